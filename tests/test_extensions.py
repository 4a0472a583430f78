"""Device extensions: the data, the timing derivation and the gates (``docs/extensions.md``)."""

from __future__ import annotations

import json
from importlib import resources

import numpy as np
import pytest
from patton.sim.check import verify
from patton.sim.cycle_model import CycleModel
from patton.sim.extensions import (
    BASE_COMMANDS,
    DEFAULT_EXT,
    EXTENSIONS,
    NotOnDeviceError,
    UnknownExtensionError,
    device_ext,
    ext_field,
)
from patton.sim.functional import FunctionalModel
from patton.sim.isa import Command, Instruction, Opcode, Scope, channel_bit
from patton.sim.timing import PROFILES, SLOTS, TIMING, timing_table

C = Command
WR16 = "aim+wr16"


def test_the_default_set_is_the_public_simulators_device():
    aim = device_ext()
    assert DEFAULT_EXT == "aim" and EXTENSIONS[0] == "aim" and aim.features == ()
    assert aim.commands == BASE_COMMANDS and C.WR16 not in aim.commands
    assert len(BASE_COMMANDS) == 26 and [int(c) for c in BASE_COMMANDS] == list(range(26))
    assert Opcode.WR_ABK_OPEN not in aim.opcodes
    assert device_ext(WR16).commands == tuple(Command)
    assert ext_field("aim") == {} and ext_field(WR16) == {"device_ext": WR16}


def test_an_unknown_set_names_the_sets():
    with pytest.raises(UnknownExtensionError, match="aim, aim\\+wr16"):
        device_ext("aim+wr32")
    with pytest.raises(UnknownExtensionError):
        timing_table(None, "gddr7")


@pytest.mark.parametrize("profile", PROFILES)
def test_the_default_table_is_the_profiles(profile):
    """Under ``aim`` nothing moves: the same rules, slots, latencies and fingerprint."""
    table = timing_table(profile)
    assert timing_table(profile, "aim") is table
    assert table.ext == "aim" and table.slots == SLOTS
    assert all(C.WR16 not in r.preceding | r.following for r in table.rules)
    assert C.WR16 not in table.latency
    assert '"aim"' not in table.fingerprint()


@pytest.mark.parametrize("profile", PROFILES)
def test_wr16_inherits_wra16s_rules_but_the_auto_precharge(profile):
    """WR16 sits beside WRA16 in every rule but the ones WRA16 owes its auto-precharge; the
    one added rule is a write's recovery before a precharge."""
    base, ext = timing_table(profile), timing_table(profile, WR16)
    assert ext.slots == SLOTS + 1 and ext.fingerprint() != base.fingerprint()
    by_id = {r.id: r for r in base.rules}
    dropped = []
    for rule in ext.rules:
        if rule.id >= SLOTS:
            continue
        old = by_id[rule.id]
        assert (rule.level, rule.cycles, rule.expression) == \
               (old.level, old.cycles, old.expression)
        assert rule.following == (old.following | {C.WR16} if C.WRA16 in old.following
                                  else old.following)
        if rule.preceding == old.preceding | {C.WR16} if C.WRA16 in old.preceding else False:
            continue
        assert rule.preceding == old.preceding
        if C.WRA16 in old.preceding:
            dropped.append(rule.id)
    assert sorted(dropped) == [47, 52]  # WRA16 -> ACT/ACT4/ACT16, -> REFab/REFpb
    (added,) = [r for r in ext.rules if r.id >= SLOTS]
    assert (added.id, added.level, added.preceding, added.following, added.cycles) == \
           (SLOTS, Scope.CHANNEL, {C.WR16}, {C.PRE, C.PRE4, C.PREA}, 41)


def test_wr16_then_a_precharge_times_as_wra16():
    """WR16 -> PREA (41) then PREA -> ACT16 (nRP) is the dropped WRA16 -> ACT16 gap (73)."""
    t = timing_table(None, WR16)
    assert t.gap(Scope.CHANNEL, C.WR16, C.PREA) + t.gap(Scope.CHANNEL, C.PREA, C.ACT16) == \
        t.gap(Scope.CHANNEL, C.WRA16, C.ACT16) == 73
    assert t.gap(Scope.CHANNEL, C.WR16, C.ACT16) is None
    assert t.latency[C.WR16] == t.latency[C.WR] == 8


