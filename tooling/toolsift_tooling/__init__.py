"""Benchmarks and evaluation: tooling kept out of the product's package and image.

Installed beside `toolsift` (`pip install -e tooling`), it adds `toolsift bench` and
`toolsift eval` to the main CLI through the `toolsift.commands` entry point.
"""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Mount the tooling's commands; imports stay lazy so `toolsift --help` stays fast."""
    from .bench.cli import app as bench_app
    from .eval.cli import eval_command

    app.add_typer(bench_app, name="bench")
    app.command("eval")(eval_command)
