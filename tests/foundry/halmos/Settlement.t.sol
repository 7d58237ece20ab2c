// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {Test} from "forge-std/Test.sol";

import {Settlement} from "../../../contracts/libraries/Settlement.sol";

/// @notice Symbolic proofs of the settlement arithmetic, for every input: run by halmos
/// (`scripts/halmos.sh`), not by `forge test`. Amounts are bounded as the market stores them
/// (budgets and pay in 128 bits, the fee at most MAX_FEE_BPS). The verifier pool's bound
/// (`(fee / n) × n ≤ fee`) is beyond what the solvers here decide at the EVM's 256-bit width in
/// minutes, so tests/foundry/Settlement.t.sol fuzzes it instead.
contract SettlementProofs is Test {
    uint256 internal constant MAX_FEE_BPS = 1_000;

    /// A payment carries exactly `pay × feeBps / 10 000` as fee, and its provider the rest.
    function check_paymentCarriesExactFee(uint128 pay, uint16 feeBps) public pure {
        vm.assume(feeBps <= MAX_FEE_BPS);
        (uint256 fee, uint256 net) = Settlement.split(pay, feeBps);
        assert(fee == uint256(pay) * feeBps / 10_000);
        assert(fee + net == pay);
    }

    /// A settled job of three providers, summed as `JobMarket.settle` sums it: the budget is, to
    /// the wei, the providers' net pay plus the fees plus the refund, and the fees are each
    /// payment's exact share.
    function check_budgetIsPayPlusFeePlusRefund(uint128 budget, uint128 payA, uint128 payB, uint128 payC, uint16 feeBps)
        public
        pure
    {
        vm.assume(feeBps <= MAX_FEE_BPS);
        uint256 payment = uint256(payA) + payB + payC;
        vm.assume(payment <= budget);
        (uint256 feeA, uint256 netA) = Settlement.split(payA, feeBps);
        (uint256 feeB, uint256 netB) = Settlement.split(payB, feeBps);
        (uint256 feeC, uint256 netC) = Settlement.split(payC, feeBps);
        uint256 fee = feeA + feeB + feeC;
        assert(
            fee == uint256(payA) * feeBps / 10_000 + uint256(payB) * feeBps / 10_000 + uint256(payC) * feeBps / 10_000
        );
        assert(netA + netB + netC + fee + (budget - payment) == budget);
    }
}
