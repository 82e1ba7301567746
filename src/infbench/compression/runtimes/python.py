"""Runtime ``python``: the submitter's own module (``file.py:factory``)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path


def load_python_runner(package: Path, entrypoint: str, device: str):
    file, factory = entrypoint.split(":")
    path = package / file
    sys.path.insert(0, str(package))
    spec = importlib.util.spec_from_file_location(f"submission_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, factory)(str(package), device)
