// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {IJobMarket} from "../../contracts/interfaces/IJobMarket.sol";
import {IVerification} from "../../contracts/interfaces/IVerification.sol";
import {unitCommitment} from "../../contracts/libraries/UnitCommitment.sol";
import {BaseTest} from "./Base.t.sol";

/// @notice A unit confirmed wrong after its provider was replaced: the slot resumes from the last
/// good checkpoint whoever built on the bad unit, the cheater loses its pay from that unit on and is
/// slashed, and the honest successor keeps what it was paid.
contract RollbackTest is BaseTest {
    uint96 internal constant SUCCESSOR_PRICE = 35e18;
    uint256 internal constant CHEATER_UNIT_PAY = uint256(UNIT_SECONDS) * PRICE / 1 hours;
    /// @dev 583...33.3 ZEN wei: rounded down, so the pay is checked to the wei.
    uint256 internal constant SUCCESSOR_UNIT_PAY = uint256(UNIT_SECONDS) * SUCCESSOR_PRICE / 1 hours;
    uint256 internal constant COLLATERAL = BUDGET / 2;

    address internal cheater = provider1;
    address internal successor = provider2;
    address internal watcher = makeAddr("watcher");
    address internal nextHolder = provider3;

    /// @dev provider1 (the cheater) commits units 0..2, unit 1 faked, and a verifier fails unit 1
    /// late in its window; provider1 goes down, provider2 (the successor) wins the slot and commits
    /// units 3..4 in good faith on top, while the dispute is still open. Returns unit 1's record.
    function _cheatThenGetReplaced(uint32 unitsPerNode) internal returns (uint256 jobId, IJobMarket.Unit memory bad) {
        IJobMarket.JobRequest memory r = _request(1, BUDGET);
        r.unitsPerNode = unitsPerNode;
        jobId = _createJob(r);
        _auction(jobId, cheater, PRICE);
        _checkpoint(jobId, 0);
        bad = _checkpoint(jobId, 0);
        IJobMarket.Unit memory last = _checkpoint(jobId, 0);
        _rollToSample();

        vm.warp(bad.committedAt + VERIFICATION_WINDOW - 1);
        _postResult(verifier1, jobId, 0, 1, bad, false);
        vm.warp(last.committedAt + INTERVAL + 1);
        vm.prank(watcher);
        market.reportDowntime(jobId, 0);

        _auction(jobId, successor, SUCCESSOR_PRICE);
        _checkpoint(jobId, 0);
        _checkpoint(jobId, 0);
        assertEq(market.slot(jobId, 0).unitsDone, 5);
        assertLe(block.timestamp, verification.result(jobId, 0, 1).disputedAt + DISPUTE_WINDOW, "dispute still open");
    }

    function _confirm(uint256 jobId, IJobMarket.Unit memory bad) internal {
        vm.expectEmit(address(market));
        emit IJobMarket.UnitRejected(jobId, 0, 1, uint128(2 * CHEATER_UNIT_PAY));
        _resolveDispute(verifier2, jobId, 0, 1, bad, false);
    }

    /// @dev Whatever the slot holds, its budget share is its providers' pay plus what remains.
    function _assertRolledBack(uint256 jobId, IJobMarket.Unit memory bad) internal view {
        IJobMarket.Slot memory s = market.slot(jobId, 0);
        assertEq(s.unitsDone, 1, "resumes from the last good checkpoint");
        assertTrue(market.unitHash(jobId, 0, 0) != bytes16(0), "unit 0 stands");
        for (uint32 i = 1; i <= 4; ++i) {
            assertEq(market.unitHash(jobId, 0, i), bytes16(0), "units from the failed one on are void");
        }
        assertEq(market.earned(jobId, cheater), CHEATER_UNIT_PAY, "the cheater keeps unit 0 only");
        assertEq(market.participant(jobId, cheater).endRemaining, bad.remainingBefore);
        assertEq(market.earned(jobId, successor), 2 * SUCCESSOR_UNIT_PAY, "the successor keeps its pay");
        assertEq(s.remaining, BUDGET - CHEATER_UNIT_PAY - 2 * SUCCESSOR_UNIT_PAY, "budget share = pay + remaining");
        assertEq(market.slashedIn(jobId, cheater), COLLATERAL, "downtime, then the rest for the fake");
        assertEq(staking.account(cheater).staked, PROVIDER_STAKE - COLLATERAL);
        assertEq(staking.account(cheater).locked, 0);
        assertEq(market.slashedIn(jobId, successor), 0);
        assertEq(staking.account(successor).staked, PROVIDER_STAKE, "the successor is not slashed");
        assertEq(uint8(verification.result(jobId, 0, 1).verdict), uint8(IVerification.Verdict.Rejected));

        IJobMarket.Job memory j = market.job(jobId);
        assertEq(uint8(j.status), uint8(IJobMarket.JobStatus.Running), "the job cannot complete as it was");
        assertEq(j.doneSlots, 0);
    }

    /// @dev Settles after the verification window and checks the settlement to the wei: the
    /// budget is pay plus refund, and the market keeps exactly what it owes.
    function _settleAndCheck(uint256 jobId, address[] memory providers, uint256[] memory pays) internal {
        uint256 payment;
        uint256 fee;
        for (uint256 i; i < providers.length; ++i) {
            assertEq(market.earned(jobId, providers[i]), pays[i]);
            payment += pays[i];
            fee += _fee(pays[i]);
        }
        uint256 each = fee / verification.verificationCount(jobId);
        if (each > 1e18) each = 1e18;
        uint256 pool = each * verification.verificationCount(jobId);
        uint256 userBefore = zen.balanceOf(user);
        uint256 treasuryBefore = zen.balanceOf(address(treasury));

        vm.warp(market.job(jobId).completedAt + VERIFICATION_WINDOW);
        vm.expectEmit(address(market));
        emit IJobMarket.JobSettled(jobId, payment, fee, BUDGET - payment, pool);
        market.settle(jobId);

        assertEq(zen.balanceOf(user) - userBefore, BUDGET - payment, "refund");
        assertEq(zen.balanceOf(address(treasury)) - treasuryBefore, fee - pool, "treasury's fee");
        uint256 owedTotal;
        for (uint256 i; i < providers.length; ++i) {
            assertEq(market.owed(providers[i]), pays[i] - _fee(pays[i]));
            owedTotal += market.owed(providers[i]);
        }
        assertEq(zen.balanceOf(address(market)), owedTotal + pool, "the market holds exactly what it owes");
        assertEq(payment + (BUDGET - payment), BUDGET);
    }

    /// Finding 5 of issue 18: the successor is at work when the fake is confirmed. It keeps the
    /// slot and its pay, redoes units 1..9 from unit 0, and only that work completes the job.
    function test_attack_workBuiltOnRejectedUnitIsRedone() public {
        (uint256 jobId, IJobMarket.Unit memory bad) = _cheatThenGetReplaced(UNITS);
        _confirm(jobId, bad);
        _assertRolledBack(jobId, bad);

        IJobMarket.Slot memory s = market.slot(jobId, 0);
        assertEq(s.provider, successor, "the successor keeps the slot");
        assertEq(s.lastCheckpointAt, block.timestamp, "with a full interval to redo unit 1");
        assertEq(staking.account(successor).locked, COLLATERAL, "its collateral still backs it");
        assertEq(market.job(jobId).openSlots, 0);
        vm.expectRevert(abi.encodeWithSelector(IJobMarket.WrongJobStatus.selector, jobId, IJobMarket.JobStatus.Running));
        market.settle(jobId);

        IJobMarket.Unit memory redone = _checkpoint(jobId, 0);
        assertEq(market.unitHash(jobId, 0, 1), unitCommitment(redone), "unit 1 is redone next");
        assertEq(redone.remainingBefore, s.remaining);
        _completeSlot(jobId, 0);
        assertEq(market.slot(jobId, 0).unitsDone, UNITS);
        assertEq(uint8(market.status(jobId)), uint8(IJobMarket.JobStatus.Completed));

        address[] memory providers = new address[](2);
        uint256[] memory pays = new uint256[](2);
        (providers[0], pays[0]) = (cheater, CHEATER_UNIT_PAY);
        (providers[1], pays[1]) = (successor, (2 + UNITS - 1) * SUCCESSOR_UNIT_PAY);
        _settleAndCheck(jobId, providers, pays);
        assertEq(staking.account(successor).locked, 0);
        assertEq(staking.account(successor).staked, PROVIDER_STAKE);
    }

    /// The successor had finished the slot, and the job had completed, when the fake is confirmed.
    /// Its collateral was released at the finish, so it leaves the slot unslashed with its pay, the
    /// job runs again and a new provider redoes units 1..4.
    function test_attack_finishedWorkBuiltOnRejectedUnitIsRedone() public {
        (uint256 jobId, IJobMarket.Unit memory bad) = _cheatThenGetReplaced(5);
        assertEq(uint8(market.status(jobId)), uint8(IJobMarket.JobStatus.Completed));
        assertEq(staking.account(successor).locked, 0);

        vm.expectEmit(address(market));
        emit IJobMarket.UnitRejected(jobId, 0, 1, uint128(2 * CHEATER_UNIT_PAY));
        vm.expectEmit(address(market));
        emit IJobMarket.SlotReleased(jobId, 0, successor);
        _resolveDispute(verifier2, jobId, 0, 1, bad, false);
        _assertRolledBack(jobId, bad);

        IJobMarket.Slot memory s = market.slot(jobId, 0);
        assertEq(s.provider, address(0), "re-auctioned");
        assertFalse(s.done);
        assertEq(market.job(jobId).openSlots, 1);
        assertEq(uint8(market.participant(jobId, successor).state), uint8(IJobMarket.ParticipantState.Removed));
        assertEq(staking.account(successor).locked, 0);
        vm.expectRevert(abi.encodeWithSelector(IJobMarket.WrongJobStatus.selector, jobId, IJobMarket.JobStatus.Running));
        market.settle(jobId);

        _auction(jobId, provider3, PRICE);
        assertEq(market.participant(jobId, provider3).startRemaining, s.remaining);
        IJobMarket.Unit memory redone = _checkpoint(jobId, 0);
        assertEq(market.unitHash(jobId, 0, 1), unitCommitment(redone), "unit 1 is redone next");
        _completeSlot(jobId, 0);
        assertEq(market.slot(jobId, 0).unitsDone, 5);

        address[] memory providers = new address[](3);
        uint256[] memory pays = new uint256[](3);
        (providers[0], pays[0]) = (cheater, CHEATER_UNIT_PAY);
        (providers[1], pays[1]) = (successor, 2 * SUCCESSOR_UNIT_PAY);
        (providers[2], pays[2]) = (provider3, 4 * CHEATER_UNIT_PAY);
        _settleAndCheck(jobId, providers, pays);
    }

    /// The fake is confirmed while the slot waits for its re-auction: the next provider starts at
    /// unit 1, with the cheater's pay for units 1..2 back in the slot's budget.
    function test_rejectUnit_vacantSlotResumesFromLastGoodCheckpoint() public {
        uint256 jobId = _startJob();
        _checkpoint(jobId, 0);
        IJobMarket.Unit memory bad = _checkpoint(jobId, 0);
        IJobMarket.Unit memory last = _checkpoint(jobId, 0);
        _rollToSample();
        vm.warp(bad.committedAt + VERIFICATION_WINDOW - 1);
        _postResult(verifier1, jobId, 0, 1, bad, false);
        vm.warp(last.committedAt + INTERVAL + 1);
        vm.prank(watcher);
        market.reportDowntime(jobId, 0);
        _confirm(jobId, bad);

        IJobMarket.Slot memory s = market.slot(jobId, 0);
        assertEq(s.unitsDone, 1);
        assertEq(s.remaining, bad.remainingBefore);
        _auction(jobId, successor, SUCCESSOR_PRICE);
        IJobMarket.Unit memory redone = _checkpoint(jobId, 0);
        assertEq(market.unitHash(jobId, 0, 1), unitCommitment(redone));
        assertEq(market.unitHash(jobId, 0, 2), bytes16(0));
        assertEq(market.earned(jobId, successor), SUCCESSOR_UNIT_PAY);
    }

    /// Whatever unit of a replaced provider fails, after however much work by a successor at any
    /// price, and with budgets small enough to cap pay: the slot resumes from the failed unit,
    /// its budget share is always its providers' pay plus what remains, and the job settles to
    /// the wei.
    function testFuzz_rejectUnit_pastReplacedProviderConserves(
        uint32 cheaterUnits,
        uint32 failed,
        uint32 successorUnits,
        uint96 successorPrice,
        uint128 budget
    ) public {
        cheaterUnits = uint32(bound(cheaterUnits, 1, UNITS - 1));
        failed = uint32(bound(failed, 0, cheaterUnits - 1));
        successorUnits = uint32(bound(successorUnits, 0, UNITS - cheaterUnits));
        successorPrice = uint96(bound(successorPrice, 1, MAX_PRICE));
        budget = uint128(bound(budget, 1e18, BUDGET));
        uint256 jobId = _createJob(_request(1, budget));
        _auction(jobId, cheater, PRICE);
        IJobMarket.Unit memory bad;
        for (uint32 i; i < cheaterUnits && !market.slot(jobId, 0).done; ++i) {
            IJobMarket.Unit memory unit = _checkpoint(jobId, 0);
            if (i == failed) bad = unit;
        }
        if (market.slot(jobId, 0).done || bad.provider == address(0)) return;
        skip(INTERVAL + 1);
        market.reportDowntime(jobId, 0);
        _auction(jobId, successor, successorPrice);
        for (uint32 i; i < successorUnits && !market.slot(jobId, 0).done; ++i) {
            _checkpoint(jobId, 0);
        }
        uint256 successorPay = market.earned(jobId, successor);

        vm.prank(address(verification));
        market.rejectUnit(jobId, 0, failed, bad, verifier1);

        IJobMarket.Slot memory s = market.slot(jobId, 0);
        assertEq(s.unitsDone, failed);
        assertEq(market.unitHash(jobId, 0, failed), bytes16(0));
        assertEq(market.earned(jobId, cheater), budget - bad.remainingBefore);
        assertEq(market.earned(jobId, successor), successorPay);
        assertEq(market.earned(jobId, cheater) + successorPay + s.remaining, budget);
        assertEq(market.slashedIn(jobId, successor), 0);

        if (s.provider == address(0)) _auction(jobId, provider3, PRICE);
        _completeSlot(jobId, 0);
        uint256 payment =
            market.earned(jobId, cheater) + market.earned(jobId, successor) + market.earned(jobId, provider3);
        assertLe(payment, budget, "no slot is paid more than its share");
        uint256 userBefore = zen.balanceOf(user);
        _settle(jobId);
        assertEq(zen.balanceOf(user) - userBefore, budget - payment);
        assertEq(
            zen.balanceOf(address(market)),
            market.owed(cheater) + market.owed(successor) + market.owed(provider3),
            "no verifications: the market holds exactly what providers are owed"
        );
    }

    /// @dev provider1 commits units 0..1 and goes down; the successor wins the slot and is handed
    /// unit 1's checkpoint, which it cannot build on. Returns unit 1's record.
    function _succeedOnto(uint256 jobId) internal returns (IJobMarket.Unit memory handed) {
        _auction(jobId, cheater, PRICE);
        _checkpoint(jobId, 0);
        handed = _checkpoint(jobId, 0);
        _rollToSample();
        vm.warp(handed.committedAt + INTERVAL + 1);
        vm.prank(watcher);
        market.reportDowntime(jobId, 0);
        _auction(jobId, successor, SUCCESSOR_PRICE);
    }

    /// @dev `holder` flags unit 1, its input; the unit is failed and the failure confirmed in the
    /// reopened window. The slot resumes from unit 0 with `holder` still holding it, unslashed.
    function _flaggedInputRejected(uint256 jobId, address holder, IJobMarket.Unit memory input)
        internal
        returns (IJobMarket.Slot memory s)
    {
        vm.prank(holder);
        verification.flagUnit(jobId, 0, 1, input);
        vm.warp(block.timestamp + VERIFICATION_WINDOW / 2);
        _postResult(verifier1, jobId, 0, 1, input, false);
        _resolveDispute(verifier2, jobId, 0, 1, input, false);
        s = market.slot(jobId, 0);
        assertEq(s.provider, holder, "the holder keeps the slot");
        assertEq(s.unitsDone, 1, "and resumes from the last good checkpoint");
        assertEq(market.slashedIn(jobId, holder), 0);
    }

    /// Finding 1 of issue 19: a successor handed a checkpoint it cannot build on (withheld, or not
    /// the committed state) flags it, though the unit's verification window has closed: the window
    /// opens again, and the successor waits unslashed until a rejection could no longer land; it
    /// is late only a full interval after that.
    function test_attack_successorHandedABadInputIsNotSlashedWhileItIsReviewed() public {
        uint256 jobId = _createJob();
        IJobMarket.Unit memory handed = _succeedOnto(jobId);
        assertGe(block.timestamp, handed.committedAt + VERIFICATION_WINDOW, "its window had closed");

        vm.prank(successor);
        verification.flagUnit(jobId, 0, 1, handed);
        uint256 reviewEnds = block.timestamp + VERIFICATION_WINDOW + DISPUTE_WINDOW;
        assertEq(verification.inputUnderReviewUntil(jobId, 0), reviewEnds);
        assertEq(verification.resultWindowOpensAt(jobId, 0, 1, handed), block.timestamp);
        assertTrue(verification.isSampled(jobId, 0, 1, handed.blockNumber));

        vm.warp(reviewEnds + INTERVAL);
        vm.expectRevert(abi.encodeWithSelector(IJobMarket.NotOverdue.selector, reviewEnds + INTERVAL));
        vm.prank(watcher);
        market.reportDowntime(jobId, 0);
        assertEq(market.slashedIn(jobId, successor), 0);

        vm.warp(reviewEnds + INTERVAL + 1);
        vm.prank(watcher);
        market.reportDowntime(jobId, 0);
        assertGt(market.slashedIn(jobId, successor), 0, "late after the review, it is slashed");
    }

    /// The reviewed unit is failed and the failure confirmed in its reopened window: the slot
    /// resumes from unit 0 with the successor still holding it, unslashed, and the provider that
    /// committed the bad unit loses its pay for it.
    function test_attack_successorsBadInputIsRejectedInItsReopenedWindow() public {
        uint256 jobId = _createJob();
        IJobMarket.Slot memory s = _flaggedInputRejected(jobId, successor, _succeedOnto(jobId));
        assertEq(s.lastCheckpointAt, block.timestamp, "with a full interval");
        assertEq(staking.account(successor).staked, PROVIDER_STAKE);
        assertEq(market.earned(jobId, cheater), CHEATER_UNIT_PAY, "the bad unit is not paid");
        assertEq(uint8(verification.result(jobId, 0, 1).verdict), uint8(IVerification.Verdict.Rejected));
    }

    /// A reviewed unit whose seed was lost (flagged more than 256 blocks after it, nobody having
    /// recorded its seed) was drawn for from a zero seed: anyone could foresee its judges and stake
    /// Sybils to be them. Now it is drawn for from the seed and stake of the flag's block, which the
    /// flagger could not know, and is judged in its reopened window like any unit.
    function test_attack_reviewedUnitWithLostSeed_isDrawnFromTheFlagsSeed() public {
        uint256 jobId = _createJob();
        IJobMarket.Unit memory handed = _succeedOnto(jobId);
        vm.roll(block.number + 300);
        assertEq(verification.seedOf(handed.blockNumber), 0, "nobody recorded the unit's seed");
        vm.expectRevert(abi.encodeWithSelector(IVerification.SeedLost.selector, handed.blockNumber));
        verification.drawnVerifier(jobId, 0, 1, handed.blockNumber, address(0), 0);

        vm.prank(successor);
        verification.flagUnit(jobId, 0, 1, handed);
        uint64 flagBlock = uint64(block.number);
        vm.expectRevert(abi.encodeWithSelector(IVerification.SampleNotReady.selector, uint256(flagBlock) + 2));
        verification.drawnVerifier(jobId, 0, 1, handed.blockNumber, address(0), 0);
        vm.roll(block.number + 2);

        // The judge follows the hash of the block after the flag: each verifier for some hash.
        bool drewVerifier1;
        bool drewVerifier2;
        for (uint256 i; i < 64 && !(drewVerifier1 && drewVerifier2); ++i) {
            vm.setBlockhash(flagBlock + 1, keccak256(abi.encode("after the flag", i)));
            address drawn = verification.drawnVerifier(jobId, 0, 1, handed.blockNumber, address(0), 0);
            drewVerifier1 = drewVerifier1 || drawn == verifier1;
            drewVerifier2 = drewVerifier2 || drawn == verifier2;
        }
        assertTrue(drewVerifier1 && drewVerifier2, "the draw depends on the flag's seed");

        address first = verification.drawnVerifier(jobId, 0, 1, handed.blockNumber, address(0), 0);
        _sendResult(first, jobId, 0, 1, handed, false);
        address second = verification.drawnVerifier(jobId, 0, 1, handed.blockNumber, first, 0);
        assertTrue(second != first && second != address(0));
        vm.prank(second);
        verification.resolveDispute(jobId, 0, 1, handed, false, "bafyevidence");
        assertEq(uint8(verification.result(jobId, 0, 1).verdict), uint8(IVerification.Verdict.Rejected));
        assertEq(market.slot(jobId, 0).unitsDone, 1, "the successor resumes from the last good unit");
    }

    /// A participant flags the unit a successor will have to resume from while the unit's window
    /// is open (here its own provider, which then goes silent): that flag used to take the
    /// successor's later review from it (AlreadyFlagged), leaving it to be slashed for downtime on
    /// an input it cannot build on. The holder's review is its own; it is taken once.
    function test_attack_aParticipantsEarlierFlag_doesNotDenyTheSuccessorItsReview() public {
        uint256 jobId = _createJob();
        _auction(jobId, cheater, PRICE);
        _checkpoint(jobId, 0);
        IJobMarket.Unit memory handed = _checkpoint(jobId, 0);
        vm.prank(cheater);
        verification.flagUnit(jobId, 0, 1, handed);
        _rollToSample();
        vm.warp(handed.committedAt + INTERVAL + 1);
        vm.prank(watcher);
        market.reportDowntime(jobId, 0);
        _auction(jobId, successor, SUCCESSOR_PRICE);

        vm.prank(successor);
        verification.flagUnit(jobId, 0, 1, handed);
        assertEq(verification.inputUnderReviewUntil(jobId, 0), block.timestamp + VERIFICATION_WINDOW + DISPUTE_WINDOW);
        assertEq(verification.resultWindowOpensAt(jobId, 0, 1, handed), block.timestamp);
        vm.expectRevert(abi.encodeWithSelector(IVerification.AlreadyFlagged.selector, jobId, 0, 1));
        vm.prank(successor);
        verification.flagUnit(jobId, 0, 1, handed);
    }

    /// @dev The successor of `_succeedOnto`, a Sybil of the provider of the unit it is handed,
    /// flags that unit, lets its review pass unjudged and is replaced once late: the next holder,
    /// honest, must resume from the same unit. Returns the unit's record.
    function _sybilReviewsThenLeaves(uint256 jobId) internal returns (IJobMarket.Unit memory bad) {
        bad = _succeedOnto(jobId);
        vm.prank(successor);
        verification.flagUnit(jobId, 0, 1, bad);
        uint256 sybilReviewEnds = block.timestamp + VERIFICATION_WINDOW + DISPUTE_WINDOW;
        vm.warp(sybilReviewEnds + INTERVAL + 1);
        vm.prank(watcher);
        market.reportDowntime(jobId, 0);
        vm.roll(block.number + 10);
        _auction(jobId, nextHolder, SUCCESSOR_PRICE);
        IJobMarket.Slot memory s = market.slot(jobId, 0);
        assertEq(s.provider, nextHolder);
        assertEq(s.unitsDone, 2, "the next holder is handed the same unit");
        assertLt(verification.inputUnderReviewUntil(jobId, 0), block.timestamp, "the Sybil's review is over");
    }

    /// Issue 18: a cheater's Sybil wins the slot after it, flags the bad unit it is handed (the one
    /// review a unit had) and leaves once the review passed unjudged. The honest holder after it
    /// was refused the review of the same input (AlreadyFlagged): it had to build on the bad
    /// checkpoint or be slashed for downtime. Each holder now reviews its input once: the honest
    /// holder waits unslashed until a rejection could no longer land.
    function test_attack_aSybilHoldersReview_doesNotDenyTheNextHolderItsReview() public {
        uint256 jobId = _createJob();
        IJobMarket.Unit memory bad = _sybilReviewsThenLeaves(jobId);

        vm.prank(nextHolder);
        verification.flagUnit(jobId, 0, 1, bad);
        uint256 reviewEnds = block.timestamp + VERIFICATION_WINDOW + DISPUTE_WINDOW;
        assertEq(verification.inputUnderReviewUntil(jobId, 0), reviewEnds);
        assertEq(verification.resultWindowOpensAt(jobId, 0, 1, bad), block.timestamp, "its window opens again");

        vm.warp(reviewEnds + INTERVAL);
        vm.expectRevert(abi.encodeWithSelector(IJobMarket.NotOverdue.selector, reviewEnds + INTERVAL));
        vm.prank(watcher);
        market.reportDowntime(jobId, 0);
        assertEq(market.slashedIn(jobId, nextHolder), 0);
        assertGt(market.slashedIn(jobId, successor), 0, "the Sybil paid for leaving late");
    }

    /// The bad unit the Sybil's review let through is failed in the honest holder's review, and
    /// the failure confirmed: the slot resumes from the last good unit with the honest holder
    /// still holding it, unslashed.
    function test_attack_aSybilHoldersReview_theNextHoldersReviewRollsTheBadUnitBack() public {
        uint256 jobId = _createJob();
        _flaggedInputRejected(jobId, nextHolder, _sybilReviewsThenLeaves(jobId));
        assertEq(uint8(verification.result(jobId, 0, 1).verdict), uint8(IVerification.Verdict.Rejected));
    }

    /// A holder opens the review of its input once: flagging it again, however late, is refused
    /// and moves no deadline, for the Sybil and for the holder after it alike.
    function test_flagUnit_eachHolderReviewsItsInputOnce() public {
        uint256 jobId = _createJob();
        IJobMarket.Unit memory handed = _succeedOnto(jobId);
        vm.prank(successor);
        verification.flagUnit(jobId, 0, 1, handed);
        uint256 until = verification.inputUnderReviewUntil(jobId, 0);
        vm.warp(until - 1);
        vm.expectRevert(abi.encodeWithSelector(IVerification.AlreadyFlagged.selector, jobId, 0, 1));
        vm.prank(successor);
        verification.flagUnit(jobId, 0, 1, handed);
        assertEq(verification.inputUnderReviewUntil(jobId, 0), until, "no second delay");

        vm.warp(until + INTERVAL + 1);
        vm.prank(watcher);
        market.reportDowntime(jobId, 0);
        _auction(jobId, nextHolder, SUCCESSOR_PRICE);
        vm.prank(nextHolder);
        verification.flagUnit(jobId, 0, 1, handed);
        until = verification.inputUnderReviewUntil(jobId, 0);
        vm.warp(until - 1);
        vm.expectRevert(abi.encodeWithSelector(IVerification.AlreadyFlagged.selector, jobId, 0, 1));
        vm.prank(nextHolder);
        verification.flagUnit(jobId, 0, 1, handed);
        assertEq(verification.inputUnderReviewUntil(jobId, 0), until, "no second delay");
    }

    /// A later holder's review of a unit whose seed was lost draws its judges from the first
    /// flag's block, as the first review did: no holder can flag again to draw them again.
    function test_flagUnit_aLaterHoldersReviewKeepsTheFirstFlagsDraw() public {
        uint256 jobId = _createJob();
        IJobMarket.Unit memory handed = _succeedOnto(jobId);
        vm.roll(block.number + 300);
        assertEq(verification.seedOf(handed.blockNumber), 0, "nobody recorded the unit's seed");
        vm.prank(successor);
        verification.flagUnit(jobId, 0, 1, handed);
        uint64 firstFlag = uint64(block.number);
        vm.roll(block.number + 2);
        verification.recordSeed(firstFlag);
        address drawn = verification.drawnVerifier(jobId, 0, 1, handed.blockNumber, address(0), 0);

        vm.warp(verification.inputUnderReviewUntil(jobId, 0) + INTERVAL + 1);
        vm.prank(watcher);
        market.reportDowntime(jobId, 0);
        _auction(jobId, nextHolder, SUCCESSOR_PRICE);
        vm.roll(block.number + 10);
        vm.prank(nextHolder);
        verification.flagUnit(jobId, 0, 1, handed);
        uint64 laterFlag = uint64(block.number);
        vm.roll(block.number + 2);
        for (uint256 i; i < 16; ++i) {
            vm.setBlockhash(laterFlag + 1, keccak256(abi.encode("after the later flag", i)));
            assertEq(verification.drawnVerifier(jobId, 0, 1, handed.blockNumber, address(0), 0), drawn);
        }
    }

    /// A holder flagging its own unit, or one that is not its input, buys no time.
    function test_flagUnit_onlyTheHoldersInputFromAnotherProviderDefersDowntime() public {
        uint256 jobId = _createJob();
        _auction(jobId, cheater, PRICE);
        IJobMarket.Unit memory first = _checkpoint(jobId, 0);
        IJobMarket.Unit memory own = _checkpoint(jobId, 0);
        vm.prank(cheater);
        verification.flagUnit(jobId, 0, 1, own);
        assertEq(verification.inputUnderReviewUntil(jobId, 0), 0, "its own unit");

        vm.warp(own.committedAt + INTERVAL + 1);
        vm.prank(watcher);
        market.reportDowntime(jobId, 0);
        _auction(jobId, successor, SUCCESSOR_PRICE);
        uint256 closedAt = uint256(first.committedAt) + VERIFICATION_WINDOW;
        vm.expectRevert(abi.encodeWithSelector(IVerification.VerificationWindowClosed.selector, closedAt));
        vm.prank(successor);
        verification.flagUnit(jobId, 0, 0, first); // not the unit it resumes from
        assertEq(verification.inputUnderReviewUntil(jobId, 0), 0);
    }
}
