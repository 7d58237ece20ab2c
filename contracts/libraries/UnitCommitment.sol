// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {IJobMarket} from "../interfaces/IJobMarket.sol";

/// @notice The on-chain commitment to a work unit: the first 128 bits of the keccak256 of its record.
/// @dev 128 bits let two commitments share a storage slot. Faking a unit would take a second
/// preimage (2^128 work); a birthday collision does not help, because the record includes the
/// block it is committed in, so a provider cannot prepare a colliding pair in advance.
function unitCommitment(IJobMarket.Unit memory unit) pure returns (bytes16) {
    return bytes16(keccak256(abi.encode(unit)));
}
