// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {Registry} from "../../contracts/Registry.sol";
import {IJobMarket} from "../../contracts/interfaces/IJobMarket.sol";
import {IRegistry} from "../../contracts/interfaces/IRegistry.sol";
import {BaseTest} from "./Base.t.sol";

/// @notice Each contract sets the ledger up to the moment before one lifecycle step, so the gas
/// `forge snapshot` records for its single test is that step's. Storage written in setUp is cold in
/// the test, as it is for the transaction on chain (the 21,000 intrinsic gas is not included).

contract GasCreateJobTest is BaseTest {
    IJobMarket.JobRequest internal request;

    function setUp() public override {
        super.setUp();
        request = _request(1, BUDGET);
        vm.prank(user);
        zen.approve(address(market), BUDGET);
    }

    function test_gas_createJob() public {
        vm.prank(user);
        market.createJob(request);
    }
}

contract GasCommitBidTest is BaseTest {
    uint256 internal jobId;
    bytes32 internal commitment;

    function setUp() public override {
        super.setUp();
        jobId = _createJob();
        commitment = market.bidCommitmentOf(PRICE, _salt(provider1), provider1, jobId);
    }

    function test_gas_commitBid() public {
        vm.prank(provider1);
        market.commitBid(jobId, commitment);
    }
}

contract GasRevealBidTest is BaseTest {
    uint256 internal jobId;

    function setUp() public override {
        super.setUp();
        jobId = _createJob();
        _commitBid(jobId, provider1, PRICE);
        _toRevealWindow(jobId);
    }

    function test_gas_revealBid() public {
        _revealBid(jobId, provider1, PRICE);
    }
}

contract GasCloseAuctionTest is BaseTest {
    uint256 internal jobId;

    function setUp() public override {
        super.setUp();
        jobId = _createJob();
        _commitBid(jobId, provider1, PRICE);
        _toRevealWindow(jobId);
        _revealBid(jobId, provider1, PRICE);
        _toAuctionEnd(jobId);
    }

    function test_gas_closeAuction() public {
        market.closeAuction(jobId);
    }
}

contract GasCommitCheckpointTest is BaseTest {
    uint256 internal jobId;

    function setUp() public override {
        super.setUp();
        jobId = _startJob();
        _checkpoint(jobId, 0);
        skip(UNIT_SECONDS);
    }

    /// @dev A unit after the first: the slot's running fields are already set.
    function test_gas_commitCheckpoint() public {
        vm.prank(provider1);
        market.commitCheckpoint(
            jobId, 0, 1, "bafybeigckptckptckptckptckptckptckptckptckptckptckptckptc", bytes32(uint256(1))
        );
    }
}

contract GasPostResultTest is BaseTest {
    uint256 internal jobId;
    IJobMarket.Unit internal unit;
    address internal drawn;

    function setUp() public override {
        super.setUp();
        jobId = _startJob();
        unit = _checkpoint(jobId, 0);
        _rollToSample();
        drawn = _drawn(jobId, 0, 0, unit, address(0));
    }

    /// @dev The drawn verifier passes a sampled unit: the draw reads the two verifier seats.
    function test_gas_postResult() public {
        vm.prank(drawn);
        verification.postResult(jobId, 0, 0, unit, true, "bafybeievidenceevidenceevidenceevidenceevidenceevidencee");
    }
}

contract GasPostResultFullSeatsTest is BaseTest {
    uint256 internal jobId;
    IJobMarket.Unit internal unit;
    address internal drawn;

    function setUp() public override {
        super.setUp();
        for (uint256 i = staking.seatCount(); i < staking.MAX_VERIFIERS(); ++i) {
            _registerVerifier(makeAddr(string.concat("verifier", vm.toString(i + 1))));
        }
        jobId = _startJob();
        unit = _checkpoint(jobId, 0);
        _rollToSample();
        drawn = _drawn(jobId, 0, 0, unit, address(0));
    }

    /// @dev The bound: every one of the MAX_VERIFIERS seats is taken, and the draw reads them all.
    function test_gas_postResult_allSeatsTaken() public {
        vm.prank(drawn);
        verification.postResult(jobId, 0, 0, unit, true, "bafybeievidenceevidenceevidenceevidenceevidenceevidencee");
    }
}

contract GasSettleTest is BaseTest {
    uint256 internal jobId;

    function setUp() public override {
        super.setUp();
        jobId = _startJob();
        _completeSlot(jobId, 0);
        vm.warp(market.job(jobId).completedAt + VERIFICATION_WINDOW);
    }

    function test_gas_settle() public {
        market.settle(jobId);
    }
}

contract GasWholeJobTest is BaseTest {
    /// @dev One slot, three sealed bids, one winner, ten checkpoints, settlement and the winner's withdrawal.
    function test_gas_wholeJob_tenCheckpointsThreeBidders() public {
        uint256 jobId = _createJob();
        address[] memory bidders = new address[](3);
        uint96[] memory prices = new uint96[](3);
        (bidders[0], bidders[1], bidders[2]) = (provider1, provider2, provider3);
        (prices[0], prices[1], prices[2]) = (PRICE, PRICE + 1, PRICE + 2);
        _auction(jobId, bidders, prices);
        _completeSlot(jobId, 0);
        _settle(jobId);
        vm.prank(provider1);
        market.withdraw();
        assertEq(market.slot(jobId, 0).unitsDone, UNITS);
    }
}

/// @notice A model's second version: a fine-tune naming its parent and job, under a name its owner
/// already holds.
contract GasPublishVersionTest is BaseTest {
    Registry internal registry;
    IRegistry.Publication internal publication;

    function setUp() public override {
        super.setUp();
        registry = new Registry(market);
        publication = IRegistry.Publication({
            cid: SPEC_CID, license: "Apache-2.0", metadataCid: "", parentName: "", parentVersion: 0, jobId: 0
        });
        vm.prank(user);
        registry.publish(IRegistry.Kind.Model, "acme/llama-tiny", publication);
        publication.parentName = "acme/llama-tiny";
        publication.parentVersion = 1;
        publication.jobId = _createJob();
    }

    function test_gas_publishVersion() public {
        vm.prank(user);
        registry.publish(IRegistry.Kind.Model, "acme/llama-tiny", publication);
    }
}
