"""The README's executor example runs unchanged, with the results it promises."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def _example() -> str:
    text = README.read_text()
    found = re.search(r"<!-- example: executors -->\n```python\n(.*?)```", text, re.S)
    assert found, "the README lost its executor example"
    return found.group(1)


def test_example_is_short():
    assert len(_example().strip().splitlines()) <= 30


@pytest.mark.verilator
def test_example_runs_on_three_executors_with_equal_results():
    scope: dict = {}
    exec(compile(_example(), str(README), "exec"), scope)
    results = scope["results"]
    assert list(results) == ["FunctionalExecutor", "CycleExecutor", "RtlExecutor"]
    (s0, o0, c0), (s1, o1, c1), (s2, o2, c2) = results.values()
    assert np.array_equal(s0, s1) and np.array_equal(s0, s2)  # QK^T scores, bit for bit
    assert np.array_equal(o0, o1) and np.array_equal(o0, o2)  # SV outputs
    assert c0 is None and c1 == c2 > 0  # the RTL runs the cycle model's schedule
    assert s0.shape == (1, 41) and np.isfinite(o0).all()
