"""The job-status cache answers from memory while the index stands still, and rebuilds once the
indexer moves."""

from __future__ import annotations

from marketplace.gateway import db
from marketplace.gateway.api.cache import IndexCache


def test_answers_are_rebuilt_only_when_the_cursor_moves(sessions):
    cache, builds = IndexCache(recheck=0), []

    def build() -> bytes:
        builds.append(1)
        return f"answer {len(builds)}".encode()

    with sessions() as session:
        session.add(db.IndexerState(id=1, chain_id=31337, next_block=10, last_block_hash="0xaa"))
        session.commit()
        assert cache.get(session, "job 1", build) == b"answer 1"
        assert cache.get(session, "job 1", build) == b"answer 1" and len(builds) == 1
        assert cache.fresh("job 1") is None  # a re-read is due (recheck=0): this caller does it
        assert cache.fresh("job 1") == b"answer 1"  # the others are answered meanwhile

        session.get(db.IndexerState, 1).next_block = 11
        session.commit()
        assert cache.get(session, "job 1", build) == b"answer 2"
        assert cache.fresh("job 2") is None
