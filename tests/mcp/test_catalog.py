"""Converting a server's catalog: names, permissions, and clear errors for bad tools."""

from __future__ import annotations

from typing import Any

import pytest

from toolsift.mcp.catalog import CatalogError, convert, definition_hash, registry_name


def _tool(name: str = "get_weather", **extra: Any) -> dict[str, Any]:
    return {"name": name, "description": "Weather.", "inputSchema": {"type": "object"}, **extra}


def _convert(tools: list[dict[str, Any]], **kwargs: Any) -> Any:
    options: dict[str, Any] = {"permissions": {}, "default_permission": None, **kwargs}
    return convert("wx", tools, **options)


class TestNames:
    def test_prefix_and_unsafe_characters(self) -> None:
        assert registry_name("wx", "get.weather/v2") == "wx_get_weather_v2"

    def test_long_names_stay_unique_and_valid(self) -> None:
        a, b = registry_name("wx", "x" * 100 + "a"), registry_name("wx", "x" * 100 + "b")
        assert a != b
        assert len(a) == len(b) == 64

    def test_two_tools_mapping_to_one_name_are_refused(self) -> None:
        with pytest.raises(CatalogError, match="both map to 'wx_a_b'"):
            _convert([_tool("a.b"), _tool("a_b")])


class TestConvert:
    def test_permission_default_and_override(self) -> None:
        out = _convert(
            [_tool("a"), _tool("b"), _tool("c")],
            default_permission="weather.read",
            permissions={"b": "weather.admin", "c": None},
        )
        assert [i.tool.required_permission for i in out] == ["weather.read", "weather.admin", None]

    def test_title_falls_back_to_the_annotation_title(self) -> None:
        (item,) = _convert([_tool(annotations={"title": "Weather now"})])
        assert item.tool.title == "Weather now"

    def test_the_hash_pins_every_field_a_model_can_be_served(self) -> None:
        base = definition_hash(_tool())
        assert definition_hash(_tool(annotations={"readOnlyHint": True})) != base
        assert definition_hash(_tool(outputSchema={"type": "object"})) != base
        assert definition_hash(_tool(title="Weather")) != base
        assert definition_hash(_tool(description="Other.")) != base
        assert definition_hash(dict(reversed(list(_tool().items())))) == base
        # Never served: a server may restamp them on every listing.
        assert definition_hash(_tool(_meta={"fetchedAt": "2026-12-05T01:00:00Z"})) == base
        assert definition_hash(_tool(icons=[{"src": "https://example.com/i.png"}])) == base

    def test_a_ten_megabyte_description_is_refused(self) -> None:
        with pytest.raises(CatalogError, match="-byte definition") as caught:
            _convert([_tool(description="x" * 10_000_000)])
        assert caught.value.field == "tools[get_weather]"

    def test_a_long_description_is_refused(self) -> None:
        with pytest.raises(CatalogError) as caught:
            _convert([_tool(description="x" * 10_001)])
        assert caught.value.field == "tools[get_weather].description"

    @pytest.mark.parametrize(
        "schema", [{"type": "string"}, {"type": "object", "properties": {"a": {"type": 5}}}]
    )
    def test_an_invalid_input_schema_names_the_tool(self, schema: dict[str, Any]) -> None:
        with pytest.raises(CatalogError, match="tool 'get_weather': inputSchema") as caught:
            _convert([_tool(inputSchema=schema)])
        assert caught.value.field == "tools[get_weather].inputSchema"

    def test_a_nameless_tool_is_refused(self) -> None:
        with pytest.raises(CatalogError, match="no name"):
            _convert([{"description": "x"}])
