"""Energy model: per-command energies from the constants, and the standby decision."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from patton.sim import trace
from patton.sim.cycle_model import CycleModel
from patton.sim.energy import COMPONENTS, CONSTANTS, energy
from patton.sim.isa import Opcode


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


# -- against CENT's own power calculator ---------------------------------------------------------

AIM = Path(__file__).resolve().parent / "data" / "aim"
#: Whole-trace energy by component from CENT's power script (``cent_power_calculator.py`` @
#: 8c79786, ``command_processor`` and ``power_calculator``) on the public C++ simulator's
#: statistics (0f28a07 build): ``tests/data/aim/README.md`` says how it was made.
CENT_CALCULATOR = json.loads((AIM / "energy-cent-calculator.json").read_text())


def _trace(name: str) -> Path:
    path = AIM / f"{name}.trace"
    return path if path.exists() else AIM / "cent" / f"{name}.trace"


def _host_only_phy_nj(program) -> float:
    """The PHY energy CENT's script charges for the trace's SYNC and EOC instructions.

    The script keeps one ``stat`` dict for DRAM commands (``CHn_num_<X>_commands``) and for
    host instructions (``total_num_AiM_ISR_<X>_requests``); ``SYNC`` and ``EOC`` are in both
    lists, so each SYNC and EOC instruction lands in ``stat["SYNC"]``/``stat["EOC"]`` and in
    ``CMD_COUNT``, which charges one PHY command each. The simulator issues no DRAM command
    for them (its ``num_SYNC_commands`` and ``num_EOC_commands`` are 0 on every channel), and
    neither does the project: its ``controller`` term leaves them out (``docs/energy.md``).
    """
    host = sum(ins.opcode in (Opcode.SYNC, Opcode.EOC) for ins in program)
    k = CONSTANTS
    return k.ctrl_phy_mw * host / k.channels_per_ctrl / k.freq_ghz / 1000


@pytest.mark.parametrize("name", sorted(CENT_CALCULATOR))
def test_every_component_equals_cents_calculator(name):
    """``--standby cent`` is CENT's script to 1e-9, component by component; the default
    per-channel accounting is the same counts with standby charged to every channel."""
    program = list(trace.read(_trace(name)))
    run = CycleModel().run(program)
    cent = energy(run.command_counts, run.bank_state_cycles, run.cycles,
                  standby="cent").components
    expected = dict(CENT_CALCULATOR[name])
    total = expected.pop("total")
    phy = _host_only_phy_nj(program)
    expected["controller"] -= phy
    assert sorted(expected) == sorted(COMPONENTS)
    for component in COMPONENTS:
        assert cent[component] == pytest.approx(expected[component], rel=1e-9), component
    assert sum(cent.values()) == pytest.approx(total - phy, rel=1e-9)
    ours = energy(run.command_counts, run.bank_state_cycles, run.cycles).components
    channels = len(run.bank_state_cycles)
    for component in COMPONENTS:
        scale = channels if component == "standby" else 1
        assert ours[component] == pytest.approx(cent[component] * scale, rel=1e-12), component


def test_the_calculator_reference_covers_every_public_and_cent_trace():
    traces = {p.stem for p in [*AIM.glob("*.trace"), *(AIM / "cent").glob("*.trace")]}
    assert len(traces) == 19 and traces == set(CENT_CALCULATOR)
