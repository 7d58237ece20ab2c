// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

/// @title Network treasury
/// @notice Receives the network fee and the treasury's share of slashes as plain ZEN transfers;
/// pays out only through its governance role.
interface ITreasury {
    /// @notice Thrown when a grant asks for more than the treasury holds.
    error GrantExceedsBalance(uint256 balance, uint256 amount);
    /// @notice Thrown when a zero address is given.
    error ZeroAddress();

    /// @notice Emitted when governance pays a grant.
    /// @param to The recipient.
    /// @param amount ZEN wei paid.
    /// @param purpose What the grant is for.
    event GrantPaid(address indexed to, uint256 amount, string purpose);

    /// @notice Pays `amount` ZEN to `to`. Governance only.
    function grant(address to, uint256 amount, string calldata purpose) external;

    /// @notice ZEN the treasury holds.
    function balance() external view returns (uint256);
}
