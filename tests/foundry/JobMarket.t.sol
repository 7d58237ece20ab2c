// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {IAccessControl} from "@openzeppelin/contracts/access/IAccessControl.sol";

import {IJobMarket} from "../../contracts/interfaces/IJobMarket.sol";
import {IStaking} from "../../contracts/interfaces/IStaking.sol";
import {IVerification} from "../../contracts/interfaces/IVerification.sol";
import {unitCommitment} from "../../contracts/libraries/UnitCommitment.sol";
import {BaseTest} from "./Base.t.sol";

contract JobMarketTest is BaseTest {
    uint256 internal constant UNIT_PAY = uint256(UNIT_SECONDS) * PRICE / 1 hours;
    uint256 internal constant COLLATERAL = BUDGET / 2;

    function _expectInvalid(IJobMarket.JobRequest memory r) internal {
        vm.startPrank(user);
        zen.approve(address(market), r.budget);
        vm.expectRevert(IJobMarket.InvalidJobRequest.selector);
        market.createJob(r);
        vm.stopPrank();
    }

    /// @dev A two-slot job won by provider1 and provider2 at PRICE.
    function _startTwoSlotJob() internal returns (uint256 jobId) {
        jobId = _createJob(_request(2, BUDGET));
        address[] memory bidders = new address[](2);
        uint96[] memory prices = new uint96[](2);
        (bidders[0], bidders[1]) = (provider1, provider2);
        (prices[0], prices[1]) = (PRICE, PRICE);
        _auction(jobId, bidders, prices);
    }

    /// @dev provider1 delivers `units` units, then misses its deadline and provider3 reports it.
    function _workThenGoDown(uint256 jobId, uint32 units) internal {
        for (uint32 i; i < units; ++i) {
            _checkpoint(jobId, 0);
        }
        skip(INTERVAL + 1);
        vm.prank(provider3);
        market.reportDowntime(jobId, 0);
    }

    /*//////////////////////////////////////////////////////////////
                              CREATE JOB
    //////////////////////////////////////////////////////////////*/

    function test_createJob_escrowsBudgetAndOpensAuction() public {
        vm.startPrank(user);
        zen.approve(address(market), BUDGET);
        vm.expectEmit(address(market));
        emit IJobMarket.JobCreated(
            1, user, COMMUNITY, SPEC_CID, 1, UNITS, MAX_PRICE, BUDGET, uint128(COLLATERAL), UNIT_SECONDS
        );
        vm.expectEmit(address(market));
        emit IJobMarket.AuctionOpened(
            1, 1, 1, uint40(block.timestamp + 10 minutes), uint40(block.timestamp + 20 minutes)
        );
        uint256 jobId = market.createJob(_request(1, BUDGET));
        vm.stopPrank();

        assertEq(jobId, 1);
        assertEq(market.jobCount(), 1);
        assertEq(zen.balanceOf(address(market)), BUDGET);
        assertEq(zen.balanceOf(user), USER_FUNDS - BUDGET);
        IJobMarket.Job memory j = market.job(jobId);
        assertEq(uint8(j.status), uint8(IJobMarket.JobStatus.Open));
        assertEq(uint8(market.status(jobId)), uint8(IJobMarket.JobStatus.Open));
        assertEq(j.user, user);
        assertEq(j.feeBps, 500);
        assertEq(j.openSlots, 1);
        assertEq(j.round, 1);
        assertEq(market.sampleRateBps(jobId), BPS);
        assertEq(market.slot(jobId, 0).remaining, BUDGET);
    }

    function testFuzz_createJob_splitsBudgetPerSlot(uint128 budget, uint16 nodes) public {
        nodes = uint16(bound(nodes, 1, market.MAX_NODES()));
        budget = uint128(bound(budget, nodes, USER_FUNDS));
        uint256 jobId = _createJob(_request(nodes, budget));
        uint256 slotBudget = budget / nodes;
        assertEq(market.slot(jobId, nodes - 1).remaining, slotBudget);
        assertEq(market.job(jobId).collateral, slotBudget * 5_000 / BPS);
        assertEq(zen.balanceOf(address(market)), budget);
    }

    function test_createJobWithPermit_needsNoApproval() public {
        (uint8 v, bytes32 r, bytes32 s) = _permit(userKey, address(market), BUDGET, block.timestamp);
        vm.prank(user);
        uint256 jobId = market.createJobWithPermit(_request(1, BUDGET), block.timestamp, v, r, s);
        assertEq(market.job(jobId).budget, BUDGET);
        assertEq(zen.balanceOf(address(market)), BUDGET);
    }

    function test_RevertWhen_jobRequestMalformed() public {
        IJobMarket.JobRequest memory r = _request(0, BUDGET);
        _expectInvalid(r);
        r.nodes = uint16(market.MAX_NODES() + 1);
        _expectInvalid(r);
        r = _request(1, BUDGET);
        r.unitsPerNode = 0;
        _expectInvalid(r);
        r = _request(1, BUDGET);
        r.maxPrice = 0;
        _expectInvalid(r);
        r = _request(1, BUDGET);
        r.checkpointInterval = 0;
        _expectInvalid(r);
        r = _request(1, BUDGET);
        r.unitGpuSeconds = 0;
        _expectInvalid(r);
        r = _request(1, BUDGET);
        r.sampleRateBps = uint16(BPS + 1);
        _expectInvalid(r);
        r = _request(1, BUDGET);
        r.specCid = "";
        _expectInvalid(r);
        r = _request(1, BUDGET);
        r.tier = 4;
        _expectInvalid(r);
    }

    function test_RevertWhen_budgetCannotFundEverySlot() public {
        vm.expectRevert(abi.encodeWithSelector(IJobMarket.BudgetTooLow.selector, 1, 2));
        vm.prank(user);
        market.createJob(_request(2, 1));
    }

    function test_RevertWhen_jobUnknown() public {
        vm.expectRevert(abi.encodeWithSelector(IJobMarket.UnknownJob.selector, 7));
        market.job(7);
    }

    /*//////////////////////////////////////////////////////////////
                                AUCTION
    //////////////////////////////////////////////////////////////*/

    function test_commitBid_recordsSealedBid() public {
        uint256 jobId = _createJob();
        bytes32 commitment = market.bidCommitmentOf(PRICE, _salt(provider1), provider1, jobId);
        assertEq(commitment, keccak256(abi.encode(PRICE, _salt(provider1), provider1, jobId)));
        vm.expectEmit(address(market));
        emit IJobMarket.BidCommitted(jobId, provider1);
        vm.prank(provider1);
        market.commitBid(jobId, commitment);
        assertEq(market.bidCommitment(jobId, provider1), commitment);
    }

    function test_RevertWhen_bidAfterWindow() public {
        uint256 jobId = _createJob();
        uint40 deadline = market.job(jobId).bidDeadline;
        vm.warp(deadline + 1);
        vm.expectRevert(abi.encodeWithSelector(IJobMarket.BidWindowClosed.selector, deadline));
        vm.prank(provider1);
        market.commitBid(jobId, bytes32(uint256(1)));
    }

    function test_RevertWhen_bidOnUnknownJob() public {
        vm.expectRevert(abi.encodeWithSelector(IJobMarket.NoAuction.selector, 1));
        vm.prank(provider1);
        market.commitBid(1, bytes32(uint256(1)));
    }

    function test_RevertWhen_bidWithoutAuction() public {
        uint256 jobId = _startJob();
        vm.expectRevert(abi.encodeWithSelector(IJobMarket.NoAuction.selector, jobId));
        vm.prank(provider2);
        market.commitBid(jobId, bytes32(uint256(1)));
    }

    function test_RevertWhen_bidderNotEligible() public {
        uint256 jobId = _createJob();
        vm.expectRevert(abi.encodeWithSelector(IJobMarket.NotEligible.selector, verifier1, COMMUNITY));
        vm.prank(verifier1);
        market.commitBid(jobId, bytes32(uint256(1)));
    }

    function test_RevertWhen_bidderLacksCollateral() public {
        uint256 jobId = _createJob();
        vm.prank(provider1);
        staking.requestUnstake(PROVIDER_STAKE - 2_000 * ZEN);
        vm.expectRevert(
            abi.encodeWithSelector(IJobMarket.InsufficientCollateral.selector, provider1, 2_000 * ZEN, COLLATERAL)
        );
        vm.prank(provider1);
        market.commitBid(jobId, bytes32(uint256(1)));
    }

    function test_closeAuction_passesOverRemovedProviderBiddingAgain() public {
        uint256 jobId = _startJob();
        _workThenGoDown(jobId, 1);
        address[] memory bidders = new address[](2);
        uint96[] memory prices = new uint96[](2);
        (bidders[0], bidders[1]) = (provider1, provider2);
        (prices[0], prices[1]) = (1e18, PRICE);
        _auction(jobId, bidders, prices);
        assertEq(market.slot(jobId, 0).provider, provider2);
        assertEq(uint8(market.participant(jobId, provider1).state), uint8(IJobMarket.ParticipantState.Removed));
        assertEq(staking.account(provider1).locked, 0, "its bid is released");
    }

    function test_revealBid_keepsLowestBidsSorted() public {
        uint256 jobId = _createJob(_request(2, BUDGET));
        _commitBid(jobId, provider1, 50e18);
        _commitBid(jobId, provider2, 30e18);
        _commitBid(jobId, provider3, 40e18);
        _toRevealWindow(jobId);
        vm.expectEmit(address(market));
        emit IJobMarket.BidRevealed(jobId, provider1, 50e18);
        _revealBid(jobId, provider1, 50e18);
        _revealBid(jobId, provider2, 30e18);
        _revealBid(jobId, provider3, 40e18);

        // Two slots keep four places: two winners and two fallbacks.
        IJobMarket.Bid[] memory bids = market.leadingBids(jobId);
        assertEq(bids.length, 3);
        assertEq(bids[0].bidder, provider2);
        assertEq(bids[0].price, 30e18);
        assertEq(bids[1].bidder, provider3);
        assertEq(bids[1].price, 40e18);
        assertEq(bids[2].bidder, provider1);
        assertEq(market.bidCommitment(jobId, provider1), 0, "a revealed bid is spent");
        assertEq(staking.account(provider1).locked, BUDGET / 2 / 2, "a kept bid's collateral is locked");
    }

    function test_RevertWhen_revealOutsideWindow() public {
        uint256 jobId = _createJob();
        _commitBid(jobId, provider1, PRICE);
        IJobMarket.Job memory j = market.job(jobId);
        bytes memory err =
            abi.encodeWithSelector(IJobMarket.NotInRevealWindow.selector, j.bidDeadline, j.revealDeadline);
        vm.expectRevert(err);
        _revealBid(jobId, provider1, PRICE);
        vm.warp(j.revealDeadline + 1);
        vm.expectRevert(err);
        _revealBid(jobId, provider1, PRICE);
    }

    function test_RevertWhen_revealDoesNotMatchCommitment() public {
        uint256 jobId = _createJob();
        _commitBid(jobId, provider1, PRICE);
        _toRevealWindow(jobId);
        vm.expectRevert(IJobMarket.CommitmentMismatch.selector);
        _revealBid(jobId, provider1, PRICE - 1);
        vm.expectRevert(IJobMarket.CommitmentMismatch.selector);
        _revealBid(jobId, provider2, PRICE);
    }

    function test_RevertWhen_revealAboveMaxPrice() public {
        uint256 jobId = _createJob();
        _commitBid(jobId, provider1, MAX_PRICE + 1);
        _toRevealWindow(jobId);
        vm.expectRevert(abi.encodeWithSelector(IJobMarket.PriceAboveMax.selector, MAX_PRICE + 1, MAX_PRICE));
        _revealBid(jobId, provider1, MAX_PRICE + 1);
    }

    function test_RevertWhen_revealWithoutAuction() public {
        uint256 jobId = _startJob();
        vm.expectRevert(abi.encodeWithSelector(IJobMarket.NoAuction.selector, jobId));
        _revealBid(jobId, provider1, PRICE);
    }

    function test_closeAuction_clearsAtHighestWinningBid() public {
        uint256 jobId = _createJob(_request(2, BUDGET));
        address[] memory bidders = new address[](3);
        uint96[] memory prices = new uint96[](3);
        (bidders[0], bidders[1], bidders[2]) = (provider1, provider2, provider3);
        (prices[0], prices[1], prices[2]) = (30e18, 50e18, 40e18);
        _commitAndReveal(jobId, bidders, prices);
        _toAuctionEnd(jobId);
        vm.expectEmit(address(market));
        emit IJobMarket.SlotAssigned(jobId, 0, provider1, 40e18);
        vm.expectEmit(address(market));
        emit IJobMarket.SlotAssigned(jobId, 1, provider3, 40e18);
        vm.expectEmit(address(market));
        emit IJobMarket.AuctionCleared(jobId, 1, 40e18, 2);
        market.closeAuction(jobId);

        assertEq(uint8(market.status(jobId)), uint8(IJobMarket.JobStatus.Running));
        IJobMarket.Slot memory s0 = market.slot(jobId, 0);
        IJobMarket.Slot memory s1 = market.slot(jobId, 1);
        assertEq(s0.provider, provider1);
        assertEq(s1.provider, provider3);
        assertEq(s0.price, 40e18);
        assertEq(s1.price, 40e18);
        assertEq(market.participants(jobId).length, 2);
        assertEq(uint8(market.participant(jobId, provider3).state), uint8(IJobMarket.ParticipantState.Active));
        assertEq(staking.account(provider2).locked, 0, "the loser locks nothing");
        assertEq(staking.account(provider3).locked, BUDGET / 2 / 2);
    }

    function testFuzz_closeAuction_uniformPriceIsHighestWinningBid(uint96 a, uint96 b, uint96 c) public {
        a = uint96(bound(a, 1, MAX_PRICE));
        b = uint96(bound(b, 1, MAX_PRICE));
        c = uint96(bound(c, 1, MAX_PRICE));
        uint256 jobId = _createJob(_request(2, BUDGET));
        address[] memory bidders = new address[](3);
        uint96[] memory prices = new uint96[](3);
        (bidders[0], bidders[1], bidders[2]) = (provider1, provider2, provider3);
        (prices[0], prices[1], prices[2]) = (a, b, c);
        _auction(jobId, bidders, prices);

        uint96 highest = a > b ? (a > c ? a : c) : (b > c ? b : c);
        uint96 lowest = a < b ? (a < c ? a : c) : (b < c ? b : c);
        uint96 second = uint96(uint256(a) + b + c - highest - lowest);
        assertEq(market.slot(jobId, 0).price, second);
        assertEq(market.slot(jobId, 1).price, second);
        assertLe(market.slot(jobId, 0).price, MAX_PRICE);
    }

    function test_closeAuction_tooFewBidsOpensNewRound() public {
        uint256 jobId = _createJob(_request(2, BUDGET));
        _commitBid(jobId, provider1, PRICE);
        _toRevealWindow(jobId);
        _revealBid(jobId, provider1, PRICE);
        _toAuctionEnd(jobId);
        vm.expectEmit(address(market));
        emit IJobMarket.AuctionFailed(jobId, 1, 1);
        market.closeAuction(jobId);

        IJobMarket.Job memory j = market.job(jobId);
        assertEq(j.round, 2);
        assertEq(market.leadingBids(jobId).length, 0);
        assertEq(staking.account(provider1).locked, 0, "a failed round releases its bids");
        assertEq(j.bidDeadline, block.timestamp + 10 minutes);
        assertEq(uint8(j.status), uint8(IJobMarket.JobStatus.Open));
    }

    function test_commitBid_locksCollateral() public {
        uint256 jobId = _createJob();
        _commitBid(jobId, provider1, PRICE);
        assertEq(staking.account(provider1).locked, COLLATERAL);
        vm.expectRevert(
            abi.encodeWithSelector(
                IStaking.InsufficientFreeStake.selector, provider1, PROVIDER_STAKE - COLLATERAL, PROVIDER_STAKE
            )
        );
        vm.prank(provider1);
        staking.requestUnstake(PROVIDER_STAKE);
    }

    function test_RevertWhen_secondSealedBidInRound() public {
        uint256 jobId = _createJob();
        _commitBid(jobId, provider1, PRICE);
        vm.expectRevert(abi.encodeWithSelector(IJobMarket.AlreadyParticipating.selector, provider1));
        vm.prank(provider1);
        market.commitBid(jobId, bytes32(uint256(2)));
        vm.expectRevert(IJobMarket.CommitmentMismatch.selector);
        vm.prank(provider2);
        market.commitBid(jobId, 0);
    }

    function test_revealBid_pushedOutOrNotKeptBidIsReleased() public {
        uint256 pushed = _createJob();
        uint256 notKept = _createJob();
        for (uint256 k; k < 2; ++k) {
            uint256 jobId = k == 0 ? pushed : notKept;
            _commitBid(jobId, provider1, 50e18);
            _commitBid(jobId, provider2, 40e18);
            _commitBid(jobId, provider3, 30e18);
        }
        _toRevealWindow(pushed);
        _revealBid(notKept, provider2, 40e18);
        _revealBid(notKept, provider3, 30e18);
        _revealBid(notKept, provider1, 50e18);
        assertEq(staking.account(provider1).locked, COLLATERAL, "not kept in one job: released there");

        _revealBid(pushed, provider1, 50e18);
        _revealBid(pushed, provider2, 40e18);
        _revealBid(pushed, provider3, 30e18);
        assertEq(staking.account(provider1).locked, 0, "pushed out of the two kept places");
        assertEq(staking.account(provider2).locked, 2 * COLLATERAL, "fallbacks stay locked");

        _toAuctionEnd(pushed);
        market.closeAuction(pushed);
        assertEq(market.slot(pushed, 0).provider, provider3);
        assertEq(staking.account(provider2).locked, COLLATERAL, "an unneeded fallback is released at close");
        assertEq(staking.account(provider3).locked, 2 * COLLATERAL, "the bid's lock now backs the slot");
    }

    function test_closeAuction_fallsBackPastWinnerNoLongerActive() public {
        uint256 jobId = _createJob();
        address[] memory bidders = new address[](2);
        uint96[] memory prices = new uint96[](2);
        (bidders[0], bidders[1]) = (provider1, provider2);
        (prices[0], prices[1]) = (30e18, 45e18);
        _commitAndReveal(jobId, bidders, prices);
        // Slashed elsewhere below the tier's minimum stake after it revealed the lowest bid.
        vm.prank(address(market));
        staking.slash(provider1, PROVIDER_STAKE - 500 * ZEN, IStaking.SlashReason.Downtime, address(0));
        _toAuctionEnd(jobId);
        vm.expectEmit(address(market));
        emit IJobMarket.AuctionCleared(jobId, 1, 45e18, 1);
        market.closeAuction(jobId);

        assertEq(market.slot(jobId, 0).provider, provider2);
        assertEq(market.slot(jobId, 0).price, 45e18);
        assertEq(staking.account(provider1).locked, 0, "the passed-over bid is released");
        assertEq(uint8(market.participant(jobId, provider1).state), uint8(IJobMarket.ParticipantState.None));
    }

    function test_closeAuction_failsOnlyWithTooFewValidBids() public {
        uint256 jobId = _createJob();
        _commitBid(jobId, provider1, PRICE);
        _toRevealWindow(jobId);
        _revealBid(jobId, provider1, PRICE);
        vm.prank(address(market));
        staking.slash(provider1, PROVIDER_STAKE - 500 * ZEN, IStaking.SlashReason.Downtime, address(0));
        _toAuctionEnd(jobId);
        vm.expectEmit(address(market));
        emit IJobMarket.AuctionFailed(jobId, 1, 0);
        market.closeAuction(jobId);
        assertEq(market.job(jobId).round, 2);
        assertEq(market.slot(jobId, 0).provider, address(0));
        assertEq(staking.account(provider1).locked, 0);
    }

    /// @dev The griefing attack of issue 18: one provider bids lowest on many concurrent auctions
    /// with stake for one. Each sealed bid locks its collateral, so its bids past the first are
    /// refused up front, and every round fills from the other bids instead of failing.
    function test_attack_lowestBidderOnManyAuctionsCannotFailThem() public {
        vm.prank(provider1);
        staking.requestUnstake(PROVIDER_STAKE - COLLATERAL);
        uint256[] memory ids = new uint256[](3);
        for (uint256 k; k < 3; ++k) {
            ids[k] = _createJob();
            if (k == 0) {
                _commitBid(ids[k], provider1, 1e18);
            } else {
                vm.expectRevert(
                    abi.encodeWithSelector(IJobMarket.InsufficientCollateral.selector, provider1, 0, COLLATERAL)
                );
                _commitBid(ids[k], provider1, 1e18);
            }
            _commitBid(ids[k], provider2, PRICE);
            _commitBid(ids[k], provider3, PRICE + 1);
        }
        _toRevealWindow(ids[0]);
        for (uint256 k; k < 3; ++k) {
            if (k == 0) _revealBid(ids[k], provider1, 1e18);
            _revealBid(ids[k], provider2, PRICE);
            _revealBid(ids[k], provider3, PRICE + 1);
        }
        _toAuctionEnd(ids[0]);
        for (uint256 k; k < 3; ++k) {
            market.closeAuction(ids[k]);
            assertEq(uint8(market.status(ids[k])), uint8(IJobMarket.JobStatus.Running), "every round fills");
        }
        assertEq(market.slot(ids[0], 0).provider, provider1);
        assertEq(market.slot(ids[1], 0).provider, provider2);
        assertEq(market.slot(ids[2], 0).provider, provider2);
    }

    /// @dev The same bidder with stake enough to seal every bid, revealing only where it suits it:
    /// the other rounds still fill, and its sealed bids hold its stake until they expire with their
    /// bonds forfeited to the treasury.
    function test_attack_selectiveRevealForfeitsBonds() public {
        uint256[] memory ids = new uint256[](3);
        for (uint256 k; k < 3; ++k) {
            ids[k] = _createJob();
            _commitBid(ids[k], provider1, 1e18);
            _commitBid(ids[k], provider2, PRICE);
        }
        assertEq(staking.account(provider1).locked, 3 * COLLATERAL);
        _toRevealWindow(ids[0]);
        _revealBid(ids[0], provider1, 1e18);
        for (uint256 k; k < 3; ++k) {
            _revealBid(ids[k], provider2, PRICE);
        }
        _toAuctionEnd(ids[0]);
        for (uint256 k; k < 3; ++k) {
            market.closeAuction(ids[k]);
        }
        assertEq(market.slot(ids[1], 0).provider, provider2, "falls back past the sealed bid");
        assertEq(staking.account(provider1).locked, 3 * COLLATERAL, "abandoned bids still hold stake");

        uint256 treasuryBefore = zen.balanceOf(address(treasury));
        uint256 bond = COLLATERAL * market.BID_BOND_BPS() / BPS;
        for (uint256 k = 1; k < 3; ++k) {
            vm.expectEmit(address(market));
            emit IJobMarket.BidExpired(ids[k], 1, provider1, bond);
            vm.prank(provider3);
            market.expireBid(ids[k], 1, provider1);
        }
        uint256 reporterShare = bond * REPORTER_BPS / BPS;
        assertEq(zen.balanceOf(address(treasury)) - treasuryBefore, 2 * (bond - reporterShare));
        assertEq(zen.balanceOf(provider3), 2 * reporterShare);
        assertEq(staking.account(provider1).staked, PROVIDER_STAKE - 2 * bond);
        assertEq(staking.account(provider1).locked, COLLATERAL, "only the slot's collateral");

        vm.expectRevert(abi.encodeWithSelector(IJobMarket.NoSealedBid.selector, ids[1], 1, provider1));
        market.expireBid(ids[1], 1, provider1);
        vm.expectRevert(abi.encodeWithSelector(IJobMarket.NoSealedBid.selector, ids[0], 1, provider1));
        market.expireBid(ids[0], 1, provider1);
    }

    function test_RevertWhen_expireBeforeRevealWindowEnds() public {
        uint256 jobId = _createJob();
        _commitBid(jobId, provider1, PRICE);
        _toRevealWindow(jobId);
        uint40 closesAt = market.job(jobId).revealDeadline;
        vm.expectRevert(abi.encodeWithSelector(IJobMarket.RevealWindowOpen.selector, closesAt));
        market.expireBid(jobId, 1, provider1);
    }

    function test_expireBid_roundCutShortForfeitsNothing() public {
        uint256 jobId = _createJob();
        _commitBid(jobId, provider1, PRICE);
        vm.prank(user);
        market.cancelJob(jobId);
        vm.expectEmit(address(market));
        emit IJobMarket.BidExpired(jobId, 1, provider1, 0);
        market.expireBid(jobId, 1, provider1);
        assertEq(staking.account(provider1).locked, 0);
        assertEq(staking.account(provider1).staked, PROVIDER_STAKE);
    }

    function test_cancelJob_releasesKeptBids() public {
        uint256 jobId = _createJob();
        _commitBid(jobId, provider1, PRICE);
        _toRevealWindow(jobId);
        _revealBid(jobId, provider1, PRICE);
        vm.prank(user);
        market.cancelJob(jobId);
        assertEq(staking.account(provider1).locked, 0);
    }

    function test_RevertWhen_closeDuringRevealWindow() public {
        uint256 jobId = _createJob();
        uint40 closesAt = market.job(jobId).revealDeadline;
        vm.expectRevert(abi.encodeWithSelector(IJobMarket.RevealWindowOpen.selector, closesAt));
        market.closeAuction(jobId);
    }

    function test_RevertWhen_closeWithoutAuction() public {
        uint256 jobId = _startJob();
        vm.expectRevert(abi.encodeWithSelector(IJobMarket.NoAuction.selector, jobId));
        market.closeAuction(jobId);
    }

    /*//////////////////////////////////////////////////////////////
                          WORK AND METERING
    //////////////////////////////////////////////////////////////*/

    function test_commitCheckpoint_accruesPayAndStoresUnit() public {
        uint256 jobId = _startJob();
        IJobMarket.Unit memory unit = _checkpoint(jobId, 0);

        assertEq(unit.provider, provider1);
        assertEq(unit.amount, UNIT_PAY);
        assertEq(unit.remainingBefore, BUDGET);
        assertEq(market.unitHash(jobId, 0, 0), unitCommitment(unit));
        IJobMarket.Slot memory s = market.slot(jobId, 0);
        assertEq(s.remaining, BUDGET - UNIT_PAY);
        assertEq(s.unitsDone, 1);
        assertEq(s.lastCheckpointAt, block.timestamp);
        assertEq(market.earned(jobId, provider1), UNIT_PAY);
    }

    function testFuzz_commitCheckpoint_unitPaysItsWorthBoundedByBudget(
        uint32 elapsed,
        uint32 unitGpuSeconds,
        uint128 budget
    ) public {
        elapsed = uint32(bound(elapsed, 1, 30 days));
        unitGpuSeconds = uint32(bound(unitGpuSeconds, 1, type(uint32).max));
        budget = uint128(bound(budget, 1, BUDGET));
        IJobMarket.JobRequest memory r = _request(1, budget);
        r.unitGpuSeconds = unitGpuSeconds;
        uint256 jobId = _createJob(r);
        _auction(jobId, provider1, PRICE);
        IJobMarket.Unit memory unit = _checkpoint(jobId, 0, elapsed);
        uint256 pay = _pay(unitGpuSeconds, PRICE);
        assertEq(unit.amount, pay < budget ? pay : budget, "the unit's worth, whatever the time it took");
        assertEq(market.slot(jobId, 0).remaining, budget - unit.amount);
        assertEq(market.slot(jobId, 0).done, unit.amount == budget);
    }

    /// @dev The billing attack of issue 18: a provider declares 65,535 GPUs, wins the slot and
    /// commits a checkpoint a minute later. It is paid one unit's worth, like anyone else.
    function test_attack_declaredGpuCountDoesNotRaisePay() public {
        address whale = makeAddr("whale");
        IStaking.Hardware memory hw = _communityHardware();
        hw.gpus = type(uint16).max;
        vm.prank(whale);
        staking.registerProvider(COMMUNITY, hw);
        _stake(whale, PROVIDER_STAKE);
        vm.prank(verifier1);
        staking.attestBenchmark(whale, keccak256("whale benchmark"), 80_000);

        uint256 jobId = _createJob();
        _auction(jobId, whale, PRICE);
        IJobMarket.Unit memory unit = _checkpoint(jobId, 0, 1 minutes);
        assertEq(unit.amount, UNIT_PAY);
        assertEq(market.earned(jobId, whale), UNIT_PAY);
        assertLt(market.earned(jobId, whale), BUDGET / UNITS + 1);
    }

    /// @dev Pay is per unit: a provider ten times faster earns the same for the slot, ten times
    /// sooner.
    function test_commitCheckpoint_fasterProviderEarnsSamePerUnitSooner() public {
        uint256 jobId = _startTwoSlotJob();
        uint256 start = block.timestamp;
        for (uint32 i; i < UNITS; ++i) {
            _checkpoint(jobId, 0, UNIT_SECONDS / 10);
        }
        uint256 fastDone = block.timestamp - start;
        for (uint32 i; i < UNITS; ++i) {
            _checkpoint(jobId, 1, UNIT_SECONDS);
        }
        assertEq(market.earned(jobId, provider1), UNITS * UNIT_PAY);
        assertEq(market.earned(jobId, provider2), UNITS * UNIT_PAY);
        assertEq(fastDone, UNITS * (UNIT_SECONDS / 10));
    }

    function test_commitCheckpoint_lastUnitCompletesJob() public {
        uint256 jobId = _startJob();
        for (uint32 i; i < UNITS - 1; ++i) {
            _checkpoint(jobId, 0);
        }
        skip(UNIT_SECONDS);
        vm.expectEmit(address(market));
        emit IJobMarket.SlotFinished(jobId, 0);
        vm.expectEmit(address(market));
        emit IJobMarket.JobCompleted(jobId);
        vm.prank(provider1);
        market.commitCheckpoint(jobId, 0, UNITS - 1, "bafylast", bytes32(0));

        IJobMarket.Job memory j = market.job(jobId);
        assertEq(uint8(j.status), uint8(IJobMarket.JobStatus.Completed));
        assertEq(j.completedAt, block.timestamp);
        assertEq(staking.account(provider1).locked, 0, "collateral released");
        assertEq(market.earned(jobId, provider1), UNITS * UNIT_PAY);
    }

    function test_RevertWhen_checkpointByOtherThanSlotProvider() public {
        uint256 jobId = _startJob();
        vm.expectRevert(abi.encodeWithSelector(IJobMarket.NotSlotProvider.selector, jobId, 0));
        vm.prank(provider2);
        market.commitCheckpoint(jobId, 0, 0, "bafy", bytes32(0));
    }

    function test_RevertWhen_checkpointOnDoneSlot() public {
        uint256 jobId = _startTwoSlotJob();
        _completeSlot(jobId, 0);
        vm.expectRevert(abi.encodeWithSelector(IJobMarket.SlotDone.selector, jobId, 0));
        vm.prank(provider1);
        market.commitCheckpoint(jobId, 0, UNITS, "bafy", bytes32(0));
    }

    function test_RevertWhen_checkpointBeforeAuctionCleared() public {
        uint256 jobId = _createJob();
        vm.expectRevert(abi.encodeWithSelector(IJobMarket.WrongJobStatus.selector, jobId, IJobMarket.JobStatus.Open));
        vm.prank(provider1);
        market.commitCheckpoint(jobId, 0, 0, "bafy", bytes32(0));
    }

    /// A provider whose slot was rolled back since it read it cannot file a later unit's checkpoint
    /// as the slot's next.
    function test_RevertWhen_checkpointIsNotTheNextUnit() public {
        uint256 jobId = _startJob();
        _checkpoint(jobId, 0);
        vm.expectRevert(abi.encodeWithSelector(IJobMarket.NotNextUnit.selector, 2, 1));
        vm.prank(provider1);
        market.commitCheckpoint(jobId, 0, 2, "bafy", bytes32(0));
        vm.expectRevert(abi.encodeWithSelector(IJobMarket.NotNextUnit.selector, 0, 1));
        vm.prank(provider1);
        market.commitCheckpoint(jobId, 0, 0, "bafy", bytes32(0));
    }

    /*//////////////////////////////////////////////////////////////
                        DOWNTIME AND RE-AUCTION
    //////////////////////////////////////////////////////////////*/

    function test_reportDowntime_slashesAndReauctionsFromLastCheckpoint() public {
        uint256 jobId = _startJob();
        _checkpoint(jobId, 0);
        _checkpoint(jobId, 0);
        skip(INTERVAL + 1);
        uint256 slash = COLLATERAL * 2_000 / BPS;
        vm.expectEmit(address(market));
        emit IJobMarket.ProviderRemoved(jobId, 0, provider1, IStaking.SlashReason.Downtime);
        vm.prank(provider3);
        market.reportDowntime(jobId, 0);

        assertEq(staking.account(provider1).staked, PROVIDER_STAKE - slash);
        assertEq(staking.account(provider1).locked, 0);
        assertEq(zen.balanceOf(provider3), slash * REPORTER_BPS / BPS);
        assertEq(uint8(market.participant(jobId, provider1).state), uint8(IJobMarket.ParticipantState.Removed));
        assertEq(market.job(jobId).openSlots, 1);
        assertEq(market.job(jobId).round, 2);

        _auction(jobId, provider2, PRICE + 1);
        IJobMarket.Slot memory s = market.slot(jobId, 0);
        assertEq(s.provider, provider2);
        assertEq(s.unitsDone, 2, "the new provider resumes from the last checkpoint");
        assertEq(market.participant(jobId, provider2).startRemaining, BUDGET - 2 * UNIT_PAY);
        _completeSlot(jobId, 0);
        assertEq(market.earned(jobId, provider1), 2 * UNIT_PAY);
        assertEq(market.earned(jobId, provider2), (UNITS - 2) * _pay(UNIT_SECONDS, PRICE + 1));
    }

    /// A slot whose replacement rounds draw no bids 65,535 times over (a 16-bit counter's worth:
    /// about 36 hours at 1-second windows) is still refilled by the next round that does.
    function test_attack_roundsPastSixteenBitsStillReplaceAProvider() public {
        uint256 jobId = _startJob();
        _workThenGoDown(jobId, 2);
        vm.pauseGasMetering();
        while (this.failRound(jobId) <= type(uint16).max) {}
        vm.resumeGasMetering();

        _auction(jobId, provider2, PRICE);
        assertEq(market.job(jobId).round, uint32(type(uint16).max) + 1);
        assertEq(market.slot(jobId, 0).provider, provider2);
        assertEq(uint8(market.status(jobId)), uint8(IJobMarket.JobStatus.Running));
    }

    /// @dev Lets the running round end without bids; returns the round opened after it. External,
    /// so each round's memory is freed when it returns.
    function failRound(uint256 jobId) external returns (uint32) {
        _toAuctionEnd(jobId);
        market.closeAuction(jobId);
        return market.job(jobId).round;
    }

    /// A group's slots meet at slot 0's provider, whose board goes with it: while slot 0 is late or
    /// waits for a new holder the others cannot train, so it is reported first and they are late
    /// only from its successor's arrival.
    function test_reportDowntime_aGroupWaitsForItsHostsSuccessor() public {
        uint256 jobId = _startTwoSlotJob();
        address rank = market.slot(jobId, 1).provider;
        skip(INTERVAL + 1);
        vm.expectRevert(abi.encodeWithSelector(IJobMarket.GroupHostDown.selector, jobId));
        market.reportDowntime(jobId, 1);
        vm.prank(provider3);
        market.reportDowntime(jobId, 0);
        vm.expectRevert(abi.encodeWithSelector(IJobMarket.GroupHostDown.selector, jobId));
        market.reportDowntime(jobId, 1);

        _auction(jobId, provider3, PRICE);
        uint256 arrived = block.timestamp;
        assertEq(market.checkpointDeadline(jobId, 0), arrived + INTERVAL);
        assertEq(market.checkpointDeadline(jobId, 1), arrived + INTERVAL);
        skip(INTERVAL);
        vm.expectRevert(abi.encodeWithSelector(IJobMarket.NotOverdue.selector, arrived + INTERVAL));
        market.reportDowntime(jobId, 1);
        _checkpoint(jobId, 1);
        assertEq(staking.account(rank).staked, PROVIDER_STAKE, "the rank went on, unharmed");

        skip(INTERVAL + 1);
        vm.expectRevert(abi.encodeWithSelector(IJobMarket.GroupHostDown.selector, jobId));
        market.reportDowntime(jobId, 1);
        _checkpoint(jobId, 0);
        market.reportDowntime(jobId, 1);
        assertEq(uint8(market.participant(jobId, rank).state), uint8(IJobMarket.ParticipantState.Removed));
    }

    /// A finished slot 0 stands in the way of no report of the others.
    function test_reportDowntime_ofARankOnceItsHostFinished() public {
        uint256 jobId = _startTwoSlotJob();
        _completeSlot(jobId, 0);
        skip(INTERVAL + 1);
        market.reportDowntime(jobId, 1);
        assertEq(market.slot(jobId, 1).provider, address(0));
    }

    function test_RevertWhen_reportBeforeDeadline() public {
        uint256 jobId = _startJob();
        uint256 deadline = block.timestamp + INTERVAL;
        skip(INTERVAL);
        vm.expectRevert(abi.encodeWithSelector(IJobMarket.NotOverdue.selector, deadline));
        market.reportDowntime(jobId, 0);
    }

    function test_RevertWhen_reportVacantSlot() public {
        uint256 jobId = _startJob();
        _workThenGoDown(jobId, 1);
        vm.expectRevert(abi.encodeWithSelector(IJobMarket.SlotVacant.selector, jobId, 0));
        market.reportDowntime(jobId, 0);
    }

    function test_RevertWhen_reportDoneSlot() public {
        uint256 jobId = _startTwoSlotJob();
        _completeSlot(jobId, 0);
        skip(INTERVAL + 1);
        vm.expectRevert(abi.encodeWithSelector(IJobMarket.SlotDone.selector, jobId, 0));
        market.reportDowntime(jobId, 0);
    }

    function test_RevertWhen_reportOnJobNotRunning() public {
        uint256 jobId = _createJob();
        vm.expectRevert(abi.encodeWithSelector(IJobMarket.WrongJobStatus.selector, jobId, IJobMarket.JobStatus.Open));
        market.reportDowntime(jobId, 0);
    }

    /*//////////////////////////////////////////////////////////////
                              CANCELLATION
    //////////////////////////////////////////////////////////////*/

    function test_cancelJob_refundsInFullBeforeAssignment() public {
        uint256 jobId = _createJob();
        vm.expectEmit(address(market));
        emit IJobMarket.JobCancelled(jobId, BUDGET);
        vm.prank(user);
        market.cancelJob(jobId);
        assertEq(zen.balanceOf(user), USER_FUNDS);
        assertEq(zen.balanceOf(address(market)), 0);
        assertEq(uint8(market.status(jobId)), uint8(IJobMarket.JobStatus.Cancelled));
    }

    function test_cancelJob_stopsJobWaitingForReauction() public {
        uint256 jobId = _startJob();
        _workThenGoDown(jobId, 3);
        vm.prank(user);
        market.cancelJob(jobId);
        assertEq(uint8(market.status(jobId)), uint8(IJobMarket.JobStatus.Completed));

        _settle(jobId);
        uint256 earned = 3 * UNIT_PAY;
        assertEq(market.owed(provider1), earned - _fee(earned));
        assertEq(zen.balanceOf(user), USER_FUNDS - earned);
    }

    function test_RevertWhen_cancelByOtherThanUser() public {
        uint256 jobId = _createJob();
        vm.expectRevert(abi.encodeWithSelector(IJobMarket.NotJobUser.selector, provider1));
        vm.prank(provider1);
        market.cancelJob(jobId);
    }

    function test_RevertWhen_cancelJobWithEverySlotFilled() public {
        uint256 jobId = _startJob();
        vm.expectRevert(abi.encodeWithSelector(IJobMarket.WrongJobStatus.selector, jobId, IJobMarket.JobStatus.Running));
        vm.prank(user);
        market.cancelJob(jobId);
    }

    /*//////////////////////////////////////////////////////////////
                              SETTLEMENT
    //////////////////////////////////////////////////////////////*/

    function test_settle_paysProvidersFeeAndRefund() public {
        uint256 jobId = _startJob();
        _completeSlot(jobId, 0);
        uint256 payment = UNITS * UNIT_PAY;
        uint256 fee = _fee(payment);
        vm.warp(market.job(jobId).completedAt + VERIFICATION_WINDOW);
        vm.expectEmit(address(market));
        emit IJobMarket.JobSettled(jobId, payment, fee, BUDGET - payment, 0);
        market.settle(jobId);

        assertEq(uint8(market.status(jobId)), uint8(IJobMarket.JobStatus.Settled));
        assertEq(market.owed(provider1), payment - fee);
        assertEq(zen.balanceOf(address(treasury)), fee);
        assertEq(zen.balanceOf(user), USER_FUNDS - payment);
        assertEq(zen.balanceOf(address(market)), payment - fee);
    }

    function testFuzz_settle_conservesZen(uint96 price, uint128 budget, uint32 unitGpuSeconds, uint8 verified) public {
        price = uint96(bound(price, 1, MAX_PRICE));
        budget = uint128(bound(budget, 2, BUDGET));
        unitGpuSeconds = uint32(bound(unitGpuSeconds, 1, 1 days));
        verified = uint8(bound(verified, 0, 3));
        IJobMarket.JobRequest memory r = _request(2, budget);
        r.unitGpuSeconds = unitGpuSeconds;
        uint256 jobId = _createJob(r);
        address[] memory bidders = new address[](2);
        uint96[] memory prices = new uint96[](2);
        (bidders[0], bidders[1]) = (provider1, provider2);
        (prices[0], prices[1]) = (price, price);
        _auction(jobId, bidders, prices);
        for (uint16 slotId; slotId < 2; ++slotId) {
            for (uint32 i; !market.slot(jobId, slotId).done; ++i) {
                IJobMarket.Unit memory unit = _checkpoint(jobId, slotId, UNIT_SECONDS);
                if (slotId == 0 && i < verified) {
                    _rollToSample();
                    _postResult(verifier1, jobId, slotId, i, unit, true);
                }
            }
        }
        _settle(jobId);

        uint256 paid = market.owed(provider1) + market.owed(provider2);
        uint256 pool = verification.verificationCount(jobId) * market.job(jobId).verifierFeeEach;
        uint256 refund = zen.balanceOf(user) - (USER_FUNDS - budget);
        assertEq(paid + zen.balanceOf(address(treasury)) + pool + refund, budget, "escrow = payouts + fees + refund");
        assertEq(zen.balanceOf(address(market)), paid + pool);
    }

    function test_settle_paysVerifierPoolOutOfFee() public {
        uint256 jobId = _startJob();
        for (uint32 i; i < UNITS; ++i) {
            IJobMarket.Unit memory unit = _checkpoint(jobId, 0);
            if (i < 2) {
                _rollToSample();
                _postResult(i == 0 ? verifier1 : verifier2, jobId, 0, i, unit, true);
            }
        }
        uint256 fee = _fee(UNITS * UNIT_PAY);
        uint256 each = fee / 2 < 1e18 ? fee / 2 : 1e18;
        _settle(jobId);
        assertEq(market.job(jobId).verifierFeeEach, each);
        assertEq(zen.balanceOf(address(treasury)), fee - 2 * each);

        vm.expectEmit(address(market));
        emit IJobMarket.VerificationFeesClaimed(jobId, verifier1, each);
        vm.prank(verifier1);
        market.claimVerificationFees(jobId);
        assertEq(market.owed(verifier1), each);
    }

    function test_RevertWhen_settleBeforeVerificationWindowEnds() public {
        uint256 jobId = _startJob();
        _completeSlot(jobId, 0);
        uint256 until = block.timestamp + VERIFICATION_WINDOW;
        skip(VERIFICATION_WINDOW - 1);
        vm.expectRevert(abi.encodeWithSelector(IJobMarket.VerificationWindowOpen.selector, until));
        market.settle(jobId);
    }

    function test_RevertWhen_settleWithOpenDispute() public {
        uint256 jobId = _startJob();
        IJobMarket.Unit memory unit = _checkpoint(jobId, 0);
        _rollToSample();
        _postResult(verifier1, jobId, 0, 0, unit, false);
        _completeSlot(jobId, 0);
        skip(VERIFICATION_WINDOW);
        vm.expectRevert(abi.encodeWithSelector(IJobMarket.DisputesOpen.selector, 1));
        market.settle(jobId);
    }

    function test_RevertWhen_settleRunningJob() public {
        uint256 jobId = _startJob();
        vm.expectRevert(abi.encodeWithSelector(IJobMarket.WrongJobStatus.selector, jobId, IJobMarket.JobStatus.Running));
        market.settle(jobId);
    }

    function test_RevertWhen_claimVerificationFeesTwice() public {
        uint256 jobId = _startJob();
        IJobMarket.Unit memory unit = _checkpoint(jobId, 0);
        _rollToSample();
        _postResult(verifier1, jobId, 0, 0, unit, true);
        _completeSlot(jobId, 0);
        _settle(jobId);
        vm.startPrank(verifier1);
        market.claimVerificationFees(jobId);
        vm.expectRevert(IJobMarket.AlreadyClaimed.selector);
        market.claimVerificationFees(jobId);
        vm.stopPrank();
    }

    function test_RevertWhen_claimWithoutVerifications() public {
        uint256 jobId = _startJob();
        _completeSlot(jobId, 0);
        _settle(jobId);
        vm.expectRevert(IJobMarket.NothingOwed.selector);
        vm.prank(verifier2);
        market.claimVerificationFees(jobId);
    }

    function test_RevertWhen_claimBeforeSettlement() public {
        uint256 jobId = _startJob();
        vm.expectRevert(abi.encodeWithSelector(IJobMarket.WrongJobStatus.selector, jobId, IJobMarket.JobStatus.Running));
        vm.prank(verifier1);
        market.claimVerificationFees(jobId);
    }

    function testFuzz_withdraw_paysExactlyOwed(uint32 units) public {
        units = uint32(bound(units, 1, UNITS - 1));
        uint256 jobId = _startJob();
        _workThenGoDown(jobId, units);
        vm.prank(user);
        market.cancelJob(jobId);
        _settle(jobId);
        uint256 owed = market.owed(provider1);
        vm.expectEmit(address(market));
        emit IJobMarket.Withdrawn(provider1, owed);
        vm.prank(provider1);
        market.withdraw();
        assertEq(zen.balanceOf(provider1), owed);
        assertEq(market.owed(provider1), 0);
    }

    function test_RevertWhen_withdrawNothingOwed() public {
        vm.expectRevert(IJobMarket.NothingOwed.selector);
        vm.prank(provider1);
        market.withdraw();
    }

    /*//////////////////////////////////////////////////////////////
                          VERIFICATION HOOKS
    //////////////////////////////////////////////////////////////*/

    function test_RevertWhen_hooksCalledByOtherThanVerification() public {
        uint256 jobId = _startJob();
        IJobMarket.Unit memory unit = _checkpoint(jobId, 0);
        vm.startPrank(verifier1);
        vm.expectRevert(abi.encodeWithSelector(IJobMarket.NotVerification.selector, verifier1));
        market.rejectUnit(jobId, 0, 0, unit, verifier1);
        vm.expectRevert(abi.encodeWithSelector(IJobMarket.NotVerification.selector, verifier1));
        market.penalize(jobId, provider1, IStaking.SlashReason.BandwidthViolation, verifier1);
        vm.stopPrank();
    }

    function test_RevertWhen_rejectedUnitDoesNotMatch() public {
        uint256 jobId = _startJob();
        IJobMarket.Unit memory unit = _checkpoint(jobId, 0);
        unit.amount += 1;
        vm.expectRevert(IJobMarket.UnitMismatch.selector);
        vm.prank(address(verification));
        market.rejectUnit(jobId, 0, 0, unit, verifier1);
    }

    function test_penalize_slashesShareOfCollateral() public {
        uint256 jobId = _startJob();
        vm.prank(address(verification));
        market.penalize(jobId, provider1, IStaking.SlashReason.BandwidthViolation, verifier1);
        assertEq(staking.account(provider1).staked, PROVIDER_STAKE - COLLATERAL * 1_000 / BPS);
    }

    /*//////////////////////////////////////////////////////////////
                               GOVERNANCE
    //////////////////////////////////////////////////////////////*/

    function test_RevertWhen_setVerificationTwice() public {
        vm.expectRevert(IJobMarket.ParameterOutOfRange.selector);
        vm.prank(governor);
        market.setVerification(IVerification(address(1)));
    }

    function test_setParameters_runningJobsKeepTheirFee() public {
        uint256 jobId = _createJob();
        vm.expectEmit(address(market));
        emit IJobMarket.ParametersSet(1_000, 2_000, 1 hours, 2 hours, 2e18);
        vm.prank(governor);
        market.setParameters(1_000, 2_000, 1 hours, 2 hours, 2e18);
        assertEq(market.feeBps(), 1_000);
        assertEq(market.collateralBps(), 2_000);
        assertEq(market.bidWindow(), 1 hours);
        assertEq(market.revealWindow(), 2 hours);
        assertEq(market.verificationFee(), 2e18);
        assertEq(market.job(jobId).feeBps, 500);
        assertEq(market.job(_createJob()).feeBps, 1_000);
    }

    function test_RevertWhen_parametersOutOfRange() public {
        vm.startPrank(governor);
        vm.expectRevert(IJobMarket.ParameterOutOfRange.selector);
        market.setParameters(1_001, 5_000, 1, 1, 0);
        vm.expectRevert(IJobMarket.ParameterOutOfRange.selector);
        market.setParameters(500, uint16(BPS + 1), 1, 1, 0);
        vm.expectRevert(IJobMarket.ParameterOutOfRange.selector);
        market.setParameters(500, 5_000, 0, 1, 0);
        vm.expectRevert(IJobMarket.ParameterOutOfRange.selector);
        market.setSlashBps(IStaking.SlashReason.Downtime, uint16(BPS + 1));
        vm.stopPrank();
    }

    function test_setSlashBps_setsShare() public {
        vm.expectEmit(address(market));
        emit IJobMarket.SlashBpsSet(IStaking.SlashReason.Downtime, 3_000);
        vm.prank(governor);
        market.setSlashBps(IStaking.SlashReason.Downtime, 3_000);
        assertEq(market.slashBps(IStaking.SlashReason.Downtime), 3_000);
    }

    function test_RevertWhen_governanceByOthers() public {
        bytes memory err = abi.encodeWithSelector(
            IAccessControl.AccessControlUnauthorizedAccount.selector, user, market.GOVERNOR_ROLE()
        );
        vm.startPrank(user);
        vm.expectRevert(err);
        market.setParameters(500, 5_000, 1, 1, 0);
        vm.expectRevert(err);
        market.setSlashBps(IStaking.SlashReason.Downtime, 0);
        vm.expectRevert(err);
        market.setVerification(IVerification(address(1)));
        vm.stopPrank();
    }
}
