"""Shared fixtures: where the public reference material lives."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

#: ``../shared`` beside the project (CI lays it there); ``PATTON_SHARED`` overrides.
SHARED = Path(os.environ.get("PATTON_SHARED", Path(__file__).resolve().parents[2] / "shared"))
TRACES = SHARED / "reference" / "aim" / "traces"


def _need(path: Path) -> Path:
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: the tests need the shared reference "
                                "material beside the project (or PATTON_SHARED)")
    return path


@pytest.fixture(scope="session")
def reference() -> dict:
    """The public simulator's results for the public traces (``reference.json``)."""
    return json.loads(_need(TRACES / "reference.json").read_text())


@pytest.fixture(scope="session")
def traces_dir() -> Path:
    """Folder of the public traces."""
    return _need(TRACES)
