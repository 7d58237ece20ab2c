"""A service struck by `kill_tree` is gone when the call returns, children and all: a restart
that follows at once must not find it running (nor its port taken)."""

from __future__ import annotations

import sys

from marketplace.devnet.process import Service, descendants

# A parent that starts a child (a group job's rank, say) and both sleep.
PARENT = (
    "import subprocess, sys, time;"
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']);"
    "print('ready', flush=True); time.sleep(600)"
)


def test_kill_tree_returns_once_the_process_and_its_children_are_gone(tmp_path):
    for attempt in range(5):  # the race was lost one try in a few
        log = str(tmp_path / f"{attempt}.log")
        service = Service("sleeper", [sys.executable, "-c", PARENT], log)
        service.start({}, tmp_path).wait_for_log("ready", timeout=30)
        children = descendants(service.pid)
        assert children
        service.kill_tree()
        assert not service.alive()
        assert not [child for child in children if Service("rank", [], "", child).alive()]
