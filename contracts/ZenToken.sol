// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {ERC20} from "@openzeppelin/contracts/token/ERC20/ERC20.sol";
import {ERC20Permit} from "@openzeppelin/contracts/token/ERC20/extensions/ERC20Permit.sol";

/// @title ZenToken
/// @notice ZEN, the marketplace's currency and collateral. ERC-2612 permits let a user approve and
/// stake, or approve and escrow, with one signature. The whole supply is minted once, at deploy,
/// to a distributor (on a devnet: the account that funds test wallets).
contract ZenToken is ERC20, ERC20Permit {
    constructor(address distributor, uint256 supply) ERC20("Zen", "ZEN") ERC20Permit("Zen") {
        _mint(distributor, supply);
    }
}
