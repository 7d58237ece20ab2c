"""The ledger's shared terms, each defined once, numbered as the contracts number them.

Every enum here but Tier mirrors one of contracts/interfaces/*.sol member for member and in order,
since the chain stores only the index; Tier names the ids of the tier table deploy sets up
(tests/chain/test_terms.py holds them together). Off the chain
the CLI, the gateway and the error sentences spell a member in lower case (`JobStatus.OPEN` is
"open"); the gateway's records of slashes keep the contracts' own spelling ("Downtime").
"""

from __future__ import annotations

from enum import IntEnum
from typing import Self


class Term(IntEnum):
    """An enum of the ledger, with its off-chain spellings."""

    @property
    def label(self) -> str:
        """The lower-case name the CLI, the API and the error sentences use."""
        return self.name.lower()

    @property
    def contract_name(self) -> str:
        """The member's name in the Solidity source (`INCORRECT_COMPUTATION` is
        IncorrectComputation)."""
        return "".join(word.capitalize() for word in self.name.split("_"))

    @classmethod
    def labels(cls) -> tuple[str, ...]:
        return tuple(member.label for member in cls)

    @classmethod
    def named(cls, label: str) -> Self:
        """The member a lower-case label names; KeyError for a label that names none."""
        return cls[label.upper()]

    @classmethod
    def label_of(cls, value: int) -> str:
        """The label of the member numbered `value`, or the number as text: governance may add a
        tier this release does not know."""
        try:
            return cls(value).label
        except ValueError:
            return str(value)


class JobStatus(Term):
    """IJobMarket.JobStatus: where a job is in its life."""

    NONE = 0
    OPEN = 1  # first auction running, no slot assigned yet
    RUNNING = 2  # slots assigned; a re-auction may run for vacated slots
    COMPLETED = 3  # every slot done or the job stopped; awaiting verification and settlement
    SETTLED = 4
    CANCELLED = 5  # refunded in full before any slot was assigned


# What a job that exists can be in (NONE is only the status of an id no job has), as the gateway
# and the CLI list them.
JOB_STATUSES = tuple(status.label for status in JobStatus if status is not JobStatus.NONE)


class ParticipantState(Term):
    """IJobMarket.ParticipantState: whether a provider still takes part in a job."""

    NONE = 0
    ACTIVE = 1
    REMOVED = 2


class Role(Term):
    """IStaking.Role: what an account registered as."""

    NONE = 0
    PROVIDER = 1
    VERIFIER = 2


class SlashReason(Term):
    """IStaking.SlashReason: why stake was slashed (or a provider removed from its slot)."""

    DOWNTIME = 0
    INCORRECT_COMPUTATION = 1
    BANDWIDTH_VIOLATION = 2


class Verdict(Term):
    """IVerification.Verdict: the verification state of one sampled unit."""

    NONE = 0
    PASSED = 1
    DISPUTED = 2
    REJECTED = 3  # failure confirmed by a second verifier
    EXPIRED = 4  # dispute not answered in time: accepted, nobody slashed


class Tier(Term):
    """The tier ids deploy gives the tiers (Staking keeps tiers as data, by id, set by
    governance)."""

    COMMUNITY = 0  # consumer GPUs and CPU nodes; what the devnet uses
    BRONZE = 1
    SILVER = 2
    GOLD = 3


# What one work unit is worth when an order does not say: reference GPU-seconds of the job's tier,
# the pay of a unit being the clearing price (per GPU-hour) times this over 3600. A minute of one
# reference GPU fits the H steps of a nanoGPT-sized unit; an order for heavier units says more.
DEFAULT_UNIT_GPU_SECONDS = 60


class Kind(Term):
    """IRegistry.Kind: what a registry name holds; models and datasets are separate namespaces."""

    MODEL = 0  # a Hugging Face folder: config.json, safetensors weights, tokenizer files
    DATASET = 1  # a data file or a folder of shards
