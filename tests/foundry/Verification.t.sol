// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {IAccessControl} from "@openzeppelin/contracts/access/IAccessControl.sol";

import {IJobMarket} from "../../contracts/interfaces/IJobMarket.sol";
import {IStaking} from "../../contracts/interfaces/IStaking.sol";
import {IVerification} from "../../contracts/interfaces/IVerification.sol";
import {BaseTest} from "./Base.t.sol";

contract VerificationTest is BaseTest {
    uint256 internal constant UNIT_PAY = uint256(UNIT_SECONDS) * PRICE / 1 hours;
    uint256 internal constant COLLATERAL = BUDGET / 2;

    uint256 internal jobId;

    function setUp() public override {
        super.setUp();
        jobId = _startJob();
    }

    /// @dev provider1 commits `count` units; returns them, ready to be sampled.
    function _units(uint32 count) internal returns (IJobMarket.Unit[] memory units) {
        units = new IJobMarket.Unit[](count);
        for (uint32 i; i < count; ++i) {
            units[i] = _checkpoint(jobId, 0);
        }
        _rollToSample();
    }

    function _verdict(uint32 index) internal view returns (IVerification.Verdict) {
        return verification.result(jobId, 0, index).verdict;
    }

    /*//////////////////////////////////////////////////////////////
                                RESULTS
    //////////////////////////////////////////////////////////////*/

    function test_constructor_setsWindows() public view {
        assertEq(address(verification.market()), address(market));
        assertEq(address(verification.staking()), address(staking));
        assertEq(verification.verificationWindow(), VERIFICATION_WINDOW);
        assertEq(verification.disputeWindow(), DISPUTE_WINDOW);
        assertEq(verification.falseReportSlash(), FALSE_REPORT_SLASH);
    }

    function test_postResult_passCountsVerification() public {
        IJobMarket.Unit memory unit = _units(1)[0];
        vm.expectEmit(address(verification));
        emit IVerification.ResultPosted(jobId, 0, 0, verifier1, true, "bafyevidence");
        _postResult(verifier1, jobId, 0, 0, unit, true);
        assertEq(uint8(_verdict(0)), uint8(IVerification.Verdict.Passed));
        assertEq(verification.result(jobId, 0, 0).first, verifier1);
        assertEq(verification.verificationCount(jobId), 1);
        assertEq(verification.verificationsBy(jobId, verifier1), 1);
        assertEq(verification.openDisputes(jobId), 0);
    }

    function test_postResult_failOpensDispute() public {
        IJobMarket.Unit memory unit = _units(1)[0];
        vm.expectEmit(address(verification));
        emit IVerification.DisputeOpened(jobId, 0, 0, verifier1);
        _postResult(verifier1, jobId, 0, 0, unit, false);
        IVerification.Result memory r = verification.result(jobId, 0, 0);
        assertEq(uint8(r.verdict), uint8(IVerification.Verdict.Disputed));
        assertEq(r.disputedAt, block.timestamp);
        assertEq(verification.openDisputes(jobId), 1);
        assertEq(verification.verificationCount(jobId), 0, "an open dispute is not yet a paid verification");
    }

    function test_RevertWhen_postByInactiveVerifier() public {
        IJobMarket.Unit memory unit = _units(1)[0];
        vm.expectRevert(abi.encodeWithSelector(IVerification.NotAnActiveVerifier.selector, provider2));
        _sendResult(provider2, jobId, 0, 0, unit, true);
    }

    function test_RevertWhen_verifierChecksItself() public {
        IJobMarket.Unit memory unit = _units(1)[0];
        unit.provider = verifier1;
        vm.expectRevert(abi.encodeWithSelector(IVerification.ConflictOfInterest.selector, verifier1));
        _sendResult(verifier1, jobId, 0, 0, unit, true);
    }

    function test_RevertWhen_unitRecordDoesNotMatch() public {
        IJobMarket.Unit memory unit = _units(1)[0];
        unit.stateHash = keccak256("forged");
        vm.expectRevert(IVerification.UnitMismatch.selector);
        _sendResult(verifier1, jobId, 0, 0, unit, true);
    }

    function test_RevertWhen_sampleNotReady() public {
        IJobMarket.Unit memory unit = _checkpoint(jobId, 0);
        vm.roll(block.number + 1);
        vm.expectRevert(abi.encodeWithSelector(IVerification.SampleNotReady.selector, unit.blockNumber + 2));
        _sendResult(verifier1, jobId, 0, 0, unit, true);
    }

    function test_RevertWhen_unitNotSampled() public {
        IJobMarket.JobRequest memory r = _request(1, BUDGET);
        r.sampleRateBps = 0;
        jobId = _createJob(r);
        _auction(jobId, provider2, PRICE);
        IJobMarket.Unit memory unit = _units(1)[0];
        vm.expectRevert(abi.encodeWithSelector(IVerification.NotSampled.selector, jobId, 0, 0));
        _sendResult(verifier1, jobId, 0, 0, unit, true);
    }

    /// @dev A two-node job that samples nothing, won by provider1 (slot 0) and provider2 (slot 1);
    /// provider1's first unit, ready to be drawn.
    function _unsampledGroupUnit() internal returns (IJobMarket.Unit memory unit) {
        IJobMarket.JobRequest memory r = _request(2, BUDGET);
        r.sampleRateBps = 0;
        jobId = _createJob(r);
        address[] memory bidders = new address[](2);
        uint96[] memory prices = new uint96[](2);
        (bidders[0], bidders[1], prices[0], prices[1]) = (provider1, provider2, PRICE, PRICE);
        _auction(jobId, bidders, prices);
        assertEq(market.slot(jobId, 0).provider, provider1);
        unit = _checkpoint(jobId, 0);
        _rollToSample();
    }

    function test_flagUnit_letsAVerifierCheckAnUnsampledUnit() public {
        IJobMarket.Unit memory unit = _unsampledGroupUnit();
        assertFalse(verification.isSampled(jobId, 0, 0, unit.blockNumber));
        vm.expectEmit(address(verification));
        emit IVerification.UnitFlagged(jobId, 0, 0, provider2);
        vm.prank(provider2);
        verification.flagUnit(jobId, 0, 0, unit);
        assertTrue(verification.isSampled(jobId, 0, 0, unit.blockNumber));
        _postResult(verifier1, jobId, 0, 0, unit, false);
        assertEq(uint8(_verdict(0)), uint8(IVerification.Verdict.Disputed));
    }

    function test_RevertWhen_flagByAccountOutsideTheJob() public {
        IJobMarket.Unit memory unit = _unsampledGroupUnit();
        vm.expectRevert(abi.encodeWithSelector(IVerification.NotInTheJob.selector, provider3));
        vm.prank(provider3);
        verification.flagUnit(jobId, 0, 0, unit);
    }

    function test_RevertWhen_flagTwiceOrForgedOrLate() public {
        IJobMarket.Unit memory unit = _unsampledGroupUnit();
        vm.prank(provider2);
        verification.flagUnit(jobId, 0, 0, unit);
        vm.expectRevert(abi.encodeWithSelector(IVerification.AlreadyFlagged.selector, jobId, 0, 0));
        vm.prank(provider2);
        verification.flagUnit(jobId, 0, 0, unit);

        IJobMarket.Unit memory forged = unit;
        forged.stateHash = keccak256("forged");
        vm.expectRevert(IVerification.UnitMismatch.selector);
        vm.prank(provider2);
        verification.flagUnit(jobId, 0, 0, forged);

        IJobMarket.Unit memory next = _checkpoint(jobId, 0);
        uint256 closesAt = uint256(next.committedAt) + VERIFICATION_WINDOW;
        vm.warp(closesAt);
        vm.expectRevert(abi.encodeWithSelector(IVerification.VerificationWindowClosed.selector, closesAt));
        vm.prank(provider2);
        verification.flagUnit(jobId, 0, 1, next);
    }

    function testFuzz_isSampled_drawsFromNextBlockHash(uint16 rate, uint32 units) public {
        rate = uint16(bound(rate, 0, BPS));
        units = uint32(bound(units, 1, UNITS));
        IJobMarket.JobRequest memory r = _request(1, BUDGET);
        r.sampleRateBps = rate;
        jobId = _createJob(r);
        _auction(jobId, provider2, PRICE);
        IJobMarket.Unit[] memory list = _units(units);
        for (uint32 i; i < units; ++i) {
            bytes32 seed = blockhash(list[i].blockNumber + 1);
            bool expected = uint256(keccak256(abi.encode(seed, jobId, uint16(0), i))) % BPS < rate;
            assertEq(verification.isSampled(jobId, 0, i, list[i].blockNumber), expected);
        }
    }

    /// Past 256 blocks an unrecorded seed is lost: the unit is not sampled, so nobody can dispute
    /// it (it used to count as sampled, letting any verifier dispute any unit).
    function test_isSampled_lostSeedIsNotSampled() public {
        IJobMarket.Unit memory unit = _checkpoint(jobId, 0);
        _rollToSample();
        assertTrue(verification.isSampled(jobId, 0, 0, unit.blockNumber));
        vm.roll(unit.blockNumber + 258);
        assertEq(verification.seedOf(unit.blockNumber), 0);
        assertFalse(verification.isSampled(jobId, 0, 0, unit.blockNumber));
        vm.expectRevert(abi.encodeWithSelector(IVerification.SeedLost.selector, unit.blockNumber));
        verification.recordSeed(unit.blockNumber);
        vm.expectRevert(abi.encodeWithSelector(IVerification.NotSampled.selector, jobId, 0, 0));
        _sendResult(verifier1, jobId, 0, 0, unit, false);
    }

    /// A recorded seed is the next block's hash, once and for good: the sample holds for the whole
    /// verification window, and nobody can record another value.
    function test_recordSeed_keepsTheSampleForTheWholeWindow() public {
        IJobMarket.Unit memory unit = _checkpoint(jobId, 0);
        vm.expectRevert(abi.encodeWithSelector(IVerification.SampleNotReady.selector, unit.blockNumber + 2));
        verification.recordSeed(unit.blockNumber);
        _rollToSample();
        bytes32 seed = blockhash(unit.blockNumber + 1);
        vm.expectEmit(address(verification));
        emit IVerification.SeedRecorded(unit.blockNumber, seed);
        vm.prank(provider1);
        verification.recordSeed(unit.blockNumber);
        vm.expectRevert(abi.encodeWithSelector(IVerification.SeedAlreadyRecorded.selector, unit.blockNumber));
        verification.recordSeed(unit.blockNumber);

        vm.roll(block.number + 10_000);
        vm.setBlockhash(unit.blockNumber + 1, keccak256("a rewritten history"));
        assertEq(verification.recordedSeed(unit.blockNumber), seed);
        assertEq(verification.seedOf(unit.blockNumber), seed);
        assertTrue(verification.isSampled(jobId, 0, 0, unit.blockNumber));
        skip(VERIFICATION_WINDOW - 1);
        _sendResult(_drawn(jobId, 0, 0, unit, address(0)), jobId, 0, 0, unit, true);
        assertEq(uint8(_verdict(0)), uint8(IVerification.Verdict.Passed));
    }

    function test_RevertWhen_postAfterVerificationWindow() public {
        IJobMarket.Unit memory unit = _units(1)[0];
        uint256 closesAt = unit.committedAt + VERIFICATION_WINDOW;
        vm.warp(closesAt);
        vm.expectRevert(abi.encodeWithSelector(IVerification.VerificationWindowClosed.selector, closesAt));
        _sendResult(verifier1, jobId, 0, 0, unit, true);
    }

    function test_RevertWhen_postTwice() public {
        IJobMarket.Unit memory unit = _units(1)[0];
        _postResult(verifier1, jobId, 0, 0, unit, true);
        _arrangeDraw(verifier2, jobId, 0, 0, unit, address(0));
        vm.expectRevert(abi.encodeWithSelector(IVerification.AlreadyVerified.selector, jobId, 0, 0));
        _sendResult(verifier2, jobId, 0, 0, unit, false);
    }

    /*//////////////////////////////////////////////////////////////
                                DISPUTES
    //////////////////////////////////////////////////////////////*/

    function test_resolveDispute_confirmSlashesProviderAndRollsBack() public {
        IJobMarket.Unit[] memory units = _units(3);
        _postResult(verifier1, jobId, 0, 1, units[1], false);

        vm.expectEmit(address(verification));
        emit IVerification.DisputeResolved(jobId, 0, 1, verifier2, true, "bafyevidence");
        vm.expectEmit(address(market));
        emit IJobMarket.UnitRejected(jobId, 0, 1, uint128(2 * UNIT_PAY));
        _resolveDispute(verifier2, jobId, 0, 1, units[1], false);

        assertEq(uint8(_verdict(1)), uint8(IVerification.Verdict.Rejected));
        assertEq(verification.openDisputes(jobId), 0);
        assertEq(verification.verificationCount(jobId), 2, "both verifiers did the work");
        assertEq(staking.account(provider1).staked, PROVIDER_STAKE - COLLATERAL);
        assertEq(staking.account(provider1).locked, 0);
        assertEq(zen.balanceOf(verifier1), COLLATERAL * REPORTER_BPS / BPS, "the challenger reported it");

        IJobMarket.Slot memory s = market.slot(jobId, 0);
        assertEq(s.provider, address(0));
        assertEq(s.unitsDone, 1);
        assertEq(s.remaining, units[1].remainingBefore);
        assertEq(market.unitHash(jobId, 0, 1), bytes16(0), "units from the failed one on are void");
        assertEq(market.unitHash(jobId, 0, 2), bytes16(0));
        assertEq(market.earned(jobId, provider1), UNIT_PAY);
        assertEq(market.job(jobId).openSlots, 1, "re-auctioned from the last good checkpoint");
    }

    function test_resolveDispute_confirmReopensCompletedJob() public {
        _completeSlot(jobId, 0);
        assertEq(uint8(market.status(jobId)), uint8(IJobMarket.JobStatus.Completed));
        IJobMarket.Slot memory s = market.slot(jobId, 0);
        assertEq(s.unitsDone, UNITS);
        // Rebuild the last unit from chain state, as a verifier joining late would.
        IJobMarket.Unit memory unit = IJobMarket.Unit({
            provider: provider1,
            committedAt: uint64(block.timestamp),
            blockNumber: uint64(block.number),
            amount: uint128(UNIT_PAY),
            remainingBefore: uint128(s.remaining + UNIT_PAY),
            cidHash: keccak256(bytes(_cid(0, UNITS - 1))),
            stateHash: keccak256(bytes(_cid(0, UNITS - 1)))
        });
        _rollToSample();
        _postResult(verifier1, jobId, 0, UNITS - 1, unit, false);
        _resolveDispute(verifier2, jobId, 0, UNITS - 1, unit, false);

        IJobMarket.Job memory j = market.job(jobId);
        assertEq(uint8(j.status), uint8(IJobMarket.JobStatus.Running));
        assertEq(j.doneSlots, 0);
        assertEq(j.openSlots, 1);
        assertFalse(market.slot(jobId, 0).done);
        assertEq(staking.account(provider1).staked, PROVIDER_STAKE - COLLATERAL);
    }

    function test_resolveDispute_confirmClawsBackRemovedProvidersPay() public {
        IJobMarket.Unit[] memory units = _units(3);
        // Challenge late in unit 1's window so the dispute is still open when provider1 goes down.
        skip(VERIFICATION_WINDOW - 2 * UNIT_SECONDS - 1);
        _postResult(verifier1, jobId, 0, 1, units[1], false);
        vm.warp(units[2].committedAt + INTERVAL + 1);
        market.reportDowntime(jobId, 0);
        uint256 stakedAfterDowntime = staking.account(provider1).staked;

        vm.expectEmit(address(market));
        emit IJobMarket.UnitRejected(jobId, 0, 1, uint128(2 * UNIT_PAY));
        _resolveDispute(verifier2, jobId, 0, 1, units[1], false);
        assertEq(market.earned(jobId, provider1), UNIT_PAY);
        assertEq(market.participant(jobId, provider1).endRemaining, units[1].remainingBefore);
        // The downtime slash took a fifth of the collateral; this one takes the rest, no more.
        assertEq(staking.account(provider1).staked, stakedAfterDowntime - COLLATERAL * 8_000 / BPS);
        assertEq(market.slashedIn(jobId, provider1), COLLATERAL);
        assertEq(market.slot(jobId, 0).unitsDone, 1, "the vacant slot resumes from the last good checkpoint");
        assertEq(market.slot(jobId, 0).remaining, units[1].remainingBefore);
    }

    function test_resolveDispute_refuteSlashesChallenger() public {
        IJobMarket.Unit memory unit = _units(1)[0];
        _postResult(verifier1, jobId, 0, 0, unit, false);
        vm.expectEmit(address(verification));
        emit IVerification.DisputeResolved(jobId, 0, 0, verifier2, false, "bafyevidence");
        _resolveDispute(verifier2, jobId, 0, 0, unit, true);

        assertEq(uint8(_verdict(0)), uint8(IVerification.Verdict.Passed));
        assertEq(verification.result(jobId, 0, 0).second, verifier2);
        assertEq(staking.account(verifier1).staked, VERIFIER_STAKE - FALSE_REPORT_SLASH);
        assertEq(zen.balanceOf(verifier2), FALSE_REPORT_SLASH * REPORTER_BPS / BPS);
        assertEq(verification.verificationsBy(jobId, verifier1), 0);
        assertEq(verification.verificationsBy(jobId, verifier2), 1);
        assertEq(staking.account(provider1).staked, PROVIDER_STAKE);
    }

    function test_RevertWhen_resolveWithoutDispute() public {
        IJobMarket.Unit memory unit = _units(1)[0];
        vm.expectRevert(IVerification.NoOpenDispute.selector);
        _sendResolution(verifier2, jobId, 0, 0, unit, false);
    }

    function test_RevertWhen_challengerResolvesOwnDispute() public {
        IJobMarket.Unit memory unit = _units(1)[0];
        _postResult(verifier1, jobId, 0, 0, unit, false);
        vm.expectRevert(abi.encodeWithSelector(IVerification.ConflictOfInterest.selector, verifier1));
        _sendResolution(verifier1, jobId, 0, 0, unit, false);
    }

    function test_RevertWhen_resolveAfterDisputeWindow() public {
        IJobMarket.Unit memory unit = _units(1)[0];
        _postResult(verifier1, jobId, 0, 0, unit, false);
        uint256 endsAt = block.timestamp + DISPUTE_WINDOW;
        skip(DISPUTE_WINDOW + 1);
        vm.expectRevert(abi.encodeWithSelector(IVerification.DisputeWindow.selector, endsAt));
        _sendResolution(verifier2, jobId, 0, 0, unit, false);
    }

    function test_expireDispute_acceptsUnitAndSlashesNobody() public {
        IJobMarket.Unit memory unit = _units(1)[0];
        _postResult(verifier1, jobId, 0, 0, unit, false);
        skip(DISPUTE_WINDOW + 1);
        vm.expectEmit(address(verification));
        emit IVerification.DisputeExpired(jobId, 0, 0);
        verification.expireDispute(jobId, 0, 0);
        assertEq(uint8(_verdict(0)), uint8(IVerification.Verdict.Expired));
        assertEq(verification.openDisputes(jobId), 0);
        assertEq(staking.account(verifier1).staked, VERIFIER_STAKE);
        assertEq(staking.account(provider1).staked, PROVIDER_STAKE);
    }

    function test_RevertWhen_expireDisputeEarly() public {
        IJobMarket.Unit memory unit = _units(1)[0];
        _postResult(verifier1, jobId, 0, 0, unit, false);
        uint256 endsAt = block.timestamp + DISPUTE_WINDOW;
        skip(DISPUTE_WINDOW);
        vm.expectRevert(abi.encodeWithSelector(IVerification.DisputeWindow.selector, endsAt));
        verification.expireDispute(jobId, 0, 0);
    }

    function test_RevertWhen_expireWithoutDispute() public {
        vm.expectRevert(IVerification.NoOpenDispute.selector);
        verification.expireDispute(jobId, 0, 0);
    }

    /// @dev After a rollback the slot's next provider commits over the failed index: that new
    /// unit must be as checkable as any other.
    function test_postResult_checksUnitRedoneAfterRollback() public {
        IJobMarket.Unit memory unit = _units(1)[0];
        _postResult(verifier1, jobId, 0, 0, unit, false);
        _resolveDispute(verifier2, jobId, 0, 0, unit, false);
        _auction(jobId, provider2, PRICE);
        IJobMarket.Unit memory redone = _units(1)[0];
        assertEq(redone.provider, provider2);

        _postResult(verifier1, jobId, 0, 0, redone, true);
        assertEq(uint8(_verdict(0)), uint8(IVerification.Verdict.Passed));
        assertEq(verification.result(jobId, 0, 0).first, verifier1);
    }

    /*//////////////////////////////////////////////////////////////
                          BANDWIDTH COMPLAINTS
    //////////////////////////////////////////////////////////////*/

    function _complain() internal {
        vm.expectEmit(address(verification));
        emit IVerification.BandwidthComplaint(jobId, provider1, verifier1, "bafyiperf");
        vm.prank(verifier1);
        verification.complainBandwidth(jobId, provider1, "bafyiperf");
    }

    function test_resolveBandwidthComplaint_confirmSlashesProvider() public {
        _complain();
        assertEq(verification.openDisputes(jobId), 1);
        vm.expectEmit(address(verification));
        emit IVerification.BandwidthComplaintClosed(jobId, provider1, verifier2, true);
        vm.roll(block.number + 2); // the judge is drawn from the seed of the block after the complaint's
        vm.prank(verifier2);
        verification.resolveBandwidthComplaint(jobId, provider1, true);
        uint256 slash = COLLATERAL * 1_000 / BPS;
        assertEq(staking.account(provider1).staked, PROVIDER_STAKE - slash);
        assertEq(zen.balanceOf(verifier1), slash * REPORTER_BPS / BPS);
        assertEq(verification.openDisputes(jobId), 0);
    }

    function test_resolveBandwidthComplaint_refuteSlashesChallenger() public {
        _complain();
        vm.roll(block.number + 2); // the judge is drawn from the seed of the block after the complaint's
        vm.prank(verifier2);
        verification.resolveBandwidthComplaint(jobId, provider1, false);
        assertEq(staking.account(verifier1).staked, VERIFIER_STAKE - FALSE_REPORT_SLASH);
        assertEq(staking.account(provider1).staked, PROVIDER_STAKE);
    }

    function test_expireBandwidthComplaint_closesIt() public {
        _complain();
        skip(DISPUTE_WINDOW + 1);
        vm.expectEmit(address(verification));
        emit IVerification.BandwidthComplaintClosed(jobId, provider1, address(0), false);
        verification.expireBandwidthComplaint(jobId, provider1);
        assertEq(verification.openDisputes(jobId), 0);
    }

    function test_RevertWhen_complaintAgainstNonParticipant() public {
        vm.expectRevert(abi.encodeWithSelector(IVerification.NotAParticipant.selector, provider2));
        vm.prank(verifier1);
        verification.complainBandwidth(jobId, provider2, "bafyiperf");

        uint256 openJob = _createJob();
        vm.expectRevert(abi.encodeWithSelector(IVerification.JobNotRunning.selector, openJob));
        vm.prank(verifier1);
        verification.complainBandwidth(openJob, provider1, "bafyiperf");
    }

    function test_RevertWhen_complaintWithoutEvidence() public {
        vm.expectRevert(IVerification.NoEvidence.selector);
        vm.prank(verifier1);
        verification.complainBandwidth(jobId, provider1, "");
    }

    /// @dev verifier1 complains about provider1, verifier2 confirms.
    function _complainAndConfirm() internal {
        vm.prank(verifier1);
        verification.complainBandwidth(jobId, provider1, "bafyiperf");
        vm.roll(block.number + 2); // the judge is drawn from the seed of the block after the complaint's
        vm.prank(verifier2);
        verification.resolveBandwidthComplaint(jobId, provider1, true);
    }

    /// Two colluding verifiers loop open/confirm against provider1, which also holds a slot in a
    /// second job and has stake unbonding, under the harshest bandwidth slash governance can set.
    function test_attack_colludingVerifiersLoop_takeOnlyThisJobsCollateral() public {
        uint256 otherJob = _createJob();
        _auction(otherJob, provider1, PRICE);
        vm.prank(provider1);
        staking.requestUnstake(1_000 * ZEN);
        vm.prank(governor);
        market.setSlashBps(IStaking.SlashReason.BandwidthViolation, uint16(BPS));

        _complainAndConfirm();
        // Not again in the same block, nor before the cooldown is over.
        uint256 until = block.timestamp + verification.COMPLAINT_COOLDOWN();
        vm.expectRevert(abi.encodeWithSelector(IVerification.ComplaintCooldown.selector, until));
        vm.prank(verifier1);
        verification.complainBandwidth(jobId, provider1, "bafyiperf");
        for (uint256 i = 1; i < verification.MAX_COMPLAINTS(); ++i) {
            vm.warp(until);
            _complainAndConfirm();
            until = block.timestamp + verification.COMPLAINT_COOLDOWN();
        }
        vm.warp(until);
        vm.expectRevert(abi.encodeWithSelector(IVerification.ComplaintLimit.selector, jobId, provider1));
        vm.prank(verifier1);
        verification.complainBandwidth(jobId, provider1, "bafyiperf");

        // All of this job's collateral and nothing else: the other job's lock and the unbonding
        // stake are whole, and so is the free stake.
        assertEq(market.slashedIn(jobId, provider1), COLLATERAL);
        IStaking.Account memory a = staking.account(provider1);
        assertEq(a.staked, PROVIDER_STAKE - 1_000 * ZEN - COLLATERAL);
        assertEq(a.locked, COLLATERAL);
        assertEq(a.unbonding, 1_000 * ZEN);
        // The slot ends with nothing left to release: the other job's collateral stays locked.
        _completeSlot(jobId, 0);
        assertEq(staking.account(provider1).locked, COLLATERAL);
    }

    /// A lone verifier opens complaints and lets them expire, to hold the job's settlement.
    function test_attack_openExpireLoop_cannotBlockSettlement() public {
        for (uint256 i; i < verification.MAX_COMPLAINTS(); ++i) {
            vm.prank(verifier1);
            verification.complainBandwidth(jobId, provider1, "bafyiperf");
            skip(DISPUTE_WINDOW + 1);
            verification.expireBandwidthComplaint(jobId, provider1);
            skip(verification.COMPLAINT_COOLDOWN());
        }
        vm.expectRevert(abi.encodeWithSelector(IVerification.ComplaintLimit.selector, jobId, provider1));
        vm.prank(verifier1);
        verification.complainBandwidth(jobId, provider1, "bafyiperf");
        assertEq(staking.account(provider1).staked, PROVIDER_STAKE);

        // Another provider's complaint opened just before the last unit is the latest that can
        // hold settlement: one dispute window past completion.
        uint256 job2 = _createJob();
        _auction(job2, provider2, PRICE);
        for (uint32 i; i + 1 < UNITS; ++i) {
            _checkpoint(job2, 0);
        }
        vm.prank(verifier1);
        verification.complainBandwidth(job2, provider2, "bafyiperf");
        _checkpoint(job2, 0);
        uint256 completedAt = market.job(job2).completedAt;
        vm.expectRevert(abi.encodeWithSelector(IVerification.JobNotRunning.selector, job2));
        vm.prank(verifier2);
        verification.complainBandwidth(job2, provider2, "bafyiperf");
        vm.warp(completedAt + VERIFICATION_WINDOW);
        vm.expectRevert(abi.encodeWithSelector(IJobMarket.DisputesOpen.selector, 1));
        market.settle(job2);
        vm.warp(completedAt + DISPUTE_WINDOW + 1);
        verification.expireBandwidthComplaint(job2, provider2);
        market.settle(job2);
    }

    function test_RevertWhen_complaintAlreadyOpen() public {
        _complain();
        vm.expectRevert(abi.encodeWithSelector(IVerification.ComplaintOpen.selector, jobId, provider1));
        vm.prank(verifier2);
        verification.complainBandwidth(jobId, provider1, "bafyiperf");
    }

    function test_RevertWhen_complaintWindowsBreached() public {
        vm.expectRevert(IVerification.NoOpenDispute.selector);
        verification.resolveBandwidthComplaint(jobId, provider1, true);
        vm.expectRevert(IVerification.NoOpenDispute.selector);
        verification.expireBandwidthComplaint(jobId, provider1);

        _complain();
        uint256 endsAt = block.timestamp + DISPUTE_WINDOW;
        vm.expectRevert(abi.encodeWithSelector(IVerification.DisputeWindow.selector, endsAt));
        verification.expireBandwidthComplaint(jobId, provider1);
        vm.expectRevert(abi.encodeWithSelector(IVerification.ConflictOfInterest.selector, verifier1));
        vm.prank(verifier1);
        verification.resolveBandwidthComplaint(jobId, provider1, true);
        skip(DISPUTE_WINDOW + 1);
        vm.expectRevert(abi.encodeWithSelector(IVerification.DisputeWindow.selector, endsAt));
        vm.roll(block.number + 2); // the judge is drawn from the seed of the block after the complaint's
        vm.prank(verifier2);
        verification.resolveBandwidthComplaint(jobId, provider1, true);
    }

    /// Finding 3: a complaint was judged by whichever verifier answered first, so a Sybil pair
    /// could open and confirm one against an honest provider in one block. Now only the verifier
    /// drawn from the seed of the block after the complaint judges it, in its turn; the colluder
    /// drawn in no turn is refused, and the honest one drawn refutes it (the challenger pays).
    function test_attack_sybilPairConfirmingAFalseComplaint_isNotDrawn() public {
        address sybil = makeAddr("sybil judge");
        _registerVerifier(sybil);
        vm.roll(block.number + 1);
        _complain(); // verifier1 is the attacker's challenger
        vm.expectRevert(); // the seed does not exist yet: nobody can be drawn
        verification.drawnComplaintJudge(jobId, provider1);
        uint64 opened = verification.complaint(jobId, provider1).openedBlock;
        vm.roll(block.number + 2);
        // A seed (the hash of the block after the complaint's) under which turn 0 draws verifier2.
        for (uint256 i; verification.drawnComplaintJudge(jobId, provider1) != verifier2; ++i) {
            vm.setBlockhash(opened + 1, keccak256(abi.encode(i)));
        }
        vm.expectRevert(abi.encodeWithSelector(IVerification.NotDrawn.selector, sybil, verifier2, 0));
        vm.prank(sybil);
        verification.resolveBandwidthComplaint(jobId, provider1, true);
        vm.prank(verifier2);
        verification.resolveBandwidthComplaint(jobId, provider1, false);
        assertEq(staking.account(provider1).staked, PROVIDER_STAKE);
        assertEq(staking.account(verifier1).staked, VERIFIER_STAKE - FALSE_REPORT_SLASH);
    }

    /// A complaint whose seed was lost draws nobody (no foreseeable judge): it can only expire.
    function test_attack_complaintWithLostSeed_drawsNobodyAndExpires() public {
        _complain();
        vm.roll(block.number + 300);
        vm.expectRevert(abi.encodeWithSelector(IVerification.SeedLost.selector, uint64(block.number - 300)));
        vm.prank(verifier2);
        verification.resolveBandwidthComplaint(jobId, provider1, true);
        skip(DISPUTE_WINDOW + 1);
        verification.expireBandwidthComplaint(jobId, provider1);
        assertEq(staking.account(provider1).staked, PROVIDER_STAKE);
    }

    /*//////////////////////////////////////////////////////////////
                               GOVERNANCE
    //////////////////////////////////////////////////////////////*/

    function test_setParameters_updatesWindows() public {
        vm.expectEmit(address(verification));
        emit IVerification.ParametersSet(2 hours, 3 hours, 5 * ZEN);
        vm.prank(governor);
        verification.setParameters(2 hours, 3 hours, 5 * ZEN);
        assertEq(verification.verificationWindow(), 2 hours);
        assertEq(verification.disputeWindow(), 3 hours);
        assertEq(verification.falseReportSlash(), 5 * ZEN);
    }

    function test_RevertWhen_windowZero() public {
        vm.startPrank(governor);
        vm.expectRevert(IVerification.ParameterOutOfRange.selector);
        verification.setParameters(0, 1, 0);
        vm.expectRevert(IVerification.ParameterOutOfRange.selector);
        verification.setParameters(1, 0, 0);
        vm.stopPrank();
    }

    function test_RevertWhen_parametersAboveBounds() public {
        uint40 maxWindow = verification.MAX_WINDOW();
        uint256 maxSlash = verification.MAX_FALSE_REPORT_SLASH();
        vm.startPrank(governor);
        vm.expectRevert(IVerification.ParameterOutOfRange.selector);
        verification.setParameters(type(uint40).max, 1, 0);
        vm.expectRevert(IVerification.ParameterOutOfRange.selector);
        verification.setParameters(1, maxWindow + 1, 0);
        vm.expectRevert(IVerification.ParameterOutOfRange.selector);
        verification.setParameters(1, 1, maxSlash + 1);
        verification.setParameters(maxWindow, maxWindow, maxSlash);
        vm.stopPrank();
    }

    function test_RevertWhen_setParametersByNonGovernor() public {
        vm.expectRevert(
            abi.encodeWithSelector(
                IAccessControl.AccessControlUnauthorizedAccount.selector, user, verification.GOVERNOR_ROLE()
            )
        );
        vm.prank(user);
        verification.setParameters(1, 1, 0);
    }

    /*//////////////////////////////////////////////////////////////
                                 DRAWS
    //////////////////////////////////////////////////////////////*/

    /// @dev The verifier drawn for `turn` of unit 0's result, or of the dispute `challenger` opened.
    function _drawnIn(IJobMarket.Unit memory unit, address challenger, uint256 turn) internal view returns (address) {
        return verification.drawnVerifier(jobId, 0, 0, unit.blockNumber, challenger, turn);
    }

    /// A provider's own verifier used to post `pass` on its unit first, and every honest verifier
    /// after it got AlreadyVerified. Now only the verifier drawn for the turn may post.
    function test_attack_providerSybilPostsFirst_isRefused() public {
        address sybil = makeAddr("provider1's verifier");
        _registerVerifier(sybil);
        IJobMarket.Unit memory unit = _units(1)[0];
        _arrangeDraw(verifier1, jobId, 0, 0, unit, address(0));

        vm.expectRevert(abi.encodeWithSelector(IVerification.NotDrawn.selector, sybil, verifier1, 0));
        _sendResult(sybil, jobId, 0, 0, unit, true);
        _sendResult(verifier1, jobId, 0, 0, unit, false);
        assertEq(uint8(_verdict(0)), uint8(IVerification.Verdict.Disputed));
    }

    /// A Sybil used to refute an honest failure, slashing the honest verifier. Now only the
    /// verifier drawn for the dispute's turn may settle it.
    function test_attack_nonDrawnVerifierCannotResolveDispute() public {
        address sybil = makeAddr("provider1's verifier");
        _registerVerifier(sybil);
        IJobMarket.Unit memory unit = _units(1)[0];
        _postResult(verifier1, jobId, 0, 0, unit, false);
        _arrangeDraw(verifier2, jobId, 0, 0, unit, verifier1);

        vm.expectRevert(abi.encodeWithSelector(IVerification.NotDrawn.selector, sybil, verifier2, 0));
        _sendResolution(sybil, jobId, 0, 0, unit, true);
        _sendResolution(verifier2, jobId, 0, 0, unit, false);
        assertEq(uint8(_verdict(0)), uint8(IVerification.Verdict.Rejected));
        assertEq(staking.account(verifier1).staked, VERIFIER_STAKE, "the honest challenger keeps its stake");
        assertEq(staking.account(provider1).staked, PROVIDER_STAKE - COLLATERAL);
    }

    /// A drawn verifier that stays silent loses its turn, and the fee with it: the next turn draws
    /// again, and only that verifier may post. The same holds for a dispute's turns.
    function test_drawnVerifierThatTimesOut_isReplaced() public {
        address verifier3 = makeAddr("verifier3");
        _registerVerifier(verifier3);
        IJobMarket.Unit memory unit = _units(1)[0];
        uint256 seedBlock = uint256(unit.blockNumber) + 1;
        for (
            uint256 i;
            _drawnIn(unit, address(0), 0) != verifier1 || _drawnIn(unit, address(0), 1) != verifier2
                || _drawnIn(unit, verifier2, 0) != verifier1 || _drawnIn(unit, verifier2, 1) != verifier3;
            ++i
        ) {
            vm.setBlockhash(seedBlock, keccak256(abi.encode("seed", i)));
        }

        vm.warp(unit.committedAt + verification.turnLength(false));
        vm.expectRevert(abi.encodeWithSelector(IVerification.NotDrawn.selector, verifier1, verifier2, 1));
        _sendResult(verifier1, jobId, 0, 0, unit, true);
        _sendResult(verifier2, jobId, 0, 0, unit, false);

        skip(verification.turnLength(true));
        vm.expectRevert(abi.encodeWithSelector(IVerification.NotDrawn.selector, verifier1, verifier3, 1));
        _sendResolution(verifier1, jobId, 0, 0, unit, false);
        _sendResolution(verifier3, jobId, 0, 0, unit, true);

        assertEq(verification.verificationsBy(jobId, verifier1), 0, "a missed turn earns nothing");
        assertEq(verification.verificationsBy(jobId, verifier3), 1);
        assertEq(verification.result(jobId, 0, 0).second, verifier3);
    }

    /// The draw weighs stakes as they were at the unit's seed, so a verifier that has unstaked
    /// below the minimum since can still be drawn; it can no longer answer, and its turn passes
    /// to the next draw, as a silent verifier's does.
    function test_aDrawnVerifierThatUnstakedSinceLosesItsTurn() public {
        address verifier3 = makeAddr("verifier3");
        _registerVerifier(verifier3);
        IJobMarket.Unit memory unit = _units(1)[0];
        uint256 seedBlock = uint256(unit.blockNumber) + 1;
        for (uint256 i; _drawnIn(unit, address(0), 0) != verifier1 || _drawnIn(unit, address(0), 1) == verifier1; ++i) {
            vm.setBlockhash(seedBlock, keccak256(abi.encode("seed", i)));
        }
        vm.prank(verifier1);
        staking.requestUnstake(VERIFIER_STAKE);
        vm.roll(block.number + 1);

        assertEq(_drawnIn(unit, address(0), 0), verifier1, "drawn on its stake at the seed");
        vm.expectRevert(abi.encodeWithSelector(IVerification.NotAnActiveVerifier.selector, verifier1));
        _sendResult(verifier1, jobId, 0, 0, unit, true);

        vm.warp(unit.committedAt + verification.turnLength(false));
        address next = _drawnIn(unit, address(0), 1);
        _sendResult(next, jobId, 0, 0, unit, true);
        assertEq(uint8(_verdict(0)), uint8(IVerification.Verdict.Passed));
        assertEq(verification.verificationsBy(jobId, verifier1), 0, "a lost turn earns nothing");
    }

    /// The job's user may stake as a verifier, even most of all verifier stake, and is never
    /// drawn for its own job; a provider cannot be a verifier at all; a challenger never settles
    /// its own dispute. Whatever the turn.
    function testFuzz_draw_neverTheUserProviderOrChallenger(uint256 turn) public {
        _registerVerifier(user);
        _stake(user, 100 * VERIFIER_STAKE);
        vm.expectRevert(abi.encodeWithSelector(IStaking.AlreadyRegistered.selector, provider1));
        vm.prank(provider1);
        staking.registerVerifier("https://provider1.example");
        IJobMarket.Unit memory unit = _units(1)[0];

        address first = _drawnIn(unit, address(0), turn);
        assertTrue(first == verifier1 || first == verifier2);
        address second = _drawnIn(unit, first, turn);
        assertEq(second, first == verifier1 ? verifier2 : verifier1);
    }

    /// Draws track stake: over 2,000 turns, verifiers staking 1 : 1 : 2 : 4 are each drawn within
    /// four standard errors of their share (12.5%, 12.5%, 25%, 50%).
    function test_draw_frequencyTracksStake() public {
        address[4] memory verifiers = [verifier1, verifier2, makeAddr("verifier3"), makeAddr("verifier4")];
        _registerVerifier(verifiers[2]);
        _stake(verifiers[2], VERIFIER_STAKE);
        _registerVerifier(verifiers[3]);
        _stake(verifiers[3], 3 * VERIFIER_STAKE);
        IJobMarket.Unit memory unit = _units(1)[0];

        uint256 n = 2_000;
        uint256[4] memory drawn;
        for (uint256 turn; turn < n; ++turn) {
            address v = _drawnIn(unit, address(0), turn);
            for (uint256 k; k < 4; ++k) {
                if (v == verifiers[k]) ++drawn[k];
            }
        }
        uint256[4] memory shareBps = [uint256(1_250), 1_250, 2_500, 5_000];
        for (uint256 k; k < 4; ++k) {
            uint256 expected = n * shareBps[k] / BPS;
            // Four standard errors of a binomial count: 4 * sqrt(n p (1 - p)).
            uint256 tolerance = 4 * _sqrt(n * shareBps[k] * (BPS - shareBps[k]) / (BPS * BPS));
            assertApproxEqAbs(drawn[k], expected, tolerance);
        }
        assertEq(drawn[0] + drawn[1] + drawn[2] + drawn[3], n, "every turn draws someone");
    }

    function _sqrt(uint256 x) internal pure returns (uint256 y) {
        y = x;
        for (uint256 z = (x + 1) / 2; z < y; z = (x / z + z) / 2) {
            y = z;
        }
    }

    /// Once a unit's seed exists, nothing re-rolls its draw: stake added, new Sybils, stake
    /// withdrawn all count from their own block on, not for a unit committed before it.
    function test_attack_stakeMovedAfterTheSeed_changesNoDraw() public {
        IJobMarket.Unit memory unit = _units(1)[0];
        address[8] memory before;
        for (uint256 turn; turn < 8; ++turn) {
            before[turn] = _drawnIn(unit, address(0), turn);
        }
        address sybil = makeAddr("sybil");
        _registerVerifier(sybil);
        _stake(sybil, 1_000 * VERIFIER_STAKE);
        _stake(verifier2, 1_000 * VERIFIER_STAKE);
        vm.prank(verifier1);
        staking.requestUnstake(VERIFIER_STAKE);
        vm.roll(block.number + 1);

        for (uint256 turn; turn < 8; ++turn) {
            assertEq(_drawnIn(unit, address(0), turn), before[turn]);
        }
        IJobMarket.Unit memory later = _checkpoint(jobId, 0);
        _rollToSample();
        for (uint256 turn; turn < 8; ++turn) {
            address v = verification.drawnVerifier(jobId, 0, 1, later.blockNumber, address(0), turn);
            assertTrue(v != verifier1, "a verifier below the minimum is not drawn");
        }
    }
}
