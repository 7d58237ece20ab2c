// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {IAccessControl} from "@openzeppelin/contracts/access/IAccessControl.sol";

import {Treasury} from "../../contracts/Treasury.sol";
import {ITreasury} from "../../contracts/interfaces/ITreasury.sol";
import {BaseTest} from "./Base.t.sol";

contract TreasuryTest is BaseTest {
    uint256 internal constant HELD = 10_000 * ZEN;

    function setUp() public override {
        super.setUp();
        _fund(address(treasury), HELD);
    }

    function test_balance_isZenHeld() public view {
        assertEq(treasury.balance(), HELD);
    }

    function testFuzz_grant_paysRecipient(uint256 amount) public {
        amount = bound(amount, 0, HELD);
        vm.expectEmit(address(treasury));
        emit ITreasury.GrantPaid(user, amount, "devnet faucet");
        vm.prank(governor);
        treasury.grant(user, amount, "devnet faucet");
        assertEq(zen.balanceOf(user), USER_FUNDS + amount);
        assertEq(treasury.balance(), HELD - amount);
    }

    function test_RevertWhen_grantExceedsBalance() public {
        vm.expectRevert(abi.encodeWithSelector(ITreasury.GrantExceedsBalance.selector, HELD, HELD + 1));
        vm.prank(governor);
        treasury.grant(user, HELD + 1, "too much");
    }

    function test_RevertWhen_grantToZeroAddress() public {
        vm.expectRevert(ITreasury.ZeroAddress.selector);
        vm.prank(governor);
        treasury.grant(address(0), 1, "burn");
    }

    function test_RevertWhen_grantByNonGovernor() public {
        vm.expectRevert(
            abi.encodeWithSelector(
                IAccessControl.AccessControlUnauthorizedAccount.selector, user, treasury.GOVERNOR_ROLE()
            )
        );
        vm.prank(user);
        treasury.grant(user, 1, "self-dealing");
    }

    function test_RevertWhen_constructedWithZeroAddress() public {
        vm.expectRevert(ITreasury.ZeroAddress.selector);
        new Treasury(zen, address(0));
    }
}
