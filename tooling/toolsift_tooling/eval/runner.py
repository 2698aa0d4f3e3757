"""`toolsift eval` end to end: servers, a fresh tenant, the upload, the embeddings wait,
every query through `POST /v1/select` (concurrently, bounded), then the baselines."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from toolsift.embedding import local as local_models

from ..bench.stack import sigterm_as_interrupt
from . import baselines, client, stack
from .dataset import Dataset
from .margins import Margin, margins
from .metrics import NDCG_DEPTH, Outcome, summarise

MODES = ("bm25", "dense", "hybrid")
EMBEDDING_MODES = frozenset({"dense", "hybrid"})


@dataclass(frozen=True)
class Options:
    modes: Sequence[str] = ("bm25", "dense", "hybrid")
    ks: Sequence[int] = (1, 3, 5, 10)
    baselines: Sequence[str] = baselines.BASELINES
    url: str | None = None
    admin_key: str | None = None
    operator_key: str | None = None
    concurrency: int = 4
    embed_timeout: float = 300.0
    # Queries replayed as logged usage (a select, then a call of each relevant tool) before
    # any measured select: `toolsift eval --warm`. Never the measured ones.
    warm: Dataset | None = None
    # The local model the stack of our own embeds with, and baseline_dense's; None: the
    # configured one (`TOOLSIFT_EMBEDDING_ONNX_MODEL`).
    embedding_model: str | None = None
    # Given to the tenant before its tools are loaded (`toolsift eval --tenant-settings`): a
    # setting's effect measured on a dataset (`text_search`, `fusion`).
    tenant_settings: Mapping[str, Any] | None = None


@dataclass
class Evaluation:
    dataset: Dataset
    results: dict[str, dict[str, float]] = field(default_factory=dict)
    outcomes: dict[str, list[Outcome]] = field(default_factory=dict)
    # With --warm: the replayed half, its queries, and the calls the server learned.
    warm: dict[str, Any] | None = None
    # The model the tenant's vectors were served by, when a mode used them.
    embedding_model: str | None = None
    # The tenant's settings, when the run gave it some.
    tenant_settings: dict[str, Any] | None = None

    def as_json(self) -> dict[str, Any]:
        """The shape of results.json: `half` says which queries were measured ("check",
        "tune" or "all") and `queries` how many of them; `margins`, each served mode's
        recall@5 against the better baseline and the target, with 95 % intervals."""
        data = {
            "dataset": self.dataset.name,
            "tools": len(self.dataset.tools),
            "half": self.dataset.which_half,
            "queries": len(self.dataset.queries),
            "results": self.results,
            **({"embedding_model": self.embedding_model} if self.embedding_model else {}),
            **({"tenant_settings": self.tenant_settings} if self.tenant_settings else {}),
            **({"warm": self.warm} if self.warm is not None else {}),
        }
        if found := self.margins():
            data["margins"] = {m.mode: m.as_json() for m in found}
        return data

    def margins(self) -> list[Margin]:
        """Each served mode against the better baseline and its target, with 95 % intervals."""
        return margins(self.outcomes, warm=self.warm is not None)


def _progress(console: Console) -> Progress:
    return Progress(
        TextColumn("{task.description:<22}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=False,
    )


@contextlib.contextmanager
def _served(
    options: Options, *, embeddings: bool, log: Callable[[str], None]
) -> Iterator[tuple[str, str]]:
    """(url, admin key) of a fresh tenant: on `--url`, or on an embedded stack of our own.

    SIGTERM unwinds as Ctrl-C does on every path: a stack of ours is stopped, a tenant of
    ours deleted, the run's agent key revoked.
    """
    with sigterm_as_interrupt():
        if options.url is None:
            with contextlib.ExitStack() as servers:
                work_dir = Path(
                    servers.enter_context(tempfile.TemporaryDirectory(prefix="toolsift-eval-"))
                )
                log("starting an embedded stack" + (" with a worker" if embeddings else ""))
                settings = {}
                if options.embedding_model is not None:
                    settings["embedding_onnx_model"] = options.embedding_model
                served = stack.start(work_dir, servers, embeddings=embeddings, settings=settings)
                yield served.url, served.admin_key
            return
        url = options.url.rstrip("/")
        # A key the user gave names the tenant; the operator key (often ambient, in .env)
        # only serves when none was given.
        if options.admin_key:
            key = options.admin_key
            admin = client.Admin(url, key)
            try:
                if admin.has_tools():
                    raise client.ApiError(
                        "the tenant of the admin key (--admin-key or TOOLSIFT_ADMIN_KEY) "
                        "already has tools; eval needs an empty tenant (or give no admin key "
                        "and set TOOLSIFT_OPERATOR_KEY to have one created and deleted)"
                    )
            finally:
                admin.close()
            yield url, key
        elif options.operator_key:
            # A tenant of our own, removed with everything the run loaded into it.
            tenant_id, key = client.create_tenant(
                url, options.operator_key, f"toolsift-eval-{os.getpid()}"
            )
            try:
                yield url, key
            finally:
                client.delete_tenant(url, options.operator_key, tenant_id)
        else:
            raise client.ApiError(
                "--url needs TOOLSIFT_OPERATOR_KEY (a fresh tenant is created) or "
                "TOOLSIFT_ADMIN_KEY (of an empty tenant)"
            )


_RATE_LIMIT_RETRIES = 30
# A select the dense side could not serve (its query not embedded in time) is sent again this
# many times before the run fails: its figures would be another mode's.
_DEGRADED_RETRIES = 3


T = TypeVar("T")


def _post(
    http: httpx.Client, stop: threading.Event, path: str, body: bytes
) -> tuple[httpx.Response, float]:
    """One POST, waiting out the server's rate limit; the time of the answer that came."""
    for _ in range(_RATE_LIMIT_RETRIES):
        if stop.is_set():
            raise client.ApiError("stopped")
        started = time.perf_counter()
        response = http.post(path, content=body)
        elapsed = (time.perf_counter() - started) * 1000
        if response.status_code != 429:
            break
        # A dataset can need more requests than a minute's allowance: wait as told.
        stop.wait(min(float(response.headers.get("retry-after", "1")), 60.0))
    return response, elapsed


