// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {IStaking} from "./IStaking.sol";

/// @title Job market: escrow, sealed-bid reverse auctions, metering and settlement
/// @notice A user escrows a budget for a training job of `nodes` slots. Providers of the job's
/// tier commit sealed bids (locking their collateral), reveal them, and the `nodes` lowest valid
/// bids win at one uniform price (the highest winning bid). Each slot delivers `unitsPerNode` work
/// units; the job fixes what one unit is worth (`unitGpuSeconds` reference GPU-seconds of its tier),
/// so every accepted checkpoint accrues `price * unitGpuSeconds / 3600`, capped by the slot's share
/// of the budget, whatever hardware the provider declared and however long it took.
/// Settlement pays providers (pull), the network fee to the treasury and verifiers, and refunds the
/// rest: escrow = payouts + fees + refund, to the wei.
interface IJobMarket {
    enum JobStatus {
        None,
        Open, // first auction running, no slot assigned yet
        Running, // slots assigned; a re-auction may run for vacated slots
        Completed, // every slot done or the job stopped; awaiting verification and settlement
        Settled,
        Cancelled // refunded in full before any slot was assigned
    }

    enum ParticipantState {
        None,
        Active,
        Removed
    }

    /// @notice What a user asks for.
    struct JobRequest {
        string specCid; // IPFS CID of the job spec
        uint8 tier;
        uint16 nodes; // data-parallel slots
        uint32 unitsPerNode; // work units each slot must deliver
        uint32 checkpointInterval; // most seconds a slot may go without a checkpoint
        uint16 sampleRateBps; // share of units verifiers re-run
        uint96 maxPrice; // ZEN wei per GPU-hour
        uint128 budget; // ZEN wei escrowed
        uint32 unitGpuSeconds; // what one unit is worth: reference GPU-seconds of the tier
    }

    /// @notice A job as stored. The first slot is what every bid, reveal and checkpoint reads. The
    /// spec CID is in the `JobCreated` event only: nothing on-chain reads it.
    struct Job {
        uint8 tier;
        uint16 nodes;
        uint16 openSlots; // slots waiting for an auction winner
        JobStatus status;
        uint32 round;
        uint32 unitsPerNode;
        uint32 checkpointInterval;
        uint16 doneSlots;
        uint40 bidDeadline;
        uint40 revealDeadline;
        uint16 sampleRateBps;
        address user;
        uint40 completedAt;
        uint16 feeBps; // fixed when the budget is escrowed
        uint32 unitGpuSeconds; // reference GPU-seconds one unit is paid for
        uint96 maxPrice;
        uint128 collateral; // per slot
        uint128 budget;
        uint128 verifierFeeEach; // set at settlement
    }

    /// @notice One of a job's data-parallel positions and whoever fills it now.
    struct Slot {
        address provider; // zero while vacant
        uint96 price; // ZEN wei per GPU-hour for the current provider
        uint40 lastCheckpointAt;
        uint32 unitsDone;
        uint32 unitGpuSeconds; // the job's, beside `remaining` so a checkpoint reads no job word for it
        bool done;
        uint128 remaining; // the slot's share of the budget not yet accrued
    }

    /// @notice A provider's tenure in a job. Its pay is `startRemaining - endRemaining` (the slot's
    /// `remaining` stands in for `endRemaining` while the tenure is active).
    struct Participant {
        uint128 startRemaining;
        uint16 slot;
        ParticipantState state;
        uint128 endRemaining; // written only when the tenure ends
    }

    /// @notice A leading (or sentinel) bid; a leading bid's collateral is locked.
    struct Bid {
        address bidder;
        uint96 price;
    }

    /// @notice A committed work unit, as hashed on-chain. Verifiers rebuild it from the
    /// `CheckpointCommitted` event and its block.
    struct Unit {
        address provider;
        uint64 committedAt;
        uint64 blockNumber;
        uint128 amount; // pay accrued for this unit
        uint128 remainingBefore; // the slot's remaining budget before this unit
        bytes32 cidHash; // keccak256 of the checkpoint CID string
        bytes32 stateHash; // the training engine's state hash of the checkpoint
    }

