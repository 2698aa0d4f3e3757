"""Read a whole tool catalog from an MCP server, within limits.

Pages through `tools/list` to the end. Cursors are opaque and live only inside one call:
nothing here stores them. Limits bound what a misbehaving server can make us hold: too many
tools, too many pages, a cursor that repeats, or a call that never ends all raise
`FetchError` with a message fit to show an admin, and the caller keeps its last good catalog.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import tempfile
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import IO, Any, TextIO, cast

import anyio
import httpx2
import mcp_types
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from pydantic import ValidationError

from .secrets import scrub_values

MAX_TOOLS = 10_000
MAX_PAGES = 1_000
# The whole catalog as JSON: each definition is capped (256 KiB) when applied, but 10,000 of
# those would be 2.5 GiB held by one sync.
MAX_CATALOG_BYTES = 64 << 20
TIMEOUT_SECONDS = 60.0


class FetchError(Exception):
    """The server could not give a usable catalog; the message says why, without secrets."""


@dataclass(frozen=True)
class StdioTarget:
    command: str
    args: list[str] = field(default_factory=list)
    env: Mapping[str, str] | None = None


@dataclass(frozen=True)
class HttpTarget:
    url: str
    headers: Mapping[str, str] = field(default_factory=dict)
    # False: every request (redirects included) must go to public addresses only.
    private_networks: bool = True


def non_public(host: str) -> str | None:
    """The address of a literal IP `host` that is not public, else None."""
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None
    return None if _public(address) else str(address)


def _public(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_global and not address.is_multicast


async def _refusal(request: httpx2.Request) -> str | None:
    """Why a request may not go where its host resolves (a loopback, private or link-local
    address, such as a cloud's metadata service), or None: a tenant admin's URL must not
    reach the operator's own network. The connection resolves the name again, so a DNS
    answer that changes in between is not caught (an egress firewall closes that)."""
    host = request.url.host
    port = request.url.port or (443 if request.url.scheme == "https" else 80)
    try:
        found = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        return None  # the connection fails with its own error
    for *_, sockaddr in found:
        address = ipaddress.ip_address(sockaddr[0])
        if not _public(address):
            return (  # the address itself is not said: it would map the operator's network
                f"{host} resolves to an address that is not public; this deployment lets MCP"
                " sources reach public addresses only (TOOLSIFT_MCP_PRIVATE_NETWORKS)"
            )
    return None


class PrivateAddress(httpx2.ConnectError):
    """A request refused before it left (see `_refusal`)."""


Target = StdioTarget | HttpTarget | str


class Witness:
    """What the transport saw that the SDK's errors leave out, for the admin's message: the
    HTTP status that refused a request ("Server returned an error response" says none), the
    stdout lines of a stdio server that are no MCP message (the SDK skips them, so a server
    that writes only those looks like one that never answers), and the server's stderr."""

    def __init__(self, secrets: Sequence[str] = ()) -> None:
        # Scrubbed from what the server said before anything is cut short: a secret cut in
        # two would no longer match.
        self.secrets = list(secrets)
        self.http_status: str | None = None
        self.public_only = False
        self.refused: str | None = None
        self.stray_lines = 0
        self.first_stray: str | None = None
        self.stderr = ""

    async def on_request(self, request: httpx2.Request) -> None:
        """Every request, redirects included, of a target limited to public addresses."""
        if self.public_only and (refusal := await _refusal(request)) is not None:
            self.refused = refusal
            raise PrivateAddress(refusal)

    async def on_response(self, response: httpx2.Response) -> None:
        if response.status_code >= 400 and self.http_status is None:
            self.http_status = f"{response.status_code} {response.reason_phrase}".strip()

    async def on_message(self, message: object) -> None:
        if isinstance(message, ValidationError):  # a stdout line that is no JSON-RPC message
            self.stray_lines += 1
            if self.first_stray is None:
                errors = message.errors()
                line = str(errors[0].get("input", "") if errors else "")
                self.first_stray = scrub_values(line, self.secrets)[:80]
        await anyio.lowlevel.checkpoint()

    def explain(self, message: str) -> str:
        """`message`, with what the server itself said about the failure."""
        if self.refused is not None:
            return self.refused
        if self.http_status is not None:
            message = f"the server answered HTTP {self.http_status} ({message})"
            if self.http_status.startswith(("401", "403")):
                message += "; check the source's headers or bearer token"
        if self.stray_lines == 1:
            message += (
                f"; it wrote a line to stdout that is not an MCP message ({self.first_stray!r}):"
                " a stdio server must keep stdout for the protocol"
            )
        elif self.stray_lines:
            message += (
                f"; it wrote {self.stray_lines} lines to stdout that are not MCP messages (the"
                f" first: {self.first_stray!r}): a stdio server must keep stdout for the protocol"
            )
        if self.stderr:
            message += f"; its stderr ended: {self.stderr!r}"
        return scrub_values(message, self.secrets)[:_MESSAGE_CHARS]

    def read_stderr(self, file: IO[bytes], chars: int = 300) -> None:
        """Keep the last `chars` of what the server wrote to stderr, lines joined, secrets
        scrubbed first."""
        try:
            start = max(0, file.seek(0, os.SEEK_END) - 4 * chars)
            file.seek(start)
            text = file.read().decode("utf-8", errors="replace")
        except (OSError, ValueError):
            return
        lines = [line.strip() for line in text.splitlines()]
        if start > 0 and lines:
            lines = lines[1:]  # begun mid-line: maybe mid-secret
        text = scrub_values("\n".join(line for line in lines if line), self.secrets)
        self.stderr = " | ".join(text.splitlines())[-chars:]


_MESSAGE_CHARS = 1_000


@asynccontextmanager
async def connect(
    target: Target, *, timeout: float, witness: Witness | None = None, **options: Any
) -> AsyncIterator[Client]:
    """An SDK client session with the server; `options` go to `mcp.Client`."""
    witness = witness or Witness()
    if isinstance(target, StdioTarget):
        theirs = options.pop("message_handler", None)

        async def on_message(message: Any) -> None:
            await witness.on_message(message)
            if theirs is not None:
                await theirs(message)

        server = StdioServerParameters(
            command=target.command,
            args=list(target.args),
            env=dict(target.env) if target.env is not None else None,
        )
        with tempfile.TemporaryFile() as stderr:  # the child writes to its descriptor
            try:
                async with Client(
                    stdio_client(server, errlog=cast(TextIO, stderr)),
                    read_timeout_seconds=timeout,
                    cache=None,
                    message_handler=on_message,
                    **options,
                ) as client:
                    yield client
            finally:
                witness.read_stderr(stderr)
        return
    target = HttpTarget(target) if isinstance(target, str) else target
    http_timeout = httpx2.Timeout(min(timeout, 30.0), read=max(timeout, 300.0))
    witness.public_only = not target.private_networks
    hooks: dict[str, list[Callable[..., Any]]] = {
        "request": [witness.on_request],
        "response": [witness.on_response],
    }
    async with httpx2.AsyncClient(
        headers=dict(target.headers), timeout=http_timeout, event_hooks=hooks
    ) as http:
        transport = streamable_http_client(target.url, http_client=http)
        async with Client(transport, read_timeout_seconds=timeout, cache=None, **options) as client:
            yield client


@dataclass(frozen=True)
class Catalog:
    """Every tool of the server, as MCP tool objects (camelCase, as on the wire)."""

    tools: list[dict[str, Any]]
    pages: int
    # The server's freshness hint for the listing (`ttlMs`, protocol 2026-07-28); 0 or
    # absent means none, and the schedule's default interval applies.
    ttl_ms: int | None


async def fetch_catalog(
    target: Target,
    *,
    max_tools: int = MAX_TOOLS,
    max_pages: int = MAX_PAGES,
    max_bytes: int = MAX_CATALOG_BYTES,
    timeout: float = TIMEOUT_SECONDS,
    secrets: Sequence[str] = (),
) -> Catalog:
    """All tools of an MCP server: a streamable-HTTP URL or a stdio command. `secrets`: the
    source's secret values, scrubbed from an error before it is cut short."""
    witness = Witness(secrets)
    try:
        with anyio.fail_after(timeout):
            async with connect(target, timeout=timeout, witness=witness) as client:
                return await _pages(
                    client, max_tools=max_tools, max_pages=max_pages, max_bytes=max_bytes
                )
    except FetchError:
        raise
    except TimeoutError:
        message = f"the server did not list its tools within {timeout:g} s"
        raise FetchError(witness.explain(message)) from None
    except Exception as error:  # the SDK and transports raise many kinds; all mean "no catalog"
        raise FetchError(witness.explain(describe_error(error, limit=None))) from None


async def _pages(
    client: Client, *, max_tools: int, max_pages: int, max_bytes: int = MAX_CATALOG_BYTES
) -> Catalog:
    tools: list[dict[str, Any]] = []
    size = 0
    seen: set[str] = set()
    cursor: str | None = None
    ttl_ms: int | None = None
    pages = 0
    while True:
        if pages >= max_pages:
            raise FetchError(f"the server's tools/list did not end within {max_pages} pages")
        result: mcp_types.ListToolsResult = await client.list_tools(
            cursor=cursor, cache_mode="bypass"
        )
        pages += 1
        if pages == 1 and result.ttl_ms > 0:
            ttl_ms = result.ttl_ms
        for listed in result.tools:
            size += len(listed.model_dump_json(by_alias=True, exclude_none=True))
            tools.append(listed.model_dump(mode="json", by_alias=True, exclude_none=True))
        if len(tools) > max_tools:
            raise FetchError(f"the server lists more than {max_tools} tools")
        if size > max_bytes:
            raise FetchError(f"the server's tools take more than {max_bytes >> 20} MiB as JSON")
        cursor = result.next_cursor
        if not cursor:
            return Catalog(tools=tools, pages=pages, ttl_ms=ttl_ms)
        if cursor in seen:
            raise FetchError("the server repeated a tools/list cursor")
        seen.add(cursor)


def describe_error(error: BaseException, *, limit: int | None = 500) -> str:
    """One line naming the failure, from the innermost useful error of a group; at most
    `limit` characters."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    if isinstance(error, ValidationError):
        # The server's reply did not fit the protocol: say where (`tools.3.inputSchema`).
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "(root)"
        said = f"the server's reply does not fit {error.title}: {where}: {first['msg']}"
    else:
        text = str(error).splitlines()[0] if str(error) else ""
        said = f"{type(error).__name__}: {text}" if text else type(error).__name__
    return said if limit is None else said[:limit]


def fetch_catalog_sync(target: Target, **limits: Any) -> Catalog:
    """`fetch_catalog` for sync callers (Celery tasks, the CLI)."""
    return anyio.run(lambda: fetch_catalog(target, **limits))
