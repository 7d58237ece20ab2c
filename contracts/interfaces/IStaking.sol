// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

/// @title Provider and verifier registry with stake, collateral locks, unbonding and slashing
/// @notice Providers stake ZEN in a tier to sell compute; verifiers stake ZEN to check it.
/// Stake committed to a running job is locked as its collateral. Withdrawals wait out an
/// unbonding delay, and slashing reaches unbonding stake, so nobody dodges a slash by unstaking.
///
/// Verifiers are drawn, not self-chosen: an active verifier takes one of `MAX_VERIFIERS` seats,
/// and `drawVerifier` picks a seat's holder with probability proportional to its stake as it
/// stood at a given block. Seats and weights are history, not present state: stake added, moved or
/// withdrawn after block b, and accounts seated after it, cannot change a draw made for block b,
/// so nobody can re-roll a draw once its seed is known. A draw reads every seat: its cost is
/// bounded by `MAX_VERIFIERS`. When the seats are full, a verifier staking more than the lightest
/// holder takes that seat; keeping honest verifiers out therefore costs more stake than theirs.
interface IStaking {
    /// @notice What an account registered as.
    enum Role {
        None,
        Provider,
        Verifier
    }

    /// @notice Why stake was slashed.
    enum SlashReason {
        Downtime,
        IncorrectComputation,
        BandwidthViolation
    }

    /// @notice A tier's admission requirements, set by governance.
    struct Tier {
        string name;
        uint256 minStake; // ZEN wei
        uint32 minGpus; // 0 admits CPU nodes (Community tier)
        uint32 minGpuMemoryGb; // per GPU
        uint32 minNetworkGbps;
        uint16 uptimeSlaBps; // promised uptime, in basis points
    }

    /// @notice What a provider declares about its machine when it registers.
    struct Hardware {
        string gpuModel;
        uint32 gpus;
        uint32 gpuMemoryGb;
        uint32 networkGbps;
        string endpoint;
        bytes32 attestation; // hash of the signed hardware report
    }

    /// @notice An account's role and stake.
    struct Account {
        Role role;
        uint8 tier;
        bool admitted; // a verifier attested the provider's benchmark
        uint32 gpus; // declared GPU count, here so the market reads it with the role
        uint64 unbondingEnds;
        uint128 staked; // includes `locked`; beside it so a bid's eligibility is one read
        uint128 locked; // collateral committed to running jobs
        uint128 unbonding; // requested out, still slashable until withdrawn
    }

    /// @notice Thrown when a tier id has no tier.
    error UnknownTier(uint8 tier);
    /// @notice Thrown when declared hardware is below the tier's minimum.
    error HardwareBelowTier(uint8 tier);
    /// @notice Thrown when an account registers twice.
    error AlreadyRegistered(address account);
    /// @notice Thrown when an unregistered account stakes or acts.
    error NotRegistered(address account);
    /// @notice Thrown when a provider-only action is called for another account.
    error NotAProvider(address account);
    /// @notice Thrown when a verifier-only action is called by an account that is not an active verifier.
    error NotAnActiveVerifier(address account);
    /// @notice Thrown when an amount of zero is passed.
    error ZeroAmount();
    /// @notice Thrown when the stake not locked as collateral is below what is asked.
    error InsufficientFreeStake(address account, uint256 free, uint256 needed);
    /// @notice Thrown when unbonding stake is withdrawn before the delay ends.
    error UnbondingNotOver(uint64 endsAt);
    /// @notice Thrown when there is nothing to withdraw.
    error NothingToWithdraw();
    /// @notice Thrown when a basis-point parameter exceeds its cap.
    error BpsTooHigh(uint256 bps, uint256 max);
    /// @notice Thrown when a verifier attests its own benchmark.
    error SelfAttestation();
    /// @notice Thrown when a zero address is given where an account is needed.
    error ZeroAddress();
    /// @notice Thrown when a parameter is outside its hard bounds.
    error ParameterOutOfRange();
    /// @notice Thrown when `caller` is not the protocol contract this needs (the bound market or
    /// verification contract).
    error NotProtocol(address caller);
    /// @notice Thrown when the protocol's contracts are bound a second time.
    error AlreadyBound();

