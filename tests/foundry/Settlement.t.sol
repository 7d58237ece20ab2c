// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {Test} from "forge-std/Test.sol";

import {Settlement} from "../../contracts/libraries/Settlement.sol";

/// @notice The settlement arithmetic's properties that halmos cannot decide here (products of
/// quotients), fuzzed; the linear ones are proved in tests/foundry/halmos/Settlement.t.sol.
contract SettlementTest is Test {
    function testFuzz_verifierPool_neverExceedsFeeOrCap(uint128 fee, uint32 verifications, uint128 capEach)
        public
        pure
    {
        (uint256 each, uint256 pool) = Settlement.verifierPool(fee, verifications, capEach);
        assertLe(pool, fee);
        assertLe(each, capEach);
        assertEq(pool, each * verifications);
        // Nothing is left unpaid that a whole verification's share could use.
        if (verifications != 0 && each < capEach) assertLt(fee - pool, verifications);
    }

    /// Fees taken per payment fall short of the job's `payment × feeBps / 10 000` by less than one
    /// wei per payment, never exceed it.
    function testFuzz_split_perPaymentFeesMatchTheJobsFee(uint128[4] memory pays, uint16 feeBps) public pure {
        feeBps = uint16(bound(feeBps, 0, 1_000));
        (uint256 payment, uint256 fee) = (0, 0);
        for (uint256 i; i < pays.length; ++i) {
            (uint256 providerFee,) = Settlement.split(pays[i], feeBps);
            payment += pays[i];
            fee += providerFee;
        }
        uint256 jobFee = payment * feeBps / 10_000;
        assertLe(fee, jobFee);
        assertLt(jobFee, fee + pays.length);
    }
}