def _each(
    url: str,
    agent_key: str,
    count: int,
    work: Callable[[httpx.Client, threading.Event, int], T],
    *,
    concurrency: int,
) -> list[T]:
    """`work` for 0..count-1, `concurrency` at a time, a client per thread; the first
    failure, or Ctrl-C, stops the run."""
    local = threading.local()
    headers = {"Authorization": f"Bearer {agent_key}", "Content-Type": "application/json"}
    clients: list[httpx.Client] = []
    lock = threading.Lock()
    stop = threading.Event()

    def one(index: int) -> T:
        http = getattr(local, "http", None)
        if http is None:
            http = local.http = httpx.Client(base_url=url, headers=headers, timeout=60.0)
            with lock:
                clients.append(http)
        return work(http, stop, index)

    pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="eval")
    try:
        futures = [pool.submit(one, i) for i in range(count)]
        done, _ = wait(futures, return_when=FIRST_EXCEPTION)
        failed = next((f for f in done if f.exception() is not None), None)
        if failed is not None:
            raise failed.exception()  # type: ignore[misc]
        return [f.result() for f in futures]
    finally:
        # On a failure or Ctrl-C, no queued request is sent and no thread sends another (a
        # run that goes on after its tenant is deleted only collects 401s); closing the
        # clients first ends the requests in flight instead of waiting up to their timeout.
        stop.set()
        with lock:
            for http in clients:
                http.close()
        pool.shutdown(wait=True, cancel_futures=True)


