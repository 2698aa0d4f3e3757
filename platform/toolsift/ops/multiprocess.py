"""The metrics folder of a multi-process API, made ready before any metric exists.

Kept apart from `metrics.py`: importing that module creates its counters, and with
`PROMETHEUS_MULTIPROC_DIR` set the client opens their files in that folder at once. A
folder that does not exist yet (compose mounts an empty tmpfs on /tmp) would stop the API
at its start, and a clean-up after the import would delete the live files of this process.
"""

from __future__ import annotations

import os


def prepare_multiprocess_dir() -> None:
    """Start each server with an empty metrics folder (the client's documented contract)."""
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if not directory:
        return
    os.makedirs(directory, exist_ok=True)
    for name in os.listdir(directory):
        if name.endswith(".db"):
            os.remove(os.path.join(directory, name))
