"""The demo: a local Anvil chain, the ledger deployed, one job run through its whole lifecycle
(stake, sealed-bid auction, ten metered checkpoints, sampled verification, settlement,
withdrawals), and the settlement printed to the wei."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from web3 import Web3

from marketplace.chain.accounts import devnet_account
from marketplace.chain.anvil import Anvil
from marketplace.chain.deploy import DEPLOYMENTS, ZEN, Parameters, deploy
from marketplace.chain.ledger import Ledger
from marketplace.chain.scripted_job import Cast, Scenario, cid_of_bytes, onboard, run_job

console = Console()


def zen(wei: int) -> str:
    return f"{wei / ZEN:,.6f} ZEN"


def main() -> None:
    with Anvil() as chain:
        console.print(f"[bold]Anvil[/] pid {chain.pid} at {chain.rpc_url}")
        w3 = Web3(Web3.HTTPProvider(chain.rpc_url))
        accounts = [devnet_account(i) for i in range(7)]
        cast = Cast(governor=accounts[0], user=accounts[1], providers=tuple(accounts[2:5]),
                    verifiers=tuple(accounts[5:7]))
        deployment = deploy(w3, cast.governor, Parameters(verification_fee=ZEN // 10),
                            manifest=DEPLOYMENTS / "demo.json")
        console.print(f"ledger deployed; manifest at {DEPLOYMENTS / 'demo.json'}")
        ledger = Ledger(w3, deployment)
        scenario = Scenario()
        onboard(ledger, cast, scenario)
        console.print("3 providers and 2 verifiers registered and staked; providers admitted")

        with console.status("running the job: auction, checkpoints, verification, settlement"):
            outcome = run_job(ledger, cast, scenario, cid_of_bytes(b"demo job spec\n"))
        show(ledger, cast, scenario, outcome)


def show(ledger: Ledger, cast: Cast, scenario: Scenario, outcome) -> None:
    s = outcome.settlement
    console.print(
        f"\njob {outcome.job_id}: {len(scenario.bids)} sealed bids "
        f"({', '.join(zen(b) for b in scenario.bids)} per GPU-hour); winner {outcome.winners[0]} "
        f"at the clearing price {zen(outcome.clearing_price)}"
    )
    console.print(f"{len(outcome.units)} checkpoints committed, {len(outcome.verified)} sampled and verified")
    table = Table(title=f"Settlement of job {outcome.job_id}", caption=f"tx {s['tx']} in block {s['block']}")
    table.add_column("")
    table.add_column("ZEN", justify="right")
    table.add_column("wei", justify="right")
    rows = [
        ("escrowed budget", scenario.budget),
        ("payment for accepted work", s["payment"]),
        ("  network fee (5%)", s["fee"]),
        ("    to verifiers", s["verifierPool"]),
        ("    to the treasury", s["fee"] - s["verifierPool"]),
        ("  to providers", s["payment"] - s["fee"]),
        ("refund to the user", s["refund"]),
    ]
    for label, wei in rows:
        table.add_row(label, f"{wei / ZEN:,.6f}", str(wei))
    console.print(table)
    balanced = scenario.budget == s["payment"] + s["refund"]
    console.print(f"escrow = payment + refund: {'[green]yes[/]' if balanced else '[red]NO[/]'}; "
                  f"market holds {ledger.balance(ledger.market.address)} wei after withdrawals")


if __name__ == "__main__":
    main()
