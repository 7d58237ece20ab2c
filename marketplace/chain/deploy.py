"""Deploy the ledger to any RPC URL and write a manifest that outside tools can use."""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path

from eth_account.signers.local import LocalAccount
from eth_typing import ChecksumAddress
from eth_utils import to_checksum_address
from web3 import Web3
from web3.contract import Contract

from marketplace.chain.compile import compile_contracts
from marketplace.chain.errors import ChainError
from marketplace.chain.toolchain import PROJECT_ROOT
from marketplace.chain.tx import send
from marketplace.chain.zen import ZEN

log = logging.getLogger(__name__)

DEPLOYMENTS = PROJECT_ROOT / "deployments"


@dataclass(frozen=True)
class Tier:
    name: str
    min_stake: int  # ZEN wei
    min_gpus: int
    min_gpu_memory_gb: int
    min_network_gbps: int
    uptime_sla_bps: int

    def as_struct(self) -> tuple:
        return (
            self.name,
            self.min_stake,
            self.min_gpus,
            self.min_gpu_memory_gb,
            self.min_network_gbps,
            self.uptime_sla_bps,
        )


TIERS = (
    Tier("Community", 1_000 * ZEN, 0, 0, 1, 9_000),  # consumer GPUs and CPU nodes
    Tier("Bronze", 10_000 * ZEN, 4, 40, 100, 9_500),  # 4x A100 40GB
    Tier("Silver", 50_000 * ZEN, 8, 80, 200, 9_900),  # 8x A100 80GB
    Tier("Gold", 100_000 * ZEN, 8, 80, 400, 9_950),  # 8x H100 80GB
)


@dataclass(frozen=True)
class Parameters:
    """Governance parameters set at deploy; a devnet shortens the windows."""

    supply: int = 1_000_000_000 * ZEN
    unbonding_delay: int = 7 * 24 * 3600
    reporter_bps: int = 1_000  # reporter's share of a slash
    min_verifier_stake: int = 1_000 * ZEN
    fee_bps: int = 500  # network fee: 5%
    collateral_bps: int = 5_000  # collateral = 50% of a slot's budget
    bid_window: int = 600
    reveal_window: int = 600
    verification_fee: int = 1 * ZEN  # per verification, out of the network fee
    verification_window: int = 3_600
    dispute_window: int = 3_600
    false_report_slash: int = 500 * ZEN
    # Seconds every governance call waits in the timelock, in public, before anyone may execute it:
    # days on a real network, so stakers and users can leave before a change they reject.
    governance_delay: int = 2 * 24 * 3600
    tiers: tuple[Tier, ...] = TIERS


@dataclass
class Deployment:
    """Addresses and ABIs of a deployed ledger, as written to and read from the manifest."""

    chain_id: int
    deploy_block: int
    addresses: dict[str, ChecksumAddress]
    abis: dict[str, list[dict]]
    parameters: dict = field(default_factory=dict)

    def contract(self, w3: Web3, name: str) -> Contract:
        return w3.eth.contract(address=self.addresses[name], abi=self.abis[name])

    def to_json(self) -> dict:
        return {
            "chainId": self.chain_id,
            "deployBlock": self.deploy_block,
            "contracts": {
                n: {"address": a, "abi": self.abis[n]} for n, a in self.addresses.items()
            },
            "parameters": self.parameters,
        }

    def write(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.to_json(), indent=2))
        tmp.replace(path)
        return path

    @classmethod
    def load(cls, path: Path) -> Deployment:
        try:
            data = json.loads(Path(path).read_text())
        except FileNotFoundError:
            raise ChainError(f"no deployment manifest at {path}: deploy first") from None
        contracts = data["contracts"]
        return cls(
            chain_id=data["chainId"],
            deploy_block=data["deployBlock"],
            addresses={n: to_checksum_address(c["address"]) for n, c in contracts.items()},
            abis={n: c["abi"] for n, c in contracts.items()},
            parameters=data.get("parameters", {}),
        )


def manifest_path(chain_id: int) -> Path:
    """The documented place of a chain's manifest: deployments/<chain id>.json."""
    return DEPLOYMENTS / f"{chain_id}.json"


