// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {CommonBase} from "forge-std/Base.sol";
import {StdCheats} from "forge-std/StdCheats.sol";
import {StdUtils} from "forge-std/StdUtils.sol";
import {Vm} from "forge-std/Vm.sol";

import {JobMarket} from "../../../contracts/JobMarket.sol";
import {Staking} from "../../../contracts/Staking.sol";
import {Treasury} from "../../../contracts/Treasury.sol";
import {Verification} from "../../../contracts/Verification.sol";
import {ZenToken} from "../../../contracts/ZenToken.sol";
import {Timelock} from "../../../contracts/governance/Timelock.sol";
import {IJobMarket} from "../../../contracts/interfaces/IJobMarket.sol";
import {IStaking} from "../../../contracts/interfaces/IStaking.sol";
import {IVerification} from "../../../contracts/interfaces/IVerification.sol";
import {LedgerRecords} from "../utils/LedgerRecords.sol";
import {HonestHandler} from "./HonestHandler.sol";

/// @notice One attacker holding Sybil providers, Sybil verifiers, a user account and the seat of
/// the timelock's proposer. It calls every external function of the ledger with any arguments
/// (its reverts are caught: they are the ledger refusing it), and plays the colluding moves on
/// purpose: bidding low and going silent, committing wrong states (and abandoning the slot to a
/// successor that must resume from one), passing its own bad units and failing honest ones when
/// drawn, confirming false failures and false complaints when drawn, flagging good inputs to win
/// time, unstaking mid-job, and governance changes mid-job.
/// @dev Never warps time: time is the honest handler's, so every honest party is on time.
contract AttackerHandler is CommonBase, StdCheats, StdUtils {
    uint256 internal constant MAX_WINDOW = 1 hours; // windows governance sets here (see the test)

    ZenToken public immutable zen;
    Staking public immutable staking;
    JobMarket public immutable market;
    Verification public immutable verification;
    Treasury public immutable treasury;
    Timelock public immutable timelock;
    HonestHandler public immutable honest;
    address public immutable council;
    address public immutable user;

    address[] internal _providers;
    address[] internal _verifiers;

    struct Op {
        address target;
        bytes data;
        bytes32 salt;
    }

    Op[] internal _ops;
    uint256 internal _nonce;
    /// @dev The Sybil that abandoned each slot after a wrong unit: it commits there no more.
    mapping(uint256 jobId => mapping(uint16 slot => address)) internal _vanished;

    /// @notice A call only the protocol or governance may make that succeeded for the attacker.
    uint256 public ghost_forbiddenSuccesses;
    mapping(bytes32 => uint256) public calls;

    constructor(
        Verification verification_,
        Treasury treasury_,
        Timelock timelock_,
        HonestHandler honest_,
        address council_,
        address user_,
        address[] memory providers,
        address[] memory verifiers
    ) {
        verification = verification_;
        market = JobMarket(address(verification_.market()));
        staking = Staking(address(verification_.staking()));
        zen = ZenToken(address(market.zen()));
        treasury = treasury_;
        timelock = timelock_;
        honest = honest_;
        council = council_;
        user = user_;
        _providers = providers;
        _verifiers = verifiers;
    }

    /*//////////////////////////////////////////////////////////////
                      ANY FUNCTION, ANY ARGUMENTS
    //////////////////////////////////////////////////////////////*/

    /// @notice Any JobMarket function, any arguments, from any attacker account.
    function anyMarketCall(uint8 fn, uint256 a, uint256 b, uint256 c, uint256 who) external {
        address caller = _caller(who);
        uint256 jobId = bound(a, 0, honest.jobCount() + 1);
        uint16 slot = uint16(b % 3);
        fn = fn % 15;
        if (fn == 0) {
            IJobMarket.JobRequest memory r = IJobMarket.JobRequest({
                specCid: "bafy-attacker",
                tier: uint8(c % 2),
                nodes: uint16(bound(b, 0, 3)),
                unitsPerNode: uint32(bound(c >> 8, 0, 4)),
                checkpointInterval: uint32(bound(c >> 16, 0, 2 hours)),
                sampleRateBps: uint16(bound(c >> 48, 0, 11_000)),
                maxPrice: uint96(bound(c >> 64, 0, 200e18)),
                budget: uint128(bound(a, 0, 5_000e18)),
                unitGpuSeconds: uint32(bound(c >> 96, 0, 7_200))
            });
            vm.prank(user);
            zen.approve(address(market), r.budget);
            (bool ok, bytes memory ret) = _try(user, address(market), abi.encodeCall(market.createJob, (r)));
            if (ok) honest.noteJob(abi.decode(ret, (uint256)));
        } else if (fn == 1) {
            _try(caller, address(market), abi.encodeCall(market.cancelJob, (jobId)));
        } else if (fn == 2) {
            _try(caller, address(market), abi.encodeCall(market.settle, (jobId)));
        } else if (fn == 3) {
            _try(caller, address(market), abi.encodeCall(market.claimVerificationFees, (jobId)));
        } else if (fn == 4) {
            _try(caller, address(market), abi.encodeCall(market.withdraw, ()));
        } else if (fn == 5) {
            _try(caller, address(market), abi.encodeCall(market.commitBid, (jobId, bytes32(c))));
        } else if (fn == 6) {
            _try(caller, address(market), abi.encodeCall(market.revealBid, (jobId, uint96(c), bytes32(b))));
        } else if (fn == 7) {
            _try(caller, address(market), abi.encodeCall(market.closeAuction, (jobId)));
        } else if (fn == 8) {
            _try(caller, address(market), abi.encodeCall(market.expireBid, (jobId, uint16(c % 4), _anyone(b))));
        } else if (fn == 9) {
            _commit(caller, jobId, slot, uint32(c % 4), c % 2 == 0);
        } else if (fn == 10) {
            _try(caller, address(market), abi.encodeCall(market.reportDowntime, (jobId, slot)));
        } else if (fn == 11) {
            IJobMarket.Unit memory u = _someUnit(c);
            _forbidden(
                caller, address(market), abi.encodeCall(market.rejectUnit, (jobId, slot, uint32(b % 4), u, caller))
            );
        } else if (fn == 12) {
            _forbidden(
                caller,
                address(market),
                abi.encodeCall(market.penalize, (jobId, _anyone(b), IStaking.SlashReason(c % 3), caller))
            );
        } else if (fn == 13) {
            _forbidden(caller, address(market), abi.encodeCall(market.setParameters, (0, 0, 1, 1, 0)));
        } else {
            _forbidden(caller, address(market), abi.encodeCall(market.grantRole, (market.GOVERNOR_ROLE(), caller)));
        }
        ++calls["anyMarketCall"];
    }

    /// @notice Any Verification function, any arguments, from any attacker account.
    function anyVerificationCall(uint8 fn, uint256 a, uint256 b, uint256 c, uint256 who) external {
        address caller = _caller(who);
        fn = fn % 10;
        if (fn < 4) {
            _unitCall(fn, caller, a, c % 2 == 0);
        } else if (fn == 4) {
            _try(
                caller,
                address(verification),
                abi.encodeCall(verification.recordSeed, (uint64(bound(b, 0, block.number))))
            );
        } else if (fn == 5) {
            _complain(caller, bound(b, 0, honest.jobCount() + 1), _anyone(c), c % 3 == 0 ? "" : "bafy-measures");
        } else if (fn == 6) {
            uint256 jobId = bound(b, 0, honest.jobCount() + 1);
            address p = _anyone(c);
            _judge(
                caller,
                abi.encodeCall(verification.resolveBandwidthComplaint, (jobId, p, c % 2 == 0)),
                _complaintJudge(jobId, p)
            );
        } else if (fn == 7) {
            _try(
                caller,
                address(verification),
                abi.encodeCall(verification.expireBandwidthComplaint, (bound(b, 0, honest.jobCount() + 1), _anyone(c)))
            );
        } else if (fn == 8) {
            _forbidden(caller, address(verification), abi.encodeCall(verification.setParameters, (1, 1, 0)));
        } else {
            _forbidden(caller, address(verification), abi.encodeCall(verification.grantRole, (bytes32(0), caller)));
        }
        ++calls["anyVerificationCall"];
    }

    /// @dev Result, flag, dispute and expiry calls about some recorded unit (or a forged record).
    function _unitCall(uint8 fn, address caller, uint256 a, bool pass) internal {
        IJobMarket.Unit memory u = _someUnit(a);
        (uint256 jobId, uint16 slot, uint32 index) = _someIds(a);
        bytes memory data;
        if (fn == 0) {
            data = abi.encodeCall(verification.postResult, (jobId, slot, index, u, pass, "bafy-x"));
        } else if (fn == 1) {
            data = abi.encodeCall(verification.flagUnit, (jobId, slot, index, u));
        } else if (fn == 2) {
            data = abi.encodeCall(verification.resolveDispute, (jobId, slot, index, u, pass, "bafy-x"));
            _judge(caller, data, _disputeJudge(jobId, slot, index));
            return;
        } else {
            data = abi.encodeCall(verification.expireDispute, (jobId, slot, index));
        }
        _try(caller, address(verification), data);
    }

    /// @notice Any Staking or Treasury function, any arguments, from any attacker account.
    function anyStakingCall(uint8 fn, uint256 a, uint256 b, uint256 who) external {
        address caller = _caller(who);
        fn = fn % 12;
        if (fn == 0) {
            uint256 amount = bound(a, 0, 30_000e18);
            vm.prank(caller);
            zen.approve(address(staking), amount);
            _try(caller, address(staking), abi.encodeCall(staking.stake, (amount)));
        } else if (fn == 1) {
            _try(caller, address(staking), abi.encodeCall(staking.requestUnstake, (bound(a, 0, 30_000e18))));
        } else if (fn == 2) {
            _try(caller, address(staking), abi.encodeCall(staking.withdraw, ()));
        } else if (fn == 3) {
            IStaking.Hardware memory hw =
                IStaking.Hardware("H100", uint32(a), uint32(b), uint32(a >> 32), "https://x", bytes32(b));
            _try(caller, address(staking), abi.encodeCall(staking.registerProvider, (uint8(b % 5), hw)));
        } else if (fn == 4) {
            _try(caller, address(staking), abi.encodeCall(staking.registerVerifier, ("https://x")));
        } else if (fn == 5) {
            _try(caller, address(staking), abi.encodeCall(staking.attestBenchmark, (_anyone(a), bytes32(b), b)));
        } else if (fn == 6) {
            _forbidden(
                caller,
                address(staking),
                abi.encodeCall(
                    staking.slash, (_anyone(a), bound(b, 1, 30_000e18), IStaking.SlashReason.Downtime, caller)
                )
            );
        } else if (fn == 7) {
            _forbidden(caller, address(staking), abi.encodeCall(staking.lock, (_anyone(a), bound(b, 1, 1e18))));
        } else if (fn == 8) {
            _forbidden(caller, address(staking), abi.encodeCall(staking.unlock, (_anyone(a), bound(b, 1, 1e18))));
        } else if (fn == 9) {
            _forbidden(caller, address(staking), abi.encodeCall(staking.bind, (caller, caller)));
        } else if (fn == 10) {
            _forbidden(caller, address(staking), abi.encodeCall(staking.setParameters, (1, 10_000, 0)));
        } else {
            _forbidden(caller, address(treasury), abi.encodeCall(treasury.grant, (caller, bound(a, 1, 1e24), "x")));
        }
        ++calls["anyStakingCall"];
    }

    /*//////////////////////////////////////////////////////////////
                             COLLUSION
    //////////////////////////////////////////////////////////////*/

    /// @notice A Sybil provider bids low on a job in its bid window, and reveals it (or not).
    function sybilBid(uint256 jobSeed, uint256 who, bool reveal) external {
        uint256 jobId = _someAuction(jobSeed);
        if (jobId == 0) return;
        IJobMarket.Job memory j = market.job(jobId);
        address p = _providers[who % _providers.length];
        bytes32 salt = keccak256(abi.encode("sybil", jobId, j.round, p));
        if (block.timestamp <= j.bidDeadline) {
            (bool ok,) = _try(
                p, address(market), abi.encodeCall(market.commitBid, (jobId, market.bidCommitmentOf(1, salt, p, jobId)))
            );
            if (ok) ++calls["sybilSealed"];
        } else if (reveal) {
            (bool ok,) = _try(p, address(market), abi.encodeCall(market.revealBid, (jobId, 1, salt)));
            if (ok) ++calls["sybilRevealed"];
        }
        ++calls["sybilBid"];
    }

    /// @notice A Sybil provider holding a slot commits its next unit, right or wrong; after a wrong
    /// one it may vanish: it never commits for that slot again, and whoever takes the slot over
    /// must resume from the wrong state.
    function sybilCommit(uint256 seed, bool wrong, bool vanish) external {
        (uint256 jobId, uint16 s, address holder, uint32 next) = _someSybilSlot(seed);
        if (holder == address(0)) return;
        if (_commit(holder, jobId, s, next, !wrong) && wrong && vanish) {
            _vanished[jobId][s] = holder;
            ++calls["vanished"];
        }
        ++calls["sybilCommit"];
    }

    /// @notice A Sybil verifier, when drawn, passes its side's wrong units and fails honest ones.
    function sybilVerdict(uint256 recordSeed) external {
        uint256 n = honest.recordCount();
        if (n == 0) return;
        HonestHandler.Record memory r = honest.record(recordSeed % n);
        if (!honest.live(r) || block.number < r.unit.blockNumber + 2) return;
        uint256 opensAt = verification.resultWindowOpensAt(r.jobId, r.slot, r.index, r.unit);
        if (block.timestamp >= opensAt + verification.verificationWindow()) return;
        uint256 turn = (block.timestamp - opensAt) / verification.turnLength(false);
        address drawn = verification.drawnVerifier(r.jobId, r.slot, r.index, r.unit.blockNumber, address(0), turn);
        if (honest.isHonest(drawn) || drawn == address(0)) return;
        bool pass = !honest.isHonest(r.unit.provider);
        (bool ok,) = _try(
            drawn,
            address(verification),
            abi.encodeCall(verification.postResult, (r.jobId, r.slot, r.index, r.unit, pass, "bafy-sybil"))
        );
        if (ok) ++calls["sybilVerdict"];
    }

    /// @notice A Sybil verifier, when drawn to judge a dispute, sides with its own: confirms a
    /// failure of an honest unit, refutes one of its side's.
    function sybilJudge(uint256 recordSeed) external {
        uint256 n = honest.recordCount();
        if (n == 0) return;
        HonestHandler.Record memory r = honest.record(recordSeed % n);
        if (!honest.live(r)) return;
        address judge = _disputeJudge(r.jobId, r.slot, r.index);
        if (judge == address(0) || honest.isHonest(judge)) return;
        bool pass = !honest.isHonest(r.unit.provider);
        _judge(
            judge,
            abi.encodeCall(verification.resolveDispute, (r.jobId, r.slot, r.index, r.unit, pass, "bafy-sybil")),
            judge
        );
        ++calls["sybilJudge"];
    }

    /// @notice A Sybil verifier complains about a provider (honest or not) of a running job.
    function sybilComplain(uint256 jobSeed, uint256 providerSeed, uint256 who) external {
        uint256 jobId = _someJob(jobSeed);
        if (jobId == 0) return;
        address[] memory list = market.participants(jobId);
        if (list.length == 0) return;
        _complain(_verifiers[who % _verifiers.length], jobId, list[providerSeed % list.length], "bafy-measures");
    }

    /// @notice A Sybil verifier, when drawn to judge a complaint, confirms it.
    function sybilJudgeComplaint(uint256 i) external {
        uint256 n = honest.complaintCount();
        if (n == 0) return;
        HonestHandler.Complaint memory c = honest.complaintAt(i % n);
        address judge = _complaintJudge(c.jobId, c.provider);
        if (judge == address(0) || honest.isHonest(judge)) return;
        _judge(judge, abi.encodeCall(verification.resolveBandwidthComplaint, (c.jobId, c.provider, true)), judge);
        ++calls["sybilJudgeComplaint"];
    }

    /// @notice A Sybil provider holding a slot flags its (good) input to win a review's delay.
    function sybilFlag(uint256 recordSeed) external {
        uint256 n = honest.recordCount();
        if (n == 0) return;
        HonestHandler.Record memory r = honest.record(recordSeed % n);
        address holder = market.slot(r.jobId, r.slot).provider;
        if (holder == address(0) || honest.isHonest(holder)) return;
        _try(holder, address(verification), abi.encodeCall(verification.flagUnit, (r.jobId, r.slot, r.index, r.unit)));
        ++calls["sybilFlag"];
    }

    /// @notice The attacker, as the timelock's proposer, schedules a governance call: parameters
    /// in and out of their bounds, tiers, treasury grants, and the powers governance must not
    /// have (slashing, roles).
    function govern(uint8 fn, uint256 a, uint256 b) external {
        address target;
        bytes memory data;
        fn = fn % 8;
        if (fn == 0) {
            (target, data) =
            (
                address(market),
                abi.encodeCall(
                    market.setParameters,
                    (
                        uint16(bound(a, 0, 1_100)),
                        uint16(bound(b, 0, 10_000)),
                        uint40(bound(a >> 16, 1, MAX_WINDOW)),
                        uint40(bound(b >> 16, 1, MAX_WINDOW)),
                        uint128(bound(a >> 64, 0, 10e18))
                    )
                )
            );
        } else if (fn == 1) {
            (target, data) =
            (
                address(market),
                abi.encodeCall(market.setSlashBps, (IStaking.SlashReason(a % 3), uint16(bound(b, 0, 11_000))))
            );
        } else if (fn == 2) {
            (target, data) =
            (
                address(verification),
                abi.encodeCall(
                    verification.setParameters,
                    (uint40(bound(a, 1, MAX_WINDOW)), uint40(bound(b, 1, MAX_WINDOW)), bound(a >> 64, 0, 11_000e18))
                )
            );
        } else if (fn == 3) {
            (target, data) =
            (
                address(staking),
                abi.encodeCall(staking.setParameters, (uint64(bound(a, 0, 60 days)), uint16(bound(b, 0, 10_000)), 1e18))
            );
        } else if (fn == 4) {
            (target, data) =
            (
                address(staking),
                abi.encodeCall(staking.setTier, (0, IStaking.Tier("Community", bound(a, 0, 30_000e18), 1, 1, 1, 9_000)))
            );
        } else if (fn == 5) {
            (target, data) = (address(treasury), abi.encodeCall(treasury.grant, (user, bound(a, 1, 1_000e18), "grant")));
        } else if (fn == 6) {
            (target, data) =
            (
                address(staking),
                abi.encodeCall(staking.slash, (_anyone(a), bound(b, 1, 30_000e18), IStaking.SlashReason.Downtime, user))
            );
        } else {
            (target, data) = (address(market), abi.encodeCall(market.grantRole, (market.GOVERNOR_ROLE(), user)));
        }
        bytes32 salt = bytes32(++_nonce);
        uint256 delay = timelock.getMinDelay();
        vm.prank(council);
        timelock.schedule(target, 0, data, bytes32(0), salt, delay);
        _ops.push(Op(target, data, salt));
        ++calls["govern"];
    }

    /// @notice Anyone executes a scheduled governance call once its delay is over.
    function executeGovernance(uint256 i) external {
        if (_ops.length == 0) return;
        i %= _ops.length;
        Op memory op = _ops[i];
        if (!timelock.isOperationReady(timelock.hashOperation(op.target, 0, op.data, bytes32(0), op.salt))) return;
        _ops[i] = _ops[_ops.length - 1];
        _ops.pop();
        bytes4 sel = bytes4(op.data);
        bool forbidden = sel == staking.slash.selector || sel == market.grantRole.selector;
        (bool ok,) = _try(
            _caller(i),
            address(timelock),
            abi.encodeCall(timelock.execute, (op.target, 0, op.data, bytes32(0), op.salt))
        );
        if (ok && forbidden) ++ghost_forbiddenSuccesses;
        if (ok) ++calls["governed"];
    }

    /*//////////////////////////////////////////////////////////////
                                INTERNAL
    //////////////////////////////////////////////////////////////*/

    function _try(address caller, address target, bytes memory data) internal returns (bool ok, bytes memory ret) {
        vm.prank(caller);
        (ok, ret) = target.call(data);
    }

    function _forbidden(address caller, address target, bytes memory data) internal {
        (bool ok,) = _try(caller, target, data);
        if (ok) ++ghost_forbiddenSuccesses;
    }

    /// @dev Commits a unit for `caller` and, when the market takes it, files it with the honest
    /// handler's records (what it is worth at the slot's price, whether its state is right).
    function _commit(address caller, uint256 jobId, uint16 s, uint32 index, bool right) internal returns (bool ok) {
        IJobMarket.Slot memory slot = market.slot(jobId, s);
        uint256 worth = uint256(slot.unitGpuSeconds) * slot.price / 1 hours;
        bytes32 state = right ? honest.goodState(jobId, s, index) : keccak256(abi.encode("wrong", jobId, s, index));
        vm.recordLogs();
        (ok,) = _try(
            caller, address(market), abi.encodeCall(market.commitCheckpoint, (jobId, s, index, "bafy-sybil", state))
        );
        Vm.Log[] memory logs = vm.getRecordedLogs();
        if (ok) honest.noteUnit(jobId, s, index, right, LedgerRecords.unitFromLogs(logs), worth);
    }

    function _complain(address caller, uint256 jobId, address provider, string memory cid) internal {
        (bool ok,) =
            _try(caller, address(verification), abi.encodeCall(verification.complainBandwidth, (jobId, provider, cid)));
        if (ok) honest.noteComplaint(jobId, provider);
        ++calls["complain"];
    }

    /// @dev A call that may slash by judgement. A loss of honest stake it causes is collusion when
    /// `drawn` (the verifier the ledger's draw picked for this turn) made it; any other loss stays
    /// unexplained and breaks the stake invariant.
    function _judge(address caller, bytes memory data, address drawn) internal {
        address[] memory hs = honest.honest();
        uint256[] memory before = new uint256[](hs.length);
        for (uint256 k; k < hs.length; ++k) {
            before[k] = honest.stakeOf(hs[k]);
        }
        (bool ok,) = _try(caller, address(verification), data);
        if (!ok || caller != drawn) return;
        for (uint256 k; k < hs.length; ++k) {
            uint256 afterStake = honest.stakeOf(hs[k]);
            if (afterStake < before[k]) honest.noteCollusionLoss(hs[k], before[k] - afterStake);
        }
        ++calls["collusionWins"];
    }

    function _disputeJudge(uint256 jobId, uint16 slot, uint32 index) internal view returns (address) {
        IVerification.Result memory res = verification.result(jobId, slot, index);
        if (res.verdict != IVerification.Verdict.Disputed) return address(0);
        if (block.timestamp > uint256(res.disputedAt) + verification.disputeWindow()) return address(0);
        uint256 turn = (block.timestamp - res.disputedAt) / verification.turnLength(true);
        return verification.drawnVerifier(jobId, slot, index, uint64(res.unitBlock), res.first, turn);
    }

    function _complaintJudge(uint256 jobId, address provider) internal view returns (address) {
        IVerification.Complaint memory c = verification.complaint(jobId, provider);
        if (c.challenger == address(0) || block.number < uint256(c.openedBlock) + 2) return address(0);
        try verification.drawnComplaintJudge(jobId, provider) returns (address judge) {
            return judge;
        } catch {
            return address(0);
        }
    }

    function _someUnit(uint256 seed) internal view returns (IJobMarket.Unit memory u) {
        uint256 n = honest.recordCount();
        if (n == 0) return u;
        u = honest.record(seed % n).unit;
        if (seed % 7 == 0) u.amount += 1; // a forged record
    }

    function _someIds(uint256 seed) internal view returns (uint256 jobId, uint16 slot, uint32 index) {
        uint256 n = honest.recordCount();
        if (n == 0) return (1, 0, 0);
        HonestHandler.Record memory r = honest.record(seed % n);
        return (r.jobId, r.slot, r.index);
    }

    function _someJob(uint256 seed) internal view returns (uint256) {
        uint256 n = honest.jobCount();
        return n == 0 ? 0 : honest.jobIds(seed % n);
    }

    /// @dev Some job with an auction running (0 if none): where a Sybil's bid can land. Bids on any
    /// job at any time are anyMarketCall's.
    function _someAuction(uint256 seed) internal view returns (uint256) {
        uint256 n = honest.jobCount();
        uint256[] memory open = new uint256[](n);
        uint256 k;
        for (uint256 i; i < n; ++i) {
            uint256 jobId = honest.jobIds(i);
            if (market.job(jobId).openSlots != 0) open[k++] = jobId;
        }
        return k == 0 ? 0 : open[seed % k];
    }

    /// @dev Some unfinished slot a Sybil holds and has not abandoned, with the index of its next
    /// unit (holder 0 if none). Commits by anyone for any slot are anyMarketCall's.
    function _someSybilSlot(uint256 seed)
        internal
        view
        returns (uint256 jobId, uint16 slot, address holder, uint32 next)
    {
        uint256 n = honest.jobCount();
        // A job here has at most 3 nodes (the attacker's requests; the honest user asks for 2).
        uint256[] memory jobs = new uint256[](3 * n);
        uint16[] memory slots = new uint16[](3 * n);
        uint256 k;
        for (uint256 i; i < n; ++i) {
            uint256 id = honest.jobIds(i);
            uint16 nodes = market.job(id).nodes;
            for (uint16 s; s < nodes && s < 3; ++s) {
                IJobMarket.Slot memory held = market.slot(id, s);
                if (held.provider == address(0) || held.done || honest.isHonest(held.provider)) continue;
                if (_vanished[id][s] == held.provider) continue;
                (jobs[k], slots[k]) = (id, s);
                ++k;
            }
        }
        if (k == 0) return (0, 0, address(0), 0);
        (jobId, slot) = (jobs[seed % k], slots[seed % k]);
        IJobMarket.Slot memory chosen = market.slot(jobId, slot);
        return (jobId, slot, chosen.provider, chosen.unitsDone);
    }

    /// @dev An attacker account: a Sybil provider, a Sybil verifier, the user, or the council.
    function _caller(uint256 seed) internal view returns (address) {
        uint256 k = seed % (_providers.length + _verifiers.length + 2);
        if (k < _providers.length) return _providers[k];
        k -= _providers.length;
        if (k < _verifiers.length) return _verifiers[k];
        return k == _verifiers.length ? user : council;
    }

    /// @dev Any account of the world, honest or not: a victim or a name in an argument.
    function _anyone(uint256 seed) internal view returns (address) {
        address[] memory hs = honest.honest();
        uint256 k = seed % (hs.length + _providers.length + _verifiers.length);
        if (k < hs.length) return hs[k];
        return _caller(k - hs.length);
    }
}
