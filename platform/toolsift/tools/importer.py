"""Read tool catalogs in the public benchmark format (one JSON object per line).

`{id, name, description, parameters, ...}`; optional toolsift fields: `title`,
`required_permission`, `core`, `examples`. Errors name the file and line.

The toolsift fields a record leaves out are reported in `Imported.given`: an import into a
catalog keeps an existing tool's permission, core flag and examples unless the file names
them (the public format has no such fields, and re-importing a file must not make a tool an
admin restricted public).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from pydantic import ValidationError

from .schemas import CATALOG_FIELDS, EMPTY_SCHEMA, TOOL_NAME_PATTERN, ToolCreate

_INVALID = re.compile(r"[^A-Za-z0-9_-]+")


class CatalogError(ValueError):
    pass


@dataclass(frozen=True)
class Imported:
    line: int
    source_id: str
    tool: ToolCreate
    # Which of CATALOG_FIELDS the record named.
    given: frozenset[str] = frozenset(CATALOG_FIELDS)


def tool_name(source_id: str) -> str:
    """A name valid for every model API, derived stably from the source id."""
    if re.fullmatch(TOOL_NAME_PATTERN, source_id):
        return source_id
    name = _INVALID.sub("_", source_id).strip("_") or "tool"
    return _suffixed(name, source_id) if len(name) > 64 else name


def _suffixed(name: str, source_id: str) -> str:
    """`name` made unique to `source_id` (at most 64 characters)."""
    return f"{name[:55]}_{hashlib.sha1(source_id.encode()).hexdigest()[:8]}"


def _schema(parameters: Any) -> dict[str, Any]:
    if not parameters:
        return dict(EMPTY_SCHEMA)
    if isinstance(parameters, dict) and "type" not in parameters and "properties" in parameters:
        return {"type": "object", **parameters}
    if not isinstance(parameters, dict):
        raise ValueError("parameters must be a JSON object (a JSON Schema)")
    return parameters


def _taken_names(path: Path) -> set[str]:
    """The names that more than one id of the file would have: the valid ids' own, and any
    that two ids made valid share. A line that does not parse is left for `read_catalog` to
    report, in the order of the file."""
    valid: set[str] = set()
    made: Counter[str] = Counter()
    try:
        with path.open("rb") as handle:
            for raw in handle:
                try:
                    record = json.loads(raw)
                except (ValueError, RecursionError):
                    continue
                source_id = (
                    record.get("id", record.get("name")) if isinstance(record, dict) else None
                )
                if not isinstance(source_id, str):
                    continue
                if tool_name(source_id) == source_id:
                    valid.add(source_id)
                else:
                    made[tool_name(source_id)] += 1
    except OSError:
        pass  # reported by `read_catalog`
    return valid | {name for name, count in made.items() if count > 1}


def read_catalog(path: Path) -> Iterator[Imported]:
    # An id that is a valid name is always that name, wherever it is in the file; an id made
    # valid (`a.b` to `a_b`) takes a suffix of its own where a valid id of the file is that
    # name or another id makes it too. No name depends on the order of the lines, so a file
    # imported again, sorted otherwise, updates each tool from the record that made it.
    taken = _taken_names(path)
    seen: dict[str, int] = {}
    ids: dict[str, int] = {}
    try:
        handle = path.open("rb")
    except OSError as error:
        raise CatalogError(f"{path}: cannot read: {error.strerror}") from None
    with handle:
        for number, line in _lines(handle, path):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise CatalogError(f"{where}: not valid JSON ({error.msg})") from None
            except RecursionError:
                raise CatalogError(f"{where}: not valid JSON (nested too deeply)") from None
            if not isinstance(record, dict) or not isinstance(
                record.get("id", record.get("name")), str
            ):
                raise CatalogError(f"{where}: expected an object with a string `id` or `name`")
            source_id = str(record.get("id", record.get("name")))
            if source_id in ids:
                raise CatalogError(
                    f"{where}: duplicate tool id {source_id!r} (line {ids[source_id]})"
                )
            ids[source_id] = number
            name = tool_name(source_id)
            if name in seen or (name != source_id and name in taken):
                name = _suffixed(name, source_id)
            if name in seen:
                raise CatalogError(
                    f"{where}: tool id {source_id!r} makes the same name as line {seen[name]}"
                )
            seen[name] = number
            title = record.get("title") or record.get("name")
            description = record.get("description") or ""
            if not isinstance(description, str):
                raise CatalogError(
                    f"{where}: invalid tool {source_id!r}: description: must be a string"
                )
            # Taken as given, so that ToolCreate refuses what is not its type: `"false"` is
            # not a core flag (bool() would make it true) and a string is not a list of
            # examples (list() would split it into characters).
            core = record.get("core", False)
            if not isinstance(core, bool):
                raise CatalogError(
                    f"{where}: invalid tool {source_id!r}: core: must be true or false"
                )
            try:
                tool = ToolCreate(
                    name=name,
                    title=title if title and title != name else None,
                    description=description,
                    input_schema=_schema(record.get("parameters", record.get("input_schema"))),
                    examples=record.get("examples") or [],
                    required_permission=record.get("required_permission"),
                    core=core,
                )
            except (ValidationError, ValueError) as error:
                raise CatalogError(
                    f"{where}: invalid tool {source_id!r}: {_first(error)}"
                ) from None
            given = frozenset(f for f in CATALOG_FIELDS if f in record)
            yield Imported(number, source_id, tool, given)


def _lines(handle: BinaryIO, path: Path) -> Iterator[tuple[int, str]]:
    """Numbered lines, each decoded alone: one that is not UTF-8 is an error naming it."""
    for number, raw in enumerate(handle, start=1):
        try:
            yield number, raw.decode("utf-8")
        except UnicodeDecodeError:
            raise CatalogError(f"{path}:{number}: not UTF-8 text") from None


def _first(error: Exception) -> str:
    if isinstance(error, ValidationError):
        first = error.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "tool"
        return f"{field}: {first['msg']}"
    return str(error)
