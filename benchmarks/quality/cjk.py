"""What-if for CJK text in BM25, in tune.py's loop: the analysis before migration 0035, the
one served, and pairs of characters at half a word's weight.

Before 0035 the text search parser kept a run of Chinese, Japanese or Korean characters as
one word; since, `toolsift_cjk_bigrams` reads it as overlapping pairs (docs/decisions.md,
"Chinese, Japanese and Korean text is read as pairs of characters"). A run of n characters
gives n - 1 pairs, about twice its words, so a tool described in Chinese becomes a longer
document; `half` counts each pair as half a word to see what that length costs. Prints
recall@5 of BM25 and hybrid on all queries, the tune half and the check half, and how many
queries' first ten tools moved from `before`.

    python benchmarks/quality/cjk.py tests/data/cjk /path/to/datasets/livemcpbench
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import tune

#: A pair's first letter: the ranges `toolsift_cjk_bigrams` pairs, read from its file (Python's
#: `re` reads the same `\uXXXX` ranges).
_LETTERS = re.search(r"letters CONSTANT text := '([^']+)'", tune.CJK_BIGRAMS)
assert _LETTERS is not None
_PAIR = re.compile(f"^[{_LETTERS[1]}]")
VARIANTS = ("before", "pairs", "half")


class Halved(tune.Analyser):
    """Counts each pair of CJK characters as half a word."""

    def lexemes(self, config: str, texts: Sequence[str]) -> list[Counter[str]]:
        return [
            Counter({k: v / 2 if _PAIR.match(k) else v for k, v in counts.items()})
            for counts in super().lexemes(config, texts)
        ]


class Variant:
    """Makes `tuner` read text as a variant does: through the function it calls in the
    database (`before`: none), and with pairs at half weight (`half`)."""

    def __init__(self, tuner: tune.Tuner) -> None:
        self.tuner = tuner
        self.plain = tuner.analyser
        self.halved = Halved(self.plain.connection)  # creates the served function again

    def use(self, variant: str, prepared: tune.Prepared) -> None:
        self.plain.connection.execute(
            "CREATE OR REPLACE FUNCTION public.toolsift_cjk_bigrams(p_text text) RETURNS text"
            " LANGUAGE sql IMMUTABLE STRICT AS 'SELECT p_text'"
            if variant == "before"
            else tune.CJK_BIGRAMS
        )
        for analyser in (self.plain, self.halved):
            analyser.memo.clear()
        prepared.field_lexemes.clear()
        prepared.query_lexemes.clear()
        self.tuner.analyser = self.halved if variant == "half" else self.plain


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("datasets", nargs="+", type=Path)
    parser.add_argument("--cache", type=Path, default=tune.CACHE)
    args = parser.parse_args()
    config = tune.Config()
    with tune.session(args.cache) as tuner:
        variant = Variant(tuner)
        for directory, prepared in tune.each_dataset(tuner, args.datasets):
            tune_half, check_half = tune.halves(prepared.dataset)
            everyone = range(len(prepared.dataset.queries))
            print(f"{directory.name}: recall@5 all / tune / check; first ten moved")
            first: dict[str, list[list[int]]] = {}
            for name in VARIANTS:
                variant.use(name, prepared)
                scored = tuner.bm25_scored(prepared, config)
                runs = {
                    "bm25": [r.ids for r in scored],
                    "hybrid": tuner.hybrid(scored, tuner.dense(prepared, config), config.fusion),
                }
                for mode, ranking in runs.items():
                    base = first.setdefault(mode, ranking)
                    moved = sum(a[:10] != b[:10] for a, b in zip(base, ranking, strict=True))
                    cells = " / ".join(
                        f"{tune.recall5(prepared, ranking, s):.3f}"
                        for s in (everyone, tune_half, check_half)
                    )
                    print(f"  {name:7} {mode:7} {cells}  {moved}")
            if tuner.vectors is not None:
                tuner.vectors.save()


if __name__ == "__main__":
    main()
