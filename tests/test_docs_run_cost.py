"""``docs/run-cost.md``'s timed ``patton cost`` record: its figures that do not depend on the
machine are what the code makes now."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIMED = ROOT / "docs" / "records" / "timed"


def test_run_cost_300_record_figures_are_todays() -> None:
    """``docs/run-cost.md``'s 300-step transcript: cycles, energy and tokens equal a fresh
    ``patton cost`` run's (a few seconds)."""
    stored = json.loads((TIMED / "run-cost-300.json").read_text())["output"]
    done = subprocess.run([sys.executable, "-m", "patton.cli", "cost", "--model", "llama3-8b",
                           "--runtime", "patton", "--steps", "300", "--json"], cwd=ROOT,
                          capture_output=True, text=True, check=True)
    fresh = json.loads(done.stdout)
    for key in ("parts", "decode_tokens", "prefill_tokens", "hit_rate", "energy_joules",
                "latency_seconds"):
        assert fresh[key] == stored[key], key
