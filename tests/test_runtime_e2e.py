"""End to end on the models: random serving scenarios through the step driver, checked value
by value.

Every attention check compares the QK^T scores and SV outputs read back through RD_MAC with (a)
a NumPy reference that replays the documented bf16 datapath in the plan's reduction order (must
be bit-exact) and (b) float64 (within ``TOLERANCE * sum |a_i b_i|``); every KV element a step
writes, and every commit, is read back from the mats where the metadata says, and at the end
every written token of every bound block again (``Checks.sweep``); every schedule passes
``verify``.
"""

from __future__ import annotations

import pytest
from patton.runtime.models import ModelSpec
from patton.runtime.patton.config import Config
from patton.runtime.patton.metadata import CzPlace
from patton.runtime.patton.variants import VARIANTS
from patton.serving.scenario import Scenario, run
from patton.sim.device import DEVICE
from patton.sim.executor import CycleExecutor

CASES = {
    # name: (model, device channels, config); few rows per layer, so capacity runs out
    "gqa-d64": (ModelSpec("gqa64", 1, 2, 8, 64), 32, {"layer_rows": 6}),
    "gqa-d128-p4": (ModelSpec("gqa128", 1, 2, 8, 128), 8, {"layer_rows": 8}),
    "mha-d128": (ModelSpec("mha128", 1, 4, 4, 128), 4, {"layer_rows": 24, "crs_rows": 2}),
    "gqa-d256": (ModelSpec("gqa256", 1, 2, 4, 256), 4, {"layer_rows": 24, "crs_rows": 2}),
    "two-layers": (ModelSpec("two", 2, 1, 1, 64), 4, {"layer_rows": 6}),
    "no-o2v": (ModelSpec("gqa64", 1, 2, 8, 64), 32, {"layer_rows": 10, "o2v_blocks": 64}),
}


def _config(name: str) -> Config:
    spec, channels, extra = CASES[name]
    return Config(spec, DEVICE.with_(channels=channels), **extra)


def _check(c: Config, variant: str, seed: int, steps: int = 40) -> None:
    served = run(c, Scenario(requests=3, steps=steps, seed=seed), VARIANTS[variant])
    served.attached.runtime.check()
    events = served.counts.events
    assert {"alloc", "share", "cache", "release", "evict"} <= set(events), events
    assert served.attached.refused > 0  # the runtime's placement refused blocks
    total, acc = served.checks.total, served.checks.accuracy
    assert total.failures == [] and total.mismatches == 0 and total.violations == 0
    assert total.attentions >= 20
    assert acc.max_tol_ratio <= 1.0
    assert acc.max_abs_err_qk > 0.0  # bf16 scores are not float64 ...
    assert total.placement_checked > 1000 and total.placement_mismatches == 0
    bad, checked, failures = served.checks.sweep()
    assert checked > 1000 and bad == 0 and failures == []
    if variant == "patton":
        assert total.commits > 0


@pytest.mark.parametrize("name", sorted(CASES))
def test_scenario_on_the_models(name: str) -> None:
    _check(_config(name), "patton", seed=3)


def test_scenario_without_commit_zone() -> None:
    _check(_config("gqa-d64"), "patton-wo-cz", seed=4)


def test_ch_per_head_of_cases() -> None:
    assert [_config(n).ch_per_head for n in ("gqa-d64", "gqa-d128-p4", "mha-d128",
                                             "gqa-d256")] == [4, 4, 1, 2]


def test_corrupted_mat_is_detected() -> None:
    """The checks can fail: flip one stored Value bit and the sweep counts it."""
    c = _config("gqa-d64")
    ex = CycleExecutor(c.device)
    served = run(c, Scenario(requests=2, steps=20, seed=1), executor=ex)
    bad, checked, _ = served.checks.sweep()
    assert bad == 0 and checked > 0
    rt = served.attached.runtime
    bid = sorted(rt.blocks)[0]
    _, vp = rt.placements(bid)
    if isinstance(vp, CzPlace):
        row, col = c.row(0, vp.row), vp.col0
    else:
        row, col = c.row(0, vp.row0), vp.col
    fm = ex.model
    words = fm.peek(c.channel(0, 0), 0, row)
    words[col, 0] ^= 0x0001
    fm.poke(c.channel(0, 0), 0, row, words)
    bad, again, failures = served.checks.sweep()
    assert bad == 1 and again == checked and len(failures) == 1
