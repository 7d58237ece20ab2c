// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {Vm} from "forge-std/Vm.sol";

import {ZenToken} from "../../../contracts/ZenToken.sol";
import {IJobMarket} from "../../../contracts/interfaces/IJobMarket.sol";

/// @notice What an off-chain client rebuilds from the chain: unit records and permit digests.
library LedgerRecords {
    bytes32 internal constant PERMIT_TYPEHASH =
        keccak256("Permit(address owner,address spender,uint256 value,uint256 nonce,uint256 deadline)");

    /// @notice Whether slot 0 of a group job, where the group meets, is vacant or itself late: the
    /// market then reports none of the other slots (`GroupHostDown`), as an off-chain reporter
    /// reads it.
    function groupHostDown(IJobMarket market, uint256 jobId) internal view returns (bool) {
        IJobMarket.Slot memory host = market.slot(jobId, 0);
        return host.provider == address(0) || (!host.done && block.timestamp > market.checkpointDeadline(jobId, 0));
    }

    /// @notice The unit record of the `CheckpointCommitted` event in `logs`, emitted in the current
    /// block, exactly as the market hashes it.
    function unitFromLogs(Vm.Log[] memory logs) internal view returns (IJobMarket.Unit memory) {
        for (uint256 i; i < logs.length; ++i) {
            if (logs[i].topics[0] != IJobMarket.CheckpointCommitted.selector) continue;
            (, address provider, string memory cid, bytes32 stateHash,, uint128 amount, uint128 remainingBefore) =
                abi.decode(logs[i].data, (uint32, address, string, bytes32, uint32, uint128, uint128));
            return IJobMarket.Unit({
                provider: provider,
                committedAt: uint64(block.timestamp),
                blockNumber: uint64(block.number),
                amount: amount,
                remainingBefore: remainingBefore,
                cidHash: keccak256(bytes(cid)),
                stateHash: stateHash
            });
        }
        revert("no CheckpointCommitted");
    }

    /// @notice The EIP-712 digest an ERC-2612 permit of `value` from `owner` to `spender` signs.
    function permitDigest(ZenToken zen, address owner, address spender, uint256 value, uint256 deadline)
        internal
        view
        returns (bytes32)
    {
        bytes32 structHash = keccak256(abi.encode(PERMIT_TYPEHASH, owner, spender, value, zen.nonces(owner), deadline));
        return keccak256(abi.encodePacked("\x19\x01", zen.DOMAIN_SEPARATOR(), structHash));
    }
}
