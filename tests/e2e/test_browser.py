"""The gateway's pages in Debian's Chromium, against the devnet: the explorer follows a real job to
its settlement and shows it to the wei, and the staking page stakes through an injected EIP-1193
wallet and says in plain words why it cannot."""

from __future__ import annotations

import json
import re
from decimal import Decimal

import httpx
import pytest
from eth_account.signers.local import LocalAccount
from playwright.sync_api import Browser, Page, expect, sync_playwright
from web3 import Web3

from marketplace import jobs
from marketplace.chain.deploy import ZEN
from marketplace.chain.ledger import Hardware
from marketplace.chain.toolchain import PROJECT_ROOT
from marketplace.devnet.accounts import devnet_account
from marketplace.protocol.terms import JobStatus, Tier

from .conftest import wait_for

pytestmark = pytest.mark.slow

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
ARTIFACTS = PROJECT_ROOT / "test-artifacts" / "browser"
STAKER = 9  # an account of the devnet's mnemonic that nothing else on the devnet uses
FEE_BPS = 500
UI_TIMEOUT_MS = 30_000


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser: Browser, request):
    """A fresh page; its screenshot is kept under test-artifacts/browser/ whatever the outcome."""
    context = browser.new_context(viewport={"width": 1600, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(UI_TIMEOUT_MS)
    try:
        yield page
    finally:
        snap(page, request.node.name)
        context.close()


def shown(wei: int) -> str:
    """ZEN exactly, with thousands separators: the staking page's figures, and the explorer's
    titles."""
    return format((Decimal(wei) / ZEN).normalize(), ",f")


SHORT = re.compile(r"(?P<approx>≈)?(?P<value>-?\d{1,3}(,\d{3})*(\.\d{1,6})?)|<0\.000001")
FLOAT_ARTIFACT = re.compile(
    r"\d\.\d{7,}"
)  # more decimals than any figure shows, as 0.003999999999999998


def check_amounts(page: Page) -> None:
    """Every amount the explorer shows: its wei (data-wei) in full in its title, and as text that
    amount to 6 decimals, exact or marked ≈ and rounded to the nearest; and no figure on the page
    with more decimals than that."""
    amounts = page.locator("[data-wei]").evaluate_all(
        "nodes => nodes.map(n => [n.dataset.wei, n.title, n.textContent])"
    )
    assert amounts
    for wei_text, title, text in amounts:
        wei = int(wei_text)
        assert title == f"{shown(wei)} ZEN"
        match = SHORT.fullmatch(text)
        assert match, f"{text!r} is not an amount to 6 decimals"
        exact = Decimal(wei) / ZEN
        if text == "<0.000001":
            assert 0 < exact < Decimal("0.0000005")
        elif match["approx"]:
            value = Decimal(match["value"].replace(",", ""))
            assert value != exact and abs(value - exact) <= Decimal("0.0000005"), (
                f"{text} for {exact}"
            )
        else:
            assert Decimal(match["value"].replace(",", "")) == exact, f"{text} for {exact}"
    assert not FLOAT_ARTIFACT.search(page.locator("body").inner_text())


def wei_in(cell) -> int:
    """The amount in a table cell or figure, to the wei."""
    return int(cell.locator("[data-wei]").get_attribute("data-wei"))


def snap(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=ARTIFACTS / f"{name}.png", full_page=True)


def wei_of(text: str) -> int:
    """A figure as the page shows it (exact ZEN with thousands separators) back in wei."""
    value = Decimal(text.replace(",", "").removesuffix(" ZEN")) * ZEN
    assert value == value.to_integral_value(), f"{text} is not a whole number of wei"
    return int(value)


# --- the explorer ---------------------------------------------------------------------------------


# A real job small enough to train in about a second: one work unit of a small MLP.
QUICK_SPEC = """
name: explorer-quick
model: {architecture: mlp, context: 4, n_embd: 8, hidden: 32, n_layer: 1}
data:
  seq_len: 16
  sources: [{kind: synthetic, generator: markov, num_bytes: 16384, seed: 1}]
training: {lr: 1.0e-2, batch_size: 8, max_steps: 20, eval_batches: 0}
checkpoint: {every: 20}
reproducibility: {seed: 0, num_threads: 1}
"""


def test_explorer_follows_a_job_to_its_settlement_to_the_wei(network, gateway, page: Page):
    ledger, user = network.ledger, network.user
    page.goto(f"{gateway}/ui/explorer/")
    expect(page.locator("#live")).to_contain_text("Live: indexed to block")

    order = jobs.Order(
        max_budget=20 * ZEN, max_price=10 * ZEN, sample_rate_bps=0, checkpoint_interval=600
    )
    with network.storage() as storage:
        job_id = jobs.submit(ledger, user, storage, QUICK_SPEC, order)
        # The page follows the job without a reload: it appears, accrues pay, settles.
        row = page.locator(f'#jobs tr[data-job="{job_id}"]')
        expect(row).to_be_visible()
        job = jobs.ChainJob(ledger, user, job_id)
        job.wait(until=JobStatus.COMPLETED, auction_timeout=60)
    expect(row.locator(".status")).to_have_text("completed")
    accrued = ledger.job(job_id)["budget"] - ledger.slot(job_id, 0)["remaining"]
    assert accrued > 0 and wei_in(row.locator('[data-field="paid"]')) == accrued
    snap(page, "explorer-job-completed")
    job.wait()
    settled = job.settlement()
    expect(row.locator(".status")).to_have_text("settled")

    budget = ledger.job(job_id)["budget"]
    market = ledger.market.functions
    earned = [market.earned(job_id, p).call() for p in market.participants(job_id).call()]
    figures = {
        field: wei_in(row.locator(f'[data-field="{field}"]'))
        for field in ("escrow", "paid", "fee", "payouts", "refund")
    }
    assert figures == {
        "escrow": budget,
        "paid": settled.payment,
        "fee": settled.fee,
        "payouts": settled.payment - settled.fee,
        "refund": settled.refund,
    }
    assert len(earned) == 1 and settled.payment == earned[0] > 0
    assert settled.fee == settled.payment * FEE_BPS // 10_000
    assert figures["payouts"] + figures["fee"] + figures["refund"] == figures["escrow"]
    expect(row.locator('[data-field="check"]')).to_have_text("✓ escrow = payouts + fee + refund")
    expect(page.locator("#network-check")).to_contain_text(
        "✓ every escrowed ZEN is paid, refunded or still in escrow"
    )
    expect(page.locator("#network-check")).to_contain_text("treasury matches the chain at block")
    check_amounts(page)
    snap(page, "explorer-job-settled")

    # The settlement's row links to its transaction, decoded from the chain by the gateway.
    row.locator(f'a[href="#tx/{settled.tx}"]').click()
    view = page.locator("#view")
    expect(view).to_contain_text(settled.tx)
    expect(view).to_contain_text("JobMarket")
    expect(view).to_contain_text("settle(jobId)")
    expect(view).to_contain_text("JobSettled")
    expect(view).to_contain_text(f"payment={settled.payment}")
    view.get_by_role("link", name=f"block {settled.block}").click()
    expect(view).to_contain_text(f"Block {settled.block}")

    # The provider withdraws on its own; later tests that measure balances must not see it happen.
    wait_for(
        lambda: all(ledger.owed(p) == 0 for p in market.participants(job_id).call()),
        60,
        "the payout",
    )


@pytest.fixture(scope="module")
def settled_job(network, gateway) -> int:
    """A settled job for the explorer to show: the devnet's newest, or a quick one run now."""
    newest = httpx.get(f"{gateway}/jobs", params={"status": "settled", "limit": 1}).json()
    if newest:
        return newest[0]["job_id"]
    ledger, user = network.ledger, network.user
    order = jobs.Order(
        max_budget=20 * ZEN, max_price=10 * ZEN, sample_rate_bps=0, checkpoint_interval=600
    )
    with network.storage() as storage:
        job_id = jobs.submit(ledger, user, storage, QUICK_SPEC, order)
    jobs.ChainJob(ledger, user, job_id).wait(auction_timeout=60)
    return job_id


def inside(box: dict, width: int) -> bool:
    return box["x"] >= 0 and box["x"] + box["width"] <= width


@pytest.mark.parametrize("width", [1280, 1400, 2000])
def test_explorer_fits_the_window(browser: Browser, gateway, settled_job, width):
    height = 900
    context = browser.new_context(viewport={"width": width, "height": height})
    page = context.new_page()
    page.set_default_timeout(UI_TIMEOUT_MS)
    try:
        page.goto(f"{gateway}/ui/explorer/")
        row = page.locator(f'#jobs tr[data-job="{settled_job}"]')
        expect(row.locator(".status")).to_have_text("settled")
        check_amounts(page)
        # Every column of the jobs table is in the window without scrolling it sideways, the
        # reconciliation and the last event included.
        headers = page.locator("#jobs thead th")
        expect(headers.nth(9)).to_have_text("Reconciles")
        for i in range(headers.count()):
            assert inside(headers.nth(i).bounding_box(), width), (
                f"column {headers.nth(i).inner_text()!r} is cut off"
            )
        assert inside(row.locator('[data-field="check"]').bounding_box(), width)
        assert page.locator("#jobs").evaluate(
            "t => t.parentElement.scrollWidth <= t.parentElement.clientWidth"
        )
        snap(page, f"explorer-{width}")

        # A job's view, opened by its link or by its address, starts at the top of the window.
        row.locator(f'a[href="#job/{settled_job}"]').click()
        expect(page.locator("#job-title")).to_have_text(f"Job {settled_job}")
        assert 0 <= page.locator("#job-title").bounding_box()["y"] < 0.1 * height
        check_amounts(page)
        page.goto("about:blank")
        page.goto(f"{gateway}/ui/explorer/#job/{settled_job}")
        expect(page.locator("#job-title")).to_have_text(f"Job {settled_job}")
        expect(page.locator("#job [data-wei]").first).to_be_visible()
        page.wait_for_function(
            "document.querySelector('#job-title').getBoundingClientRect().top < innerHeight / 10"
        )
        page.screenshot(
            path=ARTIFACTS / f"explorer-job-{width}.png"
        )  # the window, as the reader sees it
    finally:
        context.close()


# --- the API reference ----------------------------------------------------------------------------


def test_api_reference_renders_with_no_other_site(gateway, page: Page):
    # Every request to another origin is refused, as on a machine with no network: Swagger UI,
    # its stylesheet and the OpenAPI document must all come from the gateway.
    elsewhere = []
    page.context.route(
        lambda url: not url.startswith(gateway),
        lambda route: (elsewhere.append(route.request.url), route.abort()),
    )
    page.goto(f"{gateway}/")
    assert page.url == f"{gateway}/ui/explorer/"
    page.get_by_role("link", name="API").click()
    expect(page.locator(".swagger-ui .info .title")).to_contain_text("Zoo Compute gateway")
    expect(page.locator(".opblock").first).to_be_visible()
    expect(page.locator(".opblock-summary-path", has_text="/jobs/{job_id}").first).to_be_visible()
    assert page.locator(".opblock").count() > 20
    assert elsewhere == []


# --- the staking page -----------------------------------------------------------------------------


REJECTED = {"error": {"code": 4001, "message": "User rejected the request."}}
INJECT_WALLET = """
window.ethereum = {
  request: async ({ method, params }) => {
    const reply = await window.devWallet(method, params ?? []);
    if (reply.error) throw Object.assign(new Error(reply.error.message), reply.error);
    return reply.result;
  },
};
"""


class DevWallet:
    """An EIP-1193 wallet for the page, as MetaMask is one: it holds one key and signs here, and
    forwards every other request to the devnet's Anvil. Replies are JSON-RPC's: result or error."""

    def __init__(self, w3: Web3, account: LocalAccount):
        self.w3 = w3
        self.account = account
        self.chain_id = w3.eth.chain_id  # the chain the wallet says it is on
        self.reject_signatures = False  # its user declines every signature request

    def request(self, method: str, params: list) -> dict:
        if method in ("eth_requestAccounts", "eth_accounts"):
            return {"result": [self.account.address]}
        if method == "eth_chainId":
            return {"result": hex(self.chain_id)}
        if method == "eth_signTypedData_v4":
            if self.reject_signatures:
                return REJECTED
            assert params[0].lower() == self.account.address.lower()
            signed = self.account.sign_typed_data(full_message=json.loads(params[1]))
            return {"result": "0x" + signed.signature.hex().removeprefix("0x")}
        if method == "eth_sendTransaction":
            return {"result": self._send(params[0])}
        reply = self.w3.provider.make_request(method, params)
        return {key: reply[key] for key in ("result", "error") if key in reply}

    def _send(self, request: dict) -> str:
        assert request["from"].lower() == self.account.address.lower()
        tx = {
            "to": Web3.to_checksum_address(request["to"]),
            "data": request.get("data", "0x"),
            "value": int(request.get("value", "0x0"), 16),
            "chainId": self.w3.eth.chain_id,
            "nonce": self.w3.eth.get_transaction_count(self.account.address, "pending"),
            "maxFeePerGas": 2 * self.w3.eth.gas_price,
            "maxPriorityFeePerGas": 0,
        }
        tx["gas"] = (
            int(request["gas"], 16)
            if "gas" in request
            else self.w3.eth.estimate_gas(tx | {"from": self.account.address})
        )
        signed = self.account.sign_transaction(tx)
        return "0x" + self.w3.eth.send_raw_transaction(signed.raw_transaction).hex().removeprefix(
            "0x"
        )


@pytest.fixture(scope="module")
def staker(network) -> LocalAccount:
    """A registered provider with ZEN and gas and nothing staked; no verifier admits it (it
    published no benchmark), so it never bids on the devnet's jobs."""
    ledger = network.ledger
    account = devnet_account(STAKER)
    ledger.w3.provider.make_request("anvil_setBalance", [account.address, hex(10 * 10**18)])
    ledger.transfer(devnet_account(0), account.address, 5_000 * ZEN)
    ledger.register_provider(
        account, Tier.COMMUNITY, Hardware("cpu", 0, 0, 1, "devnet://browser-test")
    )
    return account


@pytest.fixture
def wallet(network, staker, page: Page) -> DevWallet:
    wallet = DevWallet(network.ledger.w3, staker)
    page.expose_function("devWallet", wallet.request)
    page.add_init_script(INJECT_WALLET)
    return wallet


def connect(page: Page, gateway: str) -> None:
    page.goto(f"{gateway}/ui/stake/")
    page.get_by_role("button", name="Connect wallet").click()


def figure(page: Page, field: str):
    return page.locator(f'[data-field="{field}"] dd')


def test_staking_page_stakes_with_a_permit(network, gateway, page: Page, wallet: DevWallet, staker):
    ledger = network.ledger
    before = ledger.staking_account(staker.address)
    nonce = ledger.zen.functions.nonces(staker.address).call()
    connect(page, gateway)
    expect(figure(page, "role")).to_have_text("Provider")
    expect(figure(page, "tier")).to_have_text("Community (minimum stake 1,000 ZEN)")
    assert wei_of(figure(page, "balance").inner_text()) == ledger.balance(staker.address)
    assert wei_of(figure(page, "staked").inner_text()) == before["staked"]

    page.locator("#stake-amount").fill("1,234.5")
    page.get_by_role("button", name="Stake", exact=True).click()
    expect(page.locator("#notice")).to_contain_text("Staked 1,234.5 ZEN in block")

    after = ledger.staking_account(staker.address)
    assert after["staked"] == before["staked"] + 1_234_500_000_000_000_000_000
    assert (
        ledger.zen.functions.nonces(staker.address).call() == nonce + 1
    )  # staked by the signed permit
    expect(figure(page, "staked")).to_have_text(f"{shown(after['staked'])} ZEN")


def test_staking_page_says_why_it_cannot(network, gateway, page: Page, wallet: DevWallet, staker):
    ledger = network.ledger
    before = ledger.staking_account(staker.address)
    connect(page, gateway)
    problem = page.locator("#problem")

    # Too little ZEN: refused before the wallet is asked for anything.
    page.locator("#stake-amount").fill("1000000")
    page.get_by_role("button", name="Stake", exact=True).click()
    expect(problem).to_contain_text("You hold ")
    expect(problem).to_contain_text("short of the 1,000,000 ZEN you asked to stake.")

    # The wallet's user declines the permit (EIP-1193 code 4001).
    wallet.reject_signatures = True
    page.locator("#stake-amount").fill("10")
    page.get_by_role("button", name="Stake", exact=True).click()
    expect(problem).to_have_text(
        "You declined the request in your wallet, so nothing was signed or sent."
    )

    # More than the free stake: the contract's InsufficientFreeStake, decoded.
    page.locator("#unstake-amount").fill("1000000")
    page.get_by_role("button", name="Request unstake").click()
    expect(problem).to_contain_text(
        "of your stake is free (the rest is locked as collateral for running jobs); "
        "you asked for 1,000,000 ZEN."
    )

    # A wallet on another chain.
    wallet.chain_id = 1
    connect(page, gateway)
    expect(problem).to_have_text(
        "Your wallet is on chain 1, "
        f"but this ledger runs on chain {network.ledger.w3.eth.chain_id}. "
        f"Switch your wallet to chain {network.ledger.w3.eth.chain_id} to see and move your stake."
    )
    expect(page.get_by_role("button", name="Switch network")).to_be_visible()
    assert ledger.staking_account(staker.address) == before