def deploy(
    w3: Web3,
    deployer: LocalAccount,
    params: Parameters = Parameters(),
    *,
    distributor: str | None = None,
    proposer: str | None = None,
    manifest: Path | None = None,
) -> Deployment:
    """Deploy ZEN, the treasury, staking, the market, verification and the model and dataset
    registry, wire them and their tiers, then hand governance to a timelock.

    The deployer governs only while it wires: it binds the market and verification into staking
    (once, for good), sets tiers and parameters, then grants each contract's governor role to the
    timelock and renounces its own roles, the admin role included, so nobody can grant a role
    again. From then on every governance call is proposed by `proposer` (default: the deployer),
    waits `params.governance_delay` seconds in public, and may be executed by anyone. The ZEN
    supply goes to `distributor` (default: the deployer). The manifest is written to `manifest`,
    default deployments/<chain id>.json.
    """
    artifacts = compile_contracts()
    governor = deployer.address
    start_block = w3.eth.block_number

    def create(name: str, *args) -> Contract:
        art = artifacts[name]
        receipt = send(
            w3, w3.eth.contract(abi=art.abi, bytecode=art.bytecode).constructor(*args), deployer
        )
        address = receipt["contractAddress"]
        assert address is not None  # a contract creation's receipt names the new contract
        log.info("deployed %s at %s", name, address)
        return w3.eth.contract(address=address, abi=art.abi)

    zero = "0x" + "00" * 20  # as the executor: anyone executes a call whose delay is over
    timelock = create("Timelock", params.governance_delay, [proposer or governor], [zero])
    zen = create("ZenToken", distributor or governor, params.supply)
    treasury = create("Treasury", zen.address, governor)
    staking = create(
        "Staking",
        zen.address,
        treasury.address,
        governor,
        params.unbonding_delay,
        params.reporter_bps,
        params.min_verifier_stake,
    )
    market = create("JobMarket", zen.address, staking.address, treasury.address, governor)
    verification = create(
        "Verification",
        market.address,
        staking.address,
        governor,
        params.verification_window,
        params.dispute_window,
        params.false_report_slash,
    )
    registry = create("Registry", market.address)  # ungoverned: names belong to their publishers

    fns = staking.functions
    wiring = [
        market.functions.setVerification(verification.address),
        market.functions.setParameters(
            params.fee_bps,
            params.collateral_bps,
            params.bid_window,
            params.reveal_window,
            params.verification_fee,
        ),
        fns.bind(market.address, verification.address),
        *(fns.setTier(i, tier.as_struct()) for i, tier in enumerate(params.tiers)),
    ]
    governed = (treasury, staking, market, verification)
    governor_role, admin_role = fns.GOVERNOR_ROLE().call(), fns.DEFAULT_ADMIN_ROLE().call()
    for contract in governed:
        wiring += [
            contract.functions.grantRole(governor_role, timelock.address),
            contract.functions.renounceRole(governor_role, governor),
            contract.functions.renounceRole(admin_role, governor),
        ]
    for call in wiring:
        send(w3, call, deployer)
    for contract in governed:
        for role, holder, held in (
            (governor_role, timelock.address, True),
            (governor_role, governor, False),
            (admin_role, governor, False),
            (admin_role, timelock.address, False),
        ):
            if contract.functions.hasRole(role, holder).call() != held:
                raise ChainError(f"governance of {contract.address} was not handed to the timelock")

    deployment = Deployment(
        chain_id=w3.eth.chain_id,
        deploy_block=start_block + 1,
        addresses={
            c_name: c.address
            for c_name, c in [
                ("ZenToken", zen),
                ("Treasury", treasury),
                ("Staking", staking),
                ("JobMarket", market),
                ("Verification", verification),
                ("Registry", registry),
                ("Timelock", timelock),
            ]
        },
        abis={name: art.abi for name, art in artifacts.items()},
        parameters={k: v for k, v in asdict(params).items() if k != "tiers"}
        | {"tiers": [asdict(t) for t in params.tiers]},
    )
    deployment.write(Path(manifest) if manifest else manifest_path(deployment.chain_id))
    return deployment
