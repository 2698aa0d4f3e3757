"""The margins of recorded `toolsift eval` runs, with their 95 % intervals, from the runs' own
per-query files: how sure each "met by +0.006" or "missed by 0.037" is.

`toolsift eval` writes these margins into results.json and results.md since they existed;
this reads runs recorded before, from their `queries.jsonl` (each mode's and baseline's
ranking of each query) and `results.json` (whether the run was warm), with the eval's own
code (`toolsift_tooling.eval.margins`).

    python benchmarks/quality/margins.py benchmarks/quality/*/check benchmarks/quality/*/warm

With `--versus NAME`, each run is instead set against its sibling folder NAME (the same
dataset's other run, such as `check` beside `check-ensemble`): the mode's recall@5 in each,
and their difference with its 95 % interval, over the queries both answered. The two runs
must differ in the one thing compared: the recorded `check-ensemble` runs, for one, predate
the steps of migration 0033 that `check` has, so against it they mix two changes.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from toolsift_tooling.eval.margins import margins, paired_difference, per_query
from toolsift_tooling.eval.metrics import Outcome
from toolsift_tooling.eval.report import PER_QUERY, RESULTS


def records_of(run: Path) -> dict[str, dict[str, Any]]:
    """The run's per-query records by query id, in the order of its file."""
    lines = (run / PER_QUERY).read_text().splitlines()
    return {record["id"]: record for record in map(json.loads, lines)}


def outcomes_of(records: dict[str, dict[str, Any]], ids: list[str]) -> dict[str, list[Outcome]]:
    """Each mode's and baseline's outcomes of the queries `ids`, in that order, as the run
    had them (rankings only)."""
    found: dict[str, list[Outcome]] = {}
    for query in ids:
        record = records[query]
        relevant = frozenset(record["relevant"])
        for name, ranking in record["rankings"].items():
            found.setdefault(name, []).append(Outcome(ranking, relevant, 0, 0.0))
    return found


def versus(runs: list[Path], other: str, mode: str) -> None:
    """Each run's mode against the same dataset's run `other`, query by query."""
    print(f"| run | queries | {mode} | in {other} | difference (95 % interval) |")
    print("|---|---:|---:|---:|---:|")
    for run in runs:
        sibling = run.parent / other
        mine, theirs = records_of(run), records_of(sibling)
        if mine.keys() != theirs.keys():
            raise SystemExit(f"{run} and {sibling} answered other queries")
        first = outcomes_of(mine, list(mine))[mode]
        gap, (low, high) = paired_difference(first, outcomes_of(theirs, list(mine))[mode])
        this = float(per_query(first).mean())
        print(
            f"| {run.parent.name}/{run.name} | {len(mine)} | {this:.3f} | {this - gap:.3f}"
            f" | {gap:+.3f} ({low:+.3f} to {high:+.3f}) |",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="folders an eval run wrote")
    parser.add_argument("--mode", default="hybrid")
    parser.add_argument("--versus", help="a sibling run's folder name to set each run against")
    args = parser.parse_args()
    if args.versus:
        versus(args.runs, args.versus, args.mode)
        return
    print(
        f"| run | queries | {args.mode} | better baseline | over it (95 % interval)"
        " | target | over the target (95 % interval) |"
    )
    print("|---|---:|---:|---|---:|---:|---:|")
    for run in args.runs:
        results = json.loads((run / RESULTS).read_text())
        records = records_of(run)
        found = {
            m.mode: m for m in margins(outcomes_of(records, list(records)), warm="warm" in results)
        }
        margin = found[args.mode]
        # The per-query file is the run's: it must give the recall@5 the run reported.
        recorded = results["results"][args.mode]["recall@5"]
        if not math.isclose(margin.recall, recorded, abs_tol=1e-9):
            raise SystemExit(f"{run}: recall@5 {margin.recall} here, {recorded} in {RESULTS}")
        low, high = margin.over_baseline_interval
        short_low, short_high = margin.over_target_interval
        print(
            f"| {run.parent.name}/{run.name} | {results['queries']} | {margin.recall:.3f}"
            f" | {margin.baseline[9:]} {margin.baseline_recall:.3f}"
            f" | {margin.over_baseline:+.3f} ({low:+.3f} to {high:+.3f})"
            f" | {margin.target:.3f}"
            f" | {margin.over_target:+.3f} ({short_low:+.3f} to {short_high:+.3f}) |",
            flush=True,
        )


if __name__ == "__main__":
    main()
