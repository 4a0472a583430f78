"""Energy model: per-command energies from the constants, and the standby decision."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from patton.sim import trace
from patton.sim.cycle_model import CycleModel
from patton.sim.device import params
from patton.sim.energy import (
    COMPONENTS,
    CONSTANTS,
    STANDBY,
    Energy,
    EnergyConstants,
    activations,
    energy,
    energy_arrays,
    standby_scale,
)
from patton.sim.isa import Command, Opcode


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


#: What one command counts for in each term of ``docs/energy.md``'s formulas: banks activated,
#: read and write bursts, MAC16 equivalents (``pim``), external transfers (``dq``), a column
#: command for the controller's transaction engine (``col``), global-buffer reads and writes.
#: Every command also counts once for the controller's PHY.
SHARES: dict[str, dict[str, float]] = {
    "ACT": {"act": 1}, "ACT4": {"act": 4}, "ACT16": {"act": 16},
    "RD": {"read": 1, "dq": 1, "col": 1}, "RDA": {"read": 1, "dq": 1, "col": 1},
    "WR": {"write": 1, "dq": 1, "col": 1}, "WRA": {"write": 1, "dq": 1, "col": 1},
    "RDCP": {"read": 1, "col": 1, "gb_write": 1}, "WRCP": {"write": 1, "col": 1, "gb_read": 1},
    "WRGB": {"dq": 1, "col": 1, "gb_write": 1}, "AF16": {"read": 16, "col": 1},
    "RDMAC16": {"read": 1, "dq": 1, "col": 1}, "RDAF16": {"read": 1, "dq": 1, "col": 1},
    "WRMAC16": {"write": 1, "dq": 1, "col": 1}, "WRA16": {"write": 16, "dq": 1, "col": 1},
    "WR16": {"write": 16, "dq": 1, "col": 1},  # extension wr16: WRA16's figure (extensions.md)
    "MAC": {"pim": 1 / 16, "col": 1}, "MAC16": {"pim": 1, "col": 1},
    "EWMUL16": {"pim": 1 / 4, "col": 1},
}

#: Constants unlike the defaults in every field, none of them 1 (so that a product and a
#: quotient of two of them differ).
ODD = EnergyConstants(p_act=70.1, p_rd=430.3, p_wr=560.7, p_act_stby=260.9, p_pre_stby=180.2,
                      t_rc=41.5, t_bl=1.75, t_ccdl=2.5, pim_factor=3.5, dq_pj_per_bit=4.5,
                      burst_bits=288, ctrl_trx_mw=250.25, ctrl_phy_mw=370.5,
                      channels_per_ctrl=3.0, gb_static_mw=0.07, gb_read_mw=0.29,
                      gb_write_mw=0.33, freq_ghz=1.6)


@pytest.mark.parametrize("k", [CONSTANTS, ODD], ids=["constants", "odd constants"])
@pytest.mark.parametrize("command", [c.name for c in Command])
def test_one_command_costs_what_the_formulas_say(command, k):
    """Every command of the ISA, once, on one channel, in every term (nJ)."""
    share = SHARES.get(command, {})
    expected = {
        "act": k.p_act * k.t_rc * share.get("act", 0),
        "read": k.p_rd * k.t_bl * share.get("read", 0),
        "write": k.p_wr * k.t_bl * share.get("write", 0),
        "pim": k.pim_factor * k.p_rd * k.t_ccdl * share.get("pim", 0),
        "dq": k.dq_pj_per_bit * k.burst_bits * share.get("dq", 0),
        "controller": (k.ctrl_trx_mw * share.get("col", 0) + k.ctrl_phy_mw)
        / k.channels_per_ctrl / k.freq_ghz,
        "global_buffer": (k.gb_read_mw * share.get("gb_read", 0)
                          + k.gb_write_mw * share.get("gb_write", 0)) / k.freq_ghz,
        "standby": 0.0,
    }
    got = energy({0: {command: 1}}, {0: {"active": 0, "precharged": 0, "idle": 0}}, 0,
                 constants=k).components
    assert list(got) == list(COMPONENTS)
    assert got == pytest.approx({name: pj / 1000 for name, pj in expected.items()},
                                rel=1e-12, abs=0)


def test_the_shares_name_every_command_the_models_charge():
    assert set(SHARES) <= {c.name for c in Command}


def test_standby_and_the_static_term_follow_the_cycles():
    """Standby charges active and precharged time at their powers (idle time not at all),
    the global buffer's leakage every channel for the run's length."""
    ns = float(params()["cycle_ns"])
    states = {0: {"active": 100, "precharged": 300, "idle": 50},
              1: {"active": 20, "precharged": 0, "idle": 7}}
    got = energy({0: {}, 1: {}}, states, 1000, constants=ODD).components
    assert got["standby"] == pytest.approx(
        (ODD.p_act_stby * 120 + ODD.p_pre_stby * 300) * ns / 1000, rel=1e-12)
    assert got["global_buffer"] == pytest.approx(ODD.gb_static_mw * 1000 * ns * 2 / 1000,
                                                 rel=1e-12)
    cent = energy({0: {}, 1: {}}, states, 1000, constants=ODD, standby="cent").components
    assert cent["standby"] == pytest.approx(got["standby"] / 2, rel=1e-12)
    assert energy({0: {}, 1: {}}, states, 1000, constants=ODD).total == pytest.approx(
        energy({0: {}, 1: {}}, states, 1000, constants=ODD, standby="per_channel").total,
        rel=0, abs=0)


def test_standby_scale():
    assert [standby_scale(s, 4) for s in STANDBY] == [1.0, 0.25]
    assert standby_scale("cent", 1) == standby_scale("cent", 0) == 1.0
    assert standby_scale("per_channel", 0) == 1.0
    with pytest.raises(ValueError) as error:
        standby_scale("mean", 4)
    assert str(error.value) == "standby must be 'per_channel' or 'cent', not 'mean'"


def test_arrays_are_the_same_run_as_dicts():
    """``energy_arrays`` (what the cycle model calls) equals ``energy`` on the same run, with
    active, precharged and idle cycles unlike each other."""
    rng = np.random.default_rng(5)
    counts = rng.integers(0, 50, size=(3, len(Command)))
    stats = np.array([[10, 200, 3000], [40, 500, 6000], [70, 800, 9000]])
    by_name = {ch: {c.name: int(counts[ch, int(c)]) for c in Command} for ch in range(3)}
    states = {ch: dict(zip(("active", "precharged", "idle"), map(int, stats[ch])))
              for ch in range(3)}
    for standby in STANDBY:
        assert energy_arrays(counts, stats, 12_345, ODD, standby).components == pytest.approx(
            energy(by_name, states, 12_345, ODD, standby).components, rel=1e-12)
    assert energy_arrays(counts, stats, 12_345, ODD).total == pytest.approx(
        energy(by_name, states, 12_345, ODD).total, rel=1e-12)


def test_activations_count_every_bank_opened():
    assert activations({0: {"ACT": 3, "RD": 9}, 5: {"ACT16": 2, "ACT4": 1}, 7: {}}) == 39
    assert activations({}) == 0


def test_the_records_are_plain_values():
    """Constants cannot be changed in place; a result starts empty and totals its terms."""
    with pytest.raises(dataclasses.FrozenInstanceError):
        CONSTANTS.p_act = 1.0  # type: ignore[misc]
    assert not hasattr(CONSTANTS, "__dict__") and not hasattr(Energy(), "__dict__")
    assert Energy().components == {} and Energy().total == 0
    assert Energy({"act": 1.5, "dq": 2.0}).total == 3.5


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
