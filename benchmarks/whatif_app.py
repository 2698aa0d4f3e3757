"""uvicorn factory serving toolsift with `lean_select` swapped in (see lean_select.py)."""

from __future__ import annotations

import lean_select
from fastapi import FastAPI

from toolsift.app import create_app as toolsift_app


def create_app() -> FastAPI:
    lean_select.install()
    return toolsift_app()
