// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {console} from "forge-std/console.sol";

import {Timelock} from "../../../contracts/governance/Timelock.sol";
import {IJobMarket} from "../../../contracts/interfaces/IJobMarket.sol";
import {IStaking} from "../../../contracts/interfaces/IStaking.sol";
import {BaseTest} from "../Base.t.sol";
import {AttackerHandler} from "./AttackerHandler.sol";
import {HonestHandler} from "./HonestHandler.sol";

/// @notice The ledger under attack. Honest providers, verifiers and a user work jobs through the
/// ledger, on time (HonestHandler); one attacker holds two Sybil providers, two Sybil verifiers
/// (half the verifier stake), a user account and the timelock's proposer seat, and calls anything
/// with anything, colluding (AttackerHandler). Governance is a timelock, as deployed.
///
/// An honest call that reverts fails the run (`fail-on-revert`): the ledger must never refuse an
/// honest party its next step. The attacker's reverts are caught inside its handler.
/// forge-config: default.invariant.fail-on-revert = true
/// forge-config: ci.invariant.fail-on-revert = true
/// forge-config: deep.invariant.fail-on-revert = true
contract AttackInvariantTest is BaseTest {
    /// @dev With auction, verification and dispute windows of at most an hour (what the attacker's
    /// governance sets here), every honest user's job ends within this: at most four auction rounds
    /// of two hours, a silent Sybil winner's hour, the work, the verification window and a dispute
    /// window, and again once after a confirmed failure reopens the job.
    uint256 internal constant LIVENESS_BOUND = 24 hours;
    uint256 internal constant TIMELOCK_DELAY = 1 hours;

    HonestHandler internal honest;
    AttackerHandler internal attacker;
    Timelock internal timelock;
    address[] internal _everyone;
    bytes4[] internal _honestSelectors;
    bytes4[] internal _attackSelectors;

    function setUp() public override {
        super.setUp();
        address council = makeAddr("council");
        address attackerUser = makeAddr("attacker user");
        address[] memory sybilProviders = new address[](2);
        address[] memory sybilVerifiers = new address[](2);
        for (uint256 i; i < 2; ++i) {
            sybilProviders[i] = makeAddr(string.concat("sybil provider ", vm.toString(i)));
            sybilVerifiers[i] = makeAddr(string.concat("sybil verifier ", vm.toString(i)));
            _registerVerifier(sybilVerifiers[i]);
            _registerProvider(sybilProviders[i]);
            _fund(sybilProviders[i], 100_000 * ZEN);
            _fund(sybilVerifiers[i], 100_000 * ZEN);
        }
        _fund(attackerUser, 100_000 * ZEN);
        _fund(council, 10_000 * ZEN);

        address[] memory proposers = new address[](1);
        proposers[0] = council;
        timelock = new Timelock(TIMELOCK_DELAY, proposers, new address[](1));
        _handOverTo(address(timelock));
        _fund(address(treasury), 10_000 * ZEN);

        address[] memory providers = new address[](3);
        (providers[0], providers[1], providers[2]) = (provider1, provider2, provider3);
        address[] memory verifiers = new address[](2);
        (verifiers[0], verifiers[1]) = (verifier1, verifier2);
        honest = new HonestHandler(zen, staking, market, verification, user, providers, verifiers);
        attacker = new AttackerHandler(
            verification, treasury, timelock, honest, council, attackerUser, sybilProviders, sybilVerifiers
        );
        honest.setAttacker(address(attacker));

        _everyone = [
            provider1,
            provider2,
            provider3,
            verifier1,
            verifier2,
            sybilProviders[0],
            sybilProviders[1],
            sybilVerifiers[0],
            sybilVerifiers[1],
            attackerUser,
            council,
            user,
            distributor,
            governor,
            address(market),
            address(staking),
            address(treasury),
            address(verification),
            address(timelock)
        ];

        _honestSelectors = [
            HonestHandler.tick.selector,
            HonestHandler.tick.selector,
            HonestHandler.tick.selector,
            HonestHandler.tick.selector,
            HonestHandler.tick.selector,
            HonestHandler.createJob.selector,
            HonestHandler.unstake.selector,
            HonestHandler.withdraw.selector
        ];
        // A Sybil bid wins a slot only if it is sealed in the round's bid window and revealed in
        // its reveal window (ten minutes each, a tick or two): bids come often enough that Sybils
        // hold slots, go silent and leave wrong units to honest successors, whose flags of them
        // the campaign must reach.
        _attackSelectors = [
            AttackerHandler.anyMarketCall.selector,
            AttackerHandler.anyVerificationCall.selector,
            AttackerHandler.anyStakingCall.selector,
            AttackerHandler.sybilBid.selector,
            AttackerHandler.sybilBid.selector,
            AttackerHandler.sybilBid.selector,
            AttackerHandler.sybilBid.selector,
            AttackerHandler.sybilCommit.selector,
            AttackerHandler.sybilCommit.selector,
            AttackerHandler.sybilVerdict.selector,
            AttackerHandler.sybilJudge.selector,
            AttackerHandler.sybilComplain.selector,
            AttackerHandler.sybilJudgeComplaint.selector,
            AttackerHandler.sybilFlag.selector,
            AttackerHandler.govern.selector,
            AttackerHandler.executeGovernance.selector
        ];
        targetSelector(FuzzSelector({addr: address(honest), selectors: _honestSelectors}));
        targetSelector(FuzzSelector({addr: address(attacker), selectors: _attackSelectors}));
        targetContract(address(honest));
        targetContract(address(attacker));
    }

    /// @dev One campaign checks every property after each call (Forge runs a campaign per
    /// invariant function, and this suite's calls are heavy).
    function invariant_theLedgerUnderAttack() public view {
        _honestStakeMovesOnlyByItsOwnerOrDrawnCollusion();
        _noForbiddenCallSucceeds();
        _noSlotPaidAboveItsUnitsWorth();
        _zenIsConservedAndTheLedgerSolvent();
    }

    /// No account loses stake except through a rule it broke: an honest account's stake moves only
    /// by its own withdrawals, or by a verdict that attackers gave when the ledger's draw had put
    /// them in the judge's seat (the collusion bound of IVerification, probability f or f^2).
    function _honestStakeMovesOnlyByItsOwnerOrDrawnCollusion() internal view {
        address[] memory hs = honest.honest();
        for (uint256 i; i < hs.length; ++i) {
            assertEq(
                honest.stakeOf(hs[i]) + honest.ghost_withdrawn(hs[i]) + honest.ghost_collusionLoss(hs[i]),
                honest.ghost_deposited(hs[i]),
                "an honest account lost stake by no rule it broke"
            );
        }
    }

    /// What only the protocol's contracts or governance may do (slash, lock, reject a unit, set a
    /// parameter, grant a role, pay from the treasury) never succeeds for the attacker, and the
    /// timelock itself cannot slash or grant roles.
    function _noForbiddenCallSucceeds() internal view {
        assertEq(attacker.ghost_forbiddenSuccesses(), 0, "a forbidden call succeeded");
    }

    /// No provider is paid more than its units' agreed worth (units × unitGpuSeconds × its price),
    /// and no slot more than its share of the budget.
    function _noSlotPaidAboveItsUnitsWorth() internal view {
        for (uint256 i; i < honest.jobCount(); ++i) {
            uint256 jobId = honest.jobIds(i);
            IJobMarket.Job memory j = market.job(jobId);
            uint256[] memory paid = new uint256[](j.nodes);
            address[] memory list = market.participants(jobId);
            for (uint256 k; k < list.length; ++k) {
                uint256 earned = market.earned(jobId, list[k]);
                assertLe(earned, honest.ghost_worth(jobId, list[k]), "paid above its units' worth");
                paid[market.participant(jobId, list[k]).slot] += earned;
            }
            for (uint16 s; s < j.nodes; ++s) {
                assertEq(paid[s] + market.slot(jobId, s).remaining, j.budget / j.nodes);
            }
        }
    }

    /// No ZEN is created or lost, staking holds exactly every account's stake, and the market can
    /// always pay every open escrow and every debt at once.
    function _zenIsConservedAndTheLedgerSolvent() internal view {
        uint256 total;
        uint256 staked;
        uint256 owed;
        for (uint256 i; i < _everyone.length; ++i) {
            total += zen.balanceOf(_everyone[i]);
            IStaking.Account memory a = staking.account(_everyone[i]);
            staked += a.staked + a.unbonding;
            owed += market.owed(_everyone[i]);
        }
        assertEq(total, zen.totalSupply());
        assertEq(zen.balanceOf(address(staking)), staked);
        uint256 escrow;
        for (uint256 i; i < honest.jobCount(); ++i) {
            IJobMarket.Job memory j = market.job(honest.jobIds(i));
            if (j.status != IJobMarket.JobStatus.Settled && j.status != IJobMarket.JobStatus.Cancelled) {
                escrow += j.budget;
            }
        }
        assertGe(zen.balanceOf(address(market)), escrow + owed, "the market is insolvent");
    }

    /// Liveness: whatever the run did, honest parties acting on their own from here end every job
    /// of the honest user (Settled or Cancelled) within LIVENESS_BOUND of its creation, and none
    /// took longer during the run.
    function afterInvariant() external {
        assertLe(honest.ghost_longestJob(), LIVENESS_BOUND);
        assertTrue(honest.drain(LIVENESS_BOUND), "an honest user's job did not end in time");
        assertLe(honest.ghost_longestJob(), LIVENESS_BOUND);
        console.log("ticks", honest.calls("tick"), "honest jobs", honest.calls("createJob"));
        console.log("honest commits", honest.calls("honestCommit"), "settled", honest.calls("settle"));
        console.log("stopped", honest.calls("stop"), "downtime reports", honest.calls("reportDowntime"));
        console.log("honest results", honest.calls("honestResult"), "honest judgements", honest.calls("honestResolve"));
        console.log("sybil commits", attacker.calls("sybilCommit"), "sybil verdicts", attacker.calls("sybilVerdict"));
        console.log("collusion wins", attacker.calls("collusionWins"), "governed", attacker.calls("governed"));
        console.log("sybil bids sealed", attacker.calls("sybilSealed"), "revealed", attacker.calls("sybilRevealed"));
        console.log("sybil wrong units left behind", attacker.calls("vanished"));
        console.log("honest flags", honest.calls("flag"), "sybil flags", attacker.calls("sybilFlag"));
        console.log("longest job (s)", honest.ghost_longestJob());
    }
}