def test_the_added_rules_values_are_their_expressions():
    data = json.loads(resources.files("patton.sim").joinpath("data/device_extensions.json")
                      .read_text())
    p = TIMING.params
    for feature in data["features"].values():
        for rule in feature["timing"]["add"]:
            assert sum(p[t.strip()] for t in rule["expr"].split("+")) == rule["val"]


def _writes(opcode: Opcode, rows: list[int]) -> list[Instruction]:
    words = (np.arange(16, dtype=np.uint16) + 0x3F80)
    out = [Instruction(opcode, gpr0=0, channel_mask=channel_bit(0), row=row, col=i % 64,
                       data=words + i, mask=1 << (i % 16)) for i, row in enumerate(rows)]
    return out + [Instruction(Opcode.EOC)]


@pytest.mark.parametrize("native", [True, False], ids=["kernel", "python"])
def test_open_row_writes_activate_once_per_row(native):
    """Eight WR_ABK_OPEN to one row, then eight to another: two ACT16, one PREA, no checker
    violation; the same writes as WR_ABK activate every time."""
    model = CycleModel(timing=timing_table(None, WR16), record=True, native=native)
    run = model.run(_writes(Opcode.WR_ABK_OPEN, [5] * 8 + [9] * 8))
    assert run.command_counts[0] == {"ACT16": 2, "PREA": 1, "WR16": 16}
    assert verify(run.schedule, timing=model.timing) == []
    assert run.state.open_rows[0] == (9,) * 16
    closing = CycleModel(record=True, native=native).run(_writes(Opcode.WR_ABK, [5] * 8))
    assert closing.command_counts[0] == {"ACT16": 8, "WRA16": 8}


def test_the_kernel_and_the_python_model_agree_on_open_row_writes():
    program = _writes(Opcode.WR_ABK_OPEN, [3, 3, 4, 4, 4, 3])
    mixed = program[:-1] + _writes(Opcode.WR_ABK, [3, 7])
    for prog in (program, mixed):
        a = CycleModel(timing=timing_table(None, WR16), record=True).run(prog)
        b = CycleModel(timing=timing_table(None, WR16), record=True, native=False).run(prog)
        assert a.cycles == b.cycles and a.schedule == b.schedule


def test_a_device_without_the_extension_refuses_it():
    program = _writes(Opcode.WR_ABK_OPEN, [5])
    for native in (True, False):
        with pytest.raises(NotOnDeviceError, match="--device-ext aim\\+wr16"):
            CycleModel(native=native).run(program)


def test_the_functional_model_writes_as_wr_abk_and_leaves_the_row_open():
    a, b = FunctionalModel(), FunctionalModel()
    a.run(_writes(Opcode.WR_ABK_OPEN, [5] * 4))
    b.run(_writes(Opcode.WR_ABK, [5] * 4))
    assert set(a.channels[0].mats) == {5}
    assert np.array_equal(a.channels[0].mats[5], b.channels[0].mats[5])
    assert a.channels[0].mats[5].any()
    assert a.channels[0].protocol.open_rows.tolist() == [5] * 16
    assert b.channels[0].protocol.open_rows.tolist() == [-1] * 16


def test_the_command_line_refuses_an_extension_the_device_lacks(tmp_path, capsys):
    """``patton aim run`` names the trace line of the first instruction the device lacks and
    writes nothing; with ``--device-ext`` it runs and records the set in its JSON."""
    import json

    from patton.sim import trace

    from patton.cli import main

    path = tmp_path / "wr16.trace"
    trace.write(path, _writes(Opcode.WR_ABK_OPEN, [5, 5]))
    out = tmp_path / "wr16.sched"
    assert main(["aim", "run", str(path), "--schedule", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:1: WR_ABK_OPEN needs the device extension 'aim+wr16'" in err
    assert "Traceback" not in err and not out.exists()
    assert main(["aim", "run", str(path), "--device-ext", WR16, "--json",
                 "--schedule", str(out)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["device_ext"] == WR16 and report["command_counts"]["0"]["WR16"] == 2
    assert main(["aim", "check", str(out), "--device-ext", WR16]) == 0
    capsys.readouterr()
    assert main(["aim", "check", str(out), "--json"]) == 1  # WR16 on aim: protocol
    found = json.loads(capsys.readouterr().out)
    assert "device_ext" not in found and found["violations"] == 2
    assert {v["kind"] for v in found["list"]} == {"protocol"}
