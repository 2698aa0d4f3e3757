"""`python -m toolsift_tooling.bench select`: the bench group without the main CLI."""

from .cli import app

app(prog_name="toolsift bench")
