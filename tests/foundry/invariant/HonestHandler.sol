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

/// @notice The honest side of the attack suite, and the record of the world both sides see. Time
/// moves only through `tick`, and every tick first lets the honest parties do whatever is due, as
/// their daemons would: the user's jobs are bid on, revealed, closed, worked, verified, judged and
/// settled; a late provider is reported; a job whose auction keeps failing is stopped. Every honest
/// call is made only when an honest party would make it, so in a test run with `fail_on_revert`
/// any revert of one is a finding: a ledger that refuses an honest party its next step.
contract HonestHandler is CommonBase, StdCheats, StdUtils {
    /// @dev The longest time between two honest looks at the chain.
    uint256 public constant MAX_TICK = 10 minutes;
    /// @dev Rounds after which the honest user stops a job that is still waiting for providers.
    uint16 internal constant MAX_ROUNDS = 3;
    uint32 internal constant UNITS_PER_NODE = 3;
    uint32 internal constant INTERVAL = 1 hours;
    uint32 internal constant UNIT_SECONDS = 600;
    uint256 internal constant MAX_LIVE_JOBS = 2;

    /// @dev A committed unit as verifiers rebuilt it from its event, and whether its state is right.
    struct Record {
        uint256 jobId;
        uint16 slot;
        uint32 index;
        bool good;
        IJobMarket.Unit unit;
    }

    /// @dev A bandwidth complaint someone opened.
    struct Complaint {
        uint256 jobId;
        address provider;
    }

    /// @dev An honest provider's sealed bid.
    struct SealedBid {
        uint256 jobId;
        uint32 round;
        address bidder;
        uint96 price;
    }

    ZenToken public immutable zen;
    Staking public immutable staking;
    JobMarket public immutable market;
    Verification public immutable verification;
    address public immutable user;

    address[] internal _honest; // providers, then verifiers
    uint256 internal immutable _honestProviders;
    mapping(address => bool) public isHonest;

    uint256[] public jobIds;
    mapping(uint256 jobId => uint256) public createdAt;
    mapping(uint256 jobId => bool) internal _ended;
    Record[] internal _records;
    Complaint[] internal _complaints;
    SealedBid[] internal _sealed;
    /// @dev The unit each holder flagged as its input, by its commitment's block: a holder reviews
    /// its input once, whoever reviewed it before.
    mapping(uint256 jobId => mapping(uint16 slot => mapping(uint32 index => mapping(address holder => uint64))))
        internal _reviewedBy;

    // Stake of honest accounts: what went in, what their owners took out, and what collusion
    // (attackers drawn both to report and to judge) took. Nothing else may ever move it.
    mapping(address => uint256) public ghost_deposited;
    mapping(address => uint256) public ghost_withdrawn;
    mapping(address => uint256) public ghost_collusionLoss;
    // What each provider's units in a job are worth at the price it won: an upper bound on its pay.
    mapping(uint256 jobId => mapping(address provider => uint256)) public ghost_worth;
    /// @dev The longest an honest user's job took to reach Settled or Cancelled.
    uint256 public ghost_longestJob;
    mapping(bytes32 => uint256) public calls;

    address public attacker; // the handler allowed to note units and losses

    constructor(
        ZenToken zen_,
        Staking staking_,
        JobMarket market_,
        Verification verification_,
        address user_,
        address[] memory providers,
        address[] memory verifiers
    ) {
        zen = zen_;
        staking = staking_;
        market = market_;
        verification = verification_;
        user = user_;
        _honestProviders = providers.length;
        for (uint256 i; i < providers.length + verifiers.length; ++i) {
            address a = i < providers.length ? providers[i] : verifiers[i - providers.length];
            _honest.push(a);
            isHonest[a] = true;
            IStaking.Account memory acct = staking_.account(a);
            ghost_deposited[a] = acct.staked + acct.unbonding;
        }
    }

    function setAttacker(address attacker_) external {
        require(attacker == address(0));
        attacker = attacker_;
    }

    /*//////////////////////////////////////////////////////////////
                          HONEST ACTIONS (targets)
    //////////////////////////////////////////////////////////////*/

    /// @notice Time passes (up to MAX_TICK, one block), then every honest party does what is due.
    function tick(uint256 dtSeed) external {
        vm.warp(block.timestamp + bound(dtSeed, 1, MAX_TICK));
        vm.roll(block.number + 1);
        _duties();
        ++calls["tick"];
    }

    /// @notice The honest user escrows a new job.
    function createJob(uint256 nodesSeed, uint256 budgetSeed, uint256 priceSeed) external {
        if (_liveUserJobs() >= MAX_LIVE_JOBS) return;
        uint16 nodes = uint16(bound(nodesSeed, 1, 2));
        uint128 budget = uint128(bound(budgetSeed, 100e18, 3_000e18));
        IJobMarket.JobRequest memory r = IJobMarket.JobRequest({
            specCid: "bafyspec",
            tier: 0,
            nodes: nodes,
            unitsPerNode: UNITS_PER_NODE,
            checkpointInterval: INTERVAL,
            sampleRateBps: 5_000,
            maxPrice: uint96(bound(priceSeed, 1e18, 100e18)),
            budget: budget,
            unitGpuSeconds: UNIT_SECONDS
        });
        vm.startPrank(user);
        zen.approve(address(market), budget);
        uint256 jobId = market.createJob(r);
        vm.stopPrank();
        jobIds.push(jobId);
        createdAt[jobId] = block.timestamp;
        ++calls["createJob"];
    }

    /// @notice An honest account asks for some of its free stake back, or takes what has unbonded.
    function unstake(uint256 whoSeed, uint256 amountSeed) external {
        address who = _honest[whoSeed % _honest.length];
        IStaking.Account memory a = staking.account(who);
        vm.startPrank(who);
        if (a.unbonding != 0 && block.timestamp >= a.unbondingEnds) {
            staking.withdraw();
            ghost_withdrawn[who] += a.unbonding;
            ++calls["withdrawStake"];
        } else {
            uint256 free = staking.freeStake(who);
            // A verifier keeps its seat; a provider keeps enough to stay in its tier.
            uint256 keep = whoSeed % _honest.length < _honestProviders ? 5_000e18 : 6_000e18;
            if (free > keep) {
                staking.requestUnstake(bound(amountSeed, 1, free - keep));
                ++calls["requestUnstake"];
            }
        }
        vm.stopPrank();
    }

    /// @notice An honest account takes what the market owes it.
    function withdraw(uint256 whoSeed) external {
        address who = _honest[whoSeed % _honest.length];
        if (market.owed(who) == 0) return;
        vm.prank(who);
        market.withdraw();
        ++calls["withdraw"];
    }

    /// @notice Honest parties alone, on time, until every honest user's job has ended; false as
    /// soon as one is still open `bound_` seconds after it was created. Not a fuzz target: the
    /// test calls it after each run, from wherever the run left the ledger.
    function drain(uint256 bound_) external returns (bool ended) {
        while (!ended) {
            bool open;
            for (uint256 k; k < jobIds.length; ++k) {
                uint256 created = createdAt[jobIds[k]];
                if (created == 0) continue;
                if (block.timestamp > created + bound_) return false;
                open = true;
            }
            ended = !open;
            if (ended) break;
            vm.warp(block.timestamp + MAX_TICK);
            vm.roll(block.number + 1);
            _duties();
        }
    }

    /*//////////////////////////////////////////////////////////////
                       RECORDS (the attacker's handler)
    //////////////////////////////////////////////////////////////*/

    function noteJob(uint256 jobId) external {
        require(msg.sender == attacker);
        jobIds.push(jobId);
    }

    function noteUnit(uint256 jobId, uint16 slot, uint32 index, bool good, IJobMarket.Unit memory unit, uint256 worth)
        external
    {
        require(msg.sender == attacker);
        _note(jobId, slot, index, good, unit, worth);
    }

    function noteComplaint(uint256 jobId, address provider) external {
        require(msg.sender == attacker);
        _complaints.push(Complaint(jobId, provider));
    }

    function noteCollusionLoss(address victim, uint256 amount) external {
        require(msg.sender == attacker);
        ghost_collusionLoss[victim] += amount;
    }

    /*//////////////////////////////////////////////////////////////
                                 VIEWS
    //////////////////////////////////////////////////////////////*/

    function jobCount() external view returns (uint256) {
        return jobIds.length;
    }

    function honest() external view returns (address[] memory) {
        return _honest;
    }

    function recordCount() external view returns (uint256) {
        return _records.length;
    }

    function record(uint256 i) external view returns (Record memory) {
        return _records[i];
    }

    function complaintCount() external view returns (uint256) {
        return _complaints.length;
    }

    function complaintAt(uint256 i) external view returns (Complaint memory) {
        return _complaints[i];
    }

    /// @notice An honest account's stake, staked and unbonding.
    function stakeOf(address who) public view returns (uint256) {
        IStaking.Account memory a = staking.account(who);
        return a.staked + a.unbonding;
    }

    function live(Record memory r) public view returns (bool) {
        return market.unitHash(r.jobId, r.slot, r.index) == unitCommitment(r.unit);
    }

    /*//////////////////////////////////////////////////////////////
                                DUTIES
    //////////////////////////////////////////////////////////////*/

    function _duties() internal {
        for (uint256 k; k < jobIds.length; ++k) {
            uint256 jobId = jobIds[k];
            if (_ended[jobId]) continue;
            IJobMarket.Job memory j = market.job(jobId);
            if (j.status == IJobMarket.JobStatus.Settled || j.status == IJobMarket.JobStatus.Cancelled) {
                _noteEnded(jobId);
                continue;
            }
            if (j.openSlots != 0) j = _auction(jobId, j);
            if (j.status == IJobMarket.JobStatus.Running) _work(jobId, j);
        }
        _expireOwnBids();
        _verify();
        _complaintDuties();
        for (uint256 k; k < jobIds.length; ++k) {
            _settleOrNote(jobIds[k]);
        }
    }

    /// @dev Bid, reveal, close; the honest user stops its job after MAX_ROUNDS failed rounds.
    function _auction(uint256 jobId, IJobMarket.Job memory j) internal returns (IJobMarket.Job memory) {
        if (j.user == user && j.round > MAX_ROUNDS) {
            vm.prank(user);
            market.cancelJob(jobId);
            ++calls["stop"];
            return market.job(jobId);
        }
        if (block.timestamp <= j.bidDeadline) {
            // Only a round whose reveal window an honest daemon cannot miss, for a job whose
            // checkpoint deadline it can keep.
            if (j.revealDeadline - j.bidDeadline < MAX_TICK || j.checkpointInterval < INTERVAL || j.tier != 0) {
                return j;
            }
            for (uint256 i; i < _honestProviders; ++i) {
                address p = _honest[i];
                if (
                    !staking.isActiveProvider(p, 0) || staking.freeStake(p) < j.collateral
                        || market.participant(jobId, p).state != IJobMarket.ParticipantState.None
                        || market.bidCommitment(jobId, p) != 0
                ) continue;
                uint96 price = uint96(bound(uint256(keccak256(abi.encode(jobId, j.round, p))), 1, j.maxPrice));
                bytes32 commitment = market.bidCommitmentOf(price, _salt(jobId, j.round, p), p, jobId);
                vm.prank(p);
                market.commitBid(jobId, commitment);
                _sealed.push(SealedBid(jobId, j.round, p, price));
            }
        } else if (block.timestamp <= j.revealDeadline) {
            for (uint256 i = _sealed.length; i > 0; --i) {
                SealedBid memory b = _sealed[i - 1];
                if (b.jobId != jobId || b.round != j.round) continue;
                vm.prank(b.bidder);
                market.revealBid(jobId, b.price, _salt(jobId, b.round, b.bidder));
                _dropSealed(i - 1);
            }
        } else {
            market.closeAuction(jobId);
            ++calls["close"];
            j = market.job(jobId);
        }
        return j;
    }

    /// @dev A sealed honest bid of a round cut short forfeits nothing: its bidder takes it back.
    function _expireOwnBids() internal {
        for (uint256 i = _sealed.length; i > 0; --i) {
            SealedBid memory b = _sealed[i - 1];
            IJobMarket.Job memory j = market.job(b.jobId);
            if (b.round == j.round && j.openSlots != 0) continue;
            uint256 before = stakeOf(b.bidder);
            market.expireBid(b.jobId, b.round, b.bidder);
            require(stakeOf(b.bidder) == before, "an honest bid forfeited its bond");
            _dropSealed(i - 1);
        }
    }

    /// @dev Honest holders commit their next unit (flagging a bad input of another provider first);
    /// a late holder is reported.
    function _work(uint256 jobId, IJobMarket.Job memory j) internal {
        for (uint16 s; s < j.nodes; ++s) {
            IJobMarket.Slot memory slot = market.slot(jobId, s);
            if (slot.provider == address(0) || slot.done) continue;
            if (!isHonest[slot.provider]) {
                bool hostDown = s != 0 && LedgerRecords.groupHostDown(market, jobId);
                if (!hostDown && block.timestamp > market.checkpointDeadline(jobId, s)) {
                    vm.prank(_honest[_honest.length - 1]);
                    market.reportDowntime(jobId, s);
                    ++calls["reportDowntime"];
                }
                continue;
            }
            if (slot.unitsDone != 0) _flagBadInput(jobId, s, slot);
            uint256 worth = uint256(slot.unitGpuSeconds) * slot.price / 1 hours;
            string memory cid = string.concat("bafy-honest-", vm.toString(_records.length));
            vm.recordLogs();
            vm.prank(slot.provider);
            market.commitCheckpoint(jobId, s, slot.unitsDone, cid, goodState(jobId, s, slot.unitsDone));
            _note(jobId, s, slot.unitsDone, true, LedgerRecords.unitFromLogs(vm.getRecordedLogs()), worth);
            ++calls["honestCommit"];
        }
    }

    function _flagBadInput(uint256 jobId, uint16 s, IJobMarket.Slot memory slot) internal {
        for (uint256 i = _records.length; i > 0; --i) {
            Record memory r = _records[i - 1];
            if (r.jobId != jobId || r.slot != s || r.index != slot.unitsDone - 1 || !live(r)) continue;
            mapping(address => uint64) storage reviewed = _reviewedBy[jobId][s][r.index];
            if (r.good || r.unit.provider == slot.provider || reviewed[slot.provider] == r.unit.blockNumber) return;
            reviewed[slot.provider] = r.unit.blockNumber;
            vm.prank(slot.provider);
            verification.flagUnit(jobId, s, r.index, r.unit);
            ++calls["flag"];
            return;
        }
    }

    /// @dev Honest verifiers record seeds, post the truth in the turns they are drawn for, and
    /// judge disputes likewise; anyone expires a dispute whose window passed.
    function _verify() internal {
        uint256 vw = verification.verificationWindow();
        uint256 dw = verification.disputeWindow();
        for (uint256 i; i < _records.length; ++i) {
            Record memory r = _records[i];
            if (_ended[r.jobId] || block.number < r.unit.blockNumber + 2) continue;
            if (verification.recordedSeed(r.unit.blockNumber) == 0 && verification.seedOf(r.unit.blockNumber) != 0) {
                verification.recordSeed(r.unit.blockNumber);
            }
            IVerification.Result memory res = verification.result(r.jobId, r.slot, r.index);
            if (res.verdict == IVerification.Verdict.Disputed) {
                if (block.timestamp > uint256(res.disputedAt) + dw) {
                    verification.expireDispute(r.jobId, r.slot, r.index);
                    continue;
                }
                if (res.unitBlock != r.unit.blockNumber || !live(r)) continue;
                uint256 turn = (block.timestamp - res.disputedAt) / verification.turnLength(true);
                address judge =
                    verification.drawnVerifier(r.jobId, r.slot, r.index, r.unit.blockNumber, res.first, turn);
                if (!_canAnswer(judge)) continue;
                vm.prank(judge);
                verification.resolveDispute(r.jobId, r.slot, r.index, r.unit, r.good, "bafy-honest-evidence");
                ++calls["honestResolve"];
                continue;
            }
            if (!live(r)) continue;
            if (res.verdict != IVerification.Verdict.None && res.unitBlock == r.unit.blockNumber) continue;
            uint256 opensAt = verification.resultWindowOpensAt(r.jobId, r.slot, r.index, r.unit);
            if (block.timestamp >= opensAt + vw) continue;
            // Sampled, or flagged by a provider of the job.
            if (!verification.isSampled(r.jobId, r.slot, r.index, r.unit.blockNumber)) continue;
            uint256 t = (block.timestamp - opensAt) / verification.turnLength(false);
            address drawn = verification.drawnVerifier(r.jobId, r.slot, r.index, r.unit.blockNumber, address(0), t);
            if (!_canAnswer(drawn)) continue;
            vm.prank(drawn);
            verification.postResult(r.jobId, r.slot, r.index, r.unit, r.good, "bafy-honest-evidence");
            ++calls["honestResult"];
        }
    }

    /// @dev Whether `drawn` is honest and may answer now. The draw weighs stakes as they were at
    /// the unit's block; a verifier that has since unstaked below the minimum cannot answer, and
    /// its turn passes to the next draw, as a silent verifier's does.
    function _canAnswer(address drawn) internal view returns (bool) {
        return isHonest[drawn] && staking.isActiveVerifier(drawn);
    }

    /// @dev A complaint is judged by the verifier drawn for it: an honest one refutes one against
    /// an honest provider and confirms one against an attacker's. Anyone expires a stale one.
    function _complaintDuties() internal {
        uint256 dw = verification.disputeWindow();
        for (uint256 i; i < _complaints.length; ++i) {
            Complaint memory c = _complaints[i];
            IVerification.Complaint memory open = verification.complaint(c.jobId, c.provider);
            if (open.challenger == address(0)) continue;
            if (block.timestamp > uint256(open.openedAt) + dw) {
                verification.expireBandwidthComplaint(c.jobId, c.provider);
                continue;
            }
            if (block.number < uint256(open.openedBlock) + 2) continue;
            address judge = verification.drawnComplaintJudge(c.jobId, c.provider);
            if (!_canAnswer(judge)) continue;
            vm.prank(judge);
            verification.resolveBandwidthComplaint(c.jobId, c.provider, !isHonest[c.provider]);
            ++calls["honestComplaintJudged"];
        }
    }

    function _settleOrNote(uint256 jobId) internal {
        if (_ended[jobId]) return;
        IJobMarket.Job memory j = market.job(jobId);
        if (j.status == IJobMarket.JobStatus.Completed) {
            if (
                block.timestamp < uint256(j.completedAt) + verification.verificationWindow()
                    || verification.openDisputes(jobId) != 0
            ) return;
            market.settle(jobId);
            ++calls["settle"];
            j.status = IJobMarket.JobStatus.Settled;
        }
        if (j.status == IJobMarket.JobStatus.Settled || j.status == IJobMarket.JobStatus.Cancelled) _noteEnded(jobId);
    }

    /// @dev A job Settled or Cancelled stays so: its records are skipped from now on, and an honest
    /// user's job's time to end is noted.
    function _noteEnded(uint256 jobId) internal {
        _ended[jobId] = true;
        if (createdAt[jobId] == 0) return;
        uint256 took = block.timestamp - createdAt[jobId];
        if (took > ghost_longestJob) ghost_longestJob = took;
        createdAt[jobId] = 0;
    }

    /*//////////////////////////////////////////////////////////////
                                INTERNAL
    //////////////////////////////////////////////////////////////*/

    /// @notice The state hash a correct run of unit `index` produces.
    function goodState(uint256 jobId, uint16 s, uint32 index) public pure returns (bytes32) {
        return keccak256(abi.encode("good", jobId, s, index));
    }

    function _note(uint256 jobId, uint16 s, uint32 index, bool good, IJobMarket.Unit memory unit, uint256 worth)
        internal
    {
        _records.push(Record(jobId, s, index, good, unit));
        ghost_worth[jobId][unit.provider] += worth;
    }

    function _liveUserJobs() internal view returns (uint256 n) {
        for (uint256 k; k < jobIds.length; ++k) {
            if (createdAt[jobIds[k]] != 0) ++n;
        }
    }

    function _dropSealed(uint256 i) internal {
        _sealed[i] = _sealed[_sealed.length - 1];
        _sealed.pop();
    }

    function _salt(uint256 jobId, uint32 round, address bidder) internal pure returns (bytes32) {
        return keccak256(abi.encode("honest salt", jobId, round, bidder));
    }
}