    /// @notice Emitted when governance sets a tier.
    /// @param tier The tier id.
    /// @param name The tier's name.
    /// @param minStake The minimum stake in ZEN wei.
    event TierSet(uint8 indexed tier, string name, uint256 minStake);
    /// @notice Emitted when a provider registers.
    /// @param provider The provider's address.
    /// @param tier The tier it registered in.
    /// @param gpuModel The declared GPU model.
    /// @param gpus The declared GPU count.
    /// @param endpoint Where the provider's node can be reached.
    /// @param attestation Hash of the signed hardware report.
    event ProviderRegistered(
        address indexed provider, uint8 indexed tier, string gpuModel, uint32 gpus, string endpoint, bytes32 attestation
    );
    /// @notice Emitted when a verifier registers.
    /// @param verifier The verifier's address.
    /// @param endpoint Where the verifier can be reached.
    event VerifierRegistered(address indexed verifier, string endpoint);
    /// @notice Emitted when stake is added.
    /// @param account The staker.
    /// @param amount ZEN wei added.
    event Staked(address indexed account, uint256 amount);
    /// @notice Emitted when stake starts unbonding.
    /// @param account The staker.
    /// @param amount ZEN wei moved to unbonding.
    /// @param unbondingEnds When all of the account's unbonding stake can be withdrawn.
    event UnstakeRequested(address indexed account, uint256 amount, uint64 unbondingEnds);
    /// @notice Emitted when unbonded stake is withdrawn.
    /// @param account The staker.
    /// @param amount ZEN wei paid out.
    event Withdrawn(address indexed account, uint256 amount);
    /// @notice Emitted when a verifier attests a provider's benchmark, admitting it.
    /// @param provider The admitted provider.
    /// @param verifier The attesting verifier.
    /// @param resultHash Hash of the benchmark result document.
    /// @param score The benchmark score (GFLOP/s).
    event BenchmarkAttested(address indexed provider, address indexed verifier, bytes32 resultHash, uint256 score);
    /// @notice Emitted when collateral is locked for a job.
    /// @param provider The provider.
    /// @param amount ZEN wei locked.
    event CollateralLocked(address indexed provider, uint256 amount);
    /// @notice Emitted when collateral is released.
    /// @param provider The provider.
    /// @param amount ZEN wei released.
    event CollateralUnlocked(address indexed provider, uint256 amount);
    /// @notice Emitted when stake is slashed.
    /// @param account The slashed account.
    /// @param reason Why.
    /// @param amount ZEN wei taken in all.
    /// @param reporter Who reported it (receives `reporterShare`), or zero.
    /// @param reporterShare ZEN wei paid to the reporter; the rest went to the treasury.
    event Slashed(
        address indexed account, SlashReason indexed reason, uint256 amount, address reporter, uint256 reporterShare
    );
    /// @notice Emitted once, when the protocol's market and verification contracts are bound.
    /// @param market The only contract that locks and unlocks collateral, and may slash.
    /// @param verification The only other contract that may slash.
    event ProtocolBound(address market, address verification);
    /// @notice Emitted when an active verifier takes a seat in the draw.
    /// @param verifier The seated verifier.
    /// @param seat Its seat.
    /// @param evicted The lighter verifier it replaced, or zero for a free seat.
    event VerifierSeated(address indexed verifier, uint256 indexed seat, address evicted);
    /// @notice Emitted when governance changes the staking parameters.
    event ParametersSet(uint64 unbondingDelay, uint16 reporterBps, uint256 minVerifierStake);

    /// @notice Registers the caller as a provider in `tier` with the hardware it declares.
    function registerProvider(uint8 tier, Hardware calldata hardware) external;

    /// @notice Registers the caller as a verifier reachable at `endpoint`.
    function registerVerifier(string calldata endpoint) external;

    /// @notice Adds `amount` ZEN to the caller's stake (needs an allowance).
    function stake(uint256 amount) external;

