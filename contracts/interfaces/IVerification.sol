// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {IJobMarket} from "./IJobMarket.sol";

/// @title Verification: random sampling of work units, verifier results and disputes
/// @notice Which units are re-run is drawn from the seed of the unit's block: the hash of the
/// block after the commitment, which did not exist when the provider committed. A provider that
/// fakes n units is caught with probability 1 - (1 - p)^n at sample rate p.
///
/// Threat model of the seed. The committing provider cannot know or choose it: its transaction
/// is signed and sent before block b + 1 exists, and nothing it sends later changes that block's
/// hash. Only the producer of block b + 1 can bias it (by its contents, or by withholding the
/// block, each try costing the block), so the law above assumes providers do not control block
/// production; on an L2 that is the sequencer, already trusted for ordering and liveness. The
/// EVM serves a block hash for 256 blocks (8.5 minutes at 2 s a block): anyone can record the
/// seed on-chain in that time (`recordSeed`; every verifier daemon records the seed of each unit
/// it finds sampled), and a recorded seed is permanent, so verification may take the whole
/// window. A seed nobody recorded in time is lost, and the outcome is explicit: the unit counts as
/// not sampled (a provider of the job can still flag it, and its verifier is then drawn from the
/// seed and stake of the flag's block, which the flagger could not know). It never counts as sampled, which would
/// let any verifier dispute any unit; and a cheater cannot cause the loss, since anyone can
/// record, only every verifier staying offline for 256 blocks can. A failed result opens a dispute that a second
/// verifier settles: a confirmed failure slashes the provider, a refuted one slashes the first
/// verifier. A sampled unit nobody verifies within the window counts as accepted, so no job is
/// ever stuck.
///
/// Who judges is drawn, not first come. The verification window and the dispute window are each
/// cut into `TURNS` turns; in turn t the only verifier who may post a unit's result is the one
/// `IStaking.drawVerifier` picks by stake with entropy keccak256(seed, job, slot, unit, 0, t), and
/// the only one who may settle its dispute is drawn likewise with the challenger in place of 0.
/// The job's user is never drawn, nor the challenger for its own dispute; providers never are, as
/// an account is a provider or a verifier, not both. Stake counts as it stood in the unit's block,
/// before its seed existed: stake or Sybils added after it change nothing. A drawn verifier that
/// does not answer in its turn loses it, and the fee with it (fees pay posted answers only).
///
/// Collusion bound. Let f be the attackers' share of the eligible verifier stake at the unit's
/// block. Each turn's draw is theirs with probability f: they post a given unit's result with
/// probability f. A dispute draws among the stake less the challenger's (share c): the attackers
/// settle one an honest verifier opened with probability f / (1 - c), and confirming a false
/// failure (slashing an honest provider) takes both draws, probability at most f^2 per unit, as
/// their own challenger's stake leaves the pool. Deciding every unit takes all of the eligible
/// stake; deciding most disputes, more than half of the stake besides the challenger's. Silence
/// does not help: an honest verifier drawn for a turn answers in it, and a later turn is drawn only
/// when the earlier drawn verifier stayed silent.
interface IVerification {
    enum Verdict {
        None,
        Passed,
        Disputed,
        Rejected, // failure confirmed by a second verifier
        Expired // dispute not answered in time: accepted, nobody slashed
    }

    /// @notice The verification state of one unit.
    struct Result {
        Verdict verdict;
        uint40 disputedAt;
        address first;
        uint40 unitBlock; // block the unit was committed in: a unit redone after a rollback is a new one
        address second;
    }

    /// @notice A unit under review again: the successor that must resume from it flagged it.
    struct Review {
        uint64 unitBlock; // the commitment reviewed: a unit redone after a rollback is a new one
        uint40 openedAt; // its verification window opened again then
        address holder; // the holder that opened it: each holder of the slot opens it once
    }

    /// @notice A unit a provider of the job flagged for verification.
    struct Flag {
        uint64 unitBlock; // the commitment flagged: a unit redone after a rollback is a new one
        uint64 flagBlock; // drawn for from this block's seed if the unit's own was lost
    }

