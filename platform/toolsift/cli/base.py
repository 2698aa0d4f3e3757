"""The `toolsift` command's root: its Typer app and the console its commands print to."""

from __future__ import annotations

import typer
from rich.console import Console

app = typer.Typer(help="toolsift: the few tools each agent turn needs.", no_args_is_help=True)
console = Console()