    /// @notice Thrown when a job id has no job.
    error UnknownJob(uint256 jobId);
    /// @notice Thrown when a job request is malformed (zero or too many nodes, zero units, price or
    /// checkpoint interval, unit worth, a sample rate above 100%, no spec CID, or an unknown tier).
    error InvalidJobRequest();
    /// @notice Thrown when the budget leaves a slot nothing to pay for (less than one wei per slot).
    error BudgetTooLow(uint256 budget, uint256 minimum);
    /// @notice Thrown when an action does not fit the job's status.
    error WrongJobStatus(uint256 jobId, JobStatus status);
    /// @notice Thrown when no auction is running for the job (none ever does for an unknown job).
    error NoAuction(uint256 jobId);
    /// @notice Thrown when a bid is committed after the bid window.
    error BidWindowClosed(uint256 deadline);
    /// @notice Thrown when a bid is revealed outside the reveal window.
    error NotInRevealWindow(uint256 opensAfter, uint256 closesAt);
    /// @notice Thrown when an auction is closed before its reveal window ends.
    error RevealWindowOpen(uint256 closesAt);
    /// @notice Thrown when a bidder is not an active provider of the job's tier.
    error NotEligible(address provider, uint8 tier);
    /// @notice Thrown when a bidder's free stake is below the job's collateral.
    error InsufficientCollateral(address provider, uint256 free, uint256 needed);
    /// @notice Thrown when a bidder seals a second bid in one round.
    error AlreadyParticipating(address provider);
    /// @notice Thrown when a revealed bid does not match its commitment.
    error CommitmentMismatch();
    /// @notice Thrown when a revealed price is above the job's maximum.
    error PriceAboveMax(uint256 price, uint256 maxPrice);
    /// @notice Thrown when someone other than the slot's provider commits a checkpoint.
    error NotSlotProvider(uint256 jobId, uint256 slot);
    /// @notice Thrown when a checkpoint is committed as another unit than the slot's next, `next`:
    /// the slot was rolled back since its provider read it.
    error NotNextUnit(uint32 index, uint32 next);
    /// @notice Thrown when a checkpoint is committed to a slot that has delivered all its units.
    error SlotDone(uint256 jobId, uint256 slot);
    /// @notice Thrown when downtime is reported before a slot's checkpoint deadline.
    error NotOverdue(uint256 deadline);
    /// @notice Thrown when a slot has no provider.
    error SlotVacant(uint256 jobId, uint256 slot);
    /// @notice Thrown when downtime is reported of a slot of a group whose slot 0, where the group
    /// meets, is vacant or late itself: the other slots cannot train meanwhile, and slot 0 is
    /// reported first.
    error GroupHostDown(uint256 jobId);
    /// @notice Thrown when anyone but the job's user cancels it.
    error NotJobUser(address caller);
    /// @notice Thrown when settling before the verification window of the last unit ends.
    error VerificationWindowOpen(uint256 until);
    /// @notice Thrown when settling while a dispute is open.
    error DisputesOpen(uint256 count);
    /// @notice Thrown when a caller other than the verification contract calls a verification hook.
    error NotVerification(address caller);
    /// @notice Thrown when a unit record does not match what was committed.
    error UnitMismatch();
    /// @notice Thrown when there is nothing owed to withdraw or claim.
    error NothingOwed();
    /// @notice Thrown when verification fees for a job were already claimed.
    error AlreadyClaimed();
    /// @notice Thrown when a bidder holds no sealed (unrevealed, unexpired) bid in the round.
    error NoSealedBid(uint256 jobId, uint32 round, address bidder);
    /// @notice Thrown when a parameter is outside its allowed range.
    error ParameterOutOfRange();