    /// @notice Adds `amount` ZEN to the caller's stake with an ERC-2612 permit: one transaction, no approval.
    function stakeWithPermit(uint256 amount, uint256 deadline, uint8 v, bytes32 r, bytes32 s) external;

    /// @notice Moves `amount` of free stake to unbonding; the delay restarts for all unbonding stake.
    function requestUnstake(uint256 amount) external;

    /// @notice Pays out the caller's unbonding stake once the delay is over.
    function withdraw() external;

    /// @notice Admits `provider` after the calling verifier checked its benchmark.
    function attestBenchmark(address provider, bytes32 resultHash, uint256 score) external;

    /// @notice Binds the market and the verification contract, once: from then on only they lock,
    /// unlock and slash, and no role, governor or later call can change that. Governance only,
    /// during deployment (before the governor role moves to the timelock).
    function bind(address market, address verification) external;

    /// @notice Locks `amount` of `provider`'s free stake as job collateral. Market only.
    function lock(address provider, uint256 amount) external;

    /// @notice Releases up to `amount` of `provider`'s locked collateral. Market only.
    function unlock(address provider, uint256 amount) external;

    /// @notice Takes up to `amount` from `account`'s free stake, then its unbonding stake, then its
    /// locked collateral, and pays the reporter's share to `reporter` and the rest to the treasury.
    /// Market and verification only.
    /// @return slashed The amount actually taken (less than `amount` if the account holds less).
    function slash(address account, uint256 amount, SlashReason reason, address reporter)
        external
        returns (uint256 slashed);

    /// @notice Sets tier `id` (adds it when `id` equals the tier count); its minimum stake is at most
    /// `MAX_MIN_STAKE`. Governance only. A running job's collateral is locked already: a new
    /// minimum changes who may bid next, never a job in progress.
    function setTier(uint8 id, Tier calldata tier) external;

    /// @notice Sets the unbonding delay (at most `MAX_UNBONDING_DELAY`), the reporter's share of
    /// slashes (at most `MAX_REPORTER_BPS`) and the verifier minimum stake (at most
    /// `MAX_MIN_STAKE`). Governance only; stake already unbonding keeps its end time.
    function setParameters(uint64 unbondingDelay, uint16 reporterBps, uint256 minVerifierStake) external;

    /// @notice The tier with id `id`.
    function tier(uint8 id) external view returns (Tier memory);

    /// @notice How many tiers exist.
    function tierCount() external view returns (uint256);

    /// @notice The role and stake of `account`.
    function account(address account) external view returns (Account memory);

    /// @notice The hardware `provider` declared.
    function hardware(address provider) external view returns (Hardware memory);

    /// @notice Stake of `account` not locked as collateral.
    function freeStake(address account) external view returns (uint256);

    /// @notice Whether `provider` is admitted in `tier` and staked at least the tier minimum.
    function isActiveProvider(address provider, uint8 tier) external view returns (bool);

    /// @notice What the market needs to know of a bidder, in one call: whether it is an active
    /// provider of `tier`, its free stake, and its GPU count.
    function providerStanding(address provider, uint8 tier)
        external
        view
        returns (bool active, uint256 free, uint32 gpus);

    /// @notice Whether `verifier` is registered and staked at least the verifier minimum.
    function isActiveVerifier(address verifier) external view returns (bool);

    /// @notice Draws a verifier by stake as the seats stood at the end of block `atBlock`: each
    /// seated verifier whose whole-ZEN stake then reached the current verifier minimum is drawn
    /// with probability its stake over theirs together, `excluded` and `alsoExcluded` never.
    /// Zero when nobody is eligible.
    /// @param entropy The randomness of the draw: a value nobody could know at `atBlock`.
    function drawVerifier(uint64 atBlock, uint256 entropy, address excluded, address alsoExcluded)
        external
        view
        returns (address);

    /// @notice Seat `seat`'s verifier now, the block it has held it since, and its weight (whole
    /// ZEN staked).
    function verifierSeat(uint256 seat) external view returns (address verifier, uint48 since, uint48 weight);

    /// @notice How many seats are taken (at most `MAX_VERIFIERS`); seats are never given up, only
    /// taken over.
    function seatCount() external view returns (uint256);
}
