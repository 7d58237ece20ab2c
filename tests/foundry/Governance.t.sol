// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {IAccessControl} from "@openzeppelin/contracts/access/IAccessControl.sol";
import {TimelockController} from "@openzeppelin/contracts/governance/TimelockController.sol";

import {Timelock} from "../../contracts/governance/Timelock.sol";
import {IJobMarket} from "../../contracts/interfaces/IJobMarket.sol";
import {IStaking} from "../../contracts/interfaces/IStaking.sol";
import {ITreasury} from "../../contracts/interfaces/ITreasury.sol";
import {IVerification} from "../../contracts/interfaces/IVerification.sol";
import {BaseTest} from "./Base.t.sol";

/// @notice Governance as deployment leaves it: a timelock holds every governor role, nobody holds
/// an admin role. The attacks assume the worst: the timelock executes whatever a hostile proposer
/// scheduled, once its delay is over.
contract GovernanceTest is BaseTest {
    uint256 internal constant DELAY = 2 days;

    Timelock internal timelock;
    address internal council = makeAddr("council");
    address internal attacker = makeAddr("attacker");
    uint256 internal _operations;

    function setUp() public override {
        super.setUp();
        address[] memory proposers = new address[](1);
        proposers[0] = council;
        address[] memory executors = new address[](1); // zero: anyone executes
        timelock = new Timelock(DELAY, proposers, executors);

        _handOverTo(address(timelock));
    }

    /*//////////////////////////////////////////////////////////////
                               HELPERS
    //////////////////////////////////////////////////////////////*/

    /// @dev Schedules `data` on `target`, waits out the delay and executes it.
    function _govern(address target, bytes memory data) internal {
        bytes32 salt = bytes32(++_operations);
        vm.prank(council);
        timelock.schedule(target, 0, data, bytes32(0), salt, DELAY);
        skip(DELAY);
        timelock.execute(target, 0, data, bytes32(0), salt);
    }

    /// @dev As `_govern`, expecting the call to revert with `err`.
    function _governReverts(address target, bytes memory data, bytes memory err) internal {
        bytes32 salt = bytes32(++_operations);
        vm.prank(council);
        timelock.schedule(target, 0, data, bytes32(0), salt, DELAY);
        skip(DELAY);
        vm.expectRevert(err);
        timelock.execute(target, 0, data, bytes32(0), salt);
    }

    function _noAdmin(bytes32 role) internal view returns (bytes memory) {
        return abi.encodeWithSelector(IAccessControl.AccessControlUnauthorizedAccount.selector, address(timelock), role);
    }

    /*//////////////////////////////////////////////////////////////
                               HAND-OVER
    //////////////////////////////////////////////////////////////*/

    function test_handOver_deployerKeepsNoRole() public view {
        bytes32 governorRole = staking.GOVERNOR_ROLE();
        IAccessControl[4] memory governed = [
            IAccessControl(address(treasury)),
            IAccessControl(address(staking)),
            IAccessControl(address(market)),
            IAccessControl(address(verification))
        ];
        for (uint256 i; i < governed.length; ++i) {
            assertTrue(governed[i].hasRole(governorRole, address(timelock)));
            assertFalse(governed[i].hasRole(governorRole, governor));
            assertFalse(governed[i].hasRole(bytes32(0), governor));
            assertFalse(governed[i].hasRole(bytes32(0), address(timelock)));
        }
    }

    function test_RevertWhen_governanceSkipsTheDelay() public {
        bytes memory data = abi.encodeCall(IStaking.setParameters, (1 days, REPORTER_BPS, MIN_VERIFIER_STAKE));
        vm.prank(council);
        timelock.schedule(address(staking), 0, data, bytes32(0), bytes32(0), DELAY);
        skip(DELAY - 1);
        vm.expectPartialRevert(TimelockController.TimelockUnexpectedOperationState.selector);
        timelock.execute(address(staking), 0, data, bytes32(0), bytes32(0));
        skip(1);
        timelock.execute(address(staking), 0, data, bytes32(0), bytes32(0));
        assertEq(staking.unbondingDelay(), 1 days);
    }

    /*//////////////////////////////////////////////////////////////
                           HOSTILE GOVERNANCE
    //////////////////////////////////////////////////////////////*/

    function test_hostileGovernance_cannotSlashAnInnocentProvider() public {
        uint256 jobId = _startJob();
        bytes32 governorRole = staking.GOVERNOR_ROLE();

        // Slash directly, or make itself (or a puppet) something that may slash.
        _governReverts(
            address(staking),
            abi.encodeCall(IStaking.slash, (provider1, PROVIDER_STAKE, IStaking.SlashReason.Downtime, attacker)),
            abi.encodeWithSelector(IStaking.NotProtocol.selector, address(timelock))
        );
        _governReverts(
            address(staking),
            abi.encodeCall(IStaking.bind, (attacker, attacker)),
            abi.encodeWithSelector(IStaking.AlreadyBound.selector)
        );
        _governReverts(
            address(staking), abi.encodeCall(IAccessControl.grantRole, (governorRole, attacker)), _noAdmin(bytes32(0))
        );
        _governReverts(
            address(market),
            abi.encodeCall(IJobMarket.penalize, (jobId, provider1, IStaking.SlashReason.Downtime, attacker)),
            abi.encodeWithSelector(IJobMarket.NotVerification.selector, address(timelock))
        );
        _governReverts(
            address(market),
            abi.encodeWithSignature("setVerification(address)", attacker),
            abi.encodeWithSelector(IJobMarket.ParameterOutOfRange.selector)
        );
        // The harshest slash shares it may set only apply to faults a verifier or a reporter proves.
        _govern(
            address(market), abi.encodeWithSignature("setSlashBps(uint8,uint16)", IStaking.SlashReason.Downtime, BPS)
        );

        assertEq(staking.account(provider1).staked, PROVIDER_STAKE);
        assertEq(staking.account(provider1).locked, market.job(jobId).collateral);
    }

    function test_hostileGovernance_cannotTakeEscrowOrStake() public {
        _startJob();
        _fund(address(treasury), 1_000 * ZEN);
        uint256 escrow = zen.balanceOf(address(market));
        uint256 stakes = zen.balanceOf(address(staking));

        _governReverts(
            address(treasury),
            abi.encodeCall(ITreasury.grant, (attacker, 1_000 * ZEN + 1, "everything")),
            abi.encodeWithSelector(ITreasury.GrantExceedsBalance.selector, 1_000 * ZEN, 1_000 * ZEN + 1)
        );
        // Its own fees it may grant, after the delay everyone could watch.
        _govern(address(treasury), abi.encodeCall(ITreasury.grant, (attacker, 1_000 * ZEN, "fees")));

        assertEq(zen.balanceOf(attacker), 1_000 * ZEN);
        assertEq(zen.balanceOf(address(market)), escrow);
        assertEq(zen.balanceOf(address(staking)), stakes);
    }

    function test_hostileGovernance_cannotFreezeEscrowOrStake() public {
        uint40 maxWindow = verification.MAX_WINDOW();
        bytes memory outOfRange = abi.encodeWithSelector(IVerification.ParameterOutOfRange.selector);
        _governReverts(
            address(verification),
            abi.encodeWithSignature("setParameters(uint40,uint40,uint256)", type(uint40).max, 1, 0),
            outOfRange
        );
        _governReverts(
            address(market),
            abi.encodeWithSignature(
                "setParameters(uint16,uint16,uint40,uint40,uint128)", 500, 5_000, type(uint40).max, 1, 0
            ),
            outOfRange
        );
        _governReverts(
            address(staking),
            abi.encodeCall(IStaking.setParameters, (type(uint64).max, REPORTER_BPS, MIN_VERIFIER_STAKE)),
            outOfRange
        );
        // The longest windows and unbonding delay it may set.
        _govern(
            address(verification),
            abi.encodeWithSignature("setParameters(uint40,uint40,uint256)", maxWindow, maxWindow, FALSE_REPORT_SLASH)
        );
        _govern(
            address(staking),
            abi.encodeCall(IStaking.setParameters, (staking.MAX_UNBONDING_DELAY(), REPORTER_BPS, MIN_VERIFIER_STAKE))
        );

        // A job whose last unit is disputed at the last second still settles within two windows.
        uint256 jobId = _startJob();
        IJobMarket.Unit memory last;
        for (uint32 i; i < UNITS; ++i) {
            last = _checkpoint(jobId, 0);
        }
        uint256 completedAt = market.job(jobId).completedAt;
        _rollToSample();
        vm.warp(completedAt + maxWindow - 1);
        _postResult(verifier1, jobId, 0, UNITS - 1, last, false);
        vm.warp(completedAt + 2 * uint256(maxWindow));
        verification.expireDispute(jobId, 0, UNITS - 1);
        market.settle(jobId);
        assertEq(uint8(market.status(jobId)), uint8(IJobMarket.JobStatus.Settled));

        // Unbonding stake comes out within the longest delay.
        vm.prank(provider2);
        staking.requestUnstake(PROVIDER_STAKE);
        skip(staking.MAX_UNBONDING_DELAY());
        vm.prank(provider2);
        staking.withdraw();
        assertEq(zen.balanceOf(provider2), PROVIDER_STAKE);
    }
}
