// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {AccessControl} from "@openzeppelin/contracts/access/AccessControl.sol";
import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";
import {IERC20Permit} from "@openzeppelin/contracts/token/ERC20/extensions/IERC20Permit.sol";
import {SafeERC20} from "@openzeppelin/contracts/token/ERC20/utils/SafeERC20.sol";
import {ReentrancyGuard} from "@openzeppelin/contracts/utils/ReentrancyGuard.sol";
import {SafeCast} from "@openzeppelin/contracts/utils/math/SafeCast.sol";

import {IStaking} from "./interfaces/IStaking.sol";

/// @title Staking
/// @notice The provider and verifier registry. Every ZEN this contract holds is someone's stake
/// or unbonding stake: `balance == Σ staked + Σ unbonding` must never break.
/// @dev Governance has no custody. Only the market and the verification contract, bound once at
/// deployment, move stake (lock, unlock, slash); the governor (a timelock once deployment hands
/// over, with no admin left to grant roles) only sets tiers and bounded parameters.
contract Staking is IStaking, AccessControl, ReentrancyGuard {
    using SafeERC20 for IERC20;
    using SafeCast for uint256;

    /// @dev One seat of the verifier draw: its holder and weight (whole ZEN staked) since block
    /// `since`. One slot, so a draw reads one word per seat.
    struct Seat {
        address verifier;
        uint48 since;
        uint48 weight;
    }

    /*//////////////////////////////////////////////////////////////
                               CONSTANTS
    //////////////////////////////////////////////////////////////*/

    bytes32 public constant GOVERNOR_ROLE = keccak256("GOVERNOR_ROLE");

    uint256 internal constant BPS = 10_000;
    uint256 public constant MAX_REPORTER_BPS = 5_000;
    /// @notice No setting keeps unbonding stake from its owner longer than this (and none makes
    /// `block.timestamp + unbondingDelay` overflow).
    uint64 public constant MAX_UNBONDING_DELAY = 30 days;
    /// @notice The highest minimum stake a tier or a verifier can be asked for: 10 million ZEN.
    uint256 public constant MAX_MIN_STAKE = 10_000_000e18;
    /// @notice Seats in the verifier draw. A draw reads each seat once (one storage word, plus a
    /// history lookup for a seat that changed since the drawn block): this bounds its gas, so that
    /// a result costs about 265k gas to post with every seat taken (146k with two).
    uint256 public constant MAX_VERIFIERS = 32;
    uint256 internal constant WEIGHT_UNIT = 1e18;

    IERC20 public immutable zen;
    address public immutable treasury;

    /*//////////////////////////////////////////////////////////////
                                STORAGE
    //////////////////////////////////////////////////////////////*/

    mapping(uint8 id => Tier) private _tiers;
    uint8 private _tierCount;
    mapping(address account => Account) private _accounts;
    mapping(address provider => Hardware) private _hardware;

    uint64 public unbondingDelay;
    uint16 public reporterBps;
    uint256 public minVerifierStake;

    Seat[] private _seats;
    /// @dev Each seat's earlier values in block order, packed as `since << 208 | verifier << 48 |
    /// weight`: what a draw for a past block reads, by binary search.
    mapping(uint256 seat => uint256[]) private _seatHistory;
    /// @dev A seated verifier's seat + 1; zero when it holds none.
    mapping(address verifier => uint256) private _seatOf;

    /// @notice The job market: locks, unlocks and slashes. Set once by `bind`.
    address public market;
    /// @notice The verification contract: slashes. Set once by `bind`.
    address public verification;

    /*//////////////////////////////////////////////////////////////
                               MODIFIERS
    //////////////////////////////////////////////////////////////*/

    modifier onlyMarket() {
        // Before `bind` the market is zero, which no caller is.
        if (msg.sender != market) revert NotProtocol(msg.sender);
        _;
    }

    /*//////////////////////////////////////////////////////////////
                              CONSTRUCTOR
    //////////////////////////////////////////////////////////////*/

    constructor(
        IERC20 zen_,
        address treasury_,
        address governor,
        uint64 unbondingDelay_,
        uint16 reporterBps_,
        uint256 minVerifierStake_
    ) {
        if (address(zen_) == address(0) || treasury_ == address(0) || governor == address(0)) {
            revert ZeroAddress();
        }
        zen = zen_;
        treasury = treasury_;
        _grantRole(DEFAULT_ADMIN_ROLE, governor);
        _grantRole(GOVERNOR_ROLE, governor);
        _setParameters(unbondingDelay_, reporterBps_, minVerifierStake_);
    }

    /*//////////////////////////////////////////////////////////////
                          PROVIDERS AND VERIFIERS
    //////////////////////////////////////////////////////////////*/

    /// @inheritdoc IStaking
    function registerProvider(uint8 tierId, Hardware calldata hw) external {
        Account storage a = _accounts[msg.sender];
        if (a.role != Role.None) revert AlreadyRegistered(msg.sender);
        if (tierId >= _tierCount) revert UnknownTier(tierId);
        Tier storage t = _tiers[tierId];
        if (hw.gpus < t.minGpus || hw.gpuMemoryGb < t.minGpuMemoryGb || hw.networkGbps < t.minNetworkGbps) {
            revert HardwareBelowTier(tierId);
        }
        a.role = Role.Provider;
        a.tier = tierId;
        a.gpus = hw.gpus;
        _hardware[msg.sender] = hw;
        emit ProviderRegistered(msg.sender, tierId, hw.gpuModel, hw.gpus, hw.endpoint, hw.attestation);
    }

    /// @inheritdoc IStaking
    function registerVerifier(string calldata endpoint) external {
        Account storage a = _accounts[msg.sender];
        if (a.role != Role.None) revert AlreadyRegistered(msg.sender);
        a.role = Role.Verifier;
        _hardware[msg.sender].endpoint = endpoint;
        emit VerifierRegistered(msg.sender, endpoint);
    }

    /// @inheritdoc IStaking
    function attestBenchmark(address provider, bytes32 resultHash, uint256 score) external {
        if (!isActiveVerifier(msg.sender)) revert NotAnActiveVerifier(msg.sender);
        if (provider == msg.sender) revert SelfAttestation();
        Account storage a = _accounts[provider];
        if (a.role != Role.Provider) revert NotAProvider(provider);
        a.admitted = true;
        emit BenchmarkAttested(provider, msg.sender, resultHash, score);
    }

    /*//////////////////////////////////////////////////////////////
                                 STAKE
    //////////////////////////////////////////////////////////////*/

    /// @inheritdoc IStaking
    function stake(uint256 amount) external nonReentrant {
        _stake(msg.sender, amount);
    }

    /// @inheritdoc IStaking
    function stakeWithPermit(uint256 amount, uint256 deadline, uint8 v, bytes32 r, bytes32 s) external nonReentrant {
        // A front-run permit still leaves the allowance in place, so a failed permit is not fatal:
        // the transfer below is what must succeed.
        try IERC20Permit(address(zen)).permit(msg.sender, address(this), amount, deadline, v, r, s) {} catch {}
        _stake(msg.sender, amount);
    }

    /// @inheritdoc IStaking
    function requestUnstake(uint256 amount) external {
        if (amount == 0) revert ZeroAmount();
        Account storage a = _accounts[msg.sender];
        uint256 free = a.staked - a.locked;
        if (amount > free) revert InsufficientFreeStake(msg.sender, free, amount);
        // amount <= free <= staked < 2**128.
        a.staked -= uint128(amount);
        a.unbonding += uint128(amount);
        uint64 ends = uint64(block.timestamp) + unbondingDelay;
        a.unbondingEnds = ends;
        emit UnstakeRequested(msg.sender, amount, ends);
        // A role, not an amount anyone could round past.
        // slither-disable-next-line incorrect-equality
        if (a.role == Role.Verifier) _reweigh(msg.sender, a.staked);
    }

    /// @inheritdoc IStaking
    function withdraw() external nonReentrant {
        Account storage a = _accounts[msg.sender];
        uint256 amount = a.unbonding;
        if (amount == 0) revert NothingToWithdraw();
        if (block.timestamp < a.unbondingEnds) revert UnbondingNotOver(a.unbondingEnds);
        a.unbonding = 0;
        emit Withdrawn(msg.sender, amount);
        zen.safeTransfer(msg.sender, amount);
    }

    /*//////////////////////////////////////////////////////////////
                        COLLATERAL AND SLASHING
    //////////////////////////////////////////////////////////////*/

    /// @inheritdoc IStaking
    function bind(address market_, address verification_) external onlyRole(GOVERNOR_ROLE) {
        if (market != address(0)) revert AlreadyBound();
        if (market_ == address(0) || verification_ == address(0)) revert ZeroAddress();
        market = market_;
        verification = verification_;
        emit ProtocolBound(market_, verification_);
    }

    /// @inheritdoc IStaking
    function lock(address provider, uint256 amount) external onlyMarket {
        Account storage a = _accounts[provider];
        uint256 free = a.staked - a.locked;
        if (amount > free) revert InsufficientFreeStake(provider, free, amount);
        a.locked += uint128(amount); // amount <= free < 2**128
        emit CollateralLocked(provider, amount);
    }

    /// @inheritdoc IStaking
    function unlock(address provider, uint256 amount) external onlyMarket {
        Account storage a = _accounts[provider];
        // A slash may already have consumed locked stake (and clamped `locked`), so release at most
        // what is still locked rather than revert and strand the job that asks.
        uint256 released = amount < a.locked ? amount : a.locked;
        a.locked -= uint128(released);
        emit CollateralUnlocked(provider, released);
    }

    /// @inheritdoc IStaking
    function slash(address who, uint256 amount, SlashReason reason, address reporter)
        external
        nonReentrant
        returns (uint256 slashed)
    {
        if (msg.sender != market && msg.sender != verification) revert NotProtocol(msg.sender);
        Account storage a = _accounts[who];
        // Free stake first, then unbonding stake, and collateral locked for jobs last, so a slash
        // leaves other jobs' collateral whole while the account holds anything else. The market
        // releases the slashing job's own collateral before it slashes, which makes it free.
        uint256 free = a.staked - a.locked;
        uint256 fromFree = amount < free ? amount : free;
        uint256 rest = amount - fromFree;
        uint256 fromUnbonding = rest < a.unbonding ? rest : a.unbonding;
        rest -= fromUnbonding;
        uint256 fromLocked = rest < a.locked ? rest : a.locked;
        // Each is at most the field it comes out of (free + locked == staked).
        a.staked -= uint128(fromFree + fromLocked);
        a.locked -= uint128(fromLocked);
        a.unbonding -= uint128(fromUnbonding);
        slashed = fromFree + fromUnbonding + fromLocked;
        if (slashed == 0) return 0;
        if (a.role == Role.Verifier) _reweigh(who, a.staked);

        uint256 reporterShare = reporter == address(0) ? 0 : slashed * reporterBps / BPS;
        emit Slashed(who, reason, slashed, reporter, reporterShare);
        if (reporterShare != 0) zen.safeTransfer(reporter, reporterShare);
        zen.safeTransfer(treasury, slashed - reporterShare);
    }

    /*//////////////////////////////////////////////////////////////
                               GOVERNANCE
    //////////////////////////////////////////////////////////////*/

    /// @inheritdoc IStaking
    function setTier(uint8 id, Tier calldata t) external onlyRole(GOVERNOR_ROLE) {
        if (id > _tierCount) revert UnknownTier(id);
        if (t.uptimeSlaBps > BPS) revert BpsTooHigh(t.uptimeSlaBps, BPS);
        if (t.minStake > MAX_MIN_STAKE) revert ParameterOutOfRange();
        if (id == _tierCount) ++_tierCount;
        _tiers[id] = t;
        emit TierSet(id, t.name, t.minStake);
    }

    /// @inheritdoc IStaking
    function setParameters(uint64 unbondingDelay_, uint16 reporterBps_, uint256 minVerifierStake_)
        external
        onlyRole(GOVERNOR_ROLE)
    {
        _setParameters(unbondingDelay_, reporterBps_, minVerifierStake_);
    }

    /*//////////////////////////////////////////////////////////////
                                 VIEWS
    //////////////////////////////////////////////////////////////*/

    /// @inheritdoc IStaking
    function tier(uint8 id) external view returns (Tier memory) {
        if (id >= _tierCount) revert UnknownTier(id);
        return _tiers[id];
    }

    /// @inheritdoc IStaking
    function tierCount() external view returns (uint256) {
        return _tierCount;
    }

    /// @inheritdoc IStaking
    function account(address who) external view returns (Account memory) {
        return _accounts[who];
    }

    /// @inheritdoc IStaking
    function hardware(address provider) external view returns (Hardware memory) {
        return _hardware[provider];
    }

    /// @inheritdoc IStaking
    function freeStake(address who) external view returns (uint256) {
        Account storage a = _accounts[who];
        return a.staked - a.locked;
    }

    /// @inheritdoc IStaking
    function isActiveProvider(address provider, uint8 tierId) public view returns (bool) {
        Account storage a = _accounts[provider];
        return a.role == Role.Provider && a.admitted && a.tier == tierId && a.staked >= _tiers[tierId].minStake;
    }

    /// @inheritdoc IStaking
    function providerStanding(address provider, uint8 tierId)
        external
        view
        returns (bool active, uint256 free, uint32 gpus)
    {
        Account storage a = _accounts[provider];
        return (isActiveProvider(provider, tierId), a.staked - a.locked, a.gpus);
    }

    /// @inheritdoc IStaking
    function isActiveVerifier(address verifier) public view returns (bool) {
        Account storage a = _accounts[verifier];
        return a.role == Role.Verifier && a.staked >= minVerifierStake;
    }

    /// @inheritdoc IStaking
    function drawVerifier(uint64 atBlock, uint256 entropy, address excluded, address alsoExcluded)
        external
        view
        returns (address drawn)
    {
        uint256 seats = _seats.length;
        uint256 total = 0;
        for (uint256 i; i < seats; ++i) {
            (, uint256 weight) = _eligible(i, atBlock, excluded, alsoExcluded);
            total += weight;
        }
        // Nobody eligible: no draw.
        // slither-disable-next-line incorrect-equality
        if (total == 0) return drawn;
        // slither-disable-next-line weak-prng
        uint256 point = entropy % total;
        // Ends within the seats: their weights sum to `total`, which exceeds `point`.
        for (uint256 i;; ++i) {
            (address verifier, uint256 weight) = _eligible(i, atBlock, excluded, alsoExcluded);
            if (point < weight) return verifier;
            point -= weight;
        }
    }

    /// @inheritdoc IStaking
    function verifierSeat(uint256 seat) external view returns (address verifier, uint48 since, uint48 weight) {
        Seat storage s = _seats[seat];
        return (s.verifier, s.since, s.weight);
    }

    /// @inheritdoc IStaking
    function seatCount() external view returns (uint256) {
        return _seats.length;
    }

    /*//////////////////////////////////////////////////////////////
                                INTERNAL
    //////////////////////////////////////////////////////////////*/

    /// @dev Seat `seat`'s holder at the end of block `atBlock` and its weight in the draw: zero
    /// when it was below the verifier minimum or is excluded.
    function _eligible(uint256 seat, uint64 atBlock, address excluded, address alsoExcluded)
        internal
        view
        returns (address verifier, uint256 weight)
    {
        Seat memory s = _seats[seat];
        if (s.since <= atBlock) {
            (verifier, weight) = (s.verifier, s.weight);
        } else {
            (verifier, weight) = _pastSeat(seat, atBlock);
        }
        if (weight * WEIGHT_UNIT < minVerifierStake || verifier == excluded || verifier == alsoExcluded) {
            return (verifier, 0);
        }
    }

    /// @dev Seat `seat`'s holder and weight at the end of block `atBlock`, from its history: zero
    /// before its first holder. O(log n) reads however often the seat changed.
    function _pastSeat(uint256 seat, uint64 atBlock) internal view returns (address verifier, uint256 weight) {
        uint256[] storage past = _seatHistory[seat];
        // The first entry that took effect after `atBlock`; the one before it held the seat then.
        uint256 low = 0;
        uint256 high = past.length;
        while (low < high) {
            uint256 mid = (low + high) / 2;
            if (past[mid] >> 208 > atBlock) high = mid;
            else low = mid + 1;
        }
        if (low == 0) return (address(0), 0);
        uint256 entry = past[low - 1];
        return (address(uint160(entry >> 48)), uint48(entry));
    }

    /// @dev Keeps a verifier's seat at its stake `staked`, and seats an active verifier without
    /// one: in a free seat, else in the lightest seat if it outweighs its holder. Called after
    /// every change of a verifier's stake.
    function _reweigh(address verifier, uint256 staked) internal {
        uint256 w = staked / WEIGHT_UNIT;
        uint48 weight = w > type(uint48).max ? type(uint48).max : uint48(w);
        uint256 held = _seatOf[verifier];
        if (held != 0) return _sit(held - 1, verifier, weight);
        if (staked < minVerifierStake) return;

        uint256 seat = _seats.length;
        address evicted = address(0);
        if (seat < MAX_VERIFIERS) {
            _seats.push();
        } else {
            uint48 lightest = type(uint48).max;
            for (uint256 i; i < MAX_VERIFIERS; ++i) {
                if (_seats[i].weight < lightest) (seat, lightest) = (i, _seats[i].weight);
            }
            if (weight <= lightest) return;
            evicted = _seats[seat].verifier;
            delete _seatOf[evicted];
        }
        _seatOf[verifier] = seat + 1;
        _sit(seat, verifier, weight);
        emit VerifierSeated(verifier, seat, evicted);
    }

    /// @dev Puts `verifier` with `weight` in `seat` from this block on, keeping the value it
    /// replaces in the seat's history unless that took effect in this same block.
    function _sit(uint256 seat, address verifier, uint48 weight) internal {
        Seat storage s = _seats[seat];
        uint48 current = uint48(block.number);
        if (s.verifier != address(0) && s.since < current) {
            _seatHistory[seat].push(uint256(s.since) << 208 | uint256(uint160(s.verifier)) << 48 | s.weight);
        }
        (s.verifier, s.since, s.weight) = (verifier, current, weight);
    }

    function _stake(address who, uint256 amount) internal {
        if (amount == 0) revert ZeroAmount();
        Account storage a = _accounts[who];
        if (a.role == Role.None) revert NotRegistered(who);
        a.staked += amount.toUint128();
        emit Staked(who, amount);
        if (a.role == Role.Verifier) _reweigh(who, a.staked);
        zen.safeTransferFrom(who, address(this), amount);
    }

    function _setParameters(uint64 unbondingDelay_, uint16 reporterBps_, uint256 minVerifierStake_) internal {
        if (reporterBps_ > MAX_REPORTER_BPS) revert BpsTooHigh(reporterBps_, MAX_REPORTER_BPS);
        if (unbondingDelay_ > MAX_UNBONDING_DELAY || minVerifierStake_ > MAX_MIN_STAKE) revert ParameterOutOfRange();
        unbondingDelay = unbondingDelay_;
        reporterBps = reporterBps_;
        minVerifierStake = minVerifierStake_;
        emit ParametersSet(unbondingDelay_, reporterBps_, minVerifierStake_);
    }
}
