"""The pages' npm toolchain installs from the committed lock as it stands, and building leaves the
checkout clean."""

from __future__ import annotations

import json
import subprocess

from marketplace.chain.toolchain import PROJECT_ROOT


def git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=PROJECT_ROOT, check=True, capture_output=True, text=True
    ).stdout


def resolves(packages: dict, parent: str, name: str) -> bool:
    """Whether `name`, required by the package at `parent`, has an entry in the lock: node's lookup,
    from the parent's own node_modules up to the root's."""
    folder = parent
    while True:
        if f"{folder}/node_modules/{name}".lstrip("/") in packages:
            return True
        if not folder:
            return False
        folder = folder.rsplit("/node_modules/", 1)[0] if "/node_modules/" in folder else ""


def test_lock_lists_every_dependency_of_every_platform():
    # `npm ci` refuses a lock that lacks an entry npm would write (an optional package of another
    # platform, say), and `npm install` adds the entry to the tracked file: the lock must be whole.
    lock = json.loads((PROJECT_ROOT / "package-lock.json").read_text())
    manifest = json.loads((PROJECT_ROOT / "package.json").read_text())
    packages = lock["packages"]
    assert lock["lockfileVersion"] == 3
    assert packages[""]["devDependencies"] == manifest["devDependencies"]
    missing = [
        f"{parent or 'package.json'} -> {name}"
        for parent, entry in packages.items()
        for kind in ("dependencies", "optionalDependencies", "devDependencies")
        if kind != "devDependencies" or parent == ""
        for name in entry.get(kind, {})
        if not resolves(packages, parent, name)
    ]
    assert missing == []


def test_install_and_build_leave_tracked_files_alone():
    # Set-up ran before the tests (scripts/test.sh runs it): it rewrote no tracked npm file, and the
    # bundles it built are ignored, not untracked files in a clean clone.
    assert git("status", "--porcelain", "--", "package.json", "package-lock.json") == ""
    built = [
        p.relative_to(PROJECT_ROOT).as_posix()
        for p in (PROJECT_ROOT / "marketplace/gateway/web/dist").rglob("*")
        if p.is_file() and p.name != ".gitignore"
    ]
    assert built, "the pages are not built: run `npm run build`"
    assert (
        git("status", "--porcelain", "--untracked-files=all", "--", "marketplace/gateway/web/dist")
        == ""
    )
    assert set(git("check-ignore", *built).split()) == set(built)
