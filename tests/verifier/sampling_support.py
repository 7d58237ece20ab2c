"""The sampling rule of Verification.sol in Python, and the statistics of catching a cheater,
for the detection-law test.

A unit committed in block b is sampled when keccak256(abi.encode(seed(b), jobId, slot,
index)) mod 10 000 < sampleRateBps. A provider that fakes n units of a job is caught when any
of them is sampled: with probability 1 - (1 - p)^n, each unit's seed being a fresh block hash.
"""

from __future__ import annotations

import math
import random

from eth_abi import encode
from eth_utils import keccak

BPS = 10_000


def is_sampled(seed: bytes, job_id: int, slot: int, index: int, rate_bps: int) -> bool:
    """Exactly Verification._sampled, given the seed: the hash of the block after the commitment.

    A zero seed (lost: never recorded, and the EVM no longer serves it) samples nothing, as
    on-chain.
    """
    if seed == bytes(32):
        return False
    digest = keccak(encode(["bytes32", "uint256", "uint16", "uint32"], [seed, job_id, slot, index]))
    return int.from_bytes(digest, "big") % BPS < rate_bps


def detection_probability(rate_bps: int, faked_units: int) -> float:
    """1 - (1 - p)^n: the chance that at least one of n faked units is sampled."""
    return 1 - (1 - rate_bps / BPS) ** faked_units


def binomial_stderr(probability: float, trials: int) -> float:
    """Standard error of a fraction observed over `trials` independent trials."""
    return math.sqrt(probability * (1 - probability) / trials)


def simulate_caught(rate_bps: int, faked_units: int, jobs: int, rng: random.Random) -> int:
    """How many of `jobs` simulated jobs, each with `faked_units` faked units, are caught.

    Each faked unit gets a fresh random block hash as its seed and a unit index of its own;
    a job is caught when any of its faked units is sampled (a sampled faked unit always fails
    its re-run, which the integration tests show).
    """
    caught = 0
    for _ in range(jobs):
        job_id, slot = rng.randrange(1, 2**32), rng.randrange(8)
        if any(
            is_sampled(rng.randbytes(32), job_id, slot, index, rate_bps)
            for index in range(faked_units)
        ):
            caught += 1
    return caught
