"""The SDK's one implementation, on httpx.AsyncClient: the user's key signs locally, the gateway
sees signatures only."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any, Self
from urllib.parse import urlsplit

import httpx
from eth_account.messages import encode_defunct
from eth_account.signers.local import LocalAccount
from web3.contract.contract import ContractFunction

from marketplace import folders, jobs, results
from marketplace.catalog import check_model_folder
from marketplace.chain.deploy import ZEN, Deployment, manifest_path
from marketplace.chain.errors import ChainError
from marketplace.chain.ledger import Hardware, Ledger, Permit
from marketplace.chain.permit import split_signature
from marketplace.chain.registry import Reference, Registry, check_name, kind_named
from marketplace.config import Settings
from marketplace.gateway.siwe import SiweMessage
from marketplace.jobs import Order
from marketplace.licenses import spdx_id
from marketplace.protocol.journey import (
    JobError,
    NoBids,
    Progress,
    Result,
    Settlement,
    Snapshot,
    Step,
    default_output,
    next_step,
    waiting_for,
)
from marketplace.protocol.spec import HFSpec, SpecError, parse_spec
from marketplace.protocol.terms import DEFAULT_UNIT_GPU_SECONDS, JobStatus, Kind, Tier
from marketplace.sdk.errors import (
    GatewayError,
    GatewayUnavailable,
    RefusedToSign,
    TransactionReverted,
)
from marketplace.sdk.guard import MAX_FEE_PER_GAS, Guard
from marketplace.storage import Storage

SESSION_MINUTES = 60  # how long a sign-in asks to last
FINISHED = ("settled", "cancelled")


def wei(zen: float | str | Decimal) -> int:
    """A ZEN amount (5000, "0.5") in wei."""
    return int(Decimal(str(zen)) * ZEN)


class AsyncClient:
    """A gateway's jobs, and the user's own:
    `job = await client.train(config="job.yaml", max_budget=5000)`.

    `wallet` signs sign-in messages, permits and transactions here; it is needed only for writes.
    Before it signs a transaction or permit the gateway built, the SDK checks it against the call
    it asked for, built here from a deployment manifest it trusts (see marketplace/sdk/guard.py):
    `deployment`, else ZOO_MANIFEST, else deployments/<chain id>.json on this machine; a gateway
    that hands over anything else gets nothing signed. Weights come from IPFS (`ipfs_api`, default
    ZOO_IPFS_API) and are checked by CID and state hash.
    """

    def __init__(
        self,
        gateway_url: str,
        wallet: LocalAccount | None = None,
        *,
        ipfs_api: str | None = None,
        ipfs_replicas: list[str] | None = None,
        poll_interval: float = 1.0,
        timeout: float = 60.0,
        transport: httpx.AsyncBaseTransport | None = None,
        deployment: Deployment | None = None,
        max_fee_per_gas: int = MAX_FEE_PER_GAS,
    ):
        settings = Settings()
        self._deployment = deployment
        self._manifest = settings.manifest
        self._max_fee_per_gas = max_fee_per_gas
        self._guard: Guard | None = None
        self.url = gateway_url.rstrip("/")
        self.wallet = wallet
        self.poll_interval = poll_interval
        self.ipfs_api = ipfs_api or settings.ipfs_api
        self.ipfs_replicas = settings.ipfs_replicas if ipfs_replicas is None else ipfs_replicas
        self._http = httpx.AsyncClient(base_url=self.url, timeout=timeout, transport=transport)
        self._token: tuple[str, float] | None = None  # bearer token and when it expires

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *_) -> None:
        await self.aclose()

    # --- HTTP ---------------------------------------------------------------------------

    async def request(self, method: str, path: str, **kwargs) -> Any:
        """The JSON of a 2xx answer; a refusal raises GatewayError with the gateway's message."""
        try:
            response = await self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise GatewayUnavailable(self.url, str(exc) or type(exc).__name__) from None
        if response.is_success:
            return response.json()
        try:
            detail = response.json()["detail"]
        except (ValueError, KeyError, TypeError):
            detail = response.text or response.reason_phrase
        if not isinstance(detail, str):  # a request the schema refused: name the fields
            detail = "; ".join(
                f"{'.'.join(map(str, d.get('loc', [])))}: {d.get('msg')}" for d in detail
            )
        raise GatewayError(response.status_code, f"{method} {path}: {detail}")

    def _account(self) -> LocalAccount:
        if self.wallet is None:
            raise GatewayError(0, "this needs a wallet: Client(gateway_url, wallet=...)")
        return self.wallet

    # --- reads --------------------------------------------------------------------------

    async def jobs(
        self,
        *,
        status: str | None = None,
        user: str | None = None,
        provider: str | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> list[dict]:
        params = {
            k: v for k, v in {"status": status, "user": user, "provider": provider}.items() if v
        }
        return await self.request(
            "GET", "/jobs", params=params | {"limit": limit, "offset": offset}
        )

    async def job(self, job_id: int) -> dict:
        return await self.request("GET", f"/jobs/{job_id}")

    async def metrics(self, job_id: int) -> dict:
        return await self.request("GET", f"/jobs/{job_id}/metrics")

    async def logs(self, job_id: int, since: int = 0) -> list[dict]:
        return await self.request("GET", f"/jobs/{job_id}/logs", params={"since": since})

    async def provider(self, address: str) -> dict:
        """A provider as indexed: tier, hardware, stake, the jobs it held slots in, its slashes."""
        return await self.request("GET", f"/providers/{address}")

    async def account(self, address: str | None = None) -> dict:
        """An address's (default: the wallet's) ETH, ZEN, role, tier, admission, stake and pay owed,
        read live from the chain at one block; amounts in wei."""
        return await self.request("GET", f"/chain/accounts/{address or self._account().address}")

    def handle(self, job_id: int) -> AsyncJob:
        """A job by id, to follow, settle or fetch the result of."""
        return AsyncJob(self, job_id)

    # --- the model and dataset registry ---------------------------------------------------

    async def registry(self, kind: str = "model", *, limit: int = 50, offset: int = 0) -> list:
        """Names of `kind` ("model" or "dataset") as indexed, each with its owner and newest
        version."""
        path = f"/registry/{kind_named(kind).label}s"
        return await self.request("GET", path, params={"limit": limit, "offset": offset})

    async def registry_name(self, kind: str, name: str) -> dict:
        """A name as indexed, with every version (`history`, oldest first)."""
        return await self.request("GET", f"/registry/{kind_named(kind).label}s/{check_name(name)}")

    async def resolve(self, kind: str, ref: str) -> dict:
        """The indexed version `ref` names: org/name@N, or org/name for the newest."""
        reference = Reference.parse(ref)
        shown = await self.registry_name(kind, reference.name)
        if reference.version is None:
            return shown["latest"]
        for version in shown["history"]:
            if version["version"] == reference.version:
                return version
        raise GatewayError(404, f"{reference.name} has no version {reference.version}")

    async def pull(self, kind: str, ref: str, out: str | Path) -> dict:
        """Fetch the version `ref` names into the folder `out` (absent or empty), every file
        checked against its CID; a model pulled so loads with from_pretrained(out)."""
        version = await self.resolve(kind, ref)

        def fetch() -> None:
            with Storage(self.ipfs_api, self.ipfs_replicas) as storage:
                folders.pull(storage, version["cid"], Path(out))

        await asyncio.to_thread(fetch)
        return version

    async def push(
        self,
        kind: str,
        path: str | Path,
        *,
        name: str,
        license: str,
        parent: str | None = None,
        job_id: int | None = None,
        metadata: str | Path | None = None,
    ) -> dict:
        """Add `path` (a folder, or one file) and `metadata` to IPFS and publish them as the next
        version of `name`, signed here. A model must be a safetensors Hugging Face folder; the
        license an SPDX id; `parent` org/name@N (org/name: its newest indexed version)."""
        what = kind_named(kind)
        check_name(name)
        license = spdx_id(license)
        if what is Kind.MODEL:
            check_model_folder(Path(path))
        lineage = None
        if parent is not None:
            shown = await self.resolve(kind, parent)
            lineage = Reference(shown["name"], shown["version"])

        def add() -> tuple[str, str | None]:
            with Storage(self.ipfs_api, self.ipfs_replicas) as storage:
                cid, _ = folders.push(storage, Path(path))
                return cid, storage.add_file(metadata) if metadata is not None else None

        cid, metadata_cid = await asyncio.to_thread(add)
        body = {
            "kind": what.label,
            "name": name,
            "cid": cid,
            "license": license,
            "metadata_cid": metadata_cid,
            "parent": None if lineage is None else str(lineage),
            "job_id": job_id,
        }
        mined = await self.transact(
            "/transactions/registry",
            {k: v for k, v in body.items() if v is not None},
            lambda ledger: Registry(ledger.w3, ledger.deployment).publish_call(
                what, name, cid, license, metadata_cid, lineage, job_id
            ),
        )
        return body | {"transaction": mined}

    # --- signed-in writes -----------------------------------------------------------------

    async def sign_in(self) -> str:
        """A bearer token for off-chain writes, from an EIP-4361 message the wallet signs (kept
        while it lasts)."""
        if self._token is not None and self._token[1] > time.time() + 30:
            return self._token[0]
        account = self._account()
        nonce = await self.request("GET", "/auth/nonce")
        now = datetime.now(UTC).replace(microsecond=0)
        text = SiweMessage(
            domain=urlsplit(self.url).netloc,
            address=account.address,
            uri=self.url,
            chain_id=nonce["chain_id"],
            nonce=nonce["nonce"],
            issued_at=now,
            expiration_time=now + timedelta(minutes=SESSION_MINUTES),
            statement="Sign in to the Zoo Compute gateway.",
        ).text()
        signature = account.sign_message(encode_defunct(text=text)).signature.to_0x_hex()
        session = await self.request(
            "POST", "/auth/session", json={"message": text, "signature": signature}
        )
        self._token = (session["token"], session["expires_at"])
        return session["token"]

    async def _signed_in(self, method: str, path: str, **kwargs) -> Any:
        headers = {"Authorization": f"Bearer {await self.sign_in()}"}
        return await self.request(method, path, headers=headers, **kwargs)

    async def upload_spec(self, text: str) -> dict:
        """Validate and pin a job spec; its CID, name, nodes and units per node."""
        return await self._signed_in("POST", "/uploads/spec", json={"spec": text})

    async def upload_dataset(self, data: bytes) -> dict:
        """Pin a dataset's bytes; its CID and size, for a spec's `data` to name."""
        return await self._signed_in("POST", "/uploads/dataset", content=data)

    async def post_logs(self, job_id: int, lines: list[str]) -> dict:
        return await self._signed_in("POST", f"/jobs/{job_id}/logs", json={"lines": lines})

    # --- transactions ---------------------------------------------------------------------

    async def guard(self) -> Guard:
        """The checks on what the gateway hands over to sign, with the ledger it expects."""
        if self._guard is None:
            deployment = self._deployment
            if deployment is None:
                chain_id = (await self.request("GET", "/chain/config"))["chain_id"]
                path = self._manifest or manifest_path(int(chain_id))
                try:
                    deployment = Deployment.load(path)
                except (ChainError, OSError, ValueError, KeyError) as exc:
                    raise RefusedToSign(
                        f"cannot check the gateway's transactions before signing: {exc}; pass "
                        "deployment= or set ZOO_MANIFEST to the ledger's manifest"
                    ) from None
            self._guard = Guard(deployment, self._max_fee_per_gas)
        return self._guard

    async def transact(
        self, path: str, body: dict, expected: Callable[[Ledger], ContractFunction]
    ) -> dict:
        """Ask the gateway for the unsigned transaction, check it is `expected` (the call built
        here), sign it here, send it, wait until it is mined."""
        account = self._account()
        guard = await self.guard()
        unsigned = await self.request("POST", path, json={"sender": account.address} | body)
        guard.check_transaction(unsigned, expected(guard.ledger), account.address)
        raw = account.sign_transaction(unsigned).raw_transaction.to_0x_hex()
        sent = await self.request("POST", "/transactions", json={"raw": raw})
        while True:
            status = await self.request("GET", f"/transactions/status/{sent['tx_hash']}")
            if status["status"] == "succeeded":
                return status
            if status["status"] == "reverted":
                raise TransactionReverted(
                    sent["tx_hash"], status["block_number"], status.get("error")
                )
            await asyncio.sleep(min(self.poll_interval, 0.5))

    async def _signed_permit(self, spender: str, value: int) -> tuple[dict, Permit]:
        """A permit for the `spender` contract to take `value` ZEN of the wallet's, as the gateway
        builds it (POST /transactions/permit), checked and signed here: what a *WithPermit call
        takes, as the gateway's body and as the call's arguments."""
        account = self._account()
        guard = await self.guard()
        permit = await self.request(
            "POST",
            "/transactions/permit",
            json={"owner": account.address, "spender": spender, "value": str(value)},
        )
        typed = guard.check_permit(permit.get("typed_data"), account.address, spender, value)
        signature = account.sign_typed_data(full_message=typed).signature
        deadline = typed["message"]["deadline"]
        body = {"deadline": deadline, "signature": signature.to_0x_hex()}
        return body, (int(deadline), *split_signature(bytes(signature)))

    async def train(
        self,
        config: str | Path,
        max_budget: float | str | Decimal,
        *,
        max_price: float | str | Decimal = 100,
        tier: str = "community",
        nodes: int | None = None,
        sample_rate_bps: int = 1_000,
        checkpoint_interval: int = 600,
        unit_gpu_seconds: int = DEFAULT_UNIT_GPU_SECONDS,
    ) -> AsyncJob:
        """Upload the spec, escrow `max_budget` ZEN with a permit (one transaction), and return the
        job.

        Amounts are in ZEN; `max_price` is per GPU-hour; `unit_gpu_seconds` is what one work unit
        is worth in GPU-seconds of the tier's reference GPU (a unit pays the clearing price times
        it / 3600, whatever hardware runs it). The gateway refuses a bad spec (naming the
        field), a budget below the reserve and a budget above the wallet's ZEN before anything is
        signed.
        """
        return await self.submit(
            jobs.read_spec_text(Path(config)),
            Order(
                max_budget=wei(max_budget),
                max_price=wei(max_price),
                tier=Tier.named(tier),
                nodes=nodes,
                sample_rate_bps=sample_rate_bps,
                checkpoint_interval=checkpoint_interval,
                unit_gpu_seconds=unit_gpu_seconds,
            ),
        )

    async def submit(self, spec_text: str, order: Order) -> AsyncJob:
        """`train` with the spec's text and an order in wei: what the CLI sends whichever way it
        reaches the chain. A registered version the spec fine-tunes is pinned to its folder's
        CID first, as the indexed registry names it."""
        spec_text = await self._resolve_base(spec_text)
        spec = await self.upload_spec(spec_text)
        permit, permit_args = await self._signed_permit("JobMarket", order.max_budget)
        created = await self.transact(
            "/transactions/jobs",
            {
                "spec_cid": spec["cid"],
                "max_budget": str(order.max_budget),
                "max_price": str(order.max_price),
                "tier": order.tier,
                "nodes": order.nodes,
                "sample_rate_bps": order.sample_rate_bps,
                "checkpoint_interval": order.checkpoint_interval,
                "unit_gpu_seconds": order.unit_gpu_seconds,
                "permit": permit,
            },
            lambda ledger: ledger.create_job_call(
                jobs.job_request(spec_text, spec["cid"], order), permit_args
            ),
        )
        return AsyncJob(self, created["job_id"])

    async def _resolve_base(self, spec_text: str) -> str:
        try:
            parsed = parse_spec(spec_text)
        except SpecError:
            return spec_text  # the gateway refuses it, saying why, as it refuses any bad spec
        base = parsed.model.base if isinstance(parsed.model, HFSpec) else None
        if base is None or base.cid is not None:
            return spec_text
        version = await self.resolve("models", base.name)
        return jobs.pin_base(spec_text, base.name, version["cid"])

    async def withdraw(self) -> dict:
        """Take what the market owes this wallet (a provider's or verifier's pay)."""
        return await self.transact("/transactions/withdraw", {}, Ledger.withdraw_call)

    # --- providers and verifiers ----------------------------------------------------------

    async def register_provider(self, hardware: Hardware, tier: str = "community") -> dict:
        """Register the wallet as a provider of `tier` with this hardware; `hardware.attestation` is
        the sha2-256 digest of its pinned benchmark report, which a verifier checks before admitting
        it."""
        return await self.transact(
            "/transactions/providers",
            {
                "tier": Tier.named(tier),
                "gpu_model": hardware.gpu_model,
                "gpus": hardware.gpus,
                "gpu_memory_gb": hardware.gpu_memory_gb,
                "network_gbps": hardware.network_gbps,
                "endpoint": hardware.endpoint,
                "attestation": "0x" + hardware.attestation.hex(),
            },
            lambda ledger: ledger.register_provider_call(Tier.named(tier), hardware),
        )

    async def register_verifier(self, endpoint: str) -> dict:
        """Register the wallet as a verifier reached at `endpoint`."""
        return await self.transact(
            "/transactions/verifiers",
            {"endpoint": endpoint},
            lambda ledger: ledger.register_verifier_call(endpoint),
        )

    async def stake(self, amount: float | str | Decimal) -> dict:
        """Stake `amount` ZEN in one transaction: a permit for the staking contract, signed here."""
        value = wei(amount)
        permit, permit_args = await self._signed_permit("Staking", value)
        return await self.transact(
            "/transactions/stake",
            {"amount": str(value), "permit": permit},
            lambda ledger: ledger.stake_call(value, permit_args),
        )

    async def unstake(self, amount: float | str | Decimal) -> dict:
        """Move `amount` ZEN of free stake into unbonding (withdraw_stake once the delay is
        over)."""
        value = wei(amount)
        return await self.transact(
            "/transactions/unstake",
            {"amount": str(value)},
            lambda ledger: ledger.request_unstake_call(value),
        )

    async def withdraw_stake(self) -> dict:
        """Take back unbonded stake whose unbonding delay is over."""
        return await self.transact("/transactions/stake/withdraw", {}, Ledger.withdraw_stake_call)


class AsyncJob:
    """One job on the gateway: the journey of marketplace/protocol/journey.py through the gateway,
    with the same calls as the chain's (jobs.ChainJob); and its logs."""

    def __init__(self, client: AsyncClient, job_id: int):
        self.client = client
        self.id = job_id

    def __repr__(self) -> str:
        return f"AsyncJob({self.id})"

    async def status(self) -> dict:
        return await self.client.job(self.id)

    async def progress(self) -> Progress:
        """Units done of total, ZEN accrued (wei), latest loss; `client.metrics` has every
        unit's."""
        metrics = await self.client.metrics(self.id)
        return Progress(
            JobStatus.named(metrics["status"]),
            metrics["units_done"],
            metrics["units_total"],
            int(metrics["accrued"]),
            metrics["loss"],
        )

    async def _indexed(self) -> dict | None:
        """The job as indexed, or None while the indexer has not reached its creation."""
        try:
            return await self.status()
        except GatewayError as exc:
            if exc.status == 404:
                return None
            raise

    async def wait(
        self,
        on_progress: Callable[[Progress], None] | None = None,
        *,
        until: JobStatus = JobStatus.SETTLED,
        auction_timeout: float | None = None,
        on_wait: Callable[[str], None] | None = None,
    ) -> dict:
        """Take the job to `until` (default: settled, settling it once its verification window is
        over) and return it as indexed.

        With `auction_timeout` (seconds), a job still unassigned by then is cancelled for a full
        refund and NoBids is raised. `on_progress` gets the progress whenever it changes, `on_wait`
        what the journey waits for whenever that does. The gateway shows no round deadlines, so a
        round nobody closed waits for its bidders here.
        """
        started, last, said = time.monotonic(), None, None
        while True:
            job = await self._indexed()
            if (
                on_progress is not None
                and job is not None
                and (now := await self.progress()) != last
            ):
                on_progress(now)
                last = now
            waited = time.monotonic() - started
            seen = snapshot(self.id, job)
            step = next_step(seen, until=until, waited=waited, auction_timeout=auction_timeout)
            if on_wait is not None and (saying := waiting_for(seen)) != said:
                on_wait(saying)
                said = saying
            if job is not None and step is Step.ARRIVED:  # an unindexed job only ever waits
                return job
            if job is not None and step is Step.CANCEL:
                await self.cancel()
                raise NoBids(self.id, waited, int(job["budget"]), self.client._account().address)
            if step is Step.SETTLE:
                await self._try_settle()
            await asyncio.sleep(self.client.poll_interval)

    async def _try_settle(self) -> None:
        """Settle if the ledger lets us; someone else settling first, even in the same block, is no
        failure: the next look at the job finds it settled."""
        try:
            settle = f"/transactions/jobs/{self.id}/settle"
            await self.client.transact(settle, {}, lambda ledger: ledger.settle_call(self.id))
        except TransactionReverted:
            pass  # mined behind another settle (or a dispute opened in the same block)
        except GatewayError as exc:
            if exc.status != 409:  # 409: the window is not over yet, or someone settled first
                raise

    async def cancel(self) -> dict:
        """Cancel while no auction has cleared: the whole budget comes back."""
        path = f"/transactions/jobs/{self.id}/cancel"
        return await self.client.transact(path, {}, lambda ledger: ledger.cancel_job_call(self.id))

    async def clearing_price(self) -> int:
        """ZEN wei per GPU-hour the auction cleared at."""
        price = (await self.status())["clearing_price"]
        if price is None:
            raise JobError(f"job {self.id}: no auction has cleared")
        return int(price)

    async def settlement(self) -> Settlement:
        settled = (await self.status())["settlement"]
        if settled is None or settled["cancelled"]:
            raise JobError(f"job {self.id} is not settled")
        return Settlement(
            int(settled["payment"]),
            int(settled["fee"]),
            int(settled["refund"]),
            int(settled["verifier_pool"]),
            settled["tx_hash"],
            settled["block_number"],
        )

    async def result(self, output: str | Path | None = None) -> Result:
        """Download the trained model by CID and write it to `output` (default
        weights/job-<id>.pt; for a Hugging Face model, the folder weights/job-<id> that
        `AutoModelForCausalLM.from_pretrained` loads): the final checkpoint, checked against the
        state hash committed on-chain, or for a group job the model every rank's last round
        holds (see `results.write_result`)."""
        shown = await self.client.request("GET", f"/jobs/{self.id}/result")
        spec_cid = (await self.status())["spec_cid"]
        path = Path(output) if output is not None else default_output(self.id)
        units = [results.LastUnit(**slot) for slot in shown["slots"]]

        def fetch() -> tuple[str, str, Path]:
            with Storage(self.client.ipfs_api, self.client.ipfs_replicas) as storage:
                return results.write_result(
                    storage,
                    self.id,
                    units,
                    shown["nodes"],
                    shown["units_per_node"],
                    path,
                    spec_cid,
                )

        cid, digest, written = await asyncio.to_thread(fetch)
        return Result(self.id, cid, "0x" + digest, written)

    async def logs(self, *, follow: bool = False, since: int = 0) -> AsyncGenerator[dict]:
        """The job's log lines after line `since`, every page of them; with `follow`, keep reading
        new ones until the job is finished."""
        while True:
            lines = await self.client.logs(self.id, since)
            for line in lines:
                yield line
                since = line["id"]
            if lines:
                continue  # the gateway answers a page at a time
            if not follow:
                return
            job = await self._indexed()
            if job is not None and job["status"] in FINISHED:
                return
            await asyncio.sleep(self.client.poll_interval)


def snapshot(job_id: int, job: dict | None) -> Snapshot:
    """What the gateway's index shows the journey: the job's status and budget, nothing of the
    chain's clock, deadlines or disputes (`next_step` does without them)."""
    if job is None:
        return Snapshot(job_id, JobStatus.NONE)
    return Snapshot(job_id, JobStatus.named(job["status"]), int(job["budget"]))
