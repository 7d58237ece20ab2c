// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {IAccessControl} from "@openzeppelin/contracts/access/IAccessControl.sol";

import {Staking} from "../../contracts/Staking.sol";
import {IStaking} from "../../contracts/interfaces/IStaking.sol";
import {BaseTest} from "./Base.t.sol";

contract StakingTest is BaseTest {
    address internal newcomer = makeAddr("newcomer");

    function _unauthorized(address caller, bytes32 role) internal pure returns (bytes memory) {
        return abi.encodeWithSelector(IAccessControl.AccessControlUnauthorizedAccount.selector, caller, role);
    }

    /*//////////////////////////////////////////////////////////////
                              DEPLOYMENT
    //////////////////////////////////////////////////////////////*/

    function test_constructor_setsParametersAndRoles() public view {
        assertEq(address(staking.zen()), address(zen));
        assertEq(staking.treasury(), address(treasury));
        assertEq(staking.unbondingDelay(), UNBONDING_DELAY);
        assertEq(staking.reporterBps(), REPORTER_BPS);
        assertEq(staking.minVerifierStake(), MIN_VERIFIER_STAKE);
        assertTrue(staking.hasRole(staking.GOVERNOR_ROLE(), governor));
        assertEq(staking.market(), address(market));
        assertEq(staking.verification(), address(verification));
    }

    function test_RevertWhen_constructedWithZeroAddress() public {
        vm.expectRevert(IStaking.ZeroAddress.selector);
        new Staking(zen, address(0), governor, UNBONDING_DELAY, REPORTER_BPS, MIN_VERIFIER_STAKE);
    }

    function test_tiers_matchTheNetworkTiers() public view {
        assertEq(staking.tierCount(), 4);
        IStaking.Tier memory community = staking.tier(COMMUNITY);
        assertEq(community.name, "Community");
        assertEq(community.minStake, 1_000 * ZEN);
        assertEq(community.minGpus, 0);
        assertEq(community.minNetworkGbps, 1);
        assertEq(community.uptimeSlaBps, 9_000);
        IStaking.Tier memory gold = staking.tier(GOLD);
        assertEq(gold.minStake, 100_000 * ZEN);
        assertEq(gold.minGpus, 8);
        assertEq(gold.minGpuMemoryGb, 80);
        assertEq(gold.minNetworkGbps, 400);
        assertEq(gold.uptimeSlaBps, 9_950);
    }

    function test_RevertWhen_tierUnknown() public {
        vm.expectRevert(abi.encodeWithSelector(IStaking.UnknownTier.selector, 4));
        staking.tier(4);
    }

    /*//////////////////////////////////////////////////////////////
                              REGISTRATION
    //////////////////////////////////////////////////////////////*/

    function test_registerProvider_recordsTierAndHardware() public {
        IStaking.Hardware memory hw = IStaking.Hardware("H100 SXM", 8, 80, 400, "https://gold.example", keccak256("r"));
        vm.expectEmit(address(staking));
        emit IStaking.ProviderRegistered(newcomer, GOLD, hw.gpuModel, hw.gpus, hw.endpoint, hw.attestation);
        vm.prank(newcomer);
        staking.registerProvider(GOLD, hw);

        IStaking.Account memory a = staking.account(newcomer);
        assertEq(uint8(a.role), uint8(IStaking.Role.Provider));
        assertEq(a.tier, GOLD);
        assertFalse(a.admitted);
        assertEq(staking.hardware(newcomer).gpuModel, "H100 SXM");
        assertEq(staking.hardware(newcomer).gpus, 8);
    }

    function test_RevertWhen_registerProviderInUnknownTier() public {
        vm.expectRevert(abi.encodeWithSelector(IStaking.UnknownTier.selector, 4));
        vm.prank(newcomer);
        staking.registerProvider(4, _communityHardware());
    }

    function test_RevertWhen_hardwareBelowTier() public {
        vm.expectRevert(abi.encodeWithSelector(IStaking.HardwareBelowTier.selector, BRONZE));
        vm.prank(newcomer);
        staking.registerProvider(BRONZE, _communityHardware());
    }

    function test_RevertWhen_registerTwice() public {
        vm.expectRevert(abi.encodeWithSelector(IStaking.AlreadyRegistered.selector, provider1));
        vm.prank(provider1);
        staking.registerVerifier("https://twice.example");
    }

    function test_registerVerifier_recordsEndpoint() public {
        vm.prank(newcomer);
        staking.registerVerifier("https://v.example");
        assertEq(uint8(staking.account(newcomer).role), uint8(IStaking.Role.Verifier));
        assertEq(staking.hardware(newcomer).endpoint, "https://v.example");
        assertFalse(staking.isActiveVerifier(newcomer));
    }

    function test_attestBenchmark_admitsProvider() public {
        vm.prank(newcomer);
        staking.registerProvider(COMMUNITY, _communityHardware());
        _stake(newcomer, PROVIDER_STAKE);
        assertFalse(staking.isActiveProvider(newcomer, COMMUNITY));

        vm.expectEmit(address(staking));
        emit IStaking.BenchmarkAttested(newcomer, verifier2, keccak256("bench"), 1234);
        vm.prank(verifier2);
        staking.attestBenchmark(newcomer, keccak256("bench"), 1234);
        assertTrue(staking.account(newcomer).admitted);
        assertTrue(staking.isActiveProvider(newcomer, COMMUNITY));
        assertFalse(staking.isActiveProvider(newcomer, BRONZE));
    }

    function test_RevertWhen_attestByInactiveVerifier() public {
        vm.expectRevert(abi.encodeWithSelector(IStaking.NotAnActiveVerifier.selector, provider2));
        vm.prank(provider2);
        staking.attestBenchmark(provider1, 0, 0);
    }

    function test_RevertWhen_verifierAttestsItself() public {
        vm.expectRevert(IStaking.SelfAttestation.selector);
        vm.prank(verifier1);
        staking.attestBenchmark(verifier1, 0, 0);
    }

    function test_RevertWhen_attestNonProvider() public {
        vm.expectRevert(abi.encodeWithSelector(IStaking.NotAProvider.selector, verifier2));
        vm.prank(verifier1);
        staking.attestBenchmark(verifier2, 0, 0);
    }

    function test_isActiveProvider_falseBelowTierMinimum() public {
        vm.prank(provider1);
        staking.requestUnstake(PROVIDER_STAKE - 999 * ZEN);
        assertFalse(staking.isActiveProvider(provider1, COMMUNITY));
    }

    /*//////////////////////////////////////////////////////////////
                                 STAKE
    //////////////////////////////////////////////////////////////*/

    function testFuzz_stake_movesZenIntoStake(uint256 amount) public {
        amount = bound(amount, 1, 1_000_000 * ZEN);
        uint256 before = zen.balanceOf(address(staking));
        _fund(provider1, amount);
        vm.startPrank(provider1);
        zen.approve(address(staking), amount);
        vm.expectEmit(address(staking));
        emit IStaking.Staked(provider1, amount);
        staking.stake(amount);
        vm.stopPrank();
        assertEq(staking.account(provider1).staked, PROVIDER_STAKE + amount);
        assertEq(staking.freeStake(provider1), PROVIDER_STAKE + amount);
        assertEq(zen.balanceOf(address(staking)), before + amount);
    }

    function test_RevertWhen_stakeZero() public {
        vm.expectRevert(IStaking.ZeroAmount.selector);
        vm.prank(provider1);
        staking.stake(0);
    }

    function test_RevertWhen_stakeUnregistered() public {
        vm.expectRevert(abi.encodeWithSelector(IStaking.NotRegistered.selector, newcomer));
        vm.prank(newcomer);
        staking.stake(1);
    }

    function test_stakeWithPermit_needsNoApproval() public {
        (address holder, uint256 key) = makeAddrAndKey("holder");
        vm.prank(holder);
        staking.registerVerifier("https://holder.example");
        _fund(holder, VERIFIER_STAKE);
        (uint8 v, bytes32 r, bytes32 s) = _permit(key, address(staking), VERIFIER_STAKE, block.timestamp);
        vm.prank(holder);
        staking.stakeWithPermit(VERIFIER_STAKE, block.timestamp, v, r, s);
        assertEq(staking.account(holder).staked, VERIFIER_STAKE);
        assertTrue(staking.isActiveVerifier(holder));
    }

    function test_stakeWithPermit_survivesFrontRunPermit() public {
        (address holder, uint256 key) = makeAddrAndKey("holder");
        vm.prank(holder);
        staking.registerVerifier("https://holder.example");
        _fund(holder, VERIFIER_STAKE);
        (uint8 v, bytes32 r, bytes32 s) = _permit(key, address(staking), VERIFIER_STAKE, block.timestamp);
        zen.permit(holder, address(staking), VERIFIER_STAKE, block.timestamp, v, r, s);
        vm.prank(holder);
        staking.stakeWithPermit(VERIFIER_STAKE, block.timestamp, v, r, s);
        assertEq(staking.account(holder).staked, VERIFIER_STAKE);
    }

    function test_stake_locksCollateral() public {
        uint256 jobId = _startJob();
        uint256 collateral = market.job(jobId).collateral;
        assertEq(collateral, BUDGET / 2);
        assertEq(staking.account(provider1).locked, collateral);
        assertEq(staking.freeStake(provider1), PROVIDER_STAKE - collateral);

        vm.expectRevert(
            abi.encodeWithSelector(
                IStaking.InsufficientFreeStake.selector, provider1, PROVIDER_STAKE - collateral, PROVIDER_STAKE
            )
        );
        vm.prank(provider1);
        staking.requestUnstake(PROVIDER_STAKE);
    }

    /*//////////////////////////////////////////////////////////////
                          UNBONDING AND WITHDRAWAL
    //////////////////////////////////////////////////////////////*/

    function testFuzz_requestUnstake_startsUnbonding(uint256 amount) public {
        amount = bound(amount, 1, PROVIDER_STAKE);
        vm.expectEmit(address(staking));
        emit IStaking.UnstakeRequested(provider1, amount, uint64(block.timestamp) + UNBONDING_DELAY);
        vm.prank(provider1);
        staking.requestUnstake(amount);
        IStaking.Account memory a = staking.account(provider1);
        assertEq(a.staked, PROVIDER_STAKE - amount);
        assertEq(a.unbonding, amount);
        assertEq(a.unbondingEnds, block.timestamp + UNBONDING_DELAY);
    }

    function test_RevertWhen_unstakeZero() public {
        vm.expectRevert(IStaking.ZeroAmount.selector);
        vm.prank(provider1);
        staking.requestUnstake(0);
    }

    function testFuzz_withdraw_paysExactlyUnbonding(uint256 amount) public {
        amount = bound(amount, 1, PROVIDER_STAKE);
        vm.prank(provider1);
        staking.requestUnstake(amount);
        skip(UNBONDING_DELAY);
        vm.prank(provider1);
        staking.withdraw();
        assertEq(zen.balanceOf(provider1), amount);
        assertEq(staking.account(provider1).unbonding, 0);
        assertEq(zen.balanceOf(address(staking)), 2 * VERIFIER_STAKE + 3 * PROVIDER_STAKE - amount);
    }

    function test_RevertWhen_withdrawBeforeUnbondingEnds() public {
        vm.prank(provider1);
        staking.requestUnstake(ZEN);
        uint64 ends = uint64(block.timestamp) + UNBONDING_DELAY;
        skip(UNBONDING_DELAY - 1);
        vm.expectRevert(abi.encodeWithSelector(IStaking.UnbondingNotOver.selector, ends));
        vm.prank(provider1);
        staking.withdraw();
    }

    function test_RevertWhen_withdrawWithNothingUnbonding() public {
        vm.expectRevert(IStaking.NothingToWithdraw.selector);
        vm.prank(provider1);
        staking.withdraw();
    }

    /*//////////////////////////////////////////////////////////////
                        COLLATERAL AND SLASHING
    //////////////////////////////////////////////////////////////*/

    function test_lock_unlock_byMarket() public {
        vm.startPrank(address(market));
        staking.lock(provider1, 3 * ZEN);
        assertEq(staking.account(provider1).locked, 3 * ZEN);
        staking.unlock(provider1, 5 * ZEN);
        vm.stopPrank();
        assertEq(staking.account(provider1).locked, 0, "unlock releases at most what is locked");
    }

    function test_RevertWhen_lockAboveFreeStake() public {
        vm.expectRevert(
            abi.encodeWithSelector(
                IStaking.InsufficientFreeStake.selector, provider1, PROVIDER_STAKE, PROVIDER_STAKE + 1
            )
        );
        vm.prank(address(market));
        staking.lock(provider1, PROVIDER_STAKE + 1);
    }

    function test_RevertWhen_lockOrUnlockByOthers() public {
        bytes memory err = abi.encodeWithSelector(IStaking.NotProtocol.selector, address(verification));
        vm.startPrank(address(verification));
        vm.expectRevert(err);
        staking.lock(provider1, 1);
        vm.expectRevert(err);
        staking.unlock(provider1, 1);
        vm.stopPrank();
    }

    function test_RevertWhen_slashByUnauthorizedCaller() public {
        vm.expectRevert(abi.encodeWithSelector(IStaking.NotProtocol.selector, governor));
        vm.prank(governor);
        staking.slash(provider1, ZEN, IStaking.SlashReason.Downtime, governor);
    }

    function test_RevertWhen_bindTwice() public {
        vm.expectRevert(IStaking.AlreadyBound.selector);
        vm.prank(governor);
        staking.bind(governor, governor);
    }

    function test_RevertWhen_parametersOutOfBounds() public {
        uint64 maxDelay = staking.MAX_UNBONDING_DELAY();
        uint256 maxStake = staking.MAX_MIN_STAKE();
        vm.startPrank(governor);
        vm.expectRevert(IStaking.ParameterOutOfRange.selector);
        staking.setParameters(maxDelay + 1, REPORTER_BPS, MIN_VERIFIER_STAKE);
        vm.expectRevert(IStaking.ParameterOutOfRange.selector);
        staking.setParameters(UNBONDING_DELAY, REPORTER_BPS, maxStake + 1);
        vm.expectRevert(IStaking.ParameterOutOfRange.selector);
        staking.setTier(COMMUNITY, IStaking.Tier("Community", maxStake + 1, 0, 0, 0, 0));
        staking.setParameters(maxDelay, REPORTER_BPS, maxStake);
        vm.stopPrank();
    }

    function test_requestUnstake_longestDelayDoesNotOverflow() public {
        uint64 maxDelay = staking.MAX_UNBONDING_DELAY();
        vm.prank(governor);
        staking.setParameters(maxDelay, REPORTER_BPS, MIN_VERIFIER_STAKE);
        vm.warp(type(uint40).max);
        vm.prank(provider1);
        staking.requestUnstake(ZEN);
        assertEq(staking.account(provider1).unbondingEnds, uint64(type(uint40).max) + maxDelay);
        vm.warp(uint256(type(uint40).max) + maxDelay);
        vm.prank(provider1);
        staking.withdraw();
    }

    function test_slash_paysReporterAndTreasury() public {
        uint256 amount = 1_000 * ZEN;
        uint256 reporterShare = amount * REPORTER_BPS / BPS;
        vm.expectEmit(address(staking));
        emit IStaking.Slashed(provider1, IStaking.SlashReason.Downtime, amount, user, reporterShare);
        vm.prank(address(market));
        uint256 slashed = staking.slash(provider1, amount, IStaking.SlashReason.Downtime, user);
        assertEq(slashed, amount);
        assertEq(staking.account(provider1).staked, PROVIDER_STAKE - amount);
        assertEq(zen.balanceOf(user), USER_FUNDS + reporterShare);
        assertEq(zen.balanceOf(address(treasury)), amount - reporterShare);
    }

    function test_slash_withoutReporterAllToTreasury() public {
        vm.prank(address(verification));
        staking.slash(verifier2, FALSE_REPORT_SLASH, IStaking.SlashReason.IncorrectComputation, address(0));
        assertEq(zen.balanceOf(address(treasury)), FALSE_REPORT_SLASH);
    }

    function test_slash_reachesUnbondingStake() public {
        vm.prank(provider1);
        staking.requestUnstake(PROVIDER_STAKE - 100 * ZEN);
        vm.prank(address(market));
        uint256 slashed = staking.slash(provider1, 1_000 * ZEN, IStaking.SlashReason.Downtime, address(0));
        assertEq(slashed, 1_000 * ZEN);
        IStaking.Account memory a = staking.account(provider1);
        assertEq(a.staked, 0);
        assertEq(a.unbonding, PROVIDER_STAKE - 1_000 * ZEN);
    }

    function testFuzz_slash_neverTakesMoreThanHeld(uint256 unstake, uint256 amount) public {
        unstake = bound(unstake, 0, PROVIDER_STAKE);
        amount = bound(amount, 0, 10 * PROVIDER_STAKE);
        if (unstake != 0) {
            vm.prank(provider1);
            staking.requestUnstake(unstake);
        }
        uint256 before = zen.balanceOf(address(staking));
        vm.prank(address(market));
        uint256 slashed = staking.slash(provider1, amount, IStaking.SlashReason.Downtime, user);
        assertEq(slashed, amount < PROVIDER_STAKE ? amount : PROVIDER_STAKE);
        assertEq(before - zen.balanceOf(address(staking)), slashed);
        IStaking.Account memory a = staking.account(provider1);
        assertEq(a.staked + a.unbonding, PROVIDER_STAKE - slashed);
    }

    function test_slash_takesFreeStakeThenUnbondingThenCollateral() public {
        vm.prank(provider1);
        staking.requestUnstake(1_000 * ZEN);
        vm.startPrank(address(market));
        staking.lock(provider1, 15_000 * ZEN);
        staking.slash(provider1, 4_500 * ZEN, IStaking.SlashReason.Downtime, address(0));
        vm.stopPrank();
        IStaking.Account memory a = staking.account(provider1);
        assertEq(a.staked, 15_000 * ZEN, "the free 4,000 first");
        assertEq(a.unbonding, 500 * ZEN, "then unbonding");
        assertEq(a.locked, 15_000 * ZEN, "collateral untouched");
    }

    function test_slash_clampsLockedCollateral() public {
        vm.startPrank(address(market));
        staking.lock(provider1, PROVIDER_STAKE);
        staking.slash(provider1, 5_000 * ZEN, IStaking.SlashReason.Downtime, address(0));
        vm.stopPrank();
        assertEq(staking.account(provider1).locked, PROVIDER_STAKE - 5_000 * ZEN);
        assertEq(staking.freeStake(provider1), 0);
    }

    /*//////////////////////////////////////////////////////////////
                               GOVERNANCE
    //////////////////////////////////////////////////////////////*/

    function test_setTier_addsAndReplaces() public {
        vm.startPrank(governor);
        staking.setTier(4, _tier("Platinum", 200_000, 16, 80, 800, 9_990));
        staking.setTier(COMMUNITY, _tier("Community", 2_000, 0, 0, 1, 9_000));
        vm.stopPrank();
        assertEq(staking.tierCount(), 5);
        assertEq(staking.tier(4).name, "Platinum");
        assertEq(staking.tier(COMMUNITY).minStake, 2_000 * ZEN);
    }

    function test_RevertWhen_setTierSkipsAnId() public {
        vm.expectRevert(abi.encodeWithSelector(IStaking.UnknownTier.selector, 5));
        vm.prank(governor);
        staking.setTier(5, _tier("Gap", 1, 0, 0, 0, 0));
    }

    function test_RevertWhen_tierSlaAboveFullUptime() public {
        vm.expectRevert(abi.encodeWithSelector(IStaking.BpsTooHigh.selector, BPS + 1, BPS));
        vm.prank(governor);
        staking.setTier(COMMUNITY, _tier("Community", 1, 0, 0, 0, uint16(BPS + 1)));
    }

    function test_RevertWhen_setTierByNonGovernor() public {
        vm.expectRevert(_unauthorized(user, staking.GOVERNOR_ROLE()));
        vm.prank(user);
        staking.setTier(COMMUNITY, _tier("Community", 1, 0, 0, 0, 0));
    }

    function test_setParameters_updatesAll() public {
        vm.prank(governor);
        staking.setParameters(1 days, 2_000, 1 * ZEN);
        assertEq(staking.unbondingDelay(), 1 days);
        assertEq(staking.reporterBps(), 2_000);
        assertEq(staking.minVerifierStake(), 1 * ZEN);
    }

    function test_RevertWhen_reporterBpsAboveCap() public {
        vm.expectRevert(abi.encodeWithSelector(IStaking.BpsTooHigh.selector, 5_001, 5_000));
        vm.prank(governor);
        staking.setParameters(1 days, 5_001, 0);
    }

    function test_RevertWhen_setParametersByNonGovernor() public {
        vm.expectRevert(_unauthorized(user, staking.GOVERNOR_ROLE()));
        vm.prank(user);
        staking.setParameters(1 days, 0, 0);
    }

    function test_isActiveVerifier_needsMinimumStake() public {
        assertTrue(staking.isActiveVerifier(verifier1));
        vm.prank(verifier1);
        staking.requestUnstake(VERIFIER_STAKE - MIN_VERIFIER_STAKE + 1);
        assertFalse(staking.isActiveVerifier(verifier1));
        assertFalse(staking.isActiveVerifier(provider1));
    }

    /*//////////////////////////////////////////////////////////////
                             VERIFIER SEATS
    //////////////////////////////////////////////////////////////*/

    function test_stake_seatsAnActiveVerifierOnce() public {
        assertEq(staking.seatCount(), 2);
        vm.prank(newcomer);
        staking.registerVerifier("https://verifier.example");
        _stake(newcomer, MIN_VERIFIER_STAKE - 1);
        assertEq(staking.seatCount(), 2, "below the minimum: no seat");
        _fund(newcomer, 1);
        vm.startPrank(newcomer);
        zen.approve(address(staking), 1);
        vm.expectEmit(address(staking));
        emit IStaking.VerifierSeated(newcomer, 2, address(0));
        staking.stake(1);
        vm.stopPrank();
        _stake(newcomer, ZEN);
        assertEq(staking.seatCount(), 3);
        (address holder,, uint48 weight) = staking.verifierSeat(2);
        assertEq(holder, newcomer);
        assertEq(weight, MIN_VERIFIER_STAKE / ZEN + 1);
    }

    /// Seats are bounded, so a draw's gas is; filling them cannot lock honest verifiers out, as a
    /// heavier verifier takes the lightest seat. A draw for a block before that still sees the
    /// seat as it was.
    function test_stake_heavierVerifierTakesTheLightestSeatWhenFull() public {
        uint256 max = staking.MAX_VERIFIERS();
        for (uint256 i = 2; i < max; ++i) {
            _registerVerifier(makeAddr(string.concat("verifier", vm.toString(i + 1))));
        }
        vm.prank(verifier1);
        staking.requestUnstake(1);
        assertEq(staking.seatCount(), max);
        uint64 before = uint64(block.number);
        vm.roll(block.number + 1);

        vm.prank(newcomer);
        staking.registerVerifier("https://verifier.example");
        _stake(newcomer, VERIFIER_STAKE - 1);
        assertEq(staking.seatCount(), max, "no lighter seat: no seat");
        _fund(newcomer, ZEN);
        vm.startPrank(newcomer);
        zen.approve(address(staking), ZEN);
        vm.expectEmit(address(staking));
        emit IStaking.VerifierSeated(newcomer, 0, verifier1);
        staking.stake(ZEN);
        vm.stopPrank();
        (address holder,,) = staking.verifierSeat(0);
        assertEq(holder, newcomer);

        bool seenBefore;
        for (uint256 entropy; entropy < 1_000; ++entropy) {
            uint256 e = uint256(keccak256(abi.encode(entropy)));
            if (staking.drawVerifier(before, e, address(0), address(0)) == verifier1) seenBefore = true;
            assertTrue(staking.drawVerifier(uint64(block.number), e, address(0), address(0)) != verifier1);
        }
        assertTrue(seenBefore, "the evicted verifier still judges units of blocks it held its seat in");
    }
}
