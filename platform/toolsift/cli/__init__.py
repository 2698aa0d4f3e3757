"""`toolsift`: run the product, manage tenants and catalogs, select from the shell.

One module per concern: `run` (the processes), `admin` (tenants, keys, catalogs, report),
`agent` (select); `base` holds the app they register on.
"""

from __future__ import annotations

from importlib.metadata import entry_points

import psycopg
from pydantic import ValidationError
from sqlalchemy.exc import OperationalError

from ..access.cli import permission_app, role_app
from ..config import Settings
from ..kit.commands import err
from ..mcp.cli import app as mcp_app
from . import admin, agent, run
from .base import app

__all__ = ["admin", "agent", "app", "main", "run"]

app.add_typer(admin.tenant_app, name="tenant")
app.add_typer(admin.key_app, name="key")
app.add_typer(admin.tools_app, name="tools")
app.add_typer(permission_app, name="permission")
app.add_typer(role_app, name="role")
app.add_typer(mcp_app, name="mcp")

# `toolsift bench` and `toolsift eval` come from toolsift-tooling (tooling/), when installed:
# the product's package and image carry no benchmark code or data.
for command in entry_points(group="toolsift.commands"):
    command.load()(app)


def main() -> None:
    """The `toolsift` command: a database that does not answer is one line, not a traceback
    through SQLAlchemy and psycopg (any command may be the first to reach it)."""
    try:
        app()
    except ValidationError as error:
        if error.title != Settings.__name__:
            raise
        # A setting from the environment (or .env): name the variable, not a traceback.
        for problem in error.errors():
            variable = "TOOLSIFT_" + "_".join(str(p) for p in problem["loc"]).upper()
            err.print(f"[red]error:[/red] {variable}: {problem['msg']}", highlight=False)
        raise SystemExit(2) from None
    except (OperationalError, psycopg.OperationalError) as error:
        cause = error.orig if isinstance(error, OperationalError) else error
        lines = str(cause).strip().splitlines() or [type(cause).__name__]
        err.print(f"[red]error:[/red] the database did not answer: {lines[0]}", highlight=False)
        raise SystemExit(1) from None
