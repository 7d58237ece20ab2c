// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {console} from "forge-std/console.sol";

import {IJobMarket} from "../../../contracts/interfaces/IJobMarket.sol";
import {IStaking} from "../../../contracts/interfaces/IStaking.sol";
import {BaseTest} from "../Base.t.sol";
import {LedgerHandler} from "./LedgerHandler.sol";

contract LedgerInvariantTest is BaseTest {
    LedgerHandler internal handler;
    bytes4[] internal _selectors;

    function setUp() public override {
        super.setUp();
        address[] memory providers = new address[](3);
        (providers[0], providers[1], providers[2]) = (provider1, provider2, provider3);
        address[] memory verifiers = new address[](2);
        (verifiers[0], verifiers[1]) = (verifier1, verifier2);
        handler = new LedgerHandler(
            zen,
            staking,
            market,
            verification,
            LedgerHandler.Actors(user, userKey, governor, distributor, providers, verifiers)
        );

        // Weights favour the steps of a job's life, so runs reach settlement and withdrawal.
        _target(LedgerHandler.createJob.selector, 2);
        _target(LedgerHandler.runAuction.selector, 3);
        _target(LedgerHandler.sealBid.selector, 1);
        _target(LedgerHandler.expireBid.selector, 1);
        _target(LedgerHandler.commitCheckpoint.selector, 6);
        _target(LedgerHandler.postResult.selector, 3);
        _target(LedgerHandler.resolveDispute.selector, 2);
        _target(LedgerHandler.expireDispute.selector, 1);
        _target(LedgerHandler.reportDowntime.selector, 1);
        _target(LedgerHandler.cancelJob.selector, 1);
        _target(LedgerHandler.settle.selector, 2);
        _target(LedgerHandler.claimVerificationFees.selector, 1);
        _target(LedgerHandler.withdraw.selector, 1);
        _target(LedgerHandler.stake.selector, 1);
        _target(LedgerHandler.requestUnstake.selector, 1);
        _target(LedgerHandler.withdrawStake.selector, 1);
        _target(LedgerHandler.slashUnauthorized.selector, 1);
        targetSelector(FuzzSelector({addr: address(handler), selectors: _selectors}));
        targetContract(address(handler));
    }

    function _target(bytes4 selector, uint256 weight) internal {
        for (uint256 i; i < weight; ++i) {
            _selectors.push(selector);
        }
    }

    /// @dev Budgets of jobs not yet settled or cancelled.
    function _openEscrow() internal view returns (uint256 open) {
        for (uint256 i; i < handler.jobCount(); ++i) {
            IJobMarket.Job memory j = market.job(handler.jobIds(i));
            if (j.status != IJobMarket.JobStatus.Settled && j.status != IJobMarket.JobStatus.Cancelled) {
                open += j.budget;
            }
        }
    }

    function _sumOwed() internal view returns (uint256 sum) {
        address[] memory accounts = handler.stakers();
        for (uint256 i; i < accounts.length; ++i) {
            sum += market.owed(accounts[i]);
        }
    }

    /// Every property below, after every call of one campaign. Forge 1.7.1 runs a campaign per
    /// invariant function, each checking only its own: nine functions cost nine campaigns' calls.
    function invariant_theLedgerKeepsItsBooks() public view {
        _escrowIsPayoutsPlusFeesPlusRefunds();
        _marketHoldsEscrowPlusOwed();
        _stakingHoldsStakePlusUnbonding();
        _feeIsFivePercentOfEveryPayment();
        _noSlashWithoutAuthorizedCaller();
        _slashesInAJobNeverExceedItsCollateral();
        _slotPayIsItsBudgetShare();
        _rejectedUnitRollsItsSlotBack();
        _noWithdrawalAboveOwed();
    }

    /// Every wei a user escrowed is, to the wei, provider pay, a fee to the treasury, the verifier
    /// pool, a refund, or still escrowed in a job that has not settled: in every path (cancel,
    /// stop, downtime, slash, rollback, re-auction).
    function _escrowIsPayoutsPlusFeesPlusRefunds() internal view {
        assertEq(
            handler.ghost_escrowed(),
            handler.ghost_providerPaid() + handler.ghost_feesToTreasury() + handler.ghost_verifierPools()
                + handler.ghost_refunded() + _openEscrow(),
            "escrowIsPayoutsPlusFeesPlusRefunds"
        );
    }

    /// The ZEN the market holds is exactly open escrow, plus what it owes, plus verifier pools
    /// not yet claimed.
    function _marketHoldsEscrowPlusOwed() internal view {
        uint256 unclaimedPools = handler.ghost_verifierPools() - handler.ghost_verifierClaimed();
        assertEq(
            zen.balanceOf(address(market)), _openEscrow() + _sumOwed() + unclaimedPools, "marketHoldsEscrowPlusOwed"
        );
    }

    /// The ZEN staking holds is exactly the sum of every account's stake and unbonding stake.
    function _stakingHoldsStakePlusUnbonding() internal view {
        address[] memory accounts = handler.stakers();
        uint256 sum;
        for (uint256 i; i < accounts.length; ++i) {
            IStaking.Account memory a = staking.account(accounts[i]);
            sum += a.staked + a.unbonding;
        }
        assertEq(zen.balanceOf(address(staking)), sum, "stakingHoldsStakePlusUnbonding");
    }

    /// The network fee is exactly 5% (rounded down) of every provider's payment, and the treasury
    /// receives exactly the fees less the verifier pool.
    function _feeIsFivePercentOfEveryPayment() internal view {
        assertEq(handler.ghost_feeMismatches(), 0, "feeIsFivePercentOfEveryPayment");
        assertEq(
            handler.ghost_providerPaid() + handler.ghost_expectedFees(),
            handler.ghost_settledEarnings(),
            "feeIsFivePercentOfEveryPayment"
        );
        assertEq(
            handler.ghost_feesToTreasury() + handler.ghost_verifierPools(),
            handler.ghost_expectedFees(),
            "feeIsFivePercentOfEveryPayment"
        );
    }

    /// Nobody but the market and the verification contract can slash: every other attempt fails,
    /// and stake leaves staking only by its owner's withdrawal or a slash made by them.
    function _noSlashWithoutAuthorizedCaller() internal view {
        assertEq(handler.ghost_unauthorizedSlashSuccesses(), 0, "noSlashWithoutAuthorizedCaller");
        assertEq(
            zen.balanceOf(address(staking)),
            handler.ghost_stakeDeposited() - handler.ghost_stakeWithdrawn() - handler.ghost_slashedByProtocol(),
            "noSlashWithoutAuthorizedCaller"
        );
    }

    /// However many faults are reported in a job, a provider's slashes there add up to at most the
    /// collateral that job asked of it.
    function _slashesInAJobNeverExceedItsCollateral() internal view {
        for (uint256 i; i < handler.jobCount(); ++i) {
            uint256 jobId = handler.jobIds(i);
            address[] memory list = market.participants(jobId);
            for (uint256 k; k < list.length; ++k) {
                assertLe(
                    market.slashedIn(jobId, list[k]),
                    market.job(jobId).collateral,
                    "slashesInAJobNeverExceedItsCollateral"
                );
            }
        }
    }

    /// No slot is ever paid more than its share of the budget: what its providers earned plus what it
    /// has left is exactly that share, to the wei, through every rollback and re-auction.
    function _slotPayIsItsBudgetShare() internal view {
        for (uint256 i; i < handler.jobCount(); ++i) {
            uint256 jobId = handler.jobIds(i);
            IJobMarket.Job memory j = market.job(jobId);
            uint256[] memory paid = new uint256[](j.nodes);
            address[] memory list = market.participants(jobId);
            for (uint256 k; k < list.length; ++k) {
                paid[market.participant(jobId, list[k]).slot] += market.earned(jobId, list[k]);
            }
            for (uint16 s; s < j.nodes; ++s) {
                assertEq(paid[s] + market.slot(jobId, s).remaining, j.budget / j.nodes, "slotPayIsItsBudgetShare");
            }
        }
    }

    /// A confirmed failure always rolls its slot back to the failed unit, whoever holds the slot.
    function _rejectedUnitRollsItsSlotBack() internal view {
        assertEq(handler.ghost_rollbackMisses(), 0, "rejectedUnitRollsItsSlotBack");
    }

    /// No withdrawal pays more than is owed: the market pays out at most what it credited, staking
    /// at most what was requested out.
    function _noWithdrawalAboveOwed() internal view {
        assertEq(handler.ghost_marketOverpaid(), 0, "noWithdrawalAboveOwed");
        assertEq(handler.ghost_stakeOverpaid(), 0, "noWithdrawalAboveOwed");
        assertEq(
            handler.ghost_marketWithdrawn() + _sumOwed(),
            handler.ghost_providerPaid() + handler.ghost_verifierClaimed(),
            "noWithdrawalAboveOwed"
        );
        assertLe(handler.ghost_stakeWithdrawn(), handler.ghost_unbondRequested(), "noWithdrawalAboveOwed");
    }

    /// @dev With -vv: how far the last run drove the lifecycle.
    function afterInvariant() external view {
        console.log("jobs created", handler.calls("createJob"), "auctions filled", handler.calls("auctionsFilled"));
        console.log(
            "checkpoints", handler.calls("commitCheckpoint"), "downtime reports", handler.calls("reportDowntime")
        );
        console.log("results posted", handler.calls("postResult"), "disputes resolved", handler.calls("resolveDispute"));
        console.log("disputes expired", handler.calls("expireDispute"), "cancels", handler.calls("cancelJob"));
        console.log("settled", handler.calls("settle"), "settled earnings", handler.ghost_settledEarnings());
        console.log("bids", handler.calls("bids"), "rounds", handler.calls("runAuction"));
        console.log("sealed bids", handler.calls("sealBid"), "expired", handler.calls("expireBid"));
        console.log("rollbacks past a replaced provider", handler.calls("rollbackPastReplacedProvider"));
    }
}
