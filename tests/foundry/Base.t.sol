// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {IAccessControl} from "@openzeppelin/contracts/access/IAccessControl.sol";
import {Test} from "forge-std/Test.sol";

import {JobMarket} from "../../contracts/JobMarket.sol";
import {Staking} from "../../contracts/Staking.sol";
import {Treasury} from "../../contracts/Treasury.sol";
import {Verification} from "../../contracts/Verification.sol";
import {ZenToken} from "../../contracts/ZenToken.sol";
import {IJobMarket} from "../../contracts/interfaces/IJobMarket.sol";
import {IStaking} from "../../contracts/interfaces/IStaking.sol";
import {LedgerRecords} from "./utils/LedgerRecords.sol";

/// @notice Deploys the ledger the way production does and funds, stakes and admits the actors.
abstract contract BaseTest is Test {
    uint256 internal constant ZEN = 1e18;
    uint256 internal constant SUPPLY = 1_000_000_000 * ZEN;
    uint256 internal constant BPS = 10_000;

    uint64 internal constant UNBONDING_DELAY = 7 days;
    uint16 internal constant REPORTER_BPS = 1_000;
    uint256 internal constant MIN_VERIFIER_STAKE = 5_000 * ZEN;
    uint40 internal constant VERIFICATION_WINDOW = 1 hours;
    uint40 internal constant DISPUTE_WINDOW = 1 hours;
    uint256 internal constant FALSE_REPORT_SLASH = 1_000 * ZEN;

    uint8 internal constant COMMUNITY = 0;
    uint8 internal constant BRONZE = 1;
    uint8 internal constant SILVER = 2;
    uint8 internal constant GOLD = 3;

    uint256 internal constant USER_FUNDS = 1_000_000 * ZEN;
    uint256 internal constant PROVIDER_STAKE = 20_000 * ZEN;
    uint256 internal constant VERIFIER_STAKE = 10_000 * ZEN;

    // The default job: one Community slot of ten 10-minute units, 1-hour checkpoint deadline.
    uint128 internal constant BUDGET = 5_000e18;
    uint96 internal constant MAX_PRICE = 100e18;
    uint96 internal constant PRICE = 40e18;
    uint32 internal constant UNITS = 10;
    uint32 internal constant UNIT_SECONDS = 600; // what a unit takes, and is worth in GPU-seconds
    uint32 internal constant INTERVAL = 1 hours;
    string internal constant SPEC_CID = "bafybeigdyrzt5sfp7udm7hu76uh7y26nf3efuylqabf3oclgtqy55fbzdi";

    ZenToken internal zen;
    Treasury internal treasury;
    Staking internal staking;
    JobMarket internal market;
    Verification internal verification;

    address internal distributor = makeAddr("distributor");
    address internal governor = makeAddr("governor");
    address internal user;
    uint256 internal userKey;
    address internal provider1 = makeAddr("provider1");
    address internal provider2 = makeAddr("provider2");
    address internal provider3 = makeAddr("provider3");
    address internal verifier1 = makeAddr("verifier1");
    address internal verifier2 = makeAddr("verifier2");

    function setUp() public virtual {
        (user, userKey) = makeAddrAndKey("user");
        vm.warp(1_700_000_000);
        vm.roll(1_000);

        zen = new ZenToken(distributor, SUPPLY);
        treasury = new Treasury(zen, governor);
        staking = new Staking(zen, address(treasury), governor, UNBONDING_DELAY, REPORTER_BPS, MIN_VERIFIER_STAKE);
        market = new JobMarket(zen, staking, address(treasury), governor);
        verification =
            new Verification(market, staking, governor, VERIFICATION_WINDOW, DISPUTE_WINDOW, FALSE_REPORT_SLASH);

        vm.startPrank(governor);
        market.setVerification(verification);
        staking.bind(address(market), address(verification));
        staking.setTier(COMMUNITY, _tier("Community", 1_000, 0, 0, 1, 9_000));
        staking.setTier(BRONZE, _tier("Bronze", 10_000, 4, 40, 100, 9_500));
        staking.setTier(SILVER, _tier("Silver", 50_000, 8, 80, 200, 9_900));
        staking.setTier(GOLD, _tier("Gold", 100_000, 8, 80, 400, 9_950));
        vm.stopPrank();

        _fund(user, USER_FUNDS);
        _registerVerifier(verifier1);
        _registerVerifier(verifier2);
        _registerProvider(provider1);
        _registerProvider(provider2);
        _registerProvider(provider3);
    }

    /*//////////////////////////////////////////////////////////////
                              ACTORS
    //////////////////////////////////////////////////////////////*/

    function _tier(string memory name, uint256 minStakeZen, uint32 gpus, uint32 memoryGb, uint32 gbps, uint16 sla)
        internal
        pure
        returns (IStaking.Tier memory)
    {
        return IStaking.Tier(name, minStakeZen * ZEN, gpus, memoryGb, gbps, sla);
    }

    /// @dev A consumer GPU node: what the Community tier admits.
    function _communityHardware() internal pure returns (IStaking.Hardware memory) {
        return IStaking.Hardware("RTX 4090", 1, 24, 10, "https://node.example:8443", keccak256("hardware report"));
    }

    /// @dev The hand-over marketplace/chain/deploy.py performs once the ledger is wired: `timelock`
    /// takes every governor role, and the deployer keeps no role at all.
    function _handOverTo(address timelock) internal {
        IAccessControl[4] memory governed = [
            IAccessControl(address(treasury)),
            IAccessControl(address(staking)),
            IAccessControl(address(market)),
            IAccessControl(address(verification))
        ];
        bytes32 governorRole = staking.GOVERNOR_ROLE();
        vm.startPrank(governor);
        for (uint256 i; i < governed.length; ++i) {
            governed[i].grantRole(governorRole, address(timelock));
            governed[i].renounceRole(governorRole, governor);
            governed[i].renounceRole(bytes32(0), governor);
        }
        vm.stopPrank();
    }

    function _fund(address to, uint256 amount) internal {
        vm.prank(distributor);
        zen.transfer(to, amount);
    }

    function _stake(address who, uint256 amount) internal {
        _fund(who, amount);
        vm.startPrank(who);
        zen.approve(address(staking), amount);
        staking.stake(amount);
        vm.stopPrank();
    }

    /// @dev Signs an ERC-2612 permit for `value` from the holder of `key` to `spender`.
    function _permit(uint256 key, address spender, uint256 value, uint256 deadline)
        internal
        view
        returns (uint8 v, bytes32 r, bytes32 s)
    {
        return vm.sign(key, LedgerRecords.permitDigest(zen, vm.addr(key), spender, value, deadline));
    }

    function _registerVerifier(address who) internal {
        vm.prank(who);
        staking.registerVerifier("https://verifier.example");
        _stake(who, VERIFIER_STAKE);
    }

    /// @dev Registers a Community provider, stakes it and has verifier1 admit it.
    function _registerProvider(address who) internal {
        vm.prank(who);
        staking.registerProvider(COMMUNITY, _communityHardware());
        _stake(who, PROVIDER_STAKE);
        vm.prank(verifier1);
        staking.attestBenchmark(who, keccak256(abi.encode("benchmark", who)), 80_000);
    }

    /*//////////////////////////////////////////////////////////////
                                JOBS
    //////////////////////////////////////////////////////////////*/

    function _request(uint16 nodes, uint128 budget) internal pure returns (IJobMarket.JobRequest memory) {
        return IJobMarket.JobRequest({
            specCid: SPEC_CID,
            tier: COMMUNITY,
            nodes: nodes,
            unitsPerNode: UNITS,
            checkpointInterval: INTERVAL,
            sampleRateBps: uint16(BPS),
            maxPrice: MAX_PRICE,
            budget: budget,
            unitGpuSeconds: UNIT_SECONDS
        });
    }

    function _createJob(IJobMarket.JobRequest memory r) internal returns (uint256 jobId) {
        vm.startPrank(user);
        zen.approve(address(market), r.budget);
        jobId = market.createJob(r);
        vm.stopPrank();
    }

    function _createJob() internal returns (uint256) {
        return _createJob(_request(1, BUDGET));
    }

    function _salt(address bidder) internal pure returns (bytes32) {
        return keccak256(abi.encode("salt", bidder));
    }

    function _commitBid(uint256 jobId, address bidder, uint96 price) internal {
        bytes32 commitment = keccak256(abi.encode(price, _salt(bidder), bidder, jobId));
        vm.prank(bidder);
        market.commitBid(jobId, commitment);
    }

    function _revealBid(uint256 jobId, address bidder, uint96 price) internal {
        vm.prank(bidder);
        market.revealBid(jobId, price, _salt(bidder));
    }

    function _toRevealWindow(uint256 jobId) internal {
        vm.warp(market.job(jobId).bidDeadline + 1);
    }

    function _toAuctionEnd(uint256 jobId) internal {
        vm.warp(market.job(jobId).revealDeadline + 1);
    }

    /// @dev Every bidder commits, then every bidder reveals.
    function _commitAndReveal(uint256 jobId, address[] memory bidders, uint96[] memory prices) internal {
        for (uint256 i; i < bidders.length; ++i) {
            _commitBid(jobId, bidders[i], prices[i]);
        }
        _toRevealWindow(jobId);
        for (uint256 i; i < bidders.length; ++i) {
            _revealBid(jobId, bidders[i], prices[i]);
        }
    }

    /// @dev Runs one whole auction round and closes it.
    function _auction(uint256 jobId, address[] memory bidders, uint96[] memory prices) internal {
        _commitAndReveal(jobId, bidders, prices);
        _toAuctionEnd(jobId);
        market.closeAuction(jobId);
    }

    function _auction(uint256 jobId, address bidder, uint96 price) internal {
        address[] memory bidders = new address[](1);
        uint96[] memory prices = new uint96[](1);
        (bidders[0], prices[0]) = (bidder, price);
        _auction(jobId, bidders, prices);
    }

    /// @dev The default job, won by provider1 at PRICE.
    function _startJob() internal returns (uint256 jobId) {
        jobId = _createJob();
        _auction(jobId, provider1, PRICE);
    }

    /*//////////////////////////////////////////////////////////////
                             CHECKPOINTS
    //////////////////////////////////////////////////////////////*/

    function _cid(uint16 slotId, uint32 index) internal pure returns (string memory) {
        return string.concat("bafyckpt-", vm.toString(slotId), "-", vm.toString(index));
    }

    /// @dev Lets `seconds_` pass in a new block, then the slot's provider commits its next unit.
    /// Returns the unit record rebuilt from the `CheckpointCommitted` event and its block, as a
    /// verifier does.
    function _checkpoint(uint256 jobId, uint16 slotId, uint32 seconds_) internal returns (IJobMarket.Unit memory unit) {
        IJobMarket.Slot memory s = market.slot(jobId, slotId);
        skip(seconds_);
        vm.roll(block.number + 1);
        vm.recordLogs();
        string memory cid = _cid(slotId, s.unitsDone);
        vm.prank(s.provider);
        market.commitCheckpoint(jobId, slotId, s.unitsDone, cid, keccak256(bytes(cid)));
        unit = LedgerRecords.unitFromLogs(vm.getRecordedLogs());
    }

    /// @dev A unit that took UNIT_SECONDS.
    function _checkpoint(uint256 jobId, uint16 slotId) internal returns (IJobMarket.Unit memory) {
        return _checkpoint(jobId, slotId, UNIT_SECONDS);
    }

    /// @dev Commits every remaining unit of the slot.
    function _completeSlot(uint256 jobId, uint16 slotId) internal {
        while (!market.slot(jobId, slotId).done) {
            _checkpoint(jobId, slotId);
        }
    }

    /// @dev Mines the block whose hash decides the unit's sample.
    function _rollToSample() internal {
        vm.roll(block.number + 2);
    }

    /// @dev The verifier drawn for the turn running now: of the unit's result, or of the dispute
    /// `challenger` opened on it.
    function _drawn(uint256 jobId, uint16 slotId, uint32 index, IJobMarket.Unit memory unit, address challenger)
        internal
        view
        returns (address)
    {
        uint256 openedAt = challenger == address(0)
            ? verification.resultWindowOpensAt(jobId, slotId, index, unit)
            : uint256(verification.result(jobId, slotId, index).disputedAt);
        uint256 turn = (block.timestamp - openedAt) / verification.turnLength(challenger != address(0));
        return verification.drawnVerifier(jobId, slotId, index, unit.blockNumber, challenger, turn);
    }

    /// @dev Rewrites the unit's seed (the hash of the block after it) until `verifier` is the one
    /// drawn for the turn running now, keeping whether the unit is sampled: tests of what follows
    /// a result name who posts it. A seed not yet readable, recorded or lost is left alone, and so
    /// is an account that cannot be drawn. The draw itself is tested in Verification.t.sol.
    function _arrangeDraw(
        address verifier,
        uint256 jobId,
        uint16 slotId,
        uint32 index,
        IJobMarket.Unit memory unit,
        address challenger
    ) internal {
        uint256 seedBlock = uint256(unit.blockNumber) + 1;
        if (block.number <= seedBlock || blockhash(seedBlock) == 0) return;
        if (verification.recordedSeed(unit.blockNumber) != 0 || !staking.isActiveVerifier(verifier)) return;
        bool sampled = verification.isSampled(jobId, slotId, index, unit.blockNumber);
        for (uint256 i; i < 256; ++i) {
            if (
                _drawn(jobId, slotId, index, unit, challenger) == verifier
                    && verification.isSampled(jobId, slotId, index, unit.blockNumber) == sampled
            ) return;
            vm.setBlockhash(seedBlock, keccak256(abi.encode("seed", seedBlock, i)));
        }
    }

    /// @dev `verifier` posts, drawn for it (see `_arrangeDraw`).
    function _postResult(
        address verifier,
        uint256 jobId,
        uint16 slotId,
        uint32 index,
        IJobMarket.Unit memory unit,
        bool pass
    ) internal {
        _arrangeDraw(verifier, jobId, slotId, index, unit, address(0));
        _sendResult(verifier, jobId, slotId, index, unit, pass);
    }

    /// @dev `verifier` posts, drawn or not.
    function _sendResult(
        address verifier,
        uint256 jobId,
        uint16 slotId,
        uint32 index,
        IJobMarket.Unit memory unit,
        bool pass
    ) internal {
        vm.prank(verifier);
        verification.postResult(jobId, slotId, index, unit, pass, "bafyevidence");
    }

    /// @dev `verifier` settles the open dispute, drawn for it (see `_arrangeDraw`).
    function _resolveDispute(
        address verifier,
        uint256 jobId,
        uint16 slotId,
        uint32 index,
        IJobMarket.Unit memory unit,
        bool pass
    ) internal {
        address challenger = verification.result(jobId, slotId, index).first;
        if (challenger != address(0)) _arrangeDraw(verifier, jobId, slotId, index, unit, challenger);
        _sendResolution(verifier, jobId, slotId, index, unit, pass);
    }

    /// @dev `verifier` settles the open dispute, drawn or not.
    function _sendResolution(
        address verifier,
        uint256 jobId,
        uint16 slotId,
        uint32 index,
        IJobMarket.Unit memory unit,
        bool pass
    ) internal {
        vm.prank(verifier);
        verification.resolveDispute(jobId, slotId, index, unit, pass, "bafyevidence");
    }

    function _settle(uint256 jobId) internal {
        vm.warp(market.job(jobId).completedAt + VERIFICATION_WINDOW);
        market.settle(jobId);
    }

    /// @dev Pay for `gpuSeconds` at `price` per GPU-hour, as the market meters it.
    function _pay(uint256 gpuSeconds, uint256 price) internal pure returns (uint256) {
        return gpuSeconds * price / 1 hours;
    }

    function _fee(uint256 amount) internal pure returns (uint256) {
        return amount * 500 / BPS;
    }
}
