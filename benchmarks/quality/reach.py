"""Where the warm misses are: which check queries usage can reach at all, and how far.

`toolsift eval --warm` learns the tune half's calls and measures the check half. A check
query whose tools no tune query called gets nothing from learning; one whose tools were
called can still miss when its text is nearer other tools' learned queries. Per dataset,
with `usage.py`'s model of the warm select (the whole tune half learned):

- the check queries by how many of their relevant tools a tune query called (all, some,
  none), and warm hybrid's recall@5 on each group;
- for the queries with at least one called tool, where the usage list alone (the tools by
  their nearest learned query, `dense.fuse`'s `usage_ids`) ranks the best of them: how well
  nearness to the learned queries alone tells a query's tool.

    python benchmarks/quality/reach.py /path/to/datasets/* --cache /tmp/toolsift-tune
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

import numpy as np
import tune
from usage import called_for, replay_of, warm_recall

from toolsift.embedding.learning import KEPT_PER_TOOL
from toolsift.lexical.analysis import LEARNED_WEIGHT
from toolsift.selection import dense

GROUPS = ("all", "some", "none")
RANKS = (1, 5, 10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("datasets", nargs="+", type=Path)
    parser.add_argument("--cache", type=Path, default=tune.CACHE)
    args = parser.parse_args()
    print(
        "| dataset | check queries: all / some / none called | warm hybrid: all / some / none"
        " | usage list ranks a called tool: first / top 5 / top 10 / below |"
    )
    print("|---|---:|---:|---:|")
    with tune.session(args.cache) as tuner:
        for directory, prepared in tune.each_dataset(tuner, args.datasets):
            data = replay_of(tuner, prepared)
            queries, tune_half, check_half = data.queries, data.tune_half, data.check_half
            names = {name: i for i, name in enumerate(prepared.names)}
            learned = called_for(prepared, tune_half)
            kept = {t: np.array(qs[-KEPT_PER_TOOL:]) for t, qs in learned.items()}
            groups: dict[str, list[int]] = {g: [] for g in GROUPS}
            ranks: Counter[int] = Counter()
            for q in check_half:
                relevant = {names[t] for t in prepared.dataset.queries[q].relevant if t in names}
                called = relevant & kept.keys()
                group = "none" if not called else "all" if called == relevant else "some"
                groups[group].append(q)
                if called:
                    nearest = {
                        t: float(np.min(1.0 - queries[qs] @ queries[q])) for t, qs in kept.items()
                    }
                    order = sorted(nearest, key=lambda t: (nearest[t], t))
                    ranks[min(order.index(t) for t in called) + 1] += 1
            measure = {
                g: warm_recall(
                    prepared,
                    data.tfs,
                    data.terms,
                    data.own,
                    queries,
                    tune_half,
                    qs,
                    [dense.Fusion()],
                    LEARNED_WEIGHT,
                ).hybrid[0]
                for g, qs in groups.items()
                if qs
            }
            reached = sum(ranks.values())
            shares = [sum(n for r, n in ranks.items() if r <= cut) for cut in RANKS]
            cells = [
                " / ".join(str(len(groups[g])) for g in GROUPS),
                " / ".join(f"{measure[g]:.3f}" if g in measure else "-" for g in GROUPS),
                " / ".join(f"{s / reached:.2f}" for s in shares)
                + f" / {1 - shares[-1] / reached:.2f}"
                if reached
                else "-",
            ]
            print(f"| {directory.name} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
