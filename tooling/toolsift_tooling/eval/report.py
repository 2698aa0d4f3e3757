"""What `toolsift eval` writes: results.json, a markdown table, a recall@k chart, per-query
rankings (for looking at misses)."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .runner import Evaluation

RESULTS = "results.json"
TABLE = "results.md"
CHART = "recall.png"
PER_QUERY = "queries.jsonl"


def _pct(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.3f}"


def _queries(data: dict[str, Any]) -> str:
    """`177 queries (check half)`, or `354 queries (both halves)`: which were measured."""
    half = "both halves" if data["half"] == "all" else f"{data['half']} half"
    said = f"{data['queries']} queries ({half})"
    if warm := data.get("warm"):
        said += (
            f", after the {warm['half']} half replayed as usage ({warm['learned']} calls"
            f" learned; the baselines did not learn)"
        )
    return said


def markdown(data: dict[str, Any], ks: Sequence[int]) -> str:
    """One row per mode and baseline of a run's results (`Evaluation.as_json`): recall@k,
    nDCG@10, MRR, tokens, latency; then the margins."""
    head = [*(f"R@{k}" for k in ks), "nDCG@10", "MRR", "tokens (of catalog)", "p50 ms", "p95 ms"]
    lines = [
        f"**{data['dataset']}**: {data['tools']} tools, {_queries(data)}",
        "",
        "| | " + " | ".join(head) + " |",
        "|---|" + "---:|" * len(head),
    ]
    for name, row in data["results"].items():
        share = row["tokens_fraction"]
        tokens = f"{row['tokens_mean']:,.0f} ({share:.1%})" if not math.isnan(share) else "n/a"
        cells = [
            *(_pct(row[f"recall@{k}"]) for k in ks),
            _pct(row["ndcg@10"]),
            _pct(row["mrr"]),
            tokens,
            f"{row['latency_p50_ms']:.1f}",
            f"{row['latency_p95_ms']:.1f}",
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += _margins(data)
    rows: list[dict[str, float]] = list(data["results"].values())
    catalog = rows[0]["catalog_tokens"] if rows else 0
    if catalog:
        lines += ["", f"Whole catalog: {catalog:,.0f} tokens."]
    if settings := data.get("tenant_settings"):
        # A table read without them would pass for the defaults' figures.
        lines += ["", f"Tenant settings: `{json.dumps(settings, sort_keys=True)}`."]
    return "\n".join(lines) + "\n"


def _signed(value: float, interval: Sequence[float]) -> str:
    return f"{value:+.3f} ({interval[0]:+.3f} to {interval[1]:+.3f})"


def _margins(data: dict[str, Any]) -> list[str]:
    """The served modes against the better baseline and the target, with their intervals."""
    found = data.get("margins")
    if not found:
        return []
    first = next(iter(found.values()))
    baseline, goal = first["baseline"], first["target"]
    rule = (
        "half of its misses" if data.get("warm") else "5 points, or half of its misses above 0.90"
    )
    lines = [
        "",
        f"Recall@5 against the better baseline ({baseline}, {first['baseline_recall@5']:.3f})"
        f" and the target ({goal:.3f}: the baseline plus {rule}), each with its 95 % interval"
        " from a paired bootstrap over the queries:",
        "",
        f"| | R@5 | over {baseline} | over the target |",
        "|---|---:|---:|---:|",
    ]
    for mode, margin in found.items():
        lines.append(
            f"| {mode} | {margin['recall@5']:.3f}"
            f" | {_signed(margin['over_baseline'], margin['over_baseline_ci95'])}"
            f" | {_signed(margin['over_target'], margin['over_target_ci95'])} |"
        )
    return lines


def chart(data: dict[str, Any], ks: Sequence[int], path: Path) -> None:
    """Recall@k curves of a run's results, one per mode and baseline (baselines dashed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(6.4, 4.4), dpi=120)
    for name, row in data["results"].items():
        style = "--" if name.startswith("baseline_") else "-"
        axes.plot(list(ks), [row[f"recall@{k}"] for k in ks], style, marker="o", label=name)
    axes.set_xticks(list(ks))
    axes.set_xlabel("k (tools returned)")
    axes.set_ylabel("recall@k")
    axes.set_ylim(0, 1)
    axes.grid(alpha=0.3)
    axes.set_title(f"{data['dataset']}: {data['tools']} tools, {_queries(data)}")
    axes.legend(loc="lower right")
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


def write(evaluation: Evaluation, ks: Sequence[int], out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / RESULTS, out / TABLE, out / CHART, out / PER_QUERY]
    # Built once: its margins are a bootstrap of 10,000 resamples.
    data = evaluation.as_json()
    paths[0].write_text(json.dumps(data, indent=2) + "\n")
    paths[1].write_text(markdown(data, ks))
    chart(data, ks, paths[2])
    with paths[3].open("w") as handle:
        for index, query in enumerate(evaluation.dataset.queries):
            record = {
                "id": query.id,
                "query": query.text,
                "relevant": sorted(query.relevant),
                "rankings": {name: o[index].ranking for name, o in evaluation.outcomes.items()},
            }
            handle.write(json.dumps(record) + "\n")
    return paths
