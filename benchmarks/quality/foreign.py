"""What-if: embed a tool whose description is in a script the model cannot read by its name.

The default model (MiniLM) and the `english` text search configuration read English. 61 of
LiveMCPBench's 527 tools (and 220 of the MCP registry catalog's 6,344) are described in
Chinese, mostly with English names (`get-tickets`, `recommendMeals`), and its requests are
English. Here a tool whose description's letters are more than `--share` CJK is embedded
without its description (`name (title): Parameters: ...`); BM25 is unchanged. Cold,
recall@5 of each mode: all queries (tune half / check half), as `tune.py` prints them.

    python benchmarks/quality/foreign.py /path/to/datasets/* --cache /tmp/toolsift-tune
"""

from __future__ import annotations

import argparse
import re
from functools import partial
from pathlib import Path

import tune

from toolsift.embedding.service import document_text
from toolsift_tooling.eval.dataset import EvalTool

_CJK = re.compile(r"[\u3000-\u9fff\uff00-\uffef]")


def foreign(text: str, share: float) -> bool:
    letters = [c for c in text if c.isalpha()]
    return bool(letters) and sum(1 for c in letters if _CJK.match(c)) > share * len(letters)


def without_foreign(tool: EvalTool, share: float) -> str:
    t = tool.tool
    description = "" if foreign(t.description, share) else t.description
    return document_text(t.name, t.title, description, t.input_schema, t.examples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("datasets", nargs="+", type=Path)
    parser.add_argument("--cache", type=Path, default=tune.CACHE)
    parser.add_argument("--share", type=float, default=0.3, help="CJK share of the letters")
    args = parser.parse_args()
    variants = {
        "served": tune.Config(),
        "by name": tune.Config(document=partial(without_foreign, share=args.share)),
    }
    with tune.session(args.cache) as tuner:
        for directory, prepared in tune.each_dataset(tuner, args.datasets):
            count = sum(
                1 for t in prepared.dataset.tools if foreign(t.tool.description, args.share)
            )
            for label, config in variants.items():
                scores = tune.evaluate(tuner, prepared, config, ("bm25", "dense", "hybrid"))
                cells = [f"{m} {a:.3f} ({t:.3f}/{c:.3f})" for m, (a, t, c) in scores.items()]
                print(f"{directory.name:<17} {count:>4} {label:<8} " + "  ".join(cells), flush=True)


if __name__ == "__main__":
    main()
