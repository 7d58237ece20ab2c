"""Exact and near-duplicate removal over a window of recent documents.

Memory is bounded by `DedupSpec.window`, not by the corpus: the exact set holds one 8-byte
digest per remembered document (~115 bytes with Python's dict overhead, measured), the near
index one MinHash band signature per document (~1.9 KB at num_perm 64, measured with
tracemalloc). At the default window of 100,000 documents that is ~12 MB exact and ~190 MB near;
a duplicate further back than the window is not caught. A provider caps `window_bytes`
(`UnitLimits.max_dedup_bytes`), since the spec that sets the window is a stranger's. Everything
runs in document order, so the same corpus is always reduced to the same documents.
"""

from __future__ import annotations

import hashlib
import re
import zlib
from collections import OrderedDict, deque

from datasketch import MinHash, MinHashLSH

from marketplace.protocol.spec import DedupSpec

EXACT_BYTES_PER_DOCUMENT = 120  # measured: a digest and its dict entry
NEAR_BYTES_PER_PERMUTATION = 30  # measured: ~1.9 KB a document at num_perm 64
_WORD = re.compile(r"\w+")
_MINHASH_SEED = 1  # fixed: every provider and verifier must hash shingles the same way


def window_bytes(spec: DedupSpec) -> int:
    """About how much memory a full window of `spec` holds."""
    per_document = EXACT_BYTES_PER_DOCUMENT if spec.exact else 0
    if spec.near:
        per_document += NEAR_BYTES_PER_PERMUTATION * spec.num_perm
    return spec.window * per_document


class Deduplicator:
    """Says whether a document duplicates one of the last `window` kept documents."""

    def __init__(self, spec: DedupSpec):
        self.spec = spec
        self.exact_dropped = 0
        self.near_dropped = 0
        self._digests: OrderedDict[bytes, None] = OrderedDict()  # oldest first
        self._lsh = MinHashLSH(threshold=spec.threshold, num_perm=spec.num_perm)
        self._keys: deque[int] = deque()  # LSH keys, oldest first
        self._next_key = 0
        # drawn once: MinHash would draw its permutations again for every document
        template = MinHash(num_perm=spec.num_perm, seed=_MINHASH_SEED, hashfunc=zlib.crc32)
        self._permutations, self._scheme = template.permutations, template.scheme

    @property
    def remembered(self) -> int:
        """Documents held for comparison: never more than the window."""
        return max(len(self._digests), len(self._keys))

    def keep(self, text: str) -> bool:
        """True for a document to keep, which is then remembered; False for a duplicate."""
        words = _WORD.findall(text.lower())
        digest = hashlib.blake2b(" ".join(words).encode(), digest_size=8).digest()
        if self.spec.exact and digest in self._digests:
            self.exact_dropped += 1
            return False
        signature = self._minhash(words) if self.spec.near else None
        if signature is not None and self._lsh.query(signature):
            self.near_dropped += 1
            return False
        if self.spec.exact:
            self._digests[digest] = None
            if len(self._digests) > self.spec.window:
                self._digests.popitem(last=False)
        if signature is not None:
            self._lsh.insert(self._next_key, signature, check_duplication=False)
            self._keys.append(self._next_key)
            self._next_key += 1
            if len(self._keys) > self.spec.window:
                self._lsh.remove(self._keys.popleft())
        return True

    def _minhash(self, words: list[str]) -> MinHash:
        n = self.spec.shingle
        shingles = [" ".join(words[i : i + n]).encode() for i in range(max(1, len(words) - n + 1))]
        signature = MinHash(
            num_perm=self.spec.num_perm,
            hashfunc=zlib.crc32,  # a C call per shingle; datasketch's default SHA-1 is 10x slower
            permutations=self._permutations,
            scheme=self._scheme,
        )
        signature.update_batch(shingles)
        return signature
