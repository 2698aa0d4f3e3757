"""`python -m toolsift.bench select`, until the main CLI mounts the bench group."""

from .cli import app

app(prog_name="toolsift bench")
