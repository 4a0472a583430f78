"""Shared fixtures, and a guard that the suite reads nothing outside the repository's data.

The public AiM traces and their reference results are kept in ``tests/data/aim``. The folder
that holds the project's planning material beside a checkout (``OUTSIDE``) is never read: an
audit hook fails any attempt to open a file there, so a test that depended on it would fail
in every run, not only on a fresh clone without it.
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import sys
from pathlib import Path

import pytest
from hypothesis import settings

#: Property tests run derandomized by default (the examples are a function of the test, so a
#: CI failure happens again on any machine), each with the example count its ``@settings``
#: names; ``HYPOTHESIS_PROFILE=explore`` draws fresh random examples instead.
settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
settings.register_profile("explore", derandomize=False, deadline=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

#: The public simulator's traces and results (``tests/data/aim/README.md`` says where from).
TRACES = Path(__file__).resolve().parent / "data" / "aim"
#: The real-vLLM golden runs (``benchmarks/record_vllm_golden.py``).
GOLDEN_DIR = Path(__file__).resolve().parent / "data" / "serving" / "golden"


def golden_runs(prefix_caching: bool) -> list[Path]:
    """The golden runs recorded with vLLM's prefix caching on (or off), by name."""
    return [path for path in sorted(GOLDEN_DIR.glob("*.json.gz"))
            if json.loads(gzip.decompress(path.read_bytes()))["params"].get(
                "enable_prefix_caching", True) is prefix_caching]


#: The folder beside the checkout that the suite must not read.
OUTSIDE = str(Path(__file__).resolve().parents[2] / "shared") + os.sep


def guard(event: str, args: tuple) -> None:
    """Audit hook: refuse to open anything under :data:`OUTSIDE`."""
    if event == "open" and args and isinstance(args[0], (str, bytes, os.PathLike)):
        path = os.path.abspath(os.fsdecode(args[0]))
        if path.startswith(OUTSIDE):
            raise PermissionError(f"the test suite must not read {path}: the repository "
                                  "carries every file its tests need (tests/data/)")


sys.addaudithook(guard)


@pytest.fixture(scope="session")
def reference() -> dict:
    """The public simulator's results for the public traces (``reference.json``)."""
    return json.loads((TRACES / "reference.json").read_text())


@pytest.fixture(scope="session")
def traces_dir() -> Path:
    """Folder of the public traces."""
    return TRACES


@pytest.fixture
def sigint_default():
    """SIGINT raises ``KeyboardInterrupt`` in this process for the test, and the commands it
    starts begin with ^C's default action, even when the suite itself runs with SIGINT
    ignored (a shell's background job without job control: its children inherit the
    ignore, and ``patton`` rightly keeps it)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


#: How long a test file with these markers tends to run, as a rank: the suite runs its longest
#: files first so that the workers (``--dist loadfile``) finish together instead of one worker
#: running a long file alone at the end (longest processing time first).
LONG_MARKERS = {"ray": 4, "slow": 3, "formal": 2, "verilator": 1}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Order the files by their longest marker's rank, longest first; keep the order within a
    rank and within a file (a stable sort, the same on every worker)."""
    rank: dict[str, int] = {}
    for item in items:
        mine = max((LONG_MARKERS.get(m.name, 0) for m in item.iter_markers()), default=0)
        rank[item.nodeid.split("::")[0]] = max(rank.get(item.nodeid.split("::")[0], 0), mine)
    items.sort(key=lambda item: -rank[item.nodeid.split("::")[0]])
