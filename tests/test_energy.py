"""Energy model: per-command energies from the constants, and the standby decision."""

from __future__ import annotations

import pytest
from patton.sim.energy import CONSTANTS, energy


def test_per_command_energies_match_the_table():
    def one(counts):
        return energy({0: counts}, {0: {"active": 0, "precharged": 0, "idle": 0}}, 0)

    assert one({"ACT16": 1}).components["act"] == pytest.approx(47.2056, rel=1e-6)
    assert one({"ACT": 1}).components["act"] == pytest.approx(2.950350, rel=1e-6)
    assert one({"MAC16": 1}).components["pim"] == pytest.approx(1.31445, rel=1e-6)
    assert one({"MAC": 16}).components["pim"] == pytest.approx(1.31445, rel=1e-6)
    assert one({"RD": 1}).components["read"] == pytest.approx(0.5476875, rel=1e-6)
    assert one({"RD": 1}).components["dq"] == pytest.approx(1.408, rel=1e-6)
    assert one({"WRA16": 1}).components["write"] == pytest.approx(16 * 0.6914375, rel=1e-6)
    ctrl = one({"TMOD": 1}).components["controller"]
    assert ctrl == pytest.approx(CONSTANTS.ctrl_phy_mw / 2 / 2 / 1000, rel=1e-9)
    assert one({"MAC16": 1}).components["controller"] == pytest.approx(
        (CONSTANTS.ctrl_trx_mw + CONSTANTS.ctrl_phy_mw) / 4 / 1000, rel=1e-9)


def test_standby_per_channel_versus_cent():
    states = {c: {"active": 1000, "precharged": 3000, "idle": 0} for c in range(32)}
    counts = {c: {} for c in range(32)}
    ours = energy(counts, states, 4000).components["standby"]
    cent = energy(counts, states, 4000, standby="cent").components["standby"]
    one_channel = (CONSTANTS.p_act_stby * 500 + CONSTANTS.p_pre_stby * 1500) / 1000
    assert cent == pytest.approx(one_channel)
    assert ours == pytest.approx(32 * one_channel)
    with pytest.raises(ValueError, match="standby must be"):
        energy(counts, states, 4000, standby="mean")


def test_channels_add_up():
    """Every command component of a run is the sum of its channels' (the static and standby
    terms follow the channel count and the run's length instead)."""
    counts = {0: {"ACT": 3, "RD": 5, "MAC16": 7}, 3: {"WR": 2, "WRGB": 4, "ACT16": 1},
              9: {"RDCP": 1, "WRCP": 2, "EWMUL16": 8, "MAC": 3}}
    idle = {"active": 0, "precharged": 0, "idle": 0}
    whole = energy(counts, {ch: idle for ch in counts}, 0).components
    parts = [energy({ch: c}, {ch: idle}, 0).components for ch, c in counts.items()]
    for name in ("act", "read", "write", "pim", "dq", "controller", "global_buffer"):
        assert whole[name] == pytest.approx(sum(p[name] for p in parts), rel=1e-12)
        assert whole[name] > max(p[name] for p in parts)  # two channels or more add to each
    assert energy({}, {}, 0).total == 0.0
