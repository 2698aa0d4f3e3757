"""Holding sessions open to MCP servers to hear that their tool list changed.

One long-lived process (`toolsift mcp listen`) keeps one client session per enabled source
that asks for it, and turns each change into a sync (in production, a `mcp.sync` task).

- Servers on protocol 2026-07-28 are asked with `subscriptions/listen` (tools list changed):
  the response is the event stream, over streamable HTTP or stdio alike.
- Older servers send `notifications/tools/list_changed` on their own; the session's message
  handler hears them (over HTTP only if the server keeps a session and its GET stream).

Events are not replayed by the protocol, so every (re)connection is followed by one sync,
and a dropped session is reopened with backoff. A burst of events becomes one sync per
`debounce` seconds. The scheduled sync still runs: a listener is a shortcut, not the only
way a change arrives. Limits: one process holds every session (run exactly one), and a
stdio source's listener keeps its own server process running.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

import anyio
import anyio.to_thread
import mcp_types
from anyio.abc import TaskGroup
from mcp.client.subscriptions import ListenNotSupportedError

from ..config import Settings
from ..db import ALL_PERMISSIONS, Database
from .fetch import Target, connect, describe_error
from .service import mcp
from .sync import Due, listening_sources

_log = logging.getLogger(__name__)

OnChange = Callable[[Due], None]


async def listen_once(
    target: Target, on_event: Callable[[], Awaitable[None]], *, timeout: float = 60.0
) -> None:
    """Hold one session until it ends, calling `on_event` once on connect and per change."""

    async def handler(message: Any) -> None:
        root = getattr(message, "root", message)
        if isinstance(root, mcp_types.ToolListChangedNotification):
            await on_event()

    announces = True
    async with connect(target, timeout=timeout, message_handler=handler) as client:
        tools = client.server_capabilities.tools
        announces = tools is not None and bool(tools.list_changed)
        if announces:
            try:
                async with client.listen(tools_list_changed=True) as subscription:
                    # Catch up once the stream is acknowledged: nothing before is replayed.
                    await on_event()
                    async for _event in subscription:
                        await on_event()
            except ListenNotSupportedError:
                await on_event()
                await anyio.sleep_forever()  # legacy server: the message handler hears it
    # Raised outside the session: inside, the SDK's task group would wrap it in a group.
    if not announces:
        raise NoNotifications("the server does not announce tool list changes")


class NoNotifications(Exception):
    """The server never announces changes: holding a session would only cost a connection."""


class Debounced:
    """At most one `on_change` per `seconds` per source; the last event is never dropped."""

    def __init__(self, due: Due, on_change: OnChange, seconds: float) -> None:
        self.due, self.on_change, self.seconds = due, on_change, seconds
        self._pending = anyio.Event()

    async def __call__(self) -> None:
        self._pending.set()

    async def run(self) -> None:
        while True:
            await self._pending.wait()
            self._pending = anyio.Event()
            await anyio.to_thread.run_sync(self.on_change, self.due)
            await anyio.sleep(self.seconds)


async def _hold(
    database: Database, due: Due, on_change: OnChange, settings: Settings, debounce: float
) -> None:
    """Keep one source's session open for as long as the supervisor wants it."""
    delay = 1.0
    debounced = Debounced(due, on_change, debounce)
    async with anyio.create_task_group() as tg:
        tg.start_soon(debounced.run)
        while True:
            try:
                target = await anyio.to_thread.run_sync(_target, database, due, settings)
                await listen_once(target, debounced)
                delay = 1.0
            except anyio.get_cancelled_exc_class():
                raise
            except NoNotifications:
                # The schedule covers this source; look again only when it changes (the
                # supervisor restarts a changed source) or after a long while.
                _log.info("mcp listener for %s: no change notifications", due.source_id)
                await anyio.sleep(3600)
                continue
            except Exception as error:  # any failure: reconnect later; syncs report errors
                _log.info("mcp listener for %s: %s", due.source_id, describe_error(error))
            await anyio.sleep(delay)
            delay = min(delay * 2, 300.0)


def _target(database: Database, due: Due, settings: Settings) -> Target:
    with database.unit_of_work(due.tenant_id, permissions=ALL_PERMISSIONS) as session:
        target, _ = mcp.target(mcp.get(session, due.source_id), settings=settings)
    return target


async def supervise(
    database: Database,
    on_change: OnChange,
    *,
    settings: Settings,
    refresh: float = 30.0,
    debounce: float = 2.0,
) -> None:
    """Start, stop and restart source listeners as sources are added, changed or removed."""
    running: dict[Due, tuple[datetime, anyio.CancelScope]] = {}
    async with anyio.create_task_group() as tg:
        while True:
            try:
                wanted = await anyio.to_thread.run_sync(listening_sources, database)
            except Exception:  # the database is away: keep what runs, look again later
                _log.warning("mcp listener: cannot read the sources", exc_info=True)
                await anyio.sleep(refresh)
                continue
            for due, (changed, scope) in list(running.items()):
                if wanted.get(due) != changed:
                    scope.cancel()
                    del running[due]
            for due, changed in wanted.items():
                if due not in running:
                    running[due] = (
                        changed,
                        await _start(tg, database, due, on_change, settings, debounce),
                    )
            await anyio.sleep(refresh)


async def _start(
    tg: TaskGroup,
    database: Database,
    due: Due,
    on_change: OnChange,
    settings: Settings,
    debounce: float,
) -> anyio.CancelScope:
    scope = anyio.CancelScope()

    async def run() -> None:
        with scope:
            await _hold(database, due, on_change, settings, debounce)

    tg.start_soon(run)
    return scope
