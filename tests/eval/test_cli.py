"""`toolsift eval` end to end on the tiny dataset: its own embedded PostgreSQL and API, the
real admin API and POST /v1/select, and both in-process baselines."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from toolsift.cli import app
from toolsift.config import get_settings
from toolsift.embedding.local import ENSEMBLE_MODEL as ENSEMBLE
from toolsift_tooling.eval.dataset import load

TINY = Path(__file__).parent / "data" / "tiny"
runner = CliRunner()


class TestEval:
    def test_bm25_and_baselines_on_the_embedded_stack(self, tmp_path: Path) -> None:
        out = tmp_path / "out"
        options = ["--modes", "bm25", "--k", "1,3,5", "--half", "all", "--out", str(out)]
        result = runner.invoke(app, ["eval", str(TINY), *options])
        assert result.exit_code == 0, result.output
        data = json.loads((out / "results.json").read_text())
        assert set(data) == {"dataset", "tools", "half", "queries", "results", "margins"}
        assert (data["dataset"], data["tools"], data["half"], data["queries"]) == (
            "tiny",
            6,
            "all",
            5,
        )
        assert "5 queries (both halves)" in (out / "results.md").read_text()
        assert set(data["results"]) == {"bm25", "baseline_bm25s", "baseline_dense"}
        bm25 = data["results"]["bm25"]
        for key in ("recall@1", "recall@3", "recall@5", "ndcg@10", "mrr", "latency_p95_ms"):
            assert 0 <= bm25[key] <= (1 if "@" in key or key == "mrr" else 60_000)
        # Every query here shares a distinctive word with its tools.
        assert bm25["recall@5"] == 1.0
        assert 0 < bm25["tokens_mean"] < bm25["catalog_tokens"]
        assert (out / "recall.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert "| bm25 |" in (out / "results.md").read_text()
        # Both baselines find everything too: no margin, a target of 1 (half of no misses).
        margin = data["margins"]["bm25"]
        assert margin["baseline"] in ("baseline_bm25s", "baseline_dense")
        assert (margin["over_baseline"], margin["target"], margin["over_target"]) == (0, 1, 0)
        assert margin["over_target_ci95"] == [0, 0]
        assert "| bm25 | 1.000 | +0.000 (+0.000 to +0.000) |" in (out / "results.md").read_text()
        rows = [json.loads(line) for line in (out / "queries.jsonl").read_text().splitlines()]
        assert rows[0]["rankings"]["bm25"][0] == "order_status"
        # Ten ranks asked for (nDCG@10), though the largest k is 5: all six tools here.
        assert len(rows[0]["rankings"]["baseline_dense"]) == 6
        assert "properties/target/type" in result.output

    def test_the_check_half_by_default_and_an_unknown_half_refused(self, tmp_path: Path) -> None:
        out = tmp_path / "out"
        result = runner.invoke(
            app, ["eval", str(TINY), "--modes", "bm25", "--baselines", "none", "--out", str(out)]
        )
        assert result.exit_code == 0, result.output
        data = json.loads((out / "results.json").read_text())
        check = load(TINY).half("check")
        assert (data["half"], data["queries"]) == ("check", len(check.queries))
        assert "margins" not in data  # no baseline to measure a margin over
        rows = [json.loads(line) for line in (out / "queries.jsonl").read_text().splitlines()]
        assert {row["id"] for row in rows} == {q.id for q in check.queries}
        refused = runner.invoke(app, ["eval", str(TINY), "--half", "public"])
        assert refused.exit_code == 2
        assert "--half" in refused.output

    def test_an_unreadable_dataset_exits_non_zero_naming_file_and_line(
        self, tmp_path: Path
    ) -> None:
        (tmp_path / "tools.jsonl").write_text((TINY / "tools.jsonl").read_text())
        (tmp_path / "queries.jsonl").write_text('{"id": "q", "query": "hi", "relevant": ["x"]}\n')
        result = runner.invoke(app, ["eval", str(tmp_path), "--modes", "bm25"])
        assert result.exit_code == 2
        assert "queries.jsonl:1:" in result.output.replace("\n", "")

    def test_the_dataset_folder_is_refused_as_out_and_left_alone(self, tmp_path: Path) -> None:
        copy = tmp_path / "tiny"
        copy.mkdir()
        for name in ("tools.jsonl", "queries.jsonl"):
            (copy / name).write_bytes((TINY / name).read_bytes())
        result = runner.invoke(app, ["eval", str(copy), "--modes", "bm25", "--out", str(copy)])
        assert result.exit_code == 2
        assert "--out" in result.output
        assert (copy / "queries.jsonl").read_bytes() == (TINY / "queries.jsonl").read_bytes()

    def test_an_unlabelled_catalog_is_skipped(self, tmp_path: Path) -> None:
        (tmp_path / "tools.jsonl").write_text((TINY / "tools.jsonl").read_text())
        result = runner.invoke(app, ["eval", str(tmp_path)])
        assert result.exit_code == 0
        assert "skipped" in result.output

    def test_url_without_a_key_says_which_keys_it_takes(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        for name in ("TOOLSIFT_ADMIN_KEY", "TOOLSIFT_OPERATOR_KEY"):
            monkeypatch.delenv(name, raising=False)
        get_settings.cache_clear()
        try:
            result = runner.invoke(
                app, ["eval", str(TINY), "--modes", "bm25", "--url", "http://127.0.0.1:9"]
            )
        finally:
            get_settings.cache_clear()
        assert result.exit_code == 2
        assert "TOOLSIFT_OPERATOR_KEY" in result.output

    @pytest.mark.parametrize("where", ["file", "under a file"])
    def test_an_out_that_cannot_be_written_is_refused_before_the_run(
        self, tmp_path: Path, where: str
    ) -> None:
        blocker = tmp_path / "taken"
        blocker.write_text("")
        out = blocker if where == "file" else blocker / "results"
        result = runner.invoke(
            app, ["eval", str(TINY), "--modes", "bm25", "--baselines", "none", "--out", str(out)]
        )
        assert result.exit_code == 2, result.output
        assert "--out" in result.output
        assert "starting an embedded stack" not in result.output

    def test_tenant_settings_are_given_before_the_tools_and_kept(self, tmp_path: Path) -> None:
        out = tmp_path / "out"
        options = ["--modes", "bm25", "--baselines", "none", "--half", "all", "--out", str(out)]
        settings = ["--tenant-settings", '{"text_search": "simple"}']
        result = runner.invoke(app, ["eval", str(TINY), *options, *settings])
        assert result.exit_code == 0, result.output
        data = json.loads((out / "results.json").read_text())
        # As the API stored them (the answer of its PATCH).
        assert data["tenant_settings"] == {"text_search": "simple"}
        assert 'Tenant settings: `{"text_search": "simple"}`.' in (out / "results.md").read_text()

    @pytest.mark.parametrize(
        ("given", "said"),
        [("{text_search", "not JSON"), ('["simple"]', "give a JSON object")],
    )
    def test_tenant_settings_that_are_not_an_object_are_refused_before_the_run(
        self, given: str, said: str
    ) -> None:
        result = runner.invoke(app, ["eval", str(TINY), "--tenant-settings", given])
        assert result.exit_code == 2, result.output
        assert said in result.output
        assert "starting an embedded stack" not in result.output

    def test_a_setting_the_api_refuses_fails_the_run_with_its_reason(self, tmp_path: Path) -> None:
        options = ["--modes", "bm25", "--baselines", "none", "--out", str(tmp_path / "out")]
        settings = ["--tenant-settings", '{"text_search": "klingon"}']
        result = runner.invoke(app, ["eval", str(TINY), *options, *settings])
        assert result.exit_code != 0, result.output
        assert "422" in result.output
        assert "text_search" in result.output

    def test_a_mode_named_twice_runs_once(self, tmp_path: Path) -> None:
        out = tmp_path / "out"
        result = runner.invoke(
            app,
            ["eval", str(TINY), "--modes", "bm25,bm25", "--baselines", "none", "--out", str(out)],
        )
        assert result.exit_code == 0, result.output
        assert result.output.count("select (bm25)") == 1
        assert list(json.loads((out / "results.json").read_text())["results"]) == ["bm25"]

    def test_the_model_asked_for_serves_the_stack_and_the_dense_baseline(
        self, tmp_path: Path
    ) -> None:
        out = tmp_path / "out"
        options = ["--modes", "dense", "--baselines", "baseline_dense", "--half", "all"]
        result = runner.invoke(
            app, ["eval", str(TINY), *options, "--embedding-model", ENSEMBLE, "--out", str(out)]
        )
        assert result.exit_code == 0, result.output
        data = json.loads((out / "results.json").read_text())
        # The tenant was served by the ensemble: the worker and the API both ran it (a query
        # vector of another model would have failed the run as served without dense).
        assert data["embedding_model"] == ENSEMBLE
        assert data["results"]["dense"]["recall@5"] == data["results"]["baseline_dense"]["recall@5"]

    @pytest.mark.parametrize(
        ("options", "named"),
        [
            (["--embedding-model", "bge-large"], "unknown embedding model 'bge-large'"),
            (["--embedding-model", ENSEMBLE, "--url", "http://127.0.0.1:9"], "not --url's"),
        ],
    )
    def test_a_model_it_cannot_serve_is_refused(self, options: list[str], named: str) -> None:
        result = runner.invoke(app, ["eval", str(TINY), *options])
        assert result.exit_code == 2, result.output
        assert named in " ".join(re.sub("[│╭╮╰╯─]", " ", result.output).split())


USAGE = Path(__file__).parent / "data" / "usage"


class TestWarm:
    """`--warm`: the other half replayed as usage, learned by the real worker, then measured.

    The usage dataset's queries are nonsense words no description has, each pair split
    across the halves: only what was learned from the tune half can find the check half's.
    """

    def test_usage_of_one_half_finds_the_other(self, tmp_path: Path) -> None:
        out = tmp_path / "out"
        options = ["--modes", "dense", "--baselines", "baseline_dense", "--k", "1,5"]
        result = runner.invoke(app, ["eval", str(USAGE), *options, "--warm", "--out", str(out)])
        assert result.exit_code == 0, result.output
        data = json.loads((out / "results.json").read_text())
        assert data["warm"] == {
            "half": "tune",
            "queries": 4,
            "calls": 4,
            "learned": 4,
            "learned_queries": 4,
        }
        assert (data["half"], data["queries"]) == ("check", 4)
        assert data["results"]["dense"]["recall@1"] == 1.0
        # The same model on the tools' own text, cold: the words are nowhere in it.
        assert data["results"]["baseline_dense"]["recall@1"] < 1.0
        assert "after the tune half replayed as usage" in (out / "results.md").read_text()

    @pytest.mark.parametrize(
        ("options", "named"),
        [(["--half", "all"], "--warm"), (["--modes", "bm25"], "dense or hybrid")],
    )
    def test_warm_without_a_half_to_replay_or_a_dense_side_is_refused(
        self, options: list[str], named: str
    ) -> None:
        result = runner.invoke(app, ["eval", str(USAGE), "--warm", *options])
        assert result.exit_code == 2, result.output
        assert named in result.output
