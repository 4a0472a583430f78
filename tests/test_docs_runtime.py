"""``docs/runtime.md``'s timed decode-step records: their figures that do not depend on the
machine (instructions and device cycles per step and phase) are what the code makes now."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TIMED = ROOT / "docs" / "records" / "timed"


def _counts(output: dict) -> list[tuple]:
    """Each row's step, phase, instructions and cycles (the machine-independent figures)."""
    return [(r["step"], r["phase"], r.get("instructions"), r.get("cycles"))
            for r in output["rows"]]


@pytest.mark.parametrize("name,flags", [("runtime-decode-step", []),
                                        ("runtime-decode-step-stagger", ["--stagger"])])
def test_decode_step_record_counts_are_todays(name: str, flags: list[str]) -> None:
    """The record's instruction and cycle counts equal a fresh run's (a few seconds)."""
    stored = json.loads((TIMED / f"{name}.json").read_text())["output"]
    done = subprocess.run([sys.executable, "benchmarks/runtime_decode_step.py", *flags,
                           "--json"], cwd=ROOT, capture_output=True, text=True, check=True)
    assert _counts(json.loads(done.stdout)) == _counts(stored)

