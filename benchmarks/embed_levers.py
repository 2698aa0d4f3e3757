"""In-process levers of the ONNX embedding backend that keep the model and its vectors.

    .venv/bin/python benchmarks/embed_levers.py [--texts 640] [--rounds 3] [--only batching]

The texts are `toolsift bench embed`'s documents (its synthetic catalog through
`document_text`), fed in the worker's task size (`embed_batch_tools`, 64 by default): that is
what one `embed()` call sees in the worker. Every variant runs once per round, in a rotating
order, so a burst of load from other work hits each of them alike; the figure that counts is
each variant's rate divided by the baseline's in the same round (median over rounds). Each
variant's vectors are compared with the baseline's (worst cosine). One thread, like a worker.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from toolsift.config import get_settings
from toolsift.embedding import onnx
from toolsift.embedding.service import document_text
from toolsift_tooling.bench.synthetic import generate_catalog

Vectors = npt.NDArray[np.float32]
Embed = Callable[[Sequence[str]], Vectors]


def _texts(count: int) -> list[str]:
    catalog = generate_catalog("embed", count, seed=7, queries=0)
    return [
        document_text(t.name, t.title, t.description or "", t.input_schema or {}, t.examples or [])
        for t in catalog.tools
    ]


def _session(**config: Any) -> Any:
    import onnxruntime as ort  # type: ignore[import-untyped]

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    options.execution_mode = config.pop("execution_mode", ort.ExecutionMode.ORT_SEQUENTIAL)
    options.graph_optimization_level = config.pop(
        "level", ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    )
    options.enable_cpu_mem_arena = config.pop("arena", True)
    options.enable_mem_pattern = config.pop("mem_pattern", True)
    model = str(config.pop("model", onnx.default_model_path()))
    if "save_to" in config:
        options.optimized_model_filepath = str(config.pop("save_to"))
    for key, value in config.pop("entries", {}).items():
        options.add_session_config_entry(key, value)
    assert not config, config
    return ort.InferenceSession(model, sess_options=options, providers=["CPUExecutionProvider"])


def _tokenizer() -> Any:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(onnx.TOKENIZER_PATH))
    tokenizer.enable_truncation(max_length=onnx.MAX_TOKENS)
    tokenizer.no_padding()
    return tokenizer


def _run(session: Any, ids: list[list[int]]) -> Vectors:
    width = max(len(row) for row in ids)
    input_ids = np.zeros((len(ids), width), dtype=np.int64)
    mask = np.zeros((len(ids), width), dtype=np.int64)
    for row, token_ids in enumerate(ids):
        input_ids[row, : len(token_ids)] = token_ids
        mask[row, : len(token_ids)] = 1
    feeds = {"input_ids": input_ids, "attention_mask": mask, "token_type_ids": np.zeros_like(mask)}
    (hidden,) = session.run(["last_hidden_state"], feeds)
    return onnx.mean_pool_normalise(np.asarray(hidden, dtype=np.float32), mask)


def _by_count(lengths: list[int], batch: int) -> list[list[int]]:
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    return [order[i : i + batch] for i in range(0, len(order), batch)]


def _by_tokens(lengths: list[int], budget: int) -> list[list[int]]:
    """Sorted by length; a sub-batch grows while its padded size stays within `budget`."""
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    batches: list[list[int]] = [[]]
    for i in order:
        if batches[-1] and lengths[i] * (len(batches[-1]) + 1) > budget:
            batches.append([])
        batches[-1].append(i)
    return batches


def variant(
    session: Any,
    tokenizer: Any,
    plan: Callable[[list[int]], list[list[int]]],
    *,
    encode_batch: bool = True,
) -> Embed:
    def embed(texts: Sequence[str]) -> Vectors:
        if encode_batch:
            ids = [e.ids for e in tokenizer.encode_batch(list(texts))]
        else:
            ids = [tokenizer.encode(t).ids for t in texts]
        out = np.empty((len(texts), onnx.DIMENSION), dtype=np.float32)
        for chunk in plan([len(row) for row in ids]):
            out[chunk] = _run(session, [ids[i] for i in chunk])
        return out

    return embed


def _time(embed: Embed, texts: list[str], task: int) -> tuple[float, Vectors]:
    started = time.perf_counter()
    parts = [embed(texts[i : i + task]) for i in range(0, len(texts), task)]
    return len(texts) / (time.perf_counter() - started), np.concatenate(parts)


def _cosine_floor(a: Vectors, b: Vectors) -> float:
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    cos = (a64 * b64).sum(1) / (np.linalg.norm(a64, axis=1) * np.linalg.norm(b64, axis=1))
    return float(cos.min())


def compare(variants: dict[str, Embed], texts: list[str], task: int, rounds: int) -> None:
    names = list(variants)
    for embed in variants.values():  # load, warm up
        embed(texts[:task])
    rates: dict[str, list[float]] = {n: [] for n in names}
    ratios: dict[str, list[float]] = {n: [] for n in names}
    floors: dict[str, float] = dict.fromkeys(names, 1.0)
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        got = {n: _time(variants[n], texts, task) for n in order}
        base_rate, base_vectors = got[names[0]]
        for n in names:
            rate, vectors = got[n]
            rates[n].append(rate)
            ratios[n].append(rate / base_rate)
            floors[n] = min(floors[n], _cosine_floor(vectors, base_vectors))
        sys.stdout.write(f"  round {r + 1}, load average {os.getloadavg()[0]:.2f}\n")
    sys.stdout.write(
        f"| variant (vs {names[0]}) | tools/s per round | median ratio | worst cosine |\n"
    )
    sys.stdout.write("|---|---|---:|---:|\n")
    for n in names:
        per_round = " / ".join(f"{x:.0f}" for x in rates[n])
        sys.stdout.write(
            f"| {n} | {per_round} | {statistics.median(ratios[n]):.2f}x | {floors[n]:.6f} |\n"
        )
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> None:
    import onnxruntime as ort

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--texts", type=int, default=640)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--task", type=int, default=get_settings().embed_batch_tools)
    parser.add_argument("--only", choices=["tokenizer", "batching", "session"], nargs="*")
    args = parser.parse_args(argv)
    texts = _texts(args.texts)
    tokenizer = _tokenizer()
    lengths = [len(e.ids) for e in tokenizer.encode_batch(texts)]
    sys.stdout.write(
        f"{len(texts)} documents, {statistics.mean(lengths):.1f} word pieces on average "
        f"(max {max(lengths)}), tasks of {args.task}, load average {os.getloadavg()}\n"
    )
    only = set(args.only or ["tokenizer", "batching", "session"])

    if "tokenizer" in only:
        for label, fn in (
            ("encode() per text", lambda: [tokenizer.encode(t).ids for t in texts]),
            ("encode_batch()", lambda: [e.ids for e in tokenizer.encode_batch(texts)]),
        ):
            best = min(_timed(fn) for _ in range(5))
            sys.stdout.write(f"tokenizer {label}: {len(texts) / best:.0f} texts/s\n")

    session = _session()
    if "batching" in only:
        sys.stdout.write("batching (ENABLE_ALL session, one thread):\n")
        compare(
            {
                "sorted, 32 a batch (current)": variant(
                    session, tokenizer, lambda n: _by_count(n, 32), encode_batch=False
                ),
                "sorted, 1 a batch": variant(session, tokenizer, lambda n: _by_count(n, 1)),
                "sorted, 4 a batch": variant(session, tokenizer, lambda n: _by_count(n, 4)),
                "sorted, 8 a batch": variant(session, tokenizer, lambda n: _by_count(n, 8)),
                "sorted, 16 a batch": variant(session, tokenizer, lambda n: _by_count(n, 16)),
                "sorted, 64 a batch": variant(session, tokenizer, lambda n: _by_count(n, 64)),
                "sorted, <= 256 padded tokens": variant(
                    session, tokenizer, lambda n: _by_tokens(n, 256)
                ),
                "sorted, <= 512 padded tokens": variant(
                    session, tokenizer, lambda n: _by_tokens(n, 512)
                ),
            },
            texts,
            args.task,
            args.rounds,
        )
    if "session" in only:
        with tempfile.TemporaryDirectory() as tmp:
            saved = Path(tmp) / "optimized.onnx"
            _session(save_to=saved)
            level = ort.GraphOptimizationLevel
            sessions = {
                "ENABLE_ALL, arena (current)": session,
                "no CPU memory arena": _session(arena=False),
                "no memory pattern": _session(mem_pattern=False),
                "ENABLE_EXTENDED": _session(level=level.ORT_ENABLE_EXTENDED),
                "ENABLE_BASIC": _session(level=level.ORT_ENABLE_BASIC),
                "optimized file, DISABLE_ALL": _session(model=saved, level=level.ORT_DISABLE_ALL),
                "ORT_PARALLEL": _session(execution_mode=ort.ExecutionMode.ORT_PARALLEL),
                "no spinning": _session(entries={"session.intra_op.allow_spinning": "0"}),
            }
            sys.stdout.write("session options (sorted, 8 a batch):\n")
            compare(
                {
                    name: variant(s, tokenizer, lambda n: _by_count(n, 8))
                    for name, s in sessions.items()
                },
                texts,
                args.task,
                args.rounds,
            )


def _timed(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


if __name__ == "__main__":
    main()
