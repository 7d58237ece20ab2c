// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {CommonBase} from "forge-std/Base.sol";
import {StdCheats} from "forge-std/StdCheats.sol";
import {StdUtils} from "forge-std/StdUtils.sol";

import {JobMarket} from "../../../contracts/JobMarket.sol";
import {Staking} from "../../../contracts/Staking.sol";
import {Verification} from "../../../contracts/Verification.sol";
import {ZenToken} from "../../../contracts/ZenToken.sol";
import {IJobMarket} from "../../../contracts/interfaces/IJobMarket.sol";
import {IStaking} from "../../../contracts/interfaces/IStaking.sol";
import {IVerification} from "../../../contracts/interfaces/IVerification.sol";
import {unitCommitment} from "../../../contracts/libraries/UnitCommitment.sol";
import {LedgerRecords} from "../utils/LedgerRecords.sol";

/// @notice Drives whole job lifecycles through the ledger (escrow, auction, work, downtime,
/// verification, disputes, cancellation, settlement, withdrawals, staking) and keeps ghost totals
/// of every ZEN movement, computed independently of the contracts' own bookkeeping.
contract LedgerHandler is CommonBase, StdCheats, StdUtils {
    uint256 internal constant BPS = 10_000;
    uint256 internal constant FEE_BPS = 500;
    uint32 internal constant UNITS_PER_NODE = 3;
    uint32 internal constant CHECKPOINT_INTERVAL = 1 hours;
    uint32 internal constant UNIT_SECONDS = 10 minutes; // the longest a unit takes
    /// @dev Few jobs at once, so that one job's time warps leave the others' windows open often
    /// enough for runs to reach settlement.
    uint256 internal constant MAX_LIVE_JOBS = 2;

    struct Actors {
        address user;
        uint256 userKey;
        address governor;
        address distributor;
        address[] providers;
        address[] verifiers;
    }

    /// @dev A committed unit as a verifier rebuilt it from its event.
    struct Record {
        uint256 jobId;
        uint16 slot;
        uint32 index;
        bool voided; // its pay was taken back by a confirmed failure
        IJobMarket.Unit unit;
    }

    ZenToken public immutable zen;
    Staking public immutable staking;
    JobMarket public immutable market;
    Verification public immutable verification;
    address public immutable treasury;

    address public immutable user;
    uint256 internal immutable userKey;
    address internal immutable governor;
    address internal immutable distributor;
    address[] internal _providers;
    address[] internal _verifiers;

    /// @dev A bid sealed and left unrevealed, until someone expires it.
    struct Sealed {
        uint256 jobId;
        uint32 round;
        address bidder;
    }

    uint256[] public jobIds;
    Record[] internal _records;
    Sealed[] internal _sealed;
    uint256[] internal _disputed; // indices into _records whose unit got a failed result
    mapping(uint256 jobId => mapping(address verifier => bool)) internal _claimed;

    // Escrow: what came in, and every way it went out.
    uint256 public ghost_escrowed;
    uint256 public ghost_refunded;
    uint256 public ghost_providerPaid; // provider pay credited at settlement, fee deducted
    uint256 public ghost_feesToTreasury;
    uint256 public ghost_verifierPools;
    uint256 public ghost_verifierClaimed;
    // Fees: pay each provider earned by the handler's own metering, and 5% of it.
    mapping(uint256 jobId => mapping(address provider => uint256)) public ghost_earned;
    uint256 public ghost_settledEarnings;
    uint256 public ghost_expectedFees;
    uint256 public ghost_feeMismatches;
    // Withdrawals.
    uint256 public ghost_marketWithdrawn;
    uint256 public ghost_marketOverpaid;
    uint256 public ghost_stakeDeposited;
    uint256 public ghost_unbondRequested;
    uint256 public ghost_stakeWithdrawn;
    uint256 public ghost_stakeOverpaid;
    // Slashes.
    uint256 public ghost_slashedByProtocol;
    uint256 public ghost_protocolSlashCalls;
    uint256 public ghost_unauthorizedSlashAttempts;
    uint256 public ghost_unauthorizedSlashSuccesses;
    // Rollbacks: confirmed failures after which the slot did not resume from the failed unit.
    uint256 public ghost_rollbackMisses;

    /// @dev Actions that took effect (calls whose preconditions did not hold return early).
    mapping(bytes32 action => uint256) public calls;

    constructor(ZenToken zen_, Staking staking_, JobMarket market_, Verification verification_, Actors memory a) {
        zen = zen_;
        staking = staking_;
        market = market_;
        verification = verification_;
        treasury = market_.treasury();
        user = a.user;
        userKey = a.userKey;
        governor = a.governor;
        distributor = a.distributor;
        _providers = a.providers;
        _verifiers = a.verifiers;
        ghost_stakeDeposited = zen_.balanceOf(address(staking_));
    }

    /*//////////////////////////////////////////////////////////////
                                 JOBS
    //////////////////////////////////////////////////////////////*/

    function createJob(uint256 nodesSeed, uint256 budgetSeed, uint256 priceSeed, bool withPermit) external {
        if (_liveJobs() >= MAX_LIVE_JOBS) return;
        uint16 nodes = uint16(bound(nodesSeed, 1, 2));
        uint128 budget = uint128(bound(budgetSeed, nodes, 10_000e18));
        IJobMarket.JobRequest memory r = IJobMarket.JobRequest({
            specCid: "bafyspec",
            tier: 0,
            nodes: nodes,
            unitsPerNode: UNITS_PER_NODE,
            checkpointInterval: CHECKPOINT_INTERVAL,
            sampleRateBps: 5_000,
            maxPrice: uint96(bound(priceSeed, 1, 1_000e18)),
            budget: budget,
            unitGpuSeconds: UNIT_SECONDS
        });
        uint256 jobId;
        if (withPermit) {
            (uint8 v, bytes32 rs, bytes32 s) =
                vm.sign(userKey, LedgerRecords.permitDigest(zen, user, address(market), budget, block.timestamp));
            vm.prank(user);
            jobId = market.createJobWithPermit(r, block.timestamp, v, rs, s);
        } else {
            vm.startPrank(user);
            zen.approve(address(market), budget);
            jobId = market.createJob(r);
            vm.stopPrank();
        }
        jobIds.push(jobId);
        ghost_escrowed += budget;
        ++calls["createJob"];
    }

    function cancelJob(uint256 jobSeed) external {
        (uint256 jobId, IJobMarket.Job memory j) = _jobWithAuction(jobSeed);
        // The user cancels only after a round has failed to fill the job.
        if (jobId == 0 || j.round == 1) return;
        uint256 before = zen.balanceOf(user);
        vm.prank(user);
        market.cancelJob(jobId);
        ghost_refunded += zen.balanceOf(user) - before;
        // A stopped job refunds at settlement; only a job that never started refunds now.
        if (j.status == IJobMarket.JobStatus.Running) assert(zen.balanceOf(user) == before);
        ++calls["cancelJob"];
    }

    /*//////////////////////////////////////////////////////////////
                               AUCTIONS
    //////////////////////////////////////////////////////////////*/

    /// @dev One sealed-bid round on a job waiting for providers: up to three eligible providers
    /// commit, reveal after the bid window and the round is closed after the reveal window. Too
    /// few bids make the round fail and a new one open.
    function runAuction(uint256 jobSeed, uint256 biddersSeed, uint256 priceSeed) external {
        (uint256 jobId, IJobMarket.Job memory j) = _jobWithAuction(jobSeed);
        if (jobId == 0) return;
        if (block.timestamp > j.bidDeadline) {
            // This round's bid window passed: close it to open a fresh one.
            if (block.timestamp <= j.revealDeadline) vm.warp(j.revealDeadline + 1);
            market.closeAuction(jobId);
            j = market.job(jobId);
            if (j.openSlots == 0) return;
        }
        address[] memory bidders = _bidders(jobId, j, bound(biddersSeed, 1, _providers.length));
        uint96[] memory prices = new uint96[](bidders.length);
        for (uint256 k; k < bidders.length; ++k) {
            prices[k] = uint96(bound(uint256(keccak256(abi.encode(priceSeed, k))), 1, j.maxPrice));
            bytes32 salt = keccak256(abi.encode(jobId, j.round, bidders[k]));
            bytes32 commitment = market.bidCommitmentOf(prices[k], salt, bidders[k], jobId);
            vm.prank(bidders[k]);
            market.commitBid(jobId, commitment);
        }
        vm.warp(j.bidDeadline + 1);
        for (uint256 k; k < bidders.length; ++k) {
            vm.prank(bidders[k]);
            market.revealBid(jobId, prices[k], keccak256(abi.encode(jobId, j.round, bidders[k])));
        }
        vm.warp(j.revealDeadline + 1);
        market.closeAuction(jobId);
        calls["bids"] += bidders.length;
        if (market.job(jobId).openSlots == 0) ++calls["auctionsFilled"];
        ++calls["runAuction"];
    }

    /// @dev A provider seals a bid it will never reveal: its collateral stays locked until the bid
    /// expires.
    function sealBid(uint256 jobSeed, uint256 bidderSeed) external {
        (uint256 jobId, IJobMarket.Job memory j) = _jobWithAuction(jobSeed);
        if (jobId == 0 || block.timestamp > j.bidDeadline) return;
        address[] memory bidders = _bidders(jobId, j, _providers.length);
        if (bidders.length == 0) return;
        address bidder = bidders[bidderSeed % bidders.length];
        vm.prank(bidder);
        market.commitBid(jobId, keccak256(abi.encode("never revealed", jobId, j.round, bidder)));
        _sealed.push(Sealed(jobId, j.round, bidder));
        ++calls["sealBid"];
    }

    /// @dev Anyone expires a sealed bid once its round's reveal window is over (at once if the
    /// round was cut short): the collateral is released and the bond slashed.
    function expireBid(uint256 sealedSeed, uint256 callerSeed) external {
        if (_sealed.length == 0) return;
        uint256 i = sealedSeed % _sealed.length;
        Sealed memory b = _sealed[i];
        _sealed[i] = _sealed[_sealed.length - 1];
        _sealed.pop();
        IJobMarket.Job memory j = market.job(b.jobId);
        if (b.round == j.round && block.timestamp <= j.revealDeadline) vm.warp(j.revealDeadline + 1);
        _protocolSlash(
            abi.encodeCall(market.expireBid, (b.jobId, b.round, b.bidder)), _actor(callerSeed), address(market)
        );
        ++calls["expireBid"];
    }

    /*//////////////////////////////////////////////////////////////
                                 WORK
    //////////////////////////////////////////////////////////////*/

    function commitCheckpoint(uint256 jobSeed, uint256 slotSeed, uint256 elapsedSeed) external {
        (uint256 jobId, IJobMarket.Job memory j) = _jobIn(jobSeed, IJobMarket.JobStatus.Running);
        if (jobId == 0) return;
        uint16 slotId = uint16(bound(slotSeed, 0, j.nodes - 1));
        IJobMarket.Slot memory s = market.slot(jobId, slotId);
        if (s.provider == address(0) || s.done) return;

        vm.warp(block.timestamp + bound(elapsedSeed, 1, UNIT_SECONDS));
        vm.roll(block.number + 1);
        IJobMarket.Unit memory unit = _commit(jobId, slotId, s);

        _records.push(Record(jobId, slotId, s.unitsDone, false, unit));
        ghost_earned[jobId][s.provider] += unit.amount;
        ++calls["commitCheckpoint"];
    }

    function reportDowntime(uint256 jobSeed, uint256 slotSeed, uint256 reporterSeed) external {
        (uint256 jobId, IJobMarket.Job memory j) = _jobIn(jobSeed, IJobMarket.JobStatus.Running);
        if (jobId == 0) return;
        uint16 slotId = uint16(bound(slotSeed, 0, j.nodes - 1));
        IJobMarket.Slot memory s = market.slot(jobId, slotId);
        if (s.provider == address(0) || s.done) return;
        uint256 deadline = market.checkpointDeadline(jobId, slotId);
        if (block.timestamp <= deadline) vm.warp(deadline + 1);
        if (slotId != 0 && LedgerRecords.groupHostDown(market, jobId)) return; // slot 0 is reported first
        address reporter = _pick(_verifiers, reporterSeed);
        _protocolSlash(abi.encodeCall(market.reportDowntime, (jobId, slotId)), reporter, address(market));
        ++calls["reportDowntime"];
    }

    /*//////////////////////////////////////////////////////////////
                         VERIFICATION AND DISPUTES
    //////////////////////////////////////////////////////////////*/

    function postResult(uint256 recordSeed, uint256 verifierSeed, bool pass) external {
        if (_records.length == 0) return;
        uint256 i = bound(recordSeed, 0, _records.length - 1);
        Record memory rec = _records[i];
        if (!_live(rec) || block.timestamp >= rec.unit.committedAt + verification.verificationWindow()) return;
        if (block.number < rec.unit.blockNumber + 2) vm.roll(rec.unit.blockNumber + 2);
        if (!verification.isSampled(rec.jobId, rec.slot, rec.index, rec.unit.blockNumber)) return;
        address verifier = _pick(_verifiers, verifierSeed);
        if (!staking.isActiveVerifier(verifier)) return;

        vm.prank(verifier);
        // A unit that already has a result of its own is refused, and so is a verifier not drawn
        // for this turn; those refusals are not findings.
        try verification.postResult(rec.jobId, rec.slot, rec.index, rec.unit, pass, "bafyevidence") {
            if (!pass) _disputed.push(i);
            ++calls["postResult"];
        } catch (bytes memory err) {
            assert(
                bytes4(err) == IVerification.AlreadyVerified.selector || bytes4(err) == IVerification.NotDrawn.selector
            );
        }
    }

    function resolveDispute(uint256 disputeSeed, bool confirm) external {
        (uint256 i, IVerification.Result memory r) = _openDispute(disputeSeed);
        if (r.verdict != IVerification.Verdict.Disputed) return;
        Record memory rec = _records[i];
        if (block.timestamp > r.disputedAt + verification.disputeWindow() || !_live(rec)) return;
        uint256 turn = (block.timestamp - r.disputedAt) / verification.turnLength(true);
        address resolver = verification.drawnVerifier(rec.jobId, rec.slot, rec.index, r.unitBlock, r.first, turn);
        if (!staking.isActiveVerifier(resolver)) return;
        bool replaced = market.slot(rec.jobId, rec.slot).provider != rec.unit.provider;

        _protocolSlash(
            abi.encodeCall(
                verification.resolveDispute, (rec.jobId, rec.slot, rec.index, rec.unit, !confirm, "bafyevidence")
            ),
            resolver,
            address(verification)
        );
        if (confirm) {
            _voidFrom(rec);
            if (market.slot(rec.jobId, rec.slot).unitsDone != rec.index) ++ghost_rollbackMisses;
            if (replaced) ++calls["rollbackPastReplacedProvider"];
        }
        ++calls["resolveDispute"];
    }

    function expireDispute(uint256 disputeSeed) external {
        (uint256 i, IVerification.Result memory r) = _openDispute(disputeSeed);
        if (r.verdict != IVerification.Verdict.Disputed) return;
        uint256 endsAt = uint256(r.disputedAt) + verification.disputeWindow();
        if (block.timestamp <= endsAt) vm.warp(endsAt + 1);
        Record memory rec = _records[i];
        verification.expireDispute(rec.jobId, rec.slot, rec.index);
        ++calls["expireDispute"];
    }

    /*//////////////////////////////////////////////////////////////
                        SETTLEMENT AND WITHDRAWALS
    //////////////////////////////////////////////////////////////*/

    function settle(uint256 jobSeed) external {
        (uint256 jobId, IJobMarket.Job memory j) = _jobIn(jobSeed, IJobMarket.JobStatus.Completed);
        if (jobId == 0 || verification.openDisputes(jobId) != 0) return;
        uint256 until = uint256(j.completedAt) + verification.verificationWindow();
        if (block.timestamp < until) vm.warp(until);

        address[] memory list = market.participants(jobId);
        uint256[] memory owedBefore = new uint256[](list.length);
        for (uint256 k; k < list.length; ++k) {
            owedBefore[k] = market.owed(list[k]);
        }
        uint256 userBefore = zen.balanceOf(user);
        uint256 treasuryBefore = zen.balanceOf(treasury);
        market.settle(jobId);

        for (uint256 k; k < list.length; ++k) {
            uint256 credited = market.owed(list[k]) - owedBefore[k];
            uint256 earned = ghost_earned[jobId][list[k]];
            uint256 fee = earned * FEE_BPS / BPS;
            if (credited + fee != earned) ++ghost_feeMismatches;
            ghost_providerPaid += credited;
            ghost_settledEarnings += earned;
            ghost_expectedFees += fee;
        }
        ghost_refunded += zen.balanceOf(user) - userBefore;
        ghost_feesToTreasury += zen.balanceOf(treasury) - treasuryBefore;
        ghost_verifierPools += verification.verificationCount(jobId) * market.job(jobId).verifierFeeEach;
        ++calls["settle"];
    }

    function claimVerificationFees(uint256 jobSeed, uint256 verifierSeed) external {
        (uint256 jobId, IJobMarket.Job memory j) = _jobIn(jobSeed, IJobMarket.JobStatus.Settled);
        if (jobId == 0) return;
        address verifier = _pick(_verifiers, verifierSeed);
        if (_claimed[jobId][verifier] || verification.verificationsBy(jobId, verifier) * j.verifierFeeEach == 0) {
            return;
        }
        uint256 before = market.owed(verifier);
        vm.prank(verifier);
        market.claimVerificationFees(jobId);
        _claimed[jobId][verifier] = true;
        ghost_verifierClaimed += market.owed(verifier) - before;
        ++calls["claimVerificationFees"];
    }

    function withdraw(uint256 actorSeed) external {
        address account = _actor(actorSeed);
        uint256 owed = market.owed(account);
        if (owed == 0) return;
        uint256 before = zen.balanceOf(account);
        vm.prank(account);
        market.withdraw();
        uint256 received = zen.balanceOf(account) - before;
        if (received > owed) ++ghost_marketOverpaid;
        ghost_marketWithdrawn += received;
        ++calls["withdraw"];
    }

    /*//////////////////////////////////////////////////////////////
                                STAKING
    //////////////////////////////////////////////////////////////*/

    function stake(uint256 actorSeed, uint256 amount) external {
        address account = _actor(actorSeed);
        amount = bound(amount, 1, 20_000e18);
        vm.prank(distributor);
        zen.transfer(account, amount);
        vm.startPrank(account);
        zen.approve(address(staking), amount);
        staking.stake(amount);
        vm.stopPrank();
        ghost_stakeDeposited += amount;
        ++calls["stake"];
    }

    function requestUnstake(uint256 actorSeed, uint256 amount) external {
        address account = _actor(actorSeed);
        uint256 free = staking.freeStake(account);
        if (free == 0) return;
        amount = bound(amount, 1, free);
        vm.prank(account);
        staking.requestUnstake(amount);
        ghost_unbondRequested += amount;
        ++calls["requestUnstake"];
    }

    function withdrawStake(uint256 actorSeed) external {
        address account = _actor(actorSeed);
        IStaking.Account memory a = staking.account(account);
        if (a.unbonding == 0) return;
        if (block.timestamp < a.unbondingEnds) vm.warp(a.unbondingEnds);
        uint256 before = zen.balanceOf(account);
        vm.prank(account);
        staking.withdraw();
        uint256 received = zen.balanceOf(account) - before;
        if (received > a.unbonding) ++ghost_stakeOverpaid;
        ghost_stakeWithdrawn += received;
        ++calls["withdrawStake"];
    }

    /// @dev Anyone but the market and the verification contract tries to slash, directly or through
    /// the market's verification hooks.
    function slashUnauthorized(uint256 callerSeed, uint256 victimSeed, uint256 amount, bool viaMarket) external {
        address[4] memory outsiders = [user, governor, treasury, address(this)];
        uint256 k = bound(callerSeed, 0, outsiders.length + _providers.length + _verifiers.length - 1);
        address caller = k < outsiders.length ? outsiders[k] : _actor(k - outsiders.length);
        address victim = _actor(victimSeed);
        amount = bound(amount, 1, 100_000e18);
        ++ghost_unauthorizedSlashAttempts;
        vm.prank(caller);
        if (viaMarket) {
            try market.penalize(jobIds.length, victim, IStaking.SlashReason.BandwidthViolation, caller) {
                ++ghost_unauthorizedSlashSuccesses;
            } catch {}
        } else {
            try staking.slash(victim, amount, IStaking.SlashReason.Downtime, caller) {
                ++ghost_unauthorizedSlashSuccesses;
            } catch {}
        }
        ++calls["slashUnauthorized"];
    }

    /*//////////////////////////////////////////////////////////////
                                 VIEWS
    //////////////////////////////////////////////////////////////*/

    function jobCount() external view returns (uint256) {
        return jobIds.length;
    }

    /// @notice Every account that stakes or is owed: the providers, then the verifiers.
    function stakers() external view returns (address[] memory all) {
        all = new address[](_providers.length + _verifiers.length);
        for (uint256 k; k < all.length; ++k) {
            all[k] = _actor(k);
        }
    }

    /*//////////////////////////////////////////////////////////////
                                INTERNAL
    //////////////////////////////////////////////////////////////*/

    /// @dev The slot's provider commits its next unit; returns the unit as a verifier rebuilds it.
    function _commit(uint256 jobId, uint16 slotId, IJobMarket.Slot memory s) internal returns (IJobMarket.Unit memory) {
        string memory cid = string.concat("bafyckpt-", vm.toString(_records.length));
        vm.recordLogs();
        vm.prank(s.provider);
        market.commitCheckpoint(jobId, slotId, s.unitsDone, cid, keccak256(bytes(cid)));
        return LedgerRecords.unitFromLogs(vm.getRecordedLogs());
    }

    /// @dev Runs a call that may slash and books the ZEN it took out of staking.
    function _protocolSlash(bytes memory call, address caller, address target) internal {
        uint256 before = zen.balanceOf(address(staking));
        vm.prank(caller);
        (bool ok, bytes memory err) = target.call(call);
        if (!ok) {
            assembly {
                revert(add(err, 32), mload(err))
            }
        }
        ghost_slashedByProtocol += before - zen.balanceOf(address(staking));
        ++ghost_protocolSlashCalls;
    }

    /// @dev A confirmed failure takes back the pay of the failed unit's provider from that unit on;
    /// later providers of the slot keep theirs.
    function _voidFrom(Record memory failed) internal {
        for (uint256 k; k < _records.length; ++k) {
            Record storage rec = _records[k];
            if (
                rec.voided || rec.jobId != failed.jobId || rec.unit.provider != failed.unit.provider
                    || rec.index < failed.index
            ) continue;
            rec.voided = true;
            ghost_earned[rec.jobId][rec.unit.provider] -= rec.unit.amount;
        }
    }

    function _live(Record memory rec) internal view returns (bool) {
        return market.unitHash(rec.jobId, rec.slot, rec.index) == unitCommitment(rec.unit);
    }

    function _openDispute(uint256 seed) internal view returns (uint256 i, IVerification.Result memory r) {
        for (uint256 k; k < _disputed.length; ++k) {
            i = _disputed[(seed % _disputed.length + k) % _disputed.length];
            r = verification.result(_records[i].jobId, _records[i].slot, _records[i].index);
            if (r.verdict == IVerification.Verdict.Disputed) return (i, r);
        }
    }

    /// @dev The first job from a seeded start that is in `status`, or id 0.
    function _jobIn(uint256 seed, IJobMarket.JobStatus status)
        internal
        view
        returns (uint256 jobId, IJobMarket.Job memory j)
    {
        for (uint256 k; k < jobIds.length; ++k) {
            jobId = jobIds[(seed % jobIds.length + k) % jobIds.length];
            j = market.job(jobId);
            if (j.status == status) return (jobId, j);
        }
        return (0, j);
    }

    /// @dev The first job from a seeded start with an auction running, or id 0.
    function _jobWithAuction(uint256 seed) internal view returns (uint256 jobId, IJobMarket.Job memory j) {
        for (uint256 k; k < jobIds.length; ++k) {
            jobId = jobIds[(seed % jobIds.length + k) % jobIds.length];
            j = market.job(jobId);
            if (j.openSlots != 0) return (jobId, j);
        }
        return (0, j);
    }

    function _liveJobs() internal view returns (uint256 live) {
        for (uint256 k; k < jobIds.length; ++k) {
            IJobMarket.JobStatus status = market.status(jobIds[k]);
            if (status != IJobMarket.JobStatus.Settled && status != IJobMarket.JobStatus.Cancelled) ++live;
        }
    }

    /// @dev Up to `count` providers that may bid on the job.
    function _bidders(uint256 jobId, IJobMarket.Job memory j, uint256 count)
        internal
        view
        returns (address[] memory bidders)
    {
        bidders = new address[](count);
        uint256 n;
        for (uint256 k; k < _providers.length && n < count; ++k) {
            address provider = _providers[k];
            if (
                staking.isActiveProvider(provider, j.tier) && staking.freeStake(provider) >= j.collateral
                    && market.participant(jobId, provider).state == IJobMarket.ParticipantState.None
                    && market.bidCommitment(jobId, provider) == 0
            ) bidders[n++] = provider;
        }
        assembly {
            mstore(bidders, n)
        }
    }

    function _actor(uint256 seed) internal view returns (address) {
        uint256 k = seed % (_providers.length + _verifiers.length);
        return k < _providers.length ? _providers[k] : _verifiers[k - _providers.length];
    }

    function _pick(address[] storage list, uint256 seed) internal view returns (address) {
        return list[seed % list.length];
    }
}
