"""Shared fixtures: the public AiM traces and their reference results, kept in the repository."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

#: The public simulator's traces and results (``tests/data/aim/README.md`` says where from).
TRACES = Path(__file__).resolve().parent / "data" / "aim"


@pytest.fixture(scope="session")
def reference() -> dict:
    """The public simulator's results for the public traces (``reference.json``)."""
    return json.loads((TRACES / "reference.json").read_text())


@pytest.fixture(scope="session")
def traces_dir() -> Path:
    """Folder of the public traces."""
    return TRACES
