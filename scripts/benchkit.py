"""What every bench prints at its end: the median of its repetitions, their spread, and a verdict
on the median against each target.

One run of a bench on a shared machine is one draw from a spread that other work on the machine
sets, so a figure is the median of several repetitions, each running ours and its baseline back
to back in turn (`interleave`), and a target is met only when that median meets it. CPU time is
measured beside wall time (`Timer`): it moves far less with other load than wall time does.
The benches run as `python scripts/bench_x.py`, which puts this folder on the import path.
"""

from __future__ import annotations

import json
import operator
import os
import re
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from math import floor, isfinite, log10
from pathlib import Path
from typing import Any, Self, TypeVar

from rich.console import Console
from rich.table import Table

T = TypeVar("T")

_COMPARISONS = {">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt}
_TARGET = re.compile(r"\s*(>=|<=|>|<)\s*([-+]?[0-9_.]+(?:[eE][-+]?[0-9]+)?)\s*")
SIGNIFICANT_DIGITS = 4


@dataclass(frozen=True)
class Target:
    """A bound on a figure, written as in the JSON line: `">= 0.97"`, `"< 64"`."""

    text: str
    holds: Callable[[float, float], bool]
    bound: float

    @classmethod
    def parse(cls, text: str) -> Target:
        match = _TARGET.fullmatch(text)
        if match is None:
            raise ValueError(f"target {text!r} is not a comparison (>=, <=, >, <) and a number")
        return cls(text.strip(), _COMPARISONS[match[1]], float(match[2]))

    def met(self, value: float) -> bool:
        return self.holds(value, self.bound)


def cpu_seconds(root: int) -> float:
    """User + system seconds so far of process `root` and every process under it: each one's
    own (all its threads) and what it collected from the children it reaped. A descendant
    orphaned by its parent's exit drops out, so `root` should outlive what it measures."""
    own: dict[int, int] = {}
    children: defaultdict[int, list[int]] = defaultdict(list)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:  # after the command's closing parenthesis: state, ppid, ... utime is the 12th
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # exited while we looked
            continue
        own[int(entry.name)] = sum(int(ticks) for ticks in fields[11:15])
        children[int(fields[1])].append(int(entry.name))
    ticks, todo = 0, [root]
    while todo:
        pid = todo.pop()
        ticks += own.get(pid, 0)
        todo += children[pid]
    return ticks / os.sysconf("SC_CLK_TCK")


class Timer:
    """Wall and CPU seconds of a `with` block. CPU time counts process `root` (this one by
    default) and all it started, so a side whose work runs in a server or a worker pays for it."""

    def __init__(self, root: int | None = None):
        self.root = os.getpid() if root is None else root
        self.wall_s = self.cpu_s = 0.0

    def __enter__(self) -> Self:
        self._cpu = cpu_seconds(self.root)
        self._wall = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall_s = time.perf_counter() - self._wall
        self.cpu_s = cpu_seconds(self.root) - self._cpu


def interleave(
    sides: Mapping[str, Callable[[int], T]], repetitions: int, warmup: int = 0
) -> Iterator[dict[str, T]]:
    """Each side once per repetition, back to back, the first of them turning each time: load
    from elsewhere and drift (caches, clocks, heat) then fall on every side alike, and a side's
    result is compared with the others' of the same repetition. Sides get the repetition's index
    (warm-ups included, from 0); the first `warmup` repetitions are run and not yielded."""
    names = list(sides)
    for index in range(warmup + repetitions):
        turn = index % len(names)
        results = {name: sides[name](index) for name in names[turn:] + names[:turn]}
        if index >= warmup:
            yield results


@dataclass(frozen=True)
class Summary:
    """One figure over the repetitions."""

    median: float
    low: float
    high: float

    @classmethod
    def of(cls, values: list[float]) -> Summary:
        return cls(statistics.median(values), min(values), max(values))


class Bench:
    """A bench's figures as they come, one repetition at a time, and its closing report."""

    def __init__(self, name: str, targets: Mapping[str, str]):
        self.name = name
        self.targets = {figure: Target.parse(text) for figure, text in targets.items()}
        self.repetitions: list[dict[str, float]] = []
        self._began = time.monotonic()
        self._load_at_start = os.getloadavg()
        self._progress = Console(stderr=True)

    def record(self, figures: Mapping[str, float]) -> None:
        """One repetition's figures; those with a target show on stderr, so a long bench shows
        how it goes."""
        self.repetitions.append(dict(figures))
        shown = ", ".join(f"{k} {_text(v)}" for k, v in figures.items() if k in self.targets)
        self._progress.print(
            f"{self.name} repetition {len(self.repetitions)}: {shown}", soft_wrap=True
        )

    def report(self, title: str, once: Mapping[str, Any] | None = None) -> None:
        """The summary table, the verdicts and the JSON line, on stdout.

        `once` holds figures measured once or the same in every repetition (a count, a peak
        from a process of its own, whether two results agree): reported as they are."""
        if not self.repetitions:
            raise ValueError(f"bench {self.name} recorded no repetition")
        summaries = {
            figure: Summary.of([r[figure] for r in self.repetitions])
            for figure in self.repetitions[0]
        }
        figures = {figure: s.median for figure, s in summaries.items()} | dict(once or {})
        missing = self.targets.keys() - figures.keys()
        if missing:
            raise KeyError(f"targets on figures the bench did not report: {sorted(missing)}")
        met = {figure: target.met(figures[figure]) for figure, target in self.targets.items()}
        n = len(self.repetitions)
        load = {"start": _load(self._load_at_start), "end": _load(os.getloadavg())}
        cores = len(os.sched_getaffinity(0))

        how = (
            f"median of {n} repetitions, min .. max beside it; a target is met when the median"
            " meets it"
            if n > 1
            else "one run"
        )
        table = Table(
            title=title,
            caption=f"{how}. Load average (1, 5, 15 min) {_load_text(load['start'])} at the "
            f"start, {_load_text(load['end'])} at the end; {cores} cores; "
            f"{(time.monotonic() - self._began) / 60:.1f} min",
        )
        for column in ("figure", "median" if n > 1 else "value", "min .. max", "target", ""):
            table.add_column(column, justify="left" if column == "figure" else "right")
        for figure, value in figures.items():
            s = summaries.get(figure)
            spread = f"{_text(s.low)} .. {_text(s.high)}" if s and n > 1 else ""
            verdict = "" if figure not in met else "[green]met" if met[figure] else "[red]not met"
            target = self.targets[figure].text if figure in self.targets else ""
            table.add_row(figure, _text(value), spread, target, verdict)
        console = Console()
        console.print(table)
        console.print(
            f"{sum(met.values())} of {len(met)} target(s) met"
            + (f" on the median of {n} repetitions" if n > 1 else "")
        )

        result = {
            "bench": self.name,
            "figures": {figure: _rounded(value) for figure, value in figures.items()},
            "targets": {figure: target.text for figure, target in self.targets.items()},
            "met": met,
            "spread": {f: [_rounded(s.low), _rounded(s.high)] for f, s in summaries.items()},
            "repetitions": n,
            "load_average": load,
            "cores": cores,
        }
        print(json.dumps(result))


def _rounded(value: Any) -> Any:
    """Floats to SIGNIFICANT_DIGITS, whole from a thousand up (123457, not 123456.7 or 1.235e5);
    the rest as they are."""
    if not isinstance(value, float) or not isfinite(value) or value == 0:
        return value
    decimals = SIGNIFICANT_DIGITS - 1 - floor(log10(abs(value)))
    return round(value, decimals) if decimals > 0 else round(value)


def _text(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    return f"{_rounded(value):,}"


def _load(averages: tuple[float, float, float]) -> list[float]:
    return [round(a, 2) for a in averages]


def _load_text(averages: list[float]) -> str:
    return " ".join(f"{a:.2f}" for a in averages)
