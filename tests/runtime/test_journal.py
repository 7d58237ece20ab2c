"""A journal of another layout is refused when opened, with what to do, instead of failing
mid-run."""

from __future__ import annotations

import sqlite3

import pytest

from marketplace.runtime.journal import JournalError
from node.daemon.journal import Journal as ProviderJournal
from verifier.journal import Journal as VerifierJournal

# The verifier's journal before the runtime: no layout mark, jobs keyed by `job`.
EARLIER_VERIFIER_JOURNAL = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE jobs (job INTEGER PRIMARY KEY, spec_cid TEXT NOT NULL);
INSERT INTO meta VALUES ('next_block', '42');
"""


@pytest.mark.parametrize("journal", [ProviderJournal, VerifierJournal])
def test_a_journal_reopens_with_what_it_recorded(tmp_path, journal):
    path = tmp_path / "journal.sqlite3"
    first = journal(path)
    first.set_cursor(7, None)
    first.close()
    again = journal(path)
    assert again.cursor(0) == (7, None)
    again.close()


def test_an_earlier_layout_is_refused_with_a_remedy(tmp_path):
    path = tmp_path / "journal.sqlite3"
    with sqlite3.connect(path) as db:
        db.executescript(EARLIER_VERIFIER_JOURNAL)
    with pytest.raises(JournalError, match=r"layout 1, this version reads 5\): move it away"):
        VerifierJournal(path)
    with sqlite3.connect(path) as db:  # left as it was
        assert db.execute("SELECT value FROM meta WHERE key = 'next_block'").fetchone() == ("42",)


@pytest.mark.parametrize(("layout", "kept"), [(3, "rejections"), (4, "departures")])
def test_a_verifier_journal_that_kept_no_rejections_or_departures_is_refused(
    tmp_path, layout, kept
):
    """Without the rejections of its past, a verifier's journal would hold a slot's holders to
    later tenure starts than they had; without its departures, former holders to no tenure end
    (verifier/journal.py `slot_tenures`)."""
    path = tmp_path / "journal.sqlite3"
    VerifierJournal(path).close()
    with sqlite3.connect(path) as db:
        db.execute(f"DROP TABLE {kept}")
        db.execute("UPDATE meta SET value = ? WHERE key = 'layout'", (str(layout),))
    with pytest.raises(JournalError, match=rf"layout {layout}, this version reads 5\): move it"):
        VerifierJournal(path)
