"""The names `tools import` gives a catalog's ids do not depend on the order of its lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from toolsift.tools.importer import CatalogError, read_catalog


def names(path: Path, ids: list[str]) -> dict[str, str]:
    path.write_text("".join(json.dumps({"id": i, "description": "d"}) + "\n" for i in ids))
    return {item.source_id: item.tool.name for item in read_catalog(path)}


@pytest.mark.parametrize("ids", [["dup.a", "dup_a"], ["dup_a", "dup.a"]])
def test_an_id_that_is_a_valid_name_keeps_it_wherever_it_is(tmp_path: Path, ids: list[str]) -> None:
    """Otherwise `dup.a` first took `dup_a`, `dup_a` got a suffix, and a later import of
    `dup_a` alone updated the tool `dup.a` had made."""
    named = names(tmp_path / "tools.jsonl", ids)
    assert named["dup_a"] == "dup_a"
    assert named["dup.a"].startswith("dup_a_")
    assert len(named["dup.a"]) == len("dup_a_") + 8


def test_an_id_made_valid_takes_the_plain_name_when_no_id_has_it(tmp_path: Path) -> None:
    named = names(tmp_path / "tools.jsonl", ["weather.get", "b.c", "b-c"])
    assert named == {"weather.get": "weather_get", "b.c": "b_c", "b-c": "b-c"}


@pytest.mark.parametrize("ids", [["x.y", "x y"], ["x y", "x.y"]])
def test_two_ids_made_the_same_name_each_take_a_suffix_of_their_own(
    tmp_path: Path, ids: list[str]
) -> None:
    """Otherwise the first line took `x_y`, and a file sorted otherwise gave `x_y` the other
    record's definition (and the permission the catalog kept for that name)."""
    named = names(tmp_path / "tools.jsonl", ids)
    assert named == names(tmp_path / "again.jsonl", list(reversed(ids)))
    assert named["x.y"] != named["x y"]
    assert all(n.startswith("x_y_") and len(n) == len("x_y_") + 8 for n in named.values())


def test_the_same_id_twice_is_refused(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match="duplicate tool id 'a'"):
        names(tmp_path / "tools.jsonl", ["a", "a"])