    /// @notice Emitted when a job is created and its budget escrowed.
    event JobCreated(
        uint256 indexed jobId,
        address indexed user,
        uint8 indexed tier,
        string specCid,
        uint16 nodes,
        uint32 unitsPerNode,
        uint96 maxPrice,
        uint128 budget,
        uint128 collateral,
        uint32 unitGpuSeconds
    );
    /// @notice Emitted when an auction round opens.
    event AuctionOpened(uint256 indexed jobId, uint32 round, uint16 slots, uint40 bidDeadline, uint40 revealDeadline);
    /// @notice Emitted when a sealed bid is committed.
    event BidCommitted(uint256 indexed jobId, address indexed provider);
    /// @notice Emitted when a bid is revealed.
    event BidRevealed(uint256 indexed jobId, address indexed provider, uint96 price);
    /// @notice Emitted when an auction round fills its slots at a uniform clearing price.
    event AuctionCleared(uint256 indexed jobId, uint32 round, uint96 clearingPrice, uint16 winners);
    /// @notice Emitted when a sealed bid left unrevealed expires: its collateral is released and
    /// `bond` slashed (Downtime; what was actually taken is in Staking's `Slashed` event), zero
    /// when its round ended before its reveal window did.
    event BidExpired(uint256 indexed jobId, uint32 round, address indexed bidder, uint256 bond);
    /// @notice Emitted when a round ends with too few valid bids; a new round opens.
    event AuctionFailed(uint256 indexed jobId, uint32 round, uint16 validBids);
    /// @notice Emitted when a provider takes a slot.
    event SlotAssigned(uint256 indexed jobId, uint16 indexed slot, address indexed provider, uint96 price);
    /// @notice Emitted for every committed checkpoint (one work unit).
    /// @param gpuSeconds The reference GPU-seconds the unit is paid for: the job's `unitGpuSeconds`.
    /// @param amount The unit's pay, `price * gpuSeconds / 3600` capped by the slot's remaining budget.
    event CheckpointCommitted(
        uint256 indexed jobId,
        uint16 indexed slot,
        uint32 index,
        address provider,
        string cid,
        bytes32 stateHash,
        uint32 gpuSeconds,
        uint128 amount,
        uint128 remainingBefore
    );
    /// @notice Emitted when a slot has delivered all its units or spent its budget.
    event SlotFinished(uint256 indexed jobId, uint16 indexed slot);
    /// @notice Emitted when a provider loses its slot.
    event ProviderRemoved(
        uint256 indexed jobId, uint16 indexed slot, address indexed provider, IStaking.SlashReason reason
    );
    /// @notice Emitted when a failed unit is rejected: the slot rolls back to unit `index` (the units
    /// from it on are void) and `clawedBack`, its provider's pay from that unit on, returns to the
    /// slot's budget.
    event UnitRejected(uint256 indexed jobId, uint16 indexed slot, uint32 indexed index, uint128 clawedBack);
    /// @notice Emitted when a provider that had finished a slot built on a unit rejected since leaves
    /// it, unslashed and with its pay, so the slot is re-auctioned to redo the voided units.
    event SlotReleased(uint256 indexed jobId, uint16 indexed slot, address indexed provider);
    /// @notice Emitted when a job has nothing left to run.
    event JobCompleted(uint256 indexed jobId);
    /// @notice Emitted when a job is cancelled before any work, refunding the whole budget.
    event JobCancelled(uint256 indexed jobId, uint128 refund);
    /// @notice Emitted when a job is settled.
    /// @param payment Pay accrued for accepted work (fees included).
    /// @param fee The network fee taken from `payment`.
    /// @param refund What went back to the user (`budget - payment`).
    /// @param verifierPool The part of `fee` owed to verifiers.
    event JobSettled(uint256 indexed jobId, uint256 payment, uint256 fee, uint256 refund, uint256 verifierPool);
    /// @notice Emitted when owed ZEN is withdrawn.
    event Withdrawn(address indexed account, uint256 amount);
    /// @notice Emitted when a verifier's fees for a job become withdrawable.
    event VerificationFeesClaimed(uint256 indexed jobId, address indexed verifier, uint256 amount);
    /// @notice Emitted when governance changes market parameters.
    event ParametersSet(
        uint16 feeBps, uint16 collateralBps, uint40 bidWindow, uint40 revealWindow, uint128 verificationFee
    );
    /// @notice Emitted when governance sets the share of collateral a slash of `reason` takes.
    event SlashBpsSet(IStaking.SlashReason reason, uint16 bps);

    /// @notice Escrows `r.budget` ZEN (needs an allowance) and opens the first auction round.
    function createJob(JobRequest calldata r) external returns (uint256 jobId);

    /// @notice `createJob` with an ERC-2612 permit for the budget: one transaction, no approval.
    function createJobWithPermit(JobRequest calldata r, uint256 deadline, uint8 v, bytes32 rs, bytes32 s)
        external
        returns (uint256 jobId);

    /// @notice Commits a sealed bid `keccak256(abi.encode(price, salt, msg.sender, jobId))`, one
    /// per bidder and round, and locks the job's collateral from the bidder's free stake. The
    /// bidder must be an active provider of the job's tier. A bid left unrevealed when the reveal
    /// window ends keeps its collateral locked until it expires with a bond forfeited (`expireBid`).
    function commitBid(uint256 jobId, bytes32 commitment) external;

    /// @notice Reveals a committed bid. The `2 * openSlots` lowest reveals are kept, lowest first,
    /// as winners and their fallbacks, with their collateral still locked; a bid not kept, or
    /// pushed out of the list by a lower one, is released at once.
    function revealBid(uint256 jobId, uint96 price, bytes32 salt) external;

    /// @notice Ends the round after its reveal window: assigns the lowest kept bids whose bidders
    /// are still active providers of the tier and never held a slot of the job, at the uniform
    /// price (their locked collateral becomes the slot's), passing over the others, and releases
    /// every other kept bid. Opens a new round
    /// when fewer valid bids than slots were kept. Anyone may call.
    function closeAuction(uint256 jobId) external;

