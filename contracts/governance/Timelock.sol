// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {TimelockController} from "@openzeppelin/contracts/governance/TimelockController.sol";

/// @title Timelock
/// @notice The ledger's governor: every governance call (tiers, bounded parameters, treasury
/// grants) is proposed, waits out `getMinDelay()` in public, then anyone may execute it. Deployment
/// hands each contract's governor role to this timelock and renounces every admin role, so no
/// account can skip the delay or grant a role again.
/// @dev OpenZeppelin's TimelockController unchanged; `admin` is zero so the timelock administers
/// itself (a new delay is itself a delayed call).
contract Timelock is TimelockController {
    constructor(uint256 minDelay, address[] memory proposers, address[] memory executors)
        TimelockController(minDelay, proposers, executors, address(0))
    {}
}
