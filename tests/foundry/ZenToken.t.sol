// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {ERC20Permit} from "@openzeppelin/contracts/token/ERC20/extensions/ERC20Permit.sol";

import {BaseTest} from "./Base.t.sol";

contract ZenTokenTest is BaseTest {
    function test_constructor_mintsSupplyToDistributor() public view {
        assertEq(zen.name(), "Zen");
        assertEq(zen.symbol(), "ZEN");
        assertEq(zen.decimals(), 18);
        assertEq(zen.totalSupply(), SUPPLY);
    }

    function testFuzz_permit_setsAllowance(uint256 value) public {
        (uint8 v, bytes32 r, bytes32 s) = _permit(userKey, address(market), value, block.timestamp);
        zen.permit(user, address(market), value, block.timestamp, v, r, s);
        assertEq(zen.allowance(user, address(market)), value);
        assertEq(zen.nonces(user), 1);
    }

    function test_RevertWhen_permitExpired() public {
        uint256 deadline = block.timestamp - 1;
        (uint8 v, bytes32 r, bytes32 s) = _permit(userKey, address(market), 1, deadline);
        vm.expectRevert(abi.encodeWithSelector(ERC20Permit.ERC2612ExpiredSignature.selector, deadline));
        zen.permit(user, address(market), 1, deadline, v, r, s);
    }
}
