"""Request bodies are parsed as JSON (RFC 8259), not as Python's superset of it.

`json.loads` accepts `NaN`, `Infinity` and `-Infinity`; PostgreSQL's `jsonb` refuses them,
so a schema or setting holding one passed validation and failed at the INSERT as a 500.
And a body nested past the interpreter's recursion limit, or not UTF-8, raised an error
FastAPI answers with a 400 that names no field. All are malformed JSON here: a 400 naming
`body`, like any other, before anything runs.

A body sent as another media type (`curl -d` says `application/x-www-form-urlencoded`) is
a 415 naming the `Content-Type` header, where FastAPI would report a body that "should be
a valid dictionary"; so is a body sent without the header.

A query parameter the route does not take is a 400 naming it: ignored, a misspelt cursor
(`?after=` where the route pages with `before`) returned the first page forever.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute

from ..errors import BadRequest, UnsupportedMediaType


def _constant(constant: str) -> Any:
    raise json.JSONDecodeError(f"{constant} is not JSON", constant, 0)


def parse_json(body: bytes) -> Any:
    """`json.loads` without the non-standard constants; depth and encoding errors as decode
    errors."""
    try:
        return json.loads(body, parse_constant=_constant)
    except RecursionError:
        raise json.JSONDecodeError("nested too deeply", "", 0) from None
    except UnicodeDecodeError as error:
        raise json.JSONDecodeError(f"not UTF-8 at byte {error.start}", "", 0) from None


class _StrictJSONRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = parse_json(await self.body())
        return self._json


class StrictJSONRoute(APIRoute):
    """The route class of every router: see the module's docstring."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        takes_body = self.body_field is not None
        takes = sorted(_query_names(self.dependant))

        async def strict(request: Request) -> Response:
            for name in request.query_params:
                if name not in takes:
                    known = f"it takes {', '.join(takes)}" if takes else "it takes none"
                    raise BadRequest(
                        f"unknown query parameter {name[:64]!r} ({known})", field=name[:64]
                    )
            if takes_body and (problem := _not_json(request)) is not None:
                raise UnsupportedMediaType(problem, field="Content-Type")
            return await handler(_StrictJSONRequest(request.scope, request.receive))

        return strict


def _query_names(dependant: Dependant) -> set[str]:
    """The query parameters a route takes, its dependencies' included."""
    names = {param.alias for param in dependant.query_params}
    for dependency in dependant.dependencies:
        names |= _query_names(dependency)
    return names


def _not_json(request: Request) -> str | None:
    """Why the body is not declared as JSON, or None (no body at all is the route's call)."""
    media = request.headers.get("content-type")
    if media is None:
        sent = request.headers.get("content-length", "0") != "0"
        if sent or "transfer-encoding" in request.headers:
            return "send the body as application/json (no Content-Type was given)"
        return None
    if _is_json(media):
        return None
    return f"send the body as application/json, not {media.split(';')[0][:100]!r}"


def _is_json(media: str) -> bool:
    kind = media.split(";")[0].strip().lower()
    return kind == "application/json" or (
        kind.startswith("application/") and kind.endswith("+json")
    )