def _select_all(
    url: str,
    agent_key: str,
    dataset: Dataset,
    *,
    mode: str,
    depth: int,
    concurrency: int,
    advance: Callable[[], None],
    unembedded: int = 0,
) -> list[Outcome]:
    """Every query once, through `POST /v1/select`.

    `unembedded` is how many tools the wait left without a vector: a dense or hybrid answer
    that counts more `missing_embeddings` was served without (all of) the dense side.
    """

    def one(http: httpx.Client, stop: threading.Event, index: int) -> Outcome:
        query = dataset.queries[index]
        body = client.select_body(query.text, mode=mode, k=depth)
        for attempt in range(_DEGRADED_RETRIES + 1):
            response, elapsed = _post(http, stop, "/v1/select", body)
            if response.status_code != 200:
                raise client.ApiError(
                    f"POST /v1/select (mode {mode}, query {query.id}): HTTP "
                    f"{response.status_code}: {response.text[:500]}"
                )
            answer = response.json()
            missing = answer.get("missing_embeddings")
            if missing is None or missing <= unembedded:
                break
            if attempt == _DEGRADED_RETRIES:
                raise client.ApiError(
                    f"POST /v1/select (mode {mode}, query {query.id}) was answered without "
                    f"the dense side {attempt + 1} times (missing_embeddings {missing}, "
                    f"{unembedded} tools without a vector): the query could not be embedded "
                    "in time (TOOLSIFT_EMBEDDING_QUERY_TIMEOUT) or the API embeds with "
                    "another model than the tenant serves; the figures would not be this "
                    "mode's"
                )
            stop.wait(1.0)
        advance()
        return Outcome(client.ranking(answer), query.relevant, int(answer["tokens"]), elapsed)

    return _each(url, agent_key, len(dataset.queries), one, concurrency=concurrency)


def _replay(
    url: str, agent_key: str, usage: Dataset, *, concurrency: int, advance: Callable[[], None]
) -> int:
    """`usage`'s queries as an agent's turns: a select, then a reported call of each tool
    the query needed (what a model that found it would call). Returns the calls learned."""

    def one(http: httpx.Client, stop: threading.Event, index: int) -> int:
        query = usage.queries[index]
        # BM25 only: what is learned is the query, whatever the select offered.
        response, _ = _post(
            http, stop, "/v1/select", client.select_body(query.text, mode="bm25", k=5)
        )
        selection = client.checked(response)
        learned = 0
        for tool in sorted(query.relevant):
            body = {"selection_id": selection["selection_id"], "tool": tool, "allowed": True,
                    "success": True}  # fmt: skip
            response, _ = _post(http, stop, "/v1/tool-calls", json.dumps(body).encode())
            learned += bool(client.checked(response, 201)["learned"])
        advance()
        return learned

    return sum(_each(url, agent_key, len(usage.queries), one, concurrency=concurrency))


def _warm(
    url: str, agent_key: str, admin: client.Admin, options: Options, console: Console
) -> dict[str, Any]:
    """Replay `options.warm` as usage and wait for the worker to learn it."""
    usage = options.warm
    assert usage is not None
    with _progress(console) as progress:
        task = progress.add_task(f"usage ({usage.which_half})", total=len(usage.queries))
        learned = _replay(
            url, agent_key, usage, concurrency=options.concurrency,
            advance=functools.partial(progress.advance, task),
        )  # fmt: skip
    status = admin.wait_for_learning(timeout=options.embed_timeout)
    calls = sum(len(q.relevant) for q in usage.queries)
    console.log(
        f"learned {learned} of {calls} calls: {status.learned_embedded} distinct queries"
        " with a vector"
    )
    return {
        "half": usage.which_half,
        "queries": len(usage.queries),
        "calls": calls,
        "learned": learned,
        "learned_queries": status.learned_embedded,
    }


def check(options: Options) -> None:
    """Refuse unknown modes and baselines before anything is loaded or started."""
    if options.warm is not None and not EMBEDDING_MODES & set(options.modes):
        raise ValueError("--warm teaches the dense side: measure dense or hybrid too")
    for mode in options.modes:
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; use some of {', '.join(MODES)}")
    if options.embedding_model is not None:
        if options.url is not None:
            raise ValueError("--embedding-model sets the model of a stack of our own, not --url's")
        if options.embedding_model not in local_models.MODELS:
            raise ValueError(
                f"unknown embedding model {options.embedding_model!r}; use one of"
                f" {', '.join(local_models.MODELS)}"
            )
    for name in options.baselines:
        if name not in baselines.BASELINES:
            raise ValueError(
                f"unknown baseline {name!r}; use some of {', '.join(baselines.BASELINES)}"
            )


