"""End to end on the functional model: random serving scenarios, checked value by value.

Every attention check compares QK^T scores and SV outputs read back through RD_MAC with (a) a
NumPy reference that replays the documented bf16 datapath in the plan's reduction order (must
be bit-exact) and (b) float64 (within ``TOLERANCE * sum |a_i b_i|``); after the scenario every
written Key and Value element of every bound block is read from the mats at the place the
metadata names.
"""

from __future__ import annotations

import pytest
from patton.runtime.models import ModelSpec
from patton.runtime.patton.config import Config
from patton.runtime.patton.metadata import CzPlace
from patton.runtime.patton.variants import VARIANTS
from patton.sim.device import DEVICE
from patton.sim.functional import FunctionalModel
from patton.serving.checks import check_placements
from patton.serving.loop import execute
from patton.serving.scenario import Tokens, generate, origins

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
    log = generate(c, requests=3, steps=steps, seed=seed, attend_every=10, evict_rate=0.25,
                   decode=(4, 20))
    kinds = [e[0] for e in log]
    assert {"share", "evict", "finish", "prefill", "decode", "attend"} <= set(kinds)
    rt, rep = execute(c, log, VARIANTS[variant], seed=seed)
    rt.check()
    assert rep.attends >= 3
    assert rep.exact_mismatches_qk == 0
    assert rep.exact_mismatches_sv == 0
    assert rep.max_tol_ratio <= 1.0
    assert rep.max_abs_err_qk > 0.0  # bf16 scores are not float64 ...
    assert rep.placement_checked > 1000
    assert rep.placement_mismatches == 0
    if variant == "patton":
        assert rep.commits > 0


@pytest.mark.parametrize("name", sorted(CASES))
def test_scenario_on_functional_model(name: str) -> None:
    _check(_config(name), "patton", seed=3)


def test_scenario_without_commit_zone() -> None:
    _check(_config("gqa-d64"), "patton-wo-cz", seed=4)


def test_ch_per_head_of_cases() -> None:
    assert [_config(n).ch_per_head for n in ("gqa-d64", "gqa-d128-p4", "mha-d128",
                                             "gqa-d256")] == [4, 4, 1, 2]


def test_corrupted_mat_is_detected() -> None:
    """The checks can fail: flip one stored Value bit and the placement check counts it."""
    c = _config("gqa-d64")
    log = generate(c, requests=2, steps=20, seed=1, attend_every=100)
    fm = FunctionalModel(c.device)
    rt, rep = execute(c, log, seed=1, model=fm)
    assert rep.placement_mismatches == 0 and rep.placement_checked > 0
    bid = sorted(rt.blocks)[0]
    _, vp = rt.placements(bid)
    if isinstance(vp, CzPlace):
        row, col = c.row(0, vp.row), vp.col0
    else:
        row, col = c.row(0, vp.row0), vp.col
    words = fm.peek(c.channel(0, 0), 0, row)
    words[col, 0] ^= 0x0001
    fm.poke(c.channel(0, 0), 0, row, words)
    bad, checked = check_placements(rt, fm, Tokens(c, 1), origins(log))
    assert bad == 1 and checked == rep.placement_checked
