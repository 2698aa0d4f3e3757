"""From MCP tool objects to registry tools: names, limits, validation, definition hashes.

A catalog is accepted whole or not at all: one invalid tool fails the sync with an error
naming it, and the registry keeps the last good catalog. Silently skipping a bad tool would
read as "gone" and soft-delete a tool that is merely malformed today.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from ..kit.text import escape_unstorable, find_unstorable
from ..tools.schemas import ToolCreate

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
MAX_NAME = 64
# What one definition may hold: the registry's own limits, checked before parsing further.
MAX_DESCRIPTION = 10_000
MAX_DEFINITION_BYTES = 256 * 1024


class CatalogError(ValueError):
    """A tool the registry cannot take; `field` names it as `tools[<remote name>].<field>`."""

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class Imported:
    remote_name: str
    tool: ToolCreate
    # Hash of the definition as the server gave it: what an approval pins.
    definition_hash: str
    definition: dict[str, Any]


def registry_name(prefix: str, remote: str) -> str:
    """`<prefix>_<remote>`, made valid for every model API; long names keep a hash suffix."""
    name = _UNSAFE.sub("_", f"{prefix}_{remote}" if prefix else remote)
    if len(name) > MAX_NAME:
        digest = hashlib.sha256(remote.encode()).hexdigest()[:8]
        name = f"{name[: MAX_NAME - 9]}_{digest}"
    return name


#: What the registry takes from a server's definition, and so what a review approves.
REVIEWED = ("name", "title", "description", "inputSchema", "outputSchema", "annotations")


def definition_hash(definition: Mapping[str, Any]) -> str:
    """The hash an approval pins: of what a model can be served, not of `_meta` or `icons`,
    which a server may restamp on every listing (an approved tool would be held again, and
    hidden from agents, at each sync). Key order is left out too: it changes a tool's
    version, not what it says (migration 0021)."""
    reviewed = {key: definition[key] for key in REVIEWED if key in definition}
    canonical = json.dumps(reviewed, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def convert(
    prefix: str,
    tools: Sequence[Mapping[str, Any]],
    *,
    permissions: Mapping[str, str | None],
    default_permission: str | None,
    trusted: Collection[str] = (),
) -> list[Imported]:
    """Registry tools for a server's catalog, or a `CatalogError` for the first bad one.

    `permissions` overrides the source's default permission per remote tool name. A
    definition whose hash is in `trusted` passed this validation before (schema checks are
    most of a sync's time), so it is built without repeating them.
    """
    out: list[Imported] = []
    names: dict[str, str] = {}
    for raw in tools:
        remote = raw.get("name")
        if not isinstance(remote, str) or not remote:
            raise CatalogError("a tool has no name", field="tools[].name")
        where = f"tools[{escape_unstorable(remote[:80])}]"
        # The whole definition is stored as the server sent it (`_meta`, `icons` too); the
        # schemas are checked as the tool's, below, where their depth counts from their root.
        rest = {k: v for k, v in raw.items() if k not in ("inputSchema", "outputSchema")}
        if (found := find_unstorable(rest)) is not None:
            path, why = found
            raise CatalogError(
                f"{where}: {why} are not allowed (at {escape_unstorable(path)})",
                field=f"{where}.{escape_unstorable(path)}",
            )
        size = len(json.dumps(raw, ensure_ascii=False).encode())
        if size > MAX_DEFINITION_BYTES:
            raise CatalogError(
                f"tool {remote[:80]!r} has a {size}-byte definition"
                f" (at most {MAX_DEFINITION_BYTES})",
                field=where,
            )
        description = raw.get("description") or ""
        if not isinstance(description, str) or len(description) > MAX_DESCRIPTION:
            raise CatalogError(
                f"tool {remote[:80]!r}: description must be text of at most"
                f" {MAX_DESCRIPTION} characters",
                field=f"{where}.description",
            )
        name = registry_name(prefix, remote)
        if name in names:
            raise CatalogError(
                f"tools {names[name][:80]!r} and {remote[:80]!r} both map to {name!r}",
                field=f"{where}.name",
            )
        names[name] = remote
        title = raw.get("title") or (raw.get("annotations") or {}).get("title")
        permission = permissions.get(remote, default_permission)
        digest = definition_hash(raw)
        fields: dict[str, Any] = {
            "name": name,
            "title": title[:200] if isinstance(title, str) else None,
            "description": description,
            "input_schema": raw.get("inputSchema", {}),
            "output_schema": raw.get("outputSchema"),
            "annotations": raw.get("annotations"),
            "required_permission": permission,
            # Given, not defaulted: pydantic's default factories are slow under model_construct.
            "examples": [],
            "core": False,
        }
        if digest in trusted:
            out.append(Imported(remote, ToolCreate.model_construct(**fields), digest, dict(raw)))
            continue
        try:
            tool = ToolCreate(**fields)
        except ValidationError as error:
            first = error.errors()[0]
            field = ".".join(str(p) for p in first["loc"]) or "(root)"
            field = {"input_schema": "inputSchema", "output_schema": "outputSchema"}.get(
                field, field
            )
            raise CatalogError(
                f"tool {remote[:80]!r}: {field}: {first['msg']}", field=f"{where}.{field}"
            ) from None
        out.append(Imported(remote, tool, digest, dict(raw)))
    return out