def evaluate(dataset: Dataset, options: Options, console: Console) -> Evaluation:
    """Everything for one dataset; every server started here is stopped before returning."""
    check(options)
    # nDCG@10 needs ten ranks whatever the largest k asked for.
    depth = max(*options.ks, NDCG_DEPTH)
    embeddings = bool(EMBEDDING_MODES & set(options.modes))
    evaluation = Evaluation(dataset)
    n_tools, n_queries = len(dataset.tools), len(dataset.queries)
    unembedded = 0
    with _served(options, embeddings=embeddings, log=console.log) as (url, admin_key):
        admin = client.Admin(url, admin_key)
        try:
            if options.tenant_settings:
                # Before the tools: a `text_search` then analyses them once.
                evaluation.tenant_settings = admin.update_settings(options.tenant_settings)
            with _progress(console) as progress:
                task = progress.add_task("loading tools", total=n_tools)
                admin.upload(dataset.tools, lambda n: progress.advance(task, n))
            token_costs = admin.token_costs()
            catalog_tokens = sum(token_costs.values())
            agent_key_id, agent_key = admin.agent_key()
            try:
                if embeddings:
                    with _progress(console) as progress:
                        task = progress.add_task("embedding tools", total=n_tools)

                        def show(status: client.EmbeddingStatus) -> None:
                            progress.update(task, completed=status.embedded, total=status.tools)

                        status = admin.wait_for_embeddings(show, timeout=options.embed_timeout)
                    unembedded = status.missing + status.stale
                    evaluation.embedding_model = status.model
                    if not status.done:
                        console.print(
                            f"[yellow]{unembedded} of {status.tools} tools"
                            " have no current vector: the embedding server refused their text"
                            " (GET /admin/v1/embeddings lists them); BM25 still finds them."
                        )
                if options.warm is not None:
                    evaluation.warm = _warm(url, agent_key, admin, options, console)
                for mode in options.modes:
                    with _progress(console) as progress:
                        task = progress.add_task(f"select ({mode})", total=n_queries)
                        outcomes = _select_all(
                            url, agent_key, dataset, mode=mode, depth=depth,
                            concurrency=options.concurrency,
                            advance=functools.partial(progress.advance, task),
                            unembedded=unembedded,
                        )  # fmt: skip
                    evaluation.outcomes[mode] = outcomes
                    evaluation.results[mode] = summarise(
                        outcomes, ks=options.ks, catalog_tokens=catalog_tokens
                    )
            finally:
                # Whatever the outcome: on a served tenant the run's key would stay valid,
                # and nobody was shown it.
                with contextlib.suppress(client.ApiError, httpx.HTTPError):
                    admin.revoke(agent_key_id)
        finally:
            admin.close()
    for name in options.baselines:
        with _progress(console) as progress:
            task = progress.add_task(name, total=n_queries)
            retriever: baselines.Bm25sRetriever | baselines.DenseRetriever
            if name == baselines.BM25S:
                retriever = baselines.Bm25sRetriever(dataset.tools)
            else:
                from toolsift.config import get_settings

                progress.update(task, description=f"{name} (indexing)")
                backend = local_models.configured(get_settings(), model=options.embedding_model)
                retriever = baselines.DenseRetriever(dataset.tools, backend)
                progress.update(task, description=name)
            outcomes = baselines.run(
                retriever.search, dataset.queries, depth=depth, token_costs=token_costs,
                progress=functools.partial(progress.advance, task),
            )  # fmt: skip
        evaluation.outcomes[name] = outcomes
        evaluation.results[name] = summarise(outcomes, ks=options.ks, catalog_tokens=catalog_tokens)
    return evaluation