    /// @notice Bandwidth complaints against one provider in one job: the open one, if any, and
    /// how many were opened and when the last closed (for the cap and the cooldown).
    struct Complaint {
        address challenger; // zero while none is open
        uint40 openedAt;
        uint40 closedAt;
        uint8 count; // opened so far, at most MAX_COMPLAINTS
        uint64 openedBlock; // its judge is drawn from this block's seed and stake
    }

    /// @notice Thrown when the caller is not an active verifier.
    error NotAnActiveVerifier(address caller);
    /// @notice Thrown when a verifier checks work of its own or settles its own dispute.
    error ConflictOfInterest(address caller);
    /// @notice Thrown when a unit record does not match its on-chain commitment.
    error UnitMismatch();
    /// @notice Thrown when the block whose hash decides the sample does not exist yet.
    error SampleNotReady(uint256 availableAtBlock);
    /// @notice Thrown when the seed of `blockNumber` is recorded already.
    error SeedAlreadyRecorded(uint64 blockNumber);
    /// @notice Thrown when the seed of `blockNumber` can no longer be recorded: the EVM forgot the
    /// hash of the block after it, 256 blocks on.
    error SeedLost(uint64 blockNumber);
    /// @notice Thrown when a result is posted for a unit that was not sampled.
    error NotSampled(uint256 jobId, uint16 slot, uint32 index);
    /// @notice Thrown when a unit's verification window is over.
    error VerificationWindowClosed(uint256 closedAt);
    /// @notice Thrown when a unit already has a result.
    error AlreadyVerified(uint256 jobId, uint16 slot, uint32 index);
    /// @notice Thrown when a bandwidth complaint against `provider` in `jobId` is already open.
    error ComplaintOpen(uint256 jobId, address provider);
    /// @notice Thrown when `provider` already faced the most bandwidth complaints one job allows.
    error ComplaintLimit(uint256 jobId, address provider);
    /// @notice Thrown when a bandwidth complaint follows the last one's close too soon.
    error ComplaintCooldown(uint256 until);
    /// @notice Thrown when a bandwidth complaint comes without an evidence CID.
    error NoEvidence();
    /// @notice Thrown when a bandwidth complaint is made about a job that is not running.
    error JobNotRunning(uint256 jobId);
    /// @notice Thrown when no dispute or complaint is open where one is needed.
    error NoOpenDispute();
    /// @notice Thrown when a dispute is answered after its window, or expired before it.
    error DisputeWindow(uint256 endsAt);
    /// @notice Thrown when the bandwidth complaint names an account that never worked on the job.
    error NotAParticipant(address provider);
    /// @notice Thrown when a parameter is outside its allowed range.
    error ParameterOutOfRange();
    /// @notice Thrown when a unit is flagged by an account that holds no slot of its job now.
    error NotInTheJob(address caller);
    /// @notice Thrown when a verifier posts a result or settles a dispute in a turn it was not
    /// drawn for: `drawn` may, in turn `turn` (zero when nobody is eligible).
    error NotDrawn(address caller, address drawn, uint256 turn);
    /// @notice Thrown when a unit is flagged again.
    error AlreadyFlagged(uint256 jobId, uint16 slot, uint32 index);

    /// @notice Emitted when the sampling seed of units committed in `blockNumber` is recorded.
    /// @param seed The hash of block `blockNumber + 1`.
    event SeedRecorded(uint64 indexed blockNumber, bytes32 seed);

    /// @notice Emitted when a provider of the job flags a unit for verification.
    event UnitFlagged(uint256 indexed jobId, uint16 slot, uint32 index, address indexed by);

