"""The layers only point down: the foundation imports no role and no app, the roles import no app,
the provider and the verifier keep out of each other's daemons, and no modules import each other in
a circle."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("marketplace", "node", "verifier")
FOUNDATION = (
    "marketplace.errors",
    "marketplace.config",
    "marketplace.wallet",
    "marketplace.processes",
    "marketplace.chain",
    "marketplace.ipfs",
    "marketplace.storage",
    "marketplace.licenses",
    "marketplace.folders",
    "marketplace.catalog",
    "marketplace.protocol",
    "marketplace.runtime",
    "marketplace.serving",
)
ROLES = ("node", "verifier")
FOUNDATION_LAYER, ROLE_LAYER, APP_LAYER = 0, 1, 2
OFF_LIMITS = {
    "node": ("verifier",),
    "verifier": ("node.daemon",),
}  # a re-run may use the engine, not a daemon


def _within(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def layer(module: str) -> int:
    if _within(module, FOUNDATION):
        return FOUNDATION_LAYER
    return ROLE_LAYER if _within(module, ROLES) else APP_LAYER


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path], *, top_level_only: bool) -> set[str]:
    """The project modules `name` imports (all of them, or only those its module body imports as it
    loads)."""
    tree = ast.parse(path.read_text())
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = (
                ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                if node.level
                else ""
            )
            module = ".".join(part for part in (base, node.module or "") if part)
            targets = [module] + [f"{module}.{alias.name}" for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def test_every_import_points_down_or_sideways():
    known = modules()
    upward = [
        f"{name} -> {target}"
        for name, path in known.items()
        for target in imports(name, path, known, top_level_only=False)
        if layer(target) > layer(name)
        or any(
            _within(name, (role,)) and _within(target, banned)
            for role, banned in OFF_LIMITS.items()
        )
    ]
    assert upward == []


def test_no_modules_import_each_other_in_a_circle_as_they_load():
    known = modules()
    graph = {name: imports(name, path, known, top_level_only=True) for name, path in known.items()}
    state: dict[str, int] = {}  # 1 while on the current path, 2 once done
    cycles = []

    def visit(name: str, path: list[str]) -> None:
        state[name] = 1
        for target in sorted(graph[name]):
            if state.get(target) == 1 and not _parent(target, name):
                cycles.append(" -> ".join([*path[path.index(target) :], target]))
            elif target not in state:
                visit(target, [*path, target])
        state[name] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert cycles == []


def _parent(package: str, module: str) -> bool:
    """A package's __init__ importing its own submodules (and they the package) is how packages
    load."""
    return module.startswith(package + ".")
