// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {AccessControl} from "@openzeppelin/contracts/access/AccessControl.sol";
import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";
import {IERC20Permit} from "@openzeppelin/contracts/token/ERC20/extensions/IERC20Permit.sol";
import {SafeERC20} from "@openzeppelin/contracts/token/ERC20/utils/SafeERC20.sol";
import {ReentrancyGuard} from "@openzeppelin/contracts/utils/ReentrancyGuard.sol";

import {IJobMarket} from "./interfaces/IJobMarket.sol";
import {IStaking} from "./interfaces/IStaking.sol";
import {IVerification} from "./interfaces/IVerification.sol";
import {Settlement} from "./libraries/Settlement.sol";
import {unitCommitment} from "./libraries/UnitCommitment.sol";

/// @title JobMarket
/// @notice Escrow, auctions, metering and settlement. ZEN held here is always open escrow plus what
/// is owed to providers and verifiers; a job's budget leaves only as provider pay, network fee or
/// refund, and their sum is the budget, to the wei.
contract JobMarket is IJobMarket, AccessControl, ReentrancyGuard {
    using SafeERC20 for IERC20;

    /*//////////////////////////////////////////////////////////////
                               CONSTANTS
    //////////////////////////////////////////////////////////////*/

    bytes32 public constant GOVERNOR_ROLE = keccak256("GOVERNOR_ROLE");

    uint256 internal constant BPS = 10_000;
    uint256 public constant MAX_FEE_BPS = 1_000;
    /// @notice The longest bid or reveal window governance can set.
    uint40 public constant MAX_AUCTION_WINDOW = 7 days;
    /// @notice The most governance can pay per verification (out of the network fee): 1,000 ZEN.
    uint128 public constant MAX_VERIFICATION_FEE = 1_000e18;
    uint256 public constant MAX_NODES = 64;
    /// @dev Pre-written into empty winner places so a reveal updates a slot instead of creating one.
    uint96 internal constant NO_BID = type(uint96).max;
    /// @notice The share of a job's collateral an unrevealed bid forfeits.
    uint256 public constant BID_BOND_BPS = 1_000;

    IERC20 public immutable zen;
    IStaking public immutable staking;
    address public immutable treasury;

    /*//////////////////////////////////////////////////////////////
                                STORAGE
    //////////////////////////////////////////////////////////////*/

    IVerification public verification;

    uint16 public feeBps;
    uint16 public collateralBps;
    uint40 public bidWindow;
    uint40 public revealWindow;
    uint128 public verificationFee;
    mapping(IStaking.SlashReason reason => uint16 bps) public slashBps;

    uint256 private _jobCount;
    mapping(uint256 jobId => Job) private _jobs;
    mapping(uint256 jobId => mapping(uint16 slot => Slot)) private _slots;
    mapping(uint256 jobId => mapping(address provider => Participant)) private _participants;
    mapping(uint256 jobId => address[]) private _participantList;
    /// @dev Two 128-bit unit commitments per slot: unit `index` is half `index % 2` of pair `index / 2`.
    mapping(uint256 jobId => mapping(uint16 slot => mapping(uint32 pair => bytes32))) private _units;
    mapping(uint256 jobId => mapping(uint32 round => mapping(address provider => bytes32))) private _commitments;
    /// @dev The round's `2 * openSlots` lowest revealed bids, lowest first: winners, then fallbacks.
    mapping(uint256 jobId => mapping(uint256 place => Bid)) private _winners;
    /// @dev Rounds that ended before their reveal window did: their sealed bids forfeit nothing.
    mapping(uint256 jobId => mapping(uint32 round => bool)) private _cutShort;
    mapping(uint256 jobId => mapping(address verifier => bool)) private _feesClaimed;
    mapping(address account => uint256) private _owed;
    /// @dev When slot 0 was last assigned after the job's first auction round: the group of the
    /// job's slots meets at its provider, so the others are late only from then.
    mapping(uint256 jobId => uint40) private _hostSince;
    /// @notice ZEN wei slashed from `provider` for faults in job `jobId`: never above the job's
    /// collateral, whatever the number of faults reported.
    mapping(uint256 jobId => mapping(address provider => uint256)) public slashedIn;

    /*//////////////////////////////////////////////////////////////
                               MODIFIERS
    //////////////////////////////////////////////////////////////*/

    modifier onlyVerification() {
        if (msg.sender != address(verification)) revert NotVerification(msg.sender);
        _;
    }

    /*//////////////////////////////////////////////////////////////
                              CONSTRUCTOR
    //////////////////////////////////////////////////////////////*/

    constructor(IERC20 zen_, IStaking staking_, address treasury_, address governor) {
        zen = zen_;
        staking = staking_;
        treasury = treasury_;
        _grantRole(DEFAULT_ADMIN_ROLE, governor);
        _grantRole(GOVERNOR_ROLE, governor);
        _setParameters(500, 5_000, 10 minutes, 10 minutes, 1e18);
        _setSlashBps(IStaking.SlashReason.Downtime, 2_000);
        _setSlashBps(IStaking.SlashReason.IncorrectComputation, 10_000);
        _setSlashBps(IStaking.SlashReason.BandwidthViolation, 1_000);
    }

    /*//////////////////////////////////////////////////////////////
                                  JOBS
    //////////////////////////////////////////////////////////////*/

    /// @inheritdoc IJobMarket
    function createJob(JobRequest calldata r) external nonReentrant returns (uint256 jobId) {
        jobId = _createJob(r);
    }

    /// @inheritdoc IJobMarket
    function createJobWithPermit(JobRequest calldata r, uint256 deadline, uint8 v, bytes32 rs, bytes32 s)
        external
        nonReentrant
        returns (uint256 jobId)
    {
        // A front-run permit leaves the allowance in place; the transfer is what must succeed.
        try IERC20Permit(address(zen)).permit(msg.sender, address(this), r.budget, deadline, v, rs, s) {} catch {}
        jobId = _createJob(r);
    }

    /// @inheritdoc IJobMarket
    function cancelJob(uint256 jobId) external nonReentrant {
        Job storage j = _job(jobId);
        if (msg.sender != j.user) revert NotJobUser(msg.sender);
        if (j.status == JobStatus.Open) {
            Bid[] memory kept = _endRound(j, jobId);
            j.status = JobStatus.Cancelled;
            j.openSlots = 0;
            uint128 refund = j.budget;
            emit JobCancelled(jobId, refund);
            _release(kept, j.collateral);
            zen.safeTransfer(j.user, refund);
            return;
        }
        if (j.status != JobStatus.Running || j.openSlots == 0) revert WrongJobStatus(jobId, j.status);
        Bid[] memory bids = _endRound(j, jobId);
        // Stop: every slot ends where it is; accepted work settles, the rest is refunded.
        for (uint16 i; i < j.nodes; ++i) {
            Slot storage s = _slots[jobId][i];
            if (!s.done) _finishSlot(j, jobId, i, s);
        }
        _release(bids, j.collateral);
    }

    /// @inheritdoc IJobMarket
    function settle(uint256 jobId) external nonReentrant {
        Job storage j = _job(jobId);
        if (j.status != JobStatus.Completed) revert WrongJobStatus(jobId, j.status);
        uint256 until = uint256(j.completedAt) + verification.verificationWindow();
        if (block.timestamp < until) revert VerificationWindowOpen(until);
        uint256 disputes = verification.openDisputes(jobId);
        if (disputes != 0) revert DisputesOpen(disputes);
        j.status = JobStatus.Settled;

        // The fee is taken from each provider's payment, so every payment carries exactly feeBps.
        uint256 payment = 0;
        uint256 fee = 0;
        address[] storage list = _participantList[jobId];
        for (uint256 i; i < list.length; ++i) {
            address provider = list[i];
            uint256 pay = _earned(jobId, provider);
            (uint256 providerFee, uint256 net) = Settlement.split(pay, j.feeBps);
            payment += pay;
            fee += providerFee;
            _owed[provider] += net;
        }

        (uint256 each, uint256 verifierPool) =
            Settlement.verifierPool(fee, verification.verificationCount(jobId), verificationFee);
        j.verifierFeeEach = uint128(each);
        uint256 refund = j.budget - payment;

        emit JobSettled(jobId, payment, fee, refund, verifierPool);
        if (fee > verifierPool) zen.safeTransfer(treasury, fee - verifierPool);
        if (refund != 0) zen.safeTransfer(j.user, refund);
    }

    /// @inheritdoc IJobMarket
    function claimVerificationFees(uint256 jobId) external {
        Job storage j = _job(jobId);
        if (j.status != JobStatus.Settled) revert WrongJobStatus(jobId, j.status);
        if (_feesClaimed[jobId][msg.sender]) revert AlreadyClaimed();
        uint256 amount = verification.verificationsBy(jobId, msg.sender) * j.verifierFeeEach;
        if (amount == 0) revert NothingOwed();
        _feesClaimed[jobId][msg.sender] = true;
        _owed[msg.sender] += amount;
        emit VerificationFeesClaimed(jobId, msg.sender, amount);
    }

    /// @inheritdoc IJobMarket
    function withdraw() external nonReentrant {
        uint256 amount = _owed[msg.sender];
        if (amount == 0) revert NothingOwed();
        _owed[msg.sender] = 0;
        emit Withdrawn(msg.sender, amount);
        zen.safeTransfer(msg.sender, amount);
    }

    /*//////////////////////////////////////////////////////////////
                                AUCTIONS
    //////////////////////////////////////////////////////////////*/

    /// @inheritdoc IJobMarket
    /// @dev Collateral is locked at commit, not at reveal: a provider cannot promise the same stake
    /// to more auctions than it covers (its extra commitments are refused up front, so no reveal
    /// or close fails for want of it), and stake behind a sealed bid stays locked until the bid is
    /// revealed or expires with its bond forfeited, so abandoning a bid always costs the bond.
    /// Committing also finds Staking's account warm from the eligibility read, the cheaper place.
    function commitBid(uint256 jobId, bytes32 commitment) external {
        // An unknown job has no open slots: NoAuction covers it.
        Job storage j = _jobs[jobId];
        if (j.openSlots == 0) revert NoAuction(jobId);
        if (block.timestamp > j.bidDeadline) revert BidWindowClosed(j.bidDeadline);
        if (commitment == 0) revert CommitmentMismatch();
        // slither-disable-next-line unused-return
        (bool active, uint256 free,) = staking.providerStanding(msg.sender, j.tier);
        if (!active) revert NotEligible(msg.sender, j.tier);
        if (free < j.collateral) revert InsufficientCollateral(msg.sender, free, j.collateral);
        // A provider that holds or held a slot here may bid but is passed over at close, where its
        // tenure record is read anyway; a second sealed bid would lock collateral twice.
        mapping(address => bytes32) storage sealedBids = _commitments[jobId][j.round];
        if (sealedBids[msg.sender] != 0) revert AlreadyParticipating(msg.sender);
        sealedBids[msg.sender] = commitment;
        emit BidCommitted(jobId, msg.sender);
        staking.lock(msg.sender, j.collateral);
    }

    /// @inheritdoc IJobMarket
    function revealBid(uint256 jobId, uint96 price, bytes32 salt) external {
        Job storage j = _jobs[jobId];
        if (j.openSlots == 0) revert NoAuction(jobId);
        if (block.timestamp <= j.bidDeadline || block.timestamp > j.revealDeadline) {
            revert NotInRevealWindow(j.bidDeadline, j.revealDeadline);
        }
        uint32 round = j.round;
        bytes32 committed = _commitments[jobId][round][msg.sender];
        if (committed == 0 || committed != bidCommitmentOf(price, salt, msg.sender, jobId)) {
            revert CommitmentMismatch();
        }
        if (price > j.maxPrice) revert PriceAboveMax(price, j.maxPrice);
        delete _commitments[jobId][round][msg.sender];
        emit BidRevealed(jobId, msg.sender, price);

        // Keep the `2 * openSlots` lowest bids sorted ascending, in places pre-filled with NO_BID;
        // ties go to the earlier reveal. A bid not kept, or pushed out, is released at once.
        mapping(uint256 => Bid) storage winners = _winners[jobId];
        uint256 place = 2 * uint256(j.openSlots) - 1;
        Bid memory pushedOut = winners[place];
        if (price >= pushedOut.price) {
            staking.unlock(msg.sender, j.collateral);
            return;
        }
        while (place > 0) {
            Bid memory before = winners[place - 1];
            if (before.price <= price) break;
            // Places past the last bid already hold NO_BID: moving one down would rewrite it.
            if (before.price != NO_BID) winners[place] = before;
            --place;
        }
        winners[place] = Bid(msg.sender, price);
        if (pushedOut.price != NO_BID) staking.unlock(pushedOut.bidder, j.collateral);
    }

    /// @inheritdoc IJobMarket
    function closeAuction(uint256 jobId) external nonReentrant {
        Job storage j = _job(jobId);
        uint16 places = j.openSlots;
        if (places == 0) revert NoAuction(jobId);
        if (block.timestamp <= j.revealDeadline) revert RevealWindowOpen(j.revealDeadline);

        // A kept bid's collateral is locked, but its bidder may have stopped being an active
        // provider of the tier since (slashed below the minimum, unregistered), or it holds or held
        // a slot of this job: pass over it to the next kept bid. The round fails only when fewer
        // valid bids than slots were kept.
        mapping(uint256 => Bid) storage winners = _winners[jobId];
        uint256 kept = 2 * uint256(places);
        bool[] memory valid = new bool[](kept);
        uint16 found = 0;
        uint96 clearingPrice = 0;
        for (uint256 i; found < places && i < kept; ++i) {
            Bid memory b = winners[i];
            if (b.price == NO_BID) break;
            // slither-disable-next-line unused-return
            (bool active,,) = staking.providerStanding(b.bidder, j.tier);
            if (!active || _participants[jobId][b.bidder].state != ParticipantState.None) continue;
            valid[i] = true;
            clearingPrice = b.price;
            ++found;
        }
        if (found < places) {
            emit AuctionFailed(jobId, j.round, found);
            Bid[] memory all = _endRound(j, jobId);
            _openRound(j, jobId);
            _release(all, j.collateral);
            return;
        }

        j.openSlots = 0;
        j.status = JobStatus.Running;
        // Passed-over bids, and fallbacks that were not needed (never checked), are released last.
        Bid[] memory released = new Bid[](kept);
        uint256 count = 0;
        uint16 next = 0;
        for (uint256 i; i < kept; ++i) {
            Bid memory b = winners[i];
            if (b.price == NO_BID) break;
            if (!valid[i]) {
                released[count++] = b;
                continue;
            }
            while (_slots[jobId][next].provider != address(0) || _slots[jobId][next].done) ++next;
            _assign(jobId, next, b.bidder, clearingPrice);
        }
        emit AuctionCleared(jobId, j.round, clearingPrice, places);
        assembly ("memory-safe") {
            mstore(released, count)
        }
        _release(released, j.collateral);
    }

    /// @inheritdoc IJobMarket
    function expireBid(uint256 jobId, uint32 round, address bidder) external nonReentrant {
        Job storage j = _job(jobId);
        bool cutShort = _cutShort[jobId][round];
        if (!cutShort && round == j.round && block.timestamp <= j.revealDeadline) {
            revert RevealWindowOpen(j.revealDeadline);
        }
        if (_commitments[jobId][round][bidder] == 0) revert NoSealedBid(jobId, round, bidder);
        delete _commitments[jobId][round][bidder];
        uint256 bond = cutShort ? 0 : uint256(j.collateral) * BID_BOND_BPS / BPS;
        emit BidExpired(jobId, round, bidder, bond);
        // Release first so the slash takes the bond from stake like any other.
        staking.unlock(bidder, j.collateral);
        // slither-disable-next-line unused-return
        if (bond != 0) staking.slash(bidder, bond, IStaking.SlashReason.Downtime, msg.sender);
    }

    /*//////////////////////////////////////////////////////////////
                           WORK AND METERING
    //////////////////////////////////////////////////////////////*/

    /// @inheritdoc IJobMarket
    function commitCheckpoint(uint256 jobId, uint16 slotId, uint32 index, string calldata cid, bytes32 stateHash)
        external
    {
        Job storage j = _jobs[jobId];
        if (j.status != JobStatus.Running) revert WrongJobStatus(jobId, j.status);
        Slot storage s = _slots[jobId][slotId];
        if (s.provider != msg.sender) revert NotSlotProvider(jobId, slotId);
        if (s.done) revert SlotDone(jobId, slotId);
        // A rollback between the provider's read of the slot and this commit would otherwise file
        // the checkpoint of a later unit as the first voided one.
        if (index != s.unitsDone) revert NotNextUnit(index, s.unitsDone);
        _recordUnit(jobId, slotId, s, index, cid, stateHash);
        if (index + 1 == j.unitsPerNode || s.remaining == 0) _finishSlot(j, jobId, slotId, s);
    }

    /// @inheritdoc IJobMarket
    function reportDowntime(uint256 jobId, uint16 slotId) external nonReentrant {
        Job storage j = _job(jobId);
        if (j.status != JobStatus.Running) revert WrongJobStatus(jobId, j.status);
        Slot storage s = _slots[jobId][slotId];
        if (s.provider == address(0)) revert SlotVacant(jobId, slotId);
        if (s.done) revert SlotDone(jobId, slotId);
        if (slotId != 0 && _groupHostDown(jobId)) revert GroupHostDown(jobId);
        uint256 deadline = checkpointDeadline(jobId, slotId);
        if (block.timestamp <= deadline) revert NotOverdue(deadline);
        _removeProvider(j, jobId, slotId, s, IStaking.SlashReason.Downtime, msg.sender, true);
    }

    /// @dev Whether slot 0, whose provider hosts the group, is vacant or itself late: its board is
    /// gone, so the others, stalled with it, are not to blame.
    function _groupHostDown(uint256 jobId) internal view returns (bool) {
        Slot storage host = _slots[jobId][0];
        return host.provider == address(0) || (!host.done && block.timestamp > checkpointDeadline(jobId, 0));
    }

    /// @inheritdoc IJobMarket
    function checkpointDeadline(uint256 jobId, uint16 slotId) public view returns (uint256) {
        // A holder waiting on the review of a bad input it flagged is late only from its end.
        uint256 from = verification.inputUnderReviewUntil(jobId, slotId);
        uint256 last = _slots[jobId][slotId].lastCheckpointAt;
        if (from < last) from = last;
        if (slotId != 0 && from < _hostSince[jobId]) from = _hostSince[jobId];
        return from + _job(jobId).checkpointInterval;
    }

    /// @inheritdoc IJobMarket
    function rejectUnit(uint256 jobId, uint16 slotId, uint32 index, Unit calldata unit, address reporter)
        external
        onlyVerification
        nonReentrant
    {
        if (_liveUnit(jobId, slotId, index) != unitCommitment(unit)) revert UnitMismatch();
        Job storage j = _jobs[jobId];
        Slot storage s = _slots[jobId][slotId];
        address holder = s.provider;
        bool cheaterHolds = holder == unit.provider;

        // Every unit from the failed one on, by whoever, built on a wrong state: the slot resumes
        // from the last good checkpoint. The cheater's pay from the failed unit on goes back into
        // the slot's budget; a later provider's pay for what it built on the bad state in good
        // faith stands, so the slot's remaining budget and its holder's start move up together.
        uint128 clawedBack;
        if (cheaterHolds) {
            clawedBack = unit.remainingBefore - s.remaining;
            s.remaining = unit.remainingBefore;
        } else {
            // A live unit of a past tenure is never below where that tenure's pay ended.
            Participant storage p = _participants[jobId][unit.provider];
            clawedBack = unit.remainingBefore - p.endRemaining;
            p.endRemaining = unit.remainingBefore;
            s.remaining += clawedBack;
            if (holder != address(0)) _participants[jobId][holder].startRemaining += clawedBack;
        }
        s.unitsDone = index;
        emit UnitRejected(jobId, slotId, index, clawedBack);

        // A finished slot has work again; its holder's collateral was released when it finished.
        bool wasDone = s.done && holder != address(0);
        if (wasDone) {
            s.done = false;
            --j.doneSlots;
            if (j.status == JobStatus.Completed) j.status = JobStatus.Running;
        }
        if (cheaterHolds) {
            _removeProvider(j, jobId, slotId, s, IStaking.SlashReason.IncorrectComputation, reporter, !wasDone);
            return;
        }
        if (wasDone) {
            // An honest successor that had finished has no collateral left behind the slot: it
            // leaves with its pay, unslashed, and the slot is re-auctioned.
            Bid[] memory kept = _vacate(j, jobId, s);
            emit SlotReleased(jobId, slotId, holder);
            _release(kept, j.collateral);
        } else if (holder != address(0)) {
            // An honest successor still at work keeps the slot and redoes the voided units, with a
            // full checkpoint interval for the first.
            s.lastCheckpointAt = uint40(block.timestamp);
        }
        _slash(j, jobId, unit.provider, IStaking.SlashReason.IncorrectComputation, reporter, false);
    }

    /// @inheritdoc IJobMarket
    function penalize(uint256 jobId, address provider, IStaking.SlashReason reason, address reporter)
        external
        onlyVerification
        nonReentrant
    {
        _slash(_jobs[jobId], jobId, provider, reason, reporter, false);
    }

    /*//////////////////////////////////////////////////////////////
                               GOVERNANCE
    //////////////////////////////////////////////////////////////*/

    /// @notice Sets the verification contract, once. Governance only.
    function setVerification(IVerification verification_) external onlyRole(GOVERNOR_ROLE) {
        if (address(verification) != address(0) || address(verification_) == address(0)) {
            revert ParameterOutOfRange();
        }
        verification = verification_;
    }

    /// @notice Sets the fee (capped at MAX_FEE_BPS), the collateral share of a slot's budget, the
    /// auction windows (1 s to MAX_AUCTION_WINDOW) and the per-verification fee (at most
    /// MAX_VERIFICATION_FEE). Governance only; running jobs keep their fee and collateral.
    function setParameters(
        uint16 feeBps_,
        uint16 collateralBps_,
        uint40 bidWindow_,
        uint40 revealWindow_,
        uint128 verificationFee_
    ) external onlyRole(GOVERNOR_ROLE) {
        _setParameters(feeBps_, collateralBps_, bidWindow_, revealWindow_, verificationFee_);
    }

    /// @notice Sets the share of a slot's collateral that a slash for `reason` takes. Governance only.
    function setSlashBps(IStaking.SlashReason reason, uint16 bps) external onlyRole(GOVERNOR_ROLE) {
        _setSlashBps(reason, bps);
    }

    /*//////////////////////////////////////////////////////////////
                                 VIEWS
    //////////////////////////////////////////////////////////////*/

    /// @inheritdoc IJobMarket
    function job(uint256 jobId) external view returns (Job memory) {
        return _job(jobId);
    }

    /// @inheritdoc IJobMarket
    function status(uint256 jobId) external view returns (JobStatus) {
        return _jobs[jobId].status;
    }

    /// @inheritdoc IJobMarket
    function sampleRateBps(uint256 jobId) external view returns (uint16) {
        return _jobs[jobId].sampleRateBps;
    }

    /// @inheritdoc IJobMarket
    function slot(uint256 jobId, uint16 slotId) external view returns (Slot memory) {
        return _slots[jobId][slotId];
    }

    /// @inheritdoc IJobMarket
    function participant(uint256 jobId, address provider) external view returns (Participant memory) {
        return _participants[jobId][provider];
    }

    /// @inheritdoc IJobMarket
    function participants(uint256 jobId) external view returns (address[] memory) {
        return _participantList[jobId];
    }

    /// @notice Pay accrued so far by `provider` in job `jobId`, fee included.
    function earned(uint256 jobId, address provider) external view returns (uint256) {
        return _earned(jobId, provider);
    }

    /// @inheritdoc IJobMarket
    function unitHash(uint256 jobId, uint16 slotId, uint32 index) external view returns (bytes16) {
        return _liveUnit(jobId, slotId, index);
    }

    /// @inheritdoc IJobMarket
    function bidCommitment(uint256 jobId, address provider) external view returns (bytes32) {
        return _commitments[jobId][_jobs[jobId].round][provider];
    }

    /// @notice The current round's kept bids (winners, then fallbacks), lowest first.
    function leadingBids(uint256 jobId) external view returns (Bid[] memory bids) {
        bids = new Bid[](_revealedWinners(jobId, 2 * uint256(_jobs[jobId].openSlots)));
        for (uint256 i; i < bids.length; ++i) {
            bids[i] = _winners[jobId][i];
        }
    }

    /// @inheritdoc IJobMarket
    function owed(address account) external view returns (uint256) {
        return _owed[account];
    }

    /// @inheritdoc IJobMarket
    function jobCount() external view returns (uint256) {
        return _jobCount;
    }

    /// @inheritdoc IJobMarket
    function bidCommitmentOf(uint96 price, bytes32 salt, address bidder, uint256 jobId) public pure returns (bytes32) {
        return keccak256(abi.encode(price, salt, bidder, jobId));
    }

    /*//////////////////////////////////////////////////////////////
                                INTERNAL
    //////////////////////////////////////////////////////////////*/

    function _createJob(JobRequest calldata r) internal returns (uint256 jobId) {
        if (
            r.nodes == 0 || r.nodes > MAX_NODES || r.unitsPerNode == 0 || r.maxPrice == 0 || r.checkpointInterval == 0
                || r.unitGpuSeconds == 0 || r.sampleRateBps > BPS || bytes(r.specCid).length == 0
                || r.tier >= staking.tierCount()
        ) revert InvalidJobRequest();
        uint256 slotBudget = r.budget / r.nodes;
        // A slot whose share of the budget is zero could never pay for a checkpoint.
        if (slotBudget == 0) revert BudgetTooLow(r.budget, r.nodes);

        jobId = ++_jobCount;
        Job storage j = _jobs[jobId];
        j.tier = r.tier;
        j.nodes = r.nodes;
        j.unitsPerNode = r.unitsPerNode;
        j.checkpointInterval = r.checkpointInterval;
        j.sampleRateBps = r.sampleRateBps;
        j.user = msg.sender;
        j.feeBps = feeBps;
        j.unitGpuSeconds = r.unitGpuSeconds;
        j.maxPrice = r.maxPrice;
        // Collateral is a share of what one slot can earn, so it divides the per-slot budget.
        // slither-disable-next-line divide-before-multiply
        j.collateral = uint128(slotBudget * collateralBps / BPS);
        j.budget = r.budget;
        j.status = JobStatus.Open;
        j.openSlots = r.nodes;
        for (uint16 i; i < r.nodes; ++i) {
            Slot storage s = _slots[jobId][i];
            s.unitGpuSeconds = r.unitGpuSeconds;
            s.remaining = uint128(slotBudget);
        }
        emit JobCreated(
            jobId,
            msg.sender,
            r.tier,
            r.specCid,
            r.nodes,
            r.unitsPerNode,
            r.maxPrice,
            r.budget,
            j.collateral,
            r.unitGpuSeconds
        );
        _openRound(j, jobId);
        zen.safeTransferFrom(msg.sender, address(this), r.budget);
    }

    function _openRound(Job storage j, uint256 jobId) internal {
        uint32 round = j.round + 1;
        j.round = round;
        j.bidDeadline = uint40(block.timestamp + bidWindow);
        j.revealDeadline = uint40(block.timestamp + bidWindow + revealWindow);
        for (uint256 i; i < 2 * uint256(j.openSlots); ++i) {
            _winners[jobId][i] = Bid(address(0), NO_BID);
        }
        emit AuctionOpened(jobId, round, j.openSlots, j.bidDeadline, j.revealDeadline);
    }

    /// @dev The provider's collateral was locked when it revealed; it now backs the slot.
    function _assign(uint256 jobId, uint16 slotId, address provider, uint96 price) internal {
        Slot storage s = _slots[jobId][slotId];
        s.provider = provider;
        s.price = price;
        s.lastCheckpointAt = uint40(block.timestamp);
        Participant storage p = _participants[jobId][provider];
        p.startRemaining = s.remaining;
        p.slot = slotId;
        p.state = ParticipantState.Active;
        _participantList[jobId].push(provider);
        if (slotId == 0 && _jobs[jobId].round > 1) _hostSince[jobId] = uint40(block.timestamp);
        emit SlotAssigned(jobId, slotId, provider, price);
    }

    /// @dev Ends the running round: for one ending before its reveal window did, spares its
    /// unrevealed commitments the bond. Returns the bids it kept, whose collateral the caller
    /// releases (`_release`) after its own state changes. Before `openSlots` changes.
    function _endRound(Job storage j, uint256 jobId) internal returns (Bid[] memory kept) {
        if (block.timestamp <= j.revealDeadline) _cutShort[jobId][j.round] = true;
        kept = new Bid[](_revealedWinners(jobId, 2 * uint256(j.openSlots)));
        for (uint256 i; i < kept.length; ++i) {
            kept[i] = _winners[jobId][i];
        }
    }

    function _release(Bid[] memory bids, uint256 collateral) internal {
        for (uint256 i; i < bids.length; ++i) {
            staking.unlock(bids[i].bidder, collateral);
        }
    }

    /// @dev Stores the hash of unit `index`'s record (the slot's next) and accrues its pay to the
    /// slot's provider.
    function _recordUnit(
        uint256 jobId,
        uint16 slotId,
        Slot storage s,
        uint32 index,
        string calldata cid,
        bytes32 stateHash
    ) internal {
        Unit memory unit = _meter(s, cid, stateHash);
        bytes32 pair = _units[jobId][slotId][index / 2];
        _units[jobId][slotId][index / 2] = index % 2 == 0
            ? bytes32(unitCommitment(unit)) | (pair & bytes32(uint256(type(uint128).max)))
            : (pair & ~bytes32(uint256(type(uint128).max))) | (bytes32(unitCommitment(unit)) >> 128);
        // unit.amount <= unit.remainingBefore: _meter caps it.
        unchecked {
            s.remaining = unit.remainingBefore - unit.amount;
        }
        s.unitsDone = index + 1;
        s.lastCheckpointAt = uint40(block.timestamp);
        emit CheckpointCommitted(
            jobId, slotId, index, msg.sender, cid, stateHash, s.unitGpuSeconds, unit.amount, unit.remainingBefore
        );
    }

    /// @dev A unit pays what the job fixed it is worth at the slot's price, capped by the slot's
    /// budget: neither the provider's declared hardware nor the time it took enters, so a faster
    /// provider earns the same per unit, sooner, and no claim raises what a slot is paid.
    function _meter(Slot storage s, string calldata cid, bytes32 stateHash) internal view returns (Unit memory unit) {
        uint128 remainingBefore = s.remaining;
        uint256 amount = uint256(s.unitGpuSeconds) * s.price / 1 hours;
        unit = Unit({
            provider: msg.sender,
            committedAt: uint64(block.timestamp),
            blockNumber: uint64(block.number),
            amount: amount > remainingBefore ? remainingBefore : uint128(amount),
            remainingBefore: remainingBefore,
            cidHash: keccak256(bytes(cid)),
            stateHash: stateHash
        });
    }

    function _finishSlot(Job storage j, uint256 jobId, uint16 slotId, Slot storage s) internal {
        s.done = true;
        uint16 done = j.doneSlots + 1;
        j.doneSlots = done;
        emit SlotFinished(jobId, slotId);
        if (done == j.nodes) {
            j.status = JobStatus.Completed;
            j.completedAt = uint40(block.timestamp);
            j.openSlots = 0;
            emit JobCompleted(jobId);
        }
        if (s.provider != address(0)) staking.unlock(s.provider, j.collateral - slashedIn[jobId][s.provider]);
    }

    /// @dev Ends `s.provider`'s tenure, slashes it and puts the slot up for auction again.
    /// `unlockCollateral` is false when the slot had finished and its collateral was already released.
    function _removeProvider(
        Job storage j,
        uint256 jobId,
        uint16 slotId,
        Slot storage s,
        IStaking.SlashReason reason,
        address reporter,
        bool unlockCollateral
    ) internal {
        address provider = s.provider;
        Bid[] memory kept = _vacate(j, jobId, s);
        emit ProviderRemoved(jobId, slotId, provider, reason);
        _release(kept, j.collateral);
        _slash(j, jobId, provider, reason, reporter, unlockCollateral);
    }

    /// @dev Ends `s.provider`'s tenure, its pay fixed where the slot's budget stands, and puts the
    /// slot up for auction again. A round already running for other slots restarts with one more
    /// place (its bids were for fewer slots): returns that round's kept bids, whose collateral the
    /// caller releases (`_release`) after its own state changes.
    function _vacate(Job storage j, uint256 jobId, Slot storage s) internal returns (Bid[] memory kept) {
        Participant storage p = _participants[jobId][s.provider];
        p.endRemaining = s.remaining;
        p.state = ParticipantState.Removed;
        s.provider = address(0);
        s.price = 0;
        kept = j.openSlots != 0 ? _endRound(j, jobId) : new Bid[](0);
        j.openSlots += 1;
        _openRound(j, jobId);
    }

    /// @dev Slashes `provider` its share for `reason` of the job's collateral, and never more in all
    /// than that collateral: faults in one job (however many are reported, by whomever) reach only
    /// what the provider put up for it. The slash comes out of the job's collateral while it is
    /// still locked: released first, so the staking contract takes it as free stake, and the slot
    /// releases only what is left when it ends. `releaseRest` (a provider removed from a slot it
    /// had not finished) releases all the collateral still locked for the job, then slashes.
    function _slash(
        Job storage j,
        uint256 jobId,
        address provider,
        IStaking.SlashReason reason,
        address reporter,
        bool releaseRest
    ) internal {
        uint256 collateral = j.collateral;
        uint256 taken = slashedIn[jobId][provider];
        uint256 amount = collateral * slashBps[reason] / BPS;
        // taken <= collateral: every slash adds at most collateral - taken.
        if (amount > collateral - taken) amount = collateral - taken;
        slashedIn[jobId][provider] = taken + amount;
        uint256 release = 0;
        if (releaseRest) {
            release = collateral - taken;
        } else {
            Participant storage p = _participants[jobId][provider];
            if (p.state == ParticipantState.Active && !_slots[jobId][p.slot].done) release = amount;
        }
        if (release != 0) staking.unlock(provider, release);
        // What was actually taken (less if the provider holds less) is in Staking's Slashed event.
        // slither-disable-next-line unused-return
        if (amount != 0) staking.slash(provider, amount, reason, reporter);
    }

    function _earned(uint256 jobId, address provider) internal view returns (uint256) {
        Participant storage p = _participants[jobId][provider];
        if (p.state == ParticipantState.Active) return p.startRemaining - _slots[jobId][p.slot].remaining;
        if (p.state == ParticipantState.Removed) return p.startRemaining - p.endRemaining;
        return 0;
    }

    /// @dev Units past a rollback are void until the slot's new provider commits over them.
    function _liveUnit(uint256 jobId, uint16 slotId, uint32 index) internal view returns (bytes16) {
        if (index >= _slots[jobId][slotId].unitsDone) return 0;
        bytes32 pair = _units[jobId][slotId][index / 2];
        return bytes16(index % 2 == 0 ? pair : pair << 128);
    }

    /// @dev How many of the first `places` places hold a revealed bid.
    function _revealedWinners(uint256 jobId, uint256 places) internal view returns (uint256 count) {
        while (count < places && _winners[jobId][count].price != NO_BID) ++count;
    }

    function _job(uint256 jobId) internal view returns (Job storage j) {
        j = _jobs[jobId];
        if (j.status == JobStatus.None) revert UnknownJob(jobId);
    }

    function _setParameters(
        uint16 feeBps_,
        uint16 collateralBps_,
        uint40 bidWindow_,
        uint40 revealWindow_,
        uint128 verificationFee_
    ) internal {
        if (
            feeBps_ > MAX_FEE_BPS || collateralBps_ > BPS || bidWindow_ == 0 || revealWindow_ == 0
                || bidWindow_ > MAX_AUCTION_WINDOW || revealWindow_ > MAX_AUCTION_WINDOW
                || verificationFee_ > MAX_VERIFICATION_FEE
        ) revert ParameterOutOfRange();
        feeBps = feeBps_;
        collateralBps = collateralBps_;
        bidWindow = bidWindow_;
        revealWindow = revealWindow_;
        verificationFee = verificationFee_;
        emit ParametersSet(feeBps_, collateralBps_, bidWindow_, revealWindow_, verificationFee_);
    }

    function _setSlashBps(IStaking.SlashReason reason, uint16 bps) internal {
        if (bps > BPS) revert ParameterOutOfRange();
        slashBps[reason] = bps;
        emit SlashBpsSet(reason, bps);
    }
}
