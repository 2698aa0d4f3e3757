"""Latency summaries and CPU accounting shared by every measurement."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import psutil


def percentile(ordered: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default) on sorted data."""
    if not ordered:
        return math.nan
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@dataclass(frozen=True)
class Latency:
    """Milliseconds; `count` samples."""

    count: int
    mean: float
    p50: float
    p95: float
    p99: float
    max: float

    @classmethod
    def of(cls, samples_ms: Iterable[float]) -> Latency:
        ordered = sorted(samples_ms)
        if not ordered:
            return cls(0, math.nan, math.nan, math.nan, math.nan, math.nan)
        return cls(
            count=len(ordered),
            mean=sum(ordered) / len(ordered),
            p50=percentile(ordered, 50),
            p95=percentile(ordered, 95),
            p99=percentile(ordered, 99),
            max=ordered[-1],
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class CpuMeter:
    """CPU seconds spent by process trees between two snapshots.

    Workers that start during the window count from zero; ones that exit are lost, which is
    negligible here (pools keep connections and uvicorn keeps its workers).
    """

    def __init__(self, roots: dict[str, tuple[list[int], bool]]) -> None:
        """`roots`: group name -> (pids, whether their descendants count too)."""
        self.roots = roots
        self._start: dict[str, dict[int, float]] = {}

    @staticmethod
    def _tree(pids: list[int], recursive: bool) -> dict[int, float]:
        seen: dict[int, float] = {}
        for pid in pids:
            try:
                process = psutil.Process(pid)
                family = [process, *(process.children(recursive=True) if recursive else [])]
            except psutil.Error:
                continue
            for member in family:
                try:
                    times = member.cpu_times()
                except psutil.Error:
                    continue
                seen[member.pid] = times.user + times.system
        return seen

    def start(self) -> None:
        self._start = {name: self._tree(*root) for name, root in self.roots.items()}

    def stop(self) -> dict[str, float]:
        """CPU seconds per group since start()."""
        spent: dict[str, float] = {}
        for name, root in self.roots.items():
            before = self._start.get(name, {})
            now = self._tree(*root)
            spent[name] = sum(max(0.0, cpu - before.get(pid, 0.0)) for pid, cpu in now.items())
        return spent
