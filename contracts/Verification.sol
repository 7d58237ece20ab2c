// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {AccessControl} from "@openzeppelin/contracts/access/AccessControl.sol";
import {ReentrancyGuard} from "@openzeppelin/contracts/utils/ReentrancyGuard.sol";

import {IJobMarket} from "./interfaces/IJobMarket.sol";
import {IStaking} from "./interfaces/IStaking.sol";
import {IVerification} from "./interfaces/IVerification.sol";
import {unitCommitment} from "./libraries/UnitCommitment.sol";

/// @title Verification
/// @notice Sampling, verifier results and disputes. Every open dispute or complaint is counted in
/// `openDisputes`, which settlement waits on; every one of them closes, by an answer or by expiry.
contract Verification is IVerification, AccessControl, ReentrancyGuard {
    /*//////////////////////////////////////////////////////////////
                               CONSTANTS
    //////////////////////////////////////////////////////////////*/

    bytes32 public constant GOVERNOR_ROLE = keccak256("GOVERNOR_ROLE");
    uint256 internal constant BPS = 10_000;
    /// @notice The longest verification or dispute window governance can set. Settlement waits for
    /// the verification window after completion and for disputes opened within it, so no setting
    /// holds a completed job's escrow longer than twice this.
    uint40 public constant MAX_WINDOW = 7 days;
    /// @notice The most a refuted failure report can cost its verifier: 10,000 ZEN.
    uint256 public constant MAX_FALSE_REPORT_SLASH = 10_000e18;
    /// @notice Bandwidth complaints one provider can face in one job. With the market's cap (all
    /// slashes of a provider in a job together take at most that job's collateral), two colluding
    /// verifiers cannot loop open/confirm, and a lone one cannot loop open/expire.
    uint8 public constant MAX_COMPLAINTS = 3;
    /// @notice Time after a complaint closes before the next one against the same provider in the
    /// same job may open.
    uint40 public constant COMPLAINT_COOLDOWN = 1 hours;
    /// @notice Turns in a verification or dispute window; each turn draws one verifier, so a unit
    /// waits for at most this many silent verifiers before it counts as accepted.
    uint256 public constant TURNS = 4;

    IJobMarket public immutable market;
    IStaking public immutable staking;

    /*//////////////////////////////////////////////////////////////
                                STORAGE
    //////////////////////////////////////////////////////////////*/

    /// @inheritdoc IVerification
    uint40 public verificationWindow;
    /// @inheritdoc IVerification
    uint40 public disputeWindow;
    /// @notice ZEN wei slashed from a verifier whose failure report a second verifier refuted.
    uint256 public falseReportSlash;

    mapping(uint256 jobId => mapping(uint16 slot => mapping(uint32 index => Result))) private _results;
    mapping(uint256 jobId => mapping(address provider => Complaint)) private _complaints;
    /// @dev The block of the commitment a unit was flagged in (a unit replaced after a rollback is
    /// a new commitment, not flagged), and the block of the flag: a flagged unit whose own seed was
    /// lost is drawn for from the flag's.
    mapping(uint256 jobId => mapping(uint16 slot => mapping(uint32 index => Flag))) private _flagged;
    /// @dev A unit a successor flagged as its input: its verification window opened again then,
    /// by the latest holder to flag it.
    mapping(uint256 jobId => mapping(uint16 slot => mapping(uint32 index => Review))) private _reviewOpenedAt;
    /// @inheritdoc IVerification
    mapping(uint256 jobId => mapping(uint16 slot => uint256)) public inputUnderReviewUntil;
    /// @inheritdoc IVerification
    mapping(uint64 blockNumber => bytes32) public recordedSeed;
    /// @inheritdoc IVerification
    mapping(uint256 jobId => uint256) public openDisputes;
    /// @inheritdoc IVerification
    mapping(uint256 jobId => uint256) public verificationCount;
    /// @inheritdoc IVerification
    mapping(uint256 jobId => mapping(address verifier => uint256)) public verificationsBy;

    /*//////////////////////////////////////////////////////////////
                              CONSTRUCTOR
    //////////////////////////////////////////////////////////////*/

    constructor(
        IJobMarket market_,
        IStaking staking_,
        address governor,
        uint40 verificationWindow_,
        uint40 disputeWindow_,
        uint256 falseReportSlash_
    ) {
        market = market_;
        staking = staking_;
        _grantRole(DEFAULT_ADMIN_ROLE, governor);
        _grantRole(GOVERNOR_ROLE, governor);
        _setParameters(verificationWindow_, disputeWindow_, falseReportSlash_);
    }

    /*//////////////////////////////////////////////////////////////
                                RESULTS
    //////////////////////////////////////////////////////////////*/

    /// @inheritdoc IVerification
    function postResult(
        uint256 jobId,
        uint16 slot,
        uint32 index,
        IJobMarket.Unit calldata unit,
        bool pass,
        string calldata evidenceCid
    ) external {
        _checkVerifier(unit.provider);
        _checkUnit(jobId, slot, index, unit);
        // Strictly before the end: settlement may run at that very second.
        uint256 opensAt = _resultWindowOpensAt(jobId, slot, index, unit);
        uint256 closesAt = opensAt + verificationWindow;
        if (block.timestamp >= closesAt) revert VerificationWindowClosed(closesAt);
        if (!_toVerify(jobId, slot, index, unit.blockNumber)) revert NotSampled(jobId, slot, index);
        _checkDrawn(jobId, slot, index, unit.blockNumber, address(0), opensAt, verificationWindow);
        Result storage r = _results[jobId][slot][index];
        if (r.verdict != Verdict.None) {
            // A result about a unit voided by a rollback gives way to the unit that replaced it (a
            // later commitment, so a later block), unless it is an open dispute: that must still
            // close, by expiry, for the job to settle.
            if (r.verdict == Verdict.Disputed || r.unitBlock == unit.blockNumber) {
                revert AlreadyVerified(jobId, slot, index);
            }
            delete _results[jobId][slot][index];
        }

        r.unitBlock = uint40(unit.blockNumber);
        r.first = msg.sender;
        emit ResultPosted(jobId, slot, index, msg.sender, pass, evidenceCid);
        if (pass) {
            r.verdict = Verdict.Passed;
            _count(jobId, msg.sender);
        } else {
            r.verdict = Verdict.Disputed;
            r.disputedAt = uint40(block.timestamp);
            ++openDisputes[jobId];
            emit DisputeOpened(jobId, slot, index, msg.sender);
        }
    }

    /// @inheritdoc IVerification
    function flagUnit(uint256 jobId, uint16 slot, uint32 index, IJobMarket.Unit calldata unit) external {
        if (market.participant(jobId, msg.sender).state != IJobMarket.ParticipantState.Active) {
            revert NotInTheJob(msg.sender);
        }
        _checkUnit(jobId, slot, index, unit);
        bool flagged = _flagged[jobId][slot][index].unitBlock == unit.blockNumber;
        IJobMarket.Slot memory held = market.slot(jobId, slot);
        if (held.provider == msg.sender && unit.provider != msg.sender && index + 1 == held.unitsDone) {
            // The holder names the unit it must resume from, another provider's, which it cannot
            // build on: however old the unit, its verification window opens again now, and the
            // holder waits unslashed until a rejection could still land (result, then dispute).
            // Each holder opens this review once, so it cannot extend its wait; neither another
            // participant's flag nor an earlier holder's review (a Sybil of the unit's provider
            // that flagged, then left) takes it from the next holder. A provider holds a slot of
            // a job at most once (the auction passes over former participants): the address
            // names the tenure.
            Review storage review = _reviewOpenedAt[jobId][slot][index];
            if (review.unitBlock == unit.blockNumber && review.holder == msg.sender) {
                revert AlreadyFlagged(jobId, slot, index);
            }
            _reviewOpenedAt[jobId][slot][index] = Review(unit.blockNumber, uint40(block.timestamp), msg.sender);
            inputUnderReviewUntil[jobId][slot] = block.timestamp + verificationWindow + disputeWindow;
        } else {
            if (flagged) revert AlreadyFlagged(jobId, slot, index);
            uint256 closesAt = uint256(unit.committedAt) + verificationWindow;
            if (block.timestamp >= closesAt) revert VerificationWindowClosed(closesAt);
        }
        // The first flag's block stays: a second flag cannot draw the unit's judges again.
        if (!flagged) _flagged[jobId][slot][index] = Flag(unit.blockNumber, uint64(block.number));
        emit UnitFlagged(jobId, slot, index, msg.sender);
    }

    /// @inheritdoc IVerification
    function resolveDispute(
        uint256 jobId,
        uint16 slot,
        uint32 index,
        IJobMarket.Unit calldata unit,
        bool pass,
        string calldata evidenceCid
    ) external nonReentrant {
        Result storage r = _results[jobId][slot][index];
        if (r.verdict != Verdict.Disputed) revert NoOpenDispute();
        if (msg.sender == r.first) revert ConflictOfInterest(msg.sender);
        _checkVerifier(unit.provider);
        _checkUnit(jobId, slot, index, unit);
        uint256 endsAt = uint256(r.disputedAt) + disputeWindow;
        if (block.timestamp > endsAt) revert DisputeWindow(endsAt);
        _checkDrawn(jobId, slot, index, r.unitBlock, r.first, r.disputedAt, disputeWindow);

        r.second = msg.sender;
        --openDisputes[jobId];
        emit DisputeResolved(jobId, slot, index, msg.sender, !pass, evidenceCid);
        _count(jobId, msg.sender);
        if (pass) {
            r.verdict = Verdict.Passed;
            // slither-disable-next-line unused-return
            staking.slash(r.first, falseReportSlash, IStaking.SlashReason.IncorrectComputation, msg.sender);
        } else {
            r.verdict = Verdict.Rejected;
            _count(jobId, r.first);
            market.rejectUnit(jobId, slot, index, unit, r.first);
        }
    }

    /// @inheritdoc IVerification
    function expireDispute(uint256 jobId, uint16 slot, uint32 index) external {
        Result storage r = _results[jobId][slot][index];
        if (r.verdict != Verdict.Disputed) revert NoOpenDispute();
        uint256 endsAt = uint256(r.disputedAt) + disputeWindow;
        if (block.timestamp <= endsAt) revert DisputeWindow(endsAt);
        r.verdict = Verdict.Expired;
        --openDisputes[jobId];
        emit DisputeExpired(jobId, slot, index);
    }

    /// @inheritdoc IVerification
    function recordSeed(uint64 blockNumber) external {
        if (recordedSeed[blockNumber] != 0) revert SeedAlreadyRecorded(blockNumber);
        bytes32 seed = _liveSeed(blockNumber);
        if (seed == 0) revert SeedLost(blockNumber);
        recordedSeed[blockNumber] = seed;
        emit SeedRecorded(blockNumber, seed);
    }

    /*//////////////////////////////////////////////////////////////
                          BANDWIDTH COMPLAINTS
    //////////////////////////////////////////////////////////////*/

    /// @inheritdoc IVerification
    /// @dev Complaints open only while the job runs: a complaint open at completion closes within
    /// the dispute window (answered or expired by anyone), so complaints can hold settlement at
    /// most one dispute window past completion, and never past MAX_WINDOW.
    function complainBandwidth(uint256 jobId, address provider, string calldata evidenceCid) external {
        _checkVerifier(provider);
        if (bytes(evidenceCid).length == 0) revert NoEvidence();
        if (market.status(jobId) != IJobMarket.JobStatus.Running) revert JobNotRunning(jobId);
        if (market.participant(jobId, provider).state == IJobMarket.ParticipantState.None) {
            revert NotAParticipant(provider);
        }
        Complaint storage c = _complaints[jobId][provider];
        if (c.challenger != address(0)) revert ComplaintOpen(jobId, provider);
        if (c.count >= MAX_COMPLAINTS) revert ComplaintLimit(jobId, provider);
        // The first complaint has no closedAt: nothing to wait for.
        if (c.closedAt != 0 && block.timestamp < uint256(c.closedAt) + COMPLAINT_COOLDOWN) {
            revert ComplaintCooldown(uint256(c.closedAt) + COMPLAINT_COOLDOWN);
        }
        c.challenger = msg.sender;
        c.openedAt = uint40(block.timestamp);
        c.openedBlock = uint64(block.number);
        ++c.count;
        ++openDisputes[jobId];
        emit BandwidthComplaint(jobId, provider, msg.sender, evidenceCid);
    }

    /// @inheritdoc IVerification
    function resolveBandwidthComplaint(uint256 jobId, address provider, bool confirmed) external nonReentrant {
        Complaint storage c = _complaints[jobId][provider];
        address challenger = c.challenger;
        if (challenger == address(0)) revert NoOpenDispute();
        if (msg.sender == challenger) revert ConflictOfInterest(msg.sender);
        _checkVerifier(provider);
        uint256 endsAt = uint256(c.openedAt) + disputeWindow;
        if (block.timestamp > endsAt) revert DisputeWindow(endsAt);
        (address drawn, uint256 turn) = _complaintJudge(jobId, provider, c);
        if (msg.sender != drawn) revert NotDrawn(msg.sender, drawn, turn);

        _closeComplaint(jobId, c);
        emit BandwidthComplaintClosed(jobId, provider, msg.sender, confirmed);
        if (confirmed) {
            market.penalize(jobId, provider, IStaking.SlashReason.BandwidthViolation, challenger);
        } else {
            // slither-disable-next-line unused-return
            staking.slash(challenger, falseReportSlash, IStaking.SlashReason.IncorrectComputation, msg.sender);
        }
    }

    /// @inheritdoc IVerification
    function expireBandwidthComplaint(uint256 jobId, address provider) external {
        Complaint storage c = _complaints[jobId][provider];
        if (c.challenger == address(0)) revert NoOpenDispute();
        uint256 endsAt = uint256(c.openedAt) + disputeWindow;
        if (block.timestamp <= endsAt) revert DisputeWindow(endsAt);
        _closeComplaint(jobId, c);
        emit BandwidthComplaintClosed(jobId, provider, address(0), false);
    }

    /*//////////////////////////////////////////////////////////////
                               GOVERNANCE
    //////////////////////////////////////////////////////////////*/

    /// @notice Sets the verification and dispute windows (each from 1 s to MAX_WINDOW) and the
    /// false-report slash (at most MAX_FALSE_REPORT_SLASH). Governance only.
    function setParameters(uint40 verificationWindow_, uint40 disputeWindow_, uint256 falseReportSlash_)
        external
        onlyRole(GOVERNOR_ROLE)
    {
        _setParameters(verificationWindow_, disputeWindow_, falseReportSlash_);
    }

    /*//////////////////////////////////////////////////////////////
                                 VIEWS
    //////////////////////////////////////////////////////////////*/

    /// @inheritdoc IVerification
    function seedOf(uint64 blockNumber) external view returns (bytes32) {
        return _seed(blockNumber);
    }

    /// @inheritdoc IVerification
    function isSampled(uint256 jobId, uint16 slot, uint32 index, uint64 blockNumber) external view returns (bool) {
        return _toVerify(jobId, slot, index, blockNumber);
    }

    /// @inheritdoc IVerification
    function resultWindowOpensAt(uint256 jobId, uint16 slot, uint32 index, IJobMarket.Unit calldata unit)
        external
        view
        returns (uint256)
    {
        return _resultWindowOpensAt(jobId, slot, index, unit);
    }

    /// @inheritdoc IVerification
    function drawnVerifier(
        uint256 jobId,
        uint16 slot,
        uint32 index,
        uint64 blockNumber,
        address challenger,
        uint256 turn
    ) external view returns (address) {
        return _draw(jobId, slot, index, blockNumber, challenger, turn);
    }

    /// @inheritdoc IVerification
    function drawnComplaintJudge(uint256 jobId, address provider) external view returns (address drawn) {
        Complaint storage c = _complaints[jobId][provider];
        if (c.challenger == address(0)) revert NoOpenDispute();
        (drawn,) = _complaintJudge(jobId, provider, c);
    }

    /// @inheritdoc IVerification
    function turnLength(bool dispute) external view returns (uint256) {
        return _turnLength(dispute ? disputeWindow : verificationWindow);
    }

    /// @inheritdoc IVerification
    function complaint(uint256 jobId, address provider) external view returns (Complaint memory) {
        return _complaints[jobId][provider];
    }

    /// @inheritdoc IVerification
    function result(uint256 jobId, uint16 slot, uint32 index) external view returns (Result memory) {
        return _results[jobId][slot][index];
    }

    /*//////////////////////////////////////////////////////////////
                                INTERNAL
    //////////////////////////////////////////////////////////////*/

    /// @dev Sampled, or flagged; the sample first, as most units are never flagged.
    function _toVerify(uint256 jobId, uint16 slot, uint32 index, uint64 blockNumber) internal view returns (bool) {
        return _sampled(jobId, slot, index, blockNumber) || _flagged[jobId][slot][index].unitBlock == blockNumber;
    }

    /// @dev The seed is the hash of the block after the commitment (see the threat model in
    /// IVerification); a unit whose seed was lost is not sampled, never "sampled by default".
    function _sampled(uint256 jobId, uint16 slot, uint32 index, uint64 blockNumber) internal view returns (bool) {
        bytes32 seed = _seed(blockNumber);
        if (seed == 0) return false;
        // slither-disable-next-line weak-prng
        return uint256(keccak256(abi.encode(seed, jobId, slot, index))) % BPS < market.sampleRateBps(jobId);
    }

    /// @dev The recorded seed of `blockNumber`, else the EVM's hash of the next block; zero when lost.
    function _seed(uint64 blockNumber) internal view returns (bytes32 seed) {
        seed = recordedSeed[blockNumber];
        if (seed == 0) seed = _liveSeed(blockNumber);
    }

    /// @dev The hash of block `blockNumber + 1` while the EVM serves it (the last 256 blocks);
    /// zero after. Reverts until that block exists.
    function _liveSeed(uint64 blockNumber) internal view returns (bytes32) {
        uint256 seedBlock = uint256(blockNumber) + 1;
        if (block.number <= seedBlock) revert SampleNotReady(seedBlock + 1);
        return blockhash(seedBlock);
    }

    /// @dev Reverts unless the caller is the verifier drawn for the turn running now of the
    /// window that opened at `openedAt`: the unit's verification (`challenger` zero) or the dispute
    /// `challenger` opened.
    function _checkDrawn(
        uint256 jobId,
        uint16 slot,
        uint32 index,
        uint64 blockNumber,
        address challenger,
        uint256 openedAt,
        uint40 window
    ) internal view {
        uint256 turn = (block.timestamp - openedAt) / _turnLength(window);
        address drawn = _draw(jobId, slot, index, blockNumber, challenger, turn);
        if (msg.sender != drawn) revert NotDrawn(msg.sender, drawn, turn);
    }

    /// @dev Draws from the unit's seed, which nobody knew when the unit was committed, among the
    /// stake of the unit's block, which nobody can change after it; the job's user and the
    /// challenger never judge. A flagged unit whose seed was lost (a review long after the unit)
    /// is drawn for from the seed and stake of the flag's block instead, which nobody knew when it
    /// flagged; never from a zero seed, whose draws anyone could foresee and stake for.
    function _draw(uint256 jobId, uint16 slot, uint32 index, uint64 blockNumber, address challenger, uint256 turn)
        internal
        view
        returns (address)
    {
        bytes32 seed = _seed(blockNumber);
        if (seed == 0) {
            Flag memory flag = _flagged[jobId][slot][index];
            if (flag.unitBlock == blockNumber) {
                blockNumber = flag.flagBlock;
                seed = _seed(blockNumber);
            }
            if (seed == 0) revert SeedLost(blockNumber);
        }
        uint256 entropy = uint256(keccak256(abi.encode(seed, jobId, slot, index, challenger, turn)));
        return staking.drawVerifier(blockNumber, entropy, market.job(jobId).user, challenger);
    }

    /// @dev The judge of complaint `c` for the turn running now, drawn as a dispute's is (see
    /// `_draw`) from the seed of the complaint's block; a lost seed draws nobody.
    function _complaintJudge(uint256 jobId, address provider, Complaint storage c)
        internal
        view
        returns (address drawn, uint256 turn)
    {
        uint64 openedBlock = c.openedBlock;
        bytes32 seed = _seed(openedBlock);
        if (seed == 0) revert SeedLost(openedBlock);
        address challenger = c.challenger;
        turn = (block.timestamp - c.openedAt) / _turnLength(disputeWindow);
        uint256 entropy = uint256(keccak256(abi.encode(seed, jobId, provider, challenger, turn)));
        drawn = staking.drawVerifier(openedBlock, entropy, market.job(jobId).user, challenger);
    }

    /// @dev The window over TURNS, rounded up so that no turn is empty (a window is at least 1 s).
    function _turnLength(uint40 window) internal pure returns (uint256) {
        return (uint256(window) + TURNS - 1) / TURNS;
    }

    function _checkVerifier(address provider) internal view {
        if (!staking.isActiveVerifier(msg.sender)) revert NotAnActiveVerifier(msg.sender);
        if (msg.sender == provider) revert ConflictOfInterest(msg.sender);
    }

    function _resultWindowOpensAt(uint256 jobId, uint16 slot, uint32 index, IJobMarket.Unit calldata unit)
        internal
        view
        returns (uint256)
    {
        Review memory review = _reviewOpenedAt[jobId][slot][index];
        return review.unitBlock == unit.blockNumber ? review.openedAt : unit.committedAt;
    }

    function _checkUnit(uint256 jobId, uint16 slot, uint32 index, IJobMarket.Unit calldata unit) internal view {
        if (market.unitHash(jobId, slot, index) != unitCommitment(unit)) revert UnitMismatch();
    }

    /// @dev Closes the open complaint `c` but keeps its count and close time: a deleted complaint
    /// would let the next one open at once, without limit.
    function _closeComplaint(uint256 jobId, Complaint storage c) internal {
        c.challenger = address(0);
        c.closedAt = uint40(block.timestamp);
        --openDisputes[jobId];
    }

    function _count(uint256 jobId, address verifier) internal {
        ++verificationCount[jobId];
        ++verificationsBy[jobId][verifier];
    }

    function _setParameters(uint40 verificationWindow_, uint40 disputeWindow_, uint256 falseReportSlash_) internal {
        if (
            verificationWindow_ == 0 || disputeWindow_ == 0 || verificationWindow_ > MAX_WINDOW
                || disputeWindow_ > MAX_WINDOW || falseReportSlash_ > MAX_FALSE_REPORT_SLASH
        ) revert ParameterOutOfRange();
        verificationWindow = verificationWindow_;
        disputeWindow = disputeWindow_;
        falseReportSlash = falseReportSlash_;
        emit ParametersSet(verificationWindow_, disputeWindow_, falseReportSlash_);
    }
}
