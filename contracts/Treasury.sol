// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {AccessControl} from "@openzeppelin/contracts/access/AccessControl.sol";
import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";
import {SafeERC20} from "@openzeppelin/contracts/token/ERC20/utils/SafeERC20.sol";

import {ITreasury} from "./interfaces/ITreasury.sol";

/// @title Treasury
/// @notice Holds network fees and slash shares.
contract Treasury is ITreasury, AccessControl {
    using SafeERC20 for IERC20;

    bytes32 public constant GOVERNOR_ROLE = keccak256("GOVERNOR_ROLE");

    IERC20 public immutable zen;

    constructor(IERC20 zen_, address governor) {
        if (address(zen_) == address(0) || governor == address(0)) revert ZeroAddress();
        zen = zen_;
        _grantRole(DEFAULT_ADMIN_ROLE, governor);
        _grantRole(GOVERNOR_ROLE, governor);
    }

    /// @inheritdoc ITreasury
    function grant(address to, uint256 amount, string calldata purpose) external onlyRole(GOVERNOR_ROLE) {
        if (to == address(0)) revert ZeroAddress();
        uint256 held = zen.balanceOf(address(this));
        if (amount > held) revert GrantExceedsBalance(held, amount);
        emit GrantPaid(to, amount, purpose);
        zen.safeTransfer(to, amount);
    }

    /// @inheritdoc ITreasury
    function balance() external view returns (uint256) {
        return zen.balanceOf(address(this));
    }
}
