"""What the management commands share: a clear exit for bad input, the database, a tenant."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, NoReturn, TypeVar
from uuid import UUID

import typer
from pydantic import BaseModel, ValidationError
from rich.console import Console
from sqlalchemy.orm import Session

from .. import stack
from ..config import Settings, get_settings
from ..db import ALL_PERMISSIONS, Database
from ..errors import AppError
from ..security import audit

err = Console(stderr=True)

DataDir = Annotated[
    Path | None,
    typer.Option("--data-dir", envvar="TOOLSIFT_DATA_DIR", help="Where embedded data lives."),
]
Tenant = Annotated[UUID, typer.Option(help="Tenant id.")]
Schema = TypeVar("Schema", bound=BaseModel)


def fail(message: str) -> NoReturn:
    """Exit 2 with the message: bad input or state, not a crash."""
    err.print(f"[red]error:[/red] {message}", highlight=False)
    raise typer.Exit(2)


def unwritable(path: Path, *, folder: bool = False) -> str | None:
    """Why a command could not write `path` (a file, or with `folder` a folder it makes and
    writes into), or None: found before a run of minutes, not after it. Tried by writing,
    since permission bits say nothing to root and nothing of /proc."""
    if folder:
        if path.exists() and not path.is_dir():
            return f"{path} is a file, not a folder"
        where = path
        while not where.exists():
            where = where.parent
        if not where.is_dir():
            return f"{where} is a file, not a folder"
    else:
        if path.is_dir():
            return f"{path} is a directory"
        where = path.parent
        if not where.is_dir():
            return f"{where} is not a directory"
    existing = not folder and path.exists()
    try:
        if existing:
            path.open("a").close()  # neither truncated nor changed
        else:
            tempfile.TemporaryFile(dir=where).close()
    except OSError as error:
        return f"cannot write {path if existing else f'in {where}'}: {error.strerror or error}"
    return None


def valid(schema: type[Schema], **fields: object) -> Schema:
    """The API's own validation of a command's arguments; its first error, naming the
    field, is the command's exit."""
    try:
        return schema.model_validate(fields)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        # A validator's own ValueError reads "Value error, <its message>".
        message = first["msg"].removeprefix("Value error, ")
        fail(f"{where}: {message}" if where else message)


def settings_for(data_dir: Path | None) -> Settings:
    """The settings, with the command's `--data-dir` when it gave one."""
    settings = get_settings()
    return settings.model_copy(update={"data_dir": data_dir}) if data_dir else settings


def known_tenant(database: Database, tenant: UUID) -> None:
    """Stop with a clear message for a tenant id that names no tenant (not a traceback, and
    not a write that succeeds at doing nothing)."""
    if not database.tenant_exists(tenant):
        database.dispose()
        fail(f"no tenant {tenant} (`toolsift tenant create` prints a new one's id)")


@contextmanager
def tenant_session(tenant: UUID, data_dir: Path | None = None) -> Iterator[Session]:
    """One audited transaction of an existing tenant, as the CLI; an AppError is a clear
    exit naming its field."""
    with stack.database_url(settings_for(data_dir)) as url:
        database = Database(url, pool_size=1)
        try:
            known_tenant(database, tenant)
            with database.unit_of_work(tenant, permissions=ALL_PERMISSIONS) as session:
                audit.track(session, audit.Actor("cli"))
                yield session
        except AppError as error:
            fail(f"{error.field}: {error.message}" if error.field else error.message)
        finally:
            database.dispose()
