// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

/// @title Settlement arithmetic
/// @notice What a settled job's budget becomes: every provider payment carries its network fee,
/// the verifiers' pool comes out of the fees, and the rest of the budget goes back to the user.
/// Kept apart from the market so its properties are proved for all inputs (tests/foundry/halmos).
library Settlement {
    uint256 internal constant BPS = 10_000;

    /// @notice The fee `pay` carries at `feeBps` basis points, and what is left for its provider.
    function split(uint256 pay, uint256 feeBps) internal pure returns (uint256 fee, uint256 net) {
        fee = pay * feeBps / BPS;
        net = pay - fee;
    }

    /// @notice What each of `verifications` is paid out of `fee` (an equal share, at most
    /// `capEach`), and the pool that makes; the treasury keeps `fee - pool`.
    function verifierPool(uint256 fee, uint256 verifications, uint256 capEach)
        internal
        pure
        returns (uint256 each, uint256 pool)
    {
        if (verifications == 0) return (0, 0);
        each = fee / verifications;
        if (each > capEach) each = capEach;
        // Each verification is paid the same whole share: the pool is that share times their
        // number, and the remainder of the division stays with the treasury.
        // slither-disable-next-line divide-before-multiply
        pool = each * verifications;
    }
}