    /// @notice Emitted when a verifier posts a result for a sampled unit.
    event ResultPosted(
        uint256 indexed jobId,
        uint16 indexed slot,
        uint32 indexed index,
        address verifier,
        bool pass,
        string evidenceCid
    );
    /// @notice Emitted when a failed result opens a dispute.
    event DisputeOpened(uint256 indexed jobId, uint16 indexed slot, uint32 indexed index, address challenger);
    /// @notice Emitted when a second verifier settles a dispute.
    /// @param confirmed Whether the failure was confirmed (provider slashed) or refuted (first verifier slashed).
    event DisputeResolved(
        uint256 indexed jobId,
        uint16 indexed slot,
        uint32 indexed index,
        address resolver,
        bool confirmed,
        string evidenceCid
    );
    /// @notice Emitted when a dispute expires unanswered.
    event DisputeExpired(uint256 indexed jobId, uint16 indexed slot, uint32 indexed index);
    /// @notice Emitted when a verifier complains that a provider broke its tier's network SLA.
    event BandwidthComplaint(uint256 indexed jobId, address indexed provider, address challenger, string evidenceCid);
    /// @notice Emitted when a bandwidth complaint is settled or expires.
    event BandwidthComplaintClosed(uint256 indexed jobId, address indexed provider, address resolver, bool confirmed);
    /// @notice Emitted when governance changes the parameters.
    event ParametersSet(uint40 verificationWindow, uint40 disputeWindow, uint256 falseReportSlash);

    /// @notice Posts a verifier's result for sampled unit `index` of `slot`. A failure opens a dispute.
    function postResult(
        uint256 jobId,
        uint16 slot,
        uint32 index,
        IJobMarket.Unit calldata unit,
        bool pass,
        string calldata evidenceCid
    ) external;

    /// @notice A second verifier settles a dispute: `pass == false` confirms the failure.
    function resolveDispute(
        uint256 jobId,
        uint16 slot,
        uint32 index,
        IJobMarket.Unit calldata unit,
        bool pass,
        string calldata evidenceCid
    ) external;

    /// @notice Closes a dispute nobody answered within the dispute window: the unit counts as accepted.
    function expireDispute(uint256 jobId, uint16 slot, uint32 index) external;

    /// @notice A verifier complains that `provider` broke its tier's network SLA in job `jobId`,
    /// with the CID of its measurements. Bounded so that no party can slash or stall without
    /// limit: only while the job runs, one open complaint per provider and job, COMPLAINT_COOLDOWN
    /// after the last one closed, MAX_COMPLAINTS per provider and job; and the market caps all
    /// slashes of a provider in a job at that job's collateral.
    function complainBandwidth(uint256 jobId, address provider, string calldata evidenceCid) external;

    /// @notice The verifier drawn to judge the open complaint settles it, after assessing its
    /// evidence: `confirmed` slashes the provider, otherwise the complaining verifier is slashed.
    /// The judge is drawn like a dispute's: by stake at the complaint's block, from the seed of the
    /// block after it (which the challenger could not know when it complained), never the job's
    /// user or the challenger, one per turn of the dispute window; a lost seed draws nobody and the
    /// complaint expires. So colluding verifiers confirm a false complaint only when the draw
    /// falls on them (probability f / (1 - c), as for a dispute).
    function resolveBandwidthComplaint(uint256 jobId, address provider, bool confirmed) external;

    /// @notice The verifier drawn for the turn running now to judge the open complaint against
    /// `provider` in job `jobId`. Reverts with SampleNotReady before the seed exists and SeedLost
    /// after it was lost unrecorded.
    function drawnComplaintJudge(uint256 jobId, address provider) external view returns (address);

    /// @notice Closes a bandwidth complaint nobody answered within the dispute window.
    function expireBandwidthComplaint(uint256 jobId, address provider) external;

    /// @notice Flag unit `index` of `slot`, committed as `unit`, for verification whatever its
    /// sample says: the ranks of a group job name a rank whose update their robust aggregation
    /// excluded, so a verifier re-runs that rank's round. Only a provider holding a slot of the
    /// job may flag, and only within the unit's verification window, except the holder of `slot`
    /// naming the unit it must resume from, another provider's, which it cannot build on: that
    /// opens the unit's verification window again (see `inputUnderReviewUntil`). Each holder of
    /// `slot` opens that review once (AlreadyFlagged after), whoever flagged or reviewed the unit
    /// before it; a later review cannot draw the unit's judges again.
    function flagUnit(uint256 jobId, uint16 slot, uint32 index, IJobMarket.Unit calldata unit) external;