    /// @notice Expires `bidder`'s sealed bid of `round`, left unrevealed when that round's reveal
    /// window ended: releases its collateral and forfeits its bond (`BID_BOND_BPS` of the
    /// collateral), which Staking slashes as Downtime with the caller as reporter. A round that
    /// ended before its reveal window did (the job cancelled, or the round restarted) forfeits no
    /// bond, and its sealed bids expire at once. Anyone may call, once per sealed bid.
    function expireBid(uint256 jobId, uint32 round, address bidder) external;

    /// @notice Commits unit `index` of `slot`, which must be its next (`unitsDone`): its checkpoint
    /// CID and state hash. Accrues the unit's fixed pay, `price * unitGpuSeconds / 3600`, capped by
    /// the slot's remaining budget.
    function commitCheckpoint(uint256 jobId, uint16 slot, uint32 index, string calldata cid, bytes32 stateHash) external;

    /// @notice Reports a slot whose provider missed its checkpoint deadline: slashes it (Downtime,
    /// the caller as reporter) and re-auctions the slot from its last accepted checkpoint. In a job of
    /// several slots, which train as one group meeting at slot 0's provider, another slot cannot be
    /// reported while slot 0 is vacant or late itself (`GroupHostDown`).
    function reportDowntime(uint256 jobId, uint16 slot) external;

    /// @notice When slot `slot` is late if it has not committed its next unit: `checkpointInterval`
    /// after its last checkpoint (or assignment), after the review of an input its holder flagged,
    /// and, for a slot other than 0, after slot 0's holder was assigned (a group whose host dropped
    /// meets again at its successor's).
    function checkpointDeadline(uint256 jobId, uint16 slot) external view returns (uint256);

    /// @notice The user cancels: a full refund before any slot is assigned, or, while a slot waits for
    /// a re-auction, stops the job so accepted work settles and the rest is refunded.
    function cancelJob(uint256 jobId) external;

    /// @notice Settles a completed job once its verification window is over and no dispute is open.
    function settle(uint256 jobId) external;

    /// @notice Makes the caller's verification fees for a settled job withdrawable.
    function claimVerificationFees(uint256 jobId) external;

    /// @notice Pays out what the caller is owed.
    function withdraw() external;

    /// @notice Rejects a unit whose failure a second verifier confirmed: rolls the slot back to that
    /// unit, so its units from it on (whoever committed them) are void and redone, takes back its
    /// provider's pay from that unit on and slashes it (IncorrectComputation). If it still holds the
    /// slot, it is removed and the slot re-auctioned. Otherwise the slot's later providers keep their
    /// pay for the voided units, done in good faith: one still at work keeps the slot and redoes them
    /// (its checkpoint deadline restarts), one that had finished leaves it (`SlotReleased`) and the
    /// slot is re-auctioned. Verification contract only.
    function rejectUnit(uint256 jobId, uint16 slot, uint32 index, Unit calldata unit, address reporter) external;

    /// @notice Slashes a provider of a job for a confirmed violation other than wrong computation.
    /// Verification contract only.
    function penalize(uint256 jobId, address provider, IStaking.SlashReason reason, address reporter) external;

    /// @notice The job with id `jobId`.
    function job(uint256 jobId) external view returns (Job memory);

    /// @notice The status of job `jobId`.
    function status(uint256 jobId) external view returns (JobStatus);

    /// @notice The share of job `jobId`'s units that verifiers re-run, in basis points.
    function sampleRateBps(uint256 jobId) external view returns (uint16);

    /// @notice Slot `slot` of job `jobId`.
    function slot(uint256 jobId, uint16 slot) external view returns (Slot memory);

    /// @notice `provider`'s tenure in job `jobId`.
    function participant(uint256 jobId, address provider) external view returns (Participant memory);

    /// @notice Every provider that has held a slot in job `jobId`.
    function participants(uint256 jobId) external view returns (address[] memory);

    /// @notice The commitment (`unitCommitment` of its record) of unit `index` of `slot`, zero if
    /// none or voided by a rollback.
    function unitHash(uint256 jobId, uint16 slot, uint32 index) external view returns (bytes16);

    /// @notice The current round's sealed bid of `provider`, zero if none, revealed or expired.
    function bidCommitment(uint256 jobId, address provider) external view returns (bytes32);

    /// @notice What `account` can withdraw.
    function owed(address account) external view returns (uint256);

    /// @notice How many jobs exist (ids run from 1).
    function jobCount() external view returns (uint256);

    /// @notice The sealed-bid commitment for `price` and `salt` by `bidder` on `jobId`.
    function bidCommitmentOf(uint96 price, bytes32 salt, address bidder, uint256 jobId) external pure returns (bytes32);
}
