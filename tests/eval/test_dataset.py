"""Reading datasets: errors name the file and line; invalid schemas are repaired, not fatal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from toolsift_tooling.eval.dataset import DatasetError, NoQueries, load

TINY = Path(__file__).parent / "data" / "tiny"


def _copy(tmp_path: Path) -> Path:
    for name in ("tools.jsonl", "queries.jsonl"):
        (tmp_path / name).write_text((TINY / name).read_text())
    return tmp_path


class TestLoad:
    def test_reads_tools_and_maps_relevant_ids_to_registry_names(self) -> None:
        data = load(TINY)
        assert data.name == "tiny"
        assert len(data.tools) == 6
        assert len(data.queries) == 5
        # "weather.now" is not a valid registry name; the importer derives one.
        assert data.queries[2].relevant == {"weather_now"}
        assert data.queries[3].relevant == {"send_email", "translate"}

    def test_an_invalid_schema_keyword_is_dropped_and_reported(self) -> None:
        data = load(TINY)
        assert data.repairs == [f"{TINY / 'tools.jsonl'}:5: dropped properties/target/type"]
        translate = next(t for t in data.tools if t.tool.name == "translate")
        assert translate.tool.input_schema["properties"]["target"] == {}

    def test_sample_is_seeded_and_keeps_every_tool(self) -> None:
        data = load(TINY)
        first, again = data.sample(2), data.sample(2)
        assert [q.id for q in first.queries] == [q.id for q in again.queries]
        assert len(first.queries) == 2
        assert len(first.tools) == 6


class TestErrors:
    def test_bad_json_names_file_and_line(self, tmp_path: Path) -> None:
        folder = _copy(tmp_path)
        lines = (folder / "queries.jsonl").read_text().splitlines()
        lines[2] = "{oops"
        (folder / "queries.jsonl").write_text("\n".join(lines) + "\n")
        with pytest.raises(DatasetError, match=r"queries\.jsonl:3: not valid JSON"):
            load(folder)

    def test_a_line_that_is_not_utf8_is_named(self, tmp_path: Path) -> None:
        folder = _copy(tmp_path)
        with (folder / "queries.jsonl").open("ab") as handle:
            handle.write(b'{"id": "q", "query": "caf\xe9", "relevant": []}\n')
        lines = len((folder / "queries.jsonl").read_bytes().splitlines())
        with pytest.raises(DatasetError, match=rf"queries\.jsonl:{lines}: not UTF-8 text"):
            load(folder)

    def test_json_nested_past_the_recursion_limit_names_file_and_line(self, tmp_path: Path) -> None:
        folder = _copy(tmp_path)
        lines = (folder / "tools.jsonl").read_text().splitlines()
        lines[1] = "[" * 100_000 + "]" * 100_000
        (folder / "tools.jsonl").write_text("\n".join(lines) + "\n")
        with pytest.raises(DatasetError, match=r"tools\.jsonl:2: not valid JSON \(nested too"):
            load(folder)

    def test_unknown_relevant_id_names_file_and_line(self, tmp_path: Path) -> None:
        folder = _copy(tmp_path)
        with (folder / "queries.jsonl").open("a") as handle:
            handle.write(json.dumps({"id": "q9", "query": "x", "relevant": ["ghost"]}) + "\n")
        with pytest.raises(DatasetError, match=r"queries\.jsonl:6: .*unknown tool id 'ghost'"):
            load(folder)

    def test_a_repeated_query_id_names_both_lines(self, tmp_path: Path) -> None:
        folder = _copy(tmp_path)
        with (folder / "queries.jsonl").open("a") as handle:
            handle.write(json.dumps({"id": "q1", "query": "x", "relevant": ["order_status"]}))
        with pytest.raises(DatasetError, match=r"queries\.jsonl:6: query id 'q1' repeats line 1"):
            load(folder)

    def test_a_query_longer_than_a_select_reads_names_file_and_line(self, tmp_path: Path) -> None:
        folder = _copy(tmp_path)
        long = {"id": "q9", "query": "refund " * 5000, "relevant": ["issue_refund"]}
        with (folder / "queries.jsonl").open("a") as handle:
            handle.write(json.dumps(long) + "\n")
        with pytest.raises(DatasetError, match=r"queries\.jsonl:6: `query` has 35,000 characters"):
            load(folder)

    def test_a_bad_tool_names_the_original_file_and_line(self, tmp_path: Path) -> None:
        folder = _copy(tmp_path)
        lines = (folder / "tools.jsonl").read_text().splitlines()
        lines.insert(1, "")
        lines.insert(3, json.dumps({"id": "bad", "description": 5, "parameters": [1]}))
        (folder / "tools.jsonl").write_text("\n".join(lines) + "\n")
        with pytest.raises(DatasetError, match=rf"{folder / 'tools.jsonl'}:4: invalid tool 'bad'"):
            load(folder)

    def test_missing_relevant_field(self, tmp_path: Path) -> None:
        folder = _copy(tmp_path)
        (folder / "queries.jsonl").write_text(json.dumps({"id": "q", "query": "hi"}) + "\n")
        with pytest.raises(DatasetError, match=r"queries\.jsonl:1: `relevant`"):
            load(folder)

    def test_no_queries_file_is_a_skip(self, tmp_path: Path) -> None:
        (tmp_path / "tools.jsonl").write_text((TINY / "tools.jsonl").read_text())
        with pytest.raises(NoQueries, match="unlabelled"):
            load(tmp_path)

    def test_missing_folder(self, tmp_path: Path) -> None:
        with pytest.raises(DatasetError, match="not a directory"):
            load(tmp_path / "nope")