    /// @notice Records, for good, the seed of units committed in block `blockNumber` (the hash of
    /// the next block) while the EVM still serves it: from two blocks after `blockNumber` to 257.
    /// Anyone may call it; it has one possible value.
    function recordSeed(uint64 blockNumber) external;

    /// @notice The recorded seed of block `blockNumber`, zero while none is.
    function recordedSeed(uint64 blockNumber) external view returns (bytes32);

    /// @notice The seed of block `blockNumber`: recorded, or read from the EVM while it serves the
    /// hash; zero once lost. Reverts with SampleNotReady before the next block exists.
    function seedOf(uint64 blockNumber) external view returns (bytes32);

    /// @notice Whether unit `index` of `slot`, committed in block `blockNumber`, is to be verified:
    /// sampled, or flagged by a provider of the job. A unit whose seed was lost is not sampled.
    function isSampled(uint256 jobId, uint16 slot, uint32 index, uint64 blockNumber) external view returns (bool);

    /// @notice The verifier drawn for turn `turn` of unit `index` of `slot`, committed in block
    /// `blockNumber`: of its result when `challenger` is zero, else of the dispute `challenger`
    /// opened on it. Zero when nobody is eligible. Reverts with SampleNotReady before the seed exists.
    /// A flagged unit whose seed was lost is drawn for from the seed and stake of the flag's block;
    /// with that lost too, it reverts with SeedLost: no draw is ever made from a zero seed.
    function drawnVerifier(
        uint256 jobId,
        uint16 slot,
        uint32 index,
        uint64 blockNumber,
        address challenger,
        uint256 turn
    ) external view returns (address);

    /// @notice Seconds in one turn of the verification window (`dispute` false) or of the dispute
    /// window: the window over `TURNS`, rounded up. Turn t of a unit starts t turns after its
    /// commitment; turn t of a dispute, t turns after it opened.
    function turnLength(bool dispute) external view returns (uint256);

    /// @notice The bandwidth complaints against `provider` in job `jobId`: the open one, the count
    /// and the last close.
    function complaint(uint256 jobId, address provider) external view returns (Complaint memory);

    /// @notice The result of unit `index` of `slot`.
    function result(uint256 jobId, uint16 slot, uint32 index) external view returns (Result memory);

    /// @notice Seconds after a unit's commitment during which verifiers may post its result.
    function verificationWindow() external view returns (uint40);

    /// @notice Seconds a second verifier has to answer a dispute.
    function disputeWindow() external view returns (uint40);

    /// @notice When the window in which verifiers post unit `index`'s result opens: its commitment,
    /// or, for a unit its slot's successor flagged as its input, that flag.
    function resultWindowOpensAt(uint256 jobId, uint16 slot, uint32 index, IJobMarket.Unit calldata unit)
        external
        view
        returns (uint256);

    /// @notice Until when the checkpoint the holder of `slot` must resume from is under review:
    /// the holder flagged it, as another provider's last unit of the slot, and a downtime report
    /// counts its deadline from then, so a successor handed a bad input is never slashed for not
    /// building on it. Zero when nothing is under review.
    /// What bounds the wait: a holder reviews its input once, which defers its deadline by at most
    /// verificationWindow + disputeWindow (at most 2 × MAX_WINDOW). A further review needs a new holder:
    /// this one removed (a downtime report, which slashes it, a full checkpoint interval after
    /// its review ends) and an auction round won by a provider that never took part in the job,
    /// with the tier's stake and the job's collateral. The market caps no slot's replacements, so
    /// the total wait is one review and one auction per holder, each holder's leaving paid by its
    /// downtime slash; the job's user may cancel while the slot is up for auction.
    function inputUnderReviewUntil(uint256 jobId, uint16 slot) external view returns (uint256);

    /// @notice Disputes and complaints open on job `jobId`; settlement waits for zero.
    function openDisputes(uint256 jobId) external view returns (uint256);

    /// @notice Paid verifications in job `jobId`.
    function verificationCount(uint256 jobId) external view returns (uint256);

    /// @notice Paid verifications by `verifier` in job `jobId`.
    function verificationsBy(uint256 jobId, address verifier) external view returns (uint256);
}
