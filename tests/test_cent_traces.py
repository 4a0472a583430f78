"""CENT's traces (a real client's, ``tests/data/aim/cent/``) run exactly as the public simulator
runs them, wide column instructions included; and what a wide instruction does to the data."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import TRACES
from patton.sim import reference, replay, trace
from patton.sim.cycle_model import CycleModel
from patton.sim.device import DEVICE
from patton.sim.functional import FunctionalModel
from patton.sim.isa import Command, Instruction, Opcode

CENT = TRACES / "cent"
NAMES = ("cent_tiny_llama_h8_pp_8cpb_seq64", "cent_llama7b_mp_1dev_seq512",
         "cent_llama70b_gqa_mp_4dev_seq64", "cent_gpt_small_h16_pp_32cpb_seq256")
PROFILES = ("0f28a07", "2eb1ee0")


def _report(result) -> dict:
    return {"command_counts": {str(c): n for c, n in result.command_counts.items()},
            "bank_state_cycles": {str(c): s for c, s in result.bank_state_cycles.items()}}


def _exact(name: str, commit: str, native: bool) -> None:
    expected = reference.read(str(CENT / f"{name}.aimsim-{commit}.yaml"), f"{name}.trace")
    assert expected is not None and set(expected) == {
        "memory_system_cycles", "command_counts", "bank_state_cycles"}
    assert len(expected["command_counts"]) == 32 == len(expected["bank_state_cycles"])
    model = CycleModel(timing=f"aimsim-{commit}", native=native)
    result = model.run(trace.read(CENT / f"{name}.trace"))
    assert reference.differences(expected, _report(result), result) == []
    assert result.cycles == expected["memory_system_cycles"]


@pytest.mark.parametrize("commit", PROFILES)
@pytest.mark.parametrize("name", NAMES)
def test_cent_trace_is_exact_against_the_public_simulator(name, commit):
    """Cycles, every channel's command counts and bank-state cycles, compiled kernel."""
    _exact(name, commit, native=True)


@pytest.mark.slow
@pytest.mark.parametrize("commit", PROFILES)
def test_cent_wide_trace_is_exact_on_the_python_model(commit):
    _exact("cent_llama7b_mp_1dev_seq512", commit, native=False)


def test_the_wide_lines_are_noted_and_refused_when_strict():
    notes: list[trace.TraceNote] = []
    path = CENT / "cent_llama7b_mp_1dev_seq512.trace"
    trace.read(path, notes=notes)
    assert [(n.line, n.reason.split(":")[0]) for n in notes] == [
        (2619, "opsize 256 exceeds the 64 columns per row"),
        (2620, "opsize 256 exceeds the 64 columns per row")]
    with pytest.raises(trace.TraceError, match=r"seq512.trace:2619: opsize 256 exceeds"):
        trace.read(path, strict=True)
    notes.clear()
    trace.read(CENT / "cent_llama70b_gqa_mp_4dev_seq64.trace", notes=notes)
    assert [(n.line, n.reason.split(":")[0]) for n in notes] == [
        (3895, "opsize 512 exceeds the 64 columns per row")]


@pytest.mark.parametrize("commit", PROFILES)
def test_a_wide_ewmul_keeps_its_row_open(commit):
    """``AiM EWMUL 256`` alone: one ACT16 and 256 EWMUL16 in the open row, 538 cycles, as the
    public simulator (``tests/data/aim/cent/README.md``); the same time as four EWMUL 64."""
    model = CycleModel(timing=f"aimsim-{commit}", record=True)
    wide = model.run(trace.parse(["AiM EWMUL 256 0x80000000 387", "AiM EOC"]))
    split = model.run(trace.parse(["AiM EWMUL 64 0x80000000 387"] * 4 + ["AiM EOC"]))
    assert wide.cycles == split.cycles == 538
    assert wide.command_counts == split.command_counts == {0: {"ACT16": 1, "EWMUL16": 256}}
    columns = [c.col for c in wide.schedule if c.command is Command.EWMUL16]
    assert columns == [c % 64 for c in range(256)]  # the bus column wraps
    assert [c.col for c in split.schedule if c.command is Command.EWMUL16] == columns


def _random_row(rng: np.random.Generator, model: FunctionalModel, row: int) -> None:
    for bank in range(DEVICE.banks):
        model.poke(0, bank, row, rng.integers(0x3C00, 0x4000, (DEVICE.columns, DEVICE.lanes))
                   .astype(np.uint16))


def test_wide_instructions_wrap_their_columns_in_the_data():
    """Column ``c`` of a wide instruction is column ``c mod 64``: a MAC_ABK of 128 columns
    accumulates the row twice, an EWMUL of 256 writes what one of 64 writes, a WR_GB of 65
    columns writes its last column over its first; the schedule replayed on the functional
    model gives the same values as its ``run()``."""
    rng = np.random.default_rng(7)
    gb = rng.integers(0x3C00, 0x4000, (DEVICE.gb_columns + 1) * DEVICE.lanes).astype(np.uint16)
    mask = 0x80000000
    wide = [Instruction(Opcode.WR_GB, opsize=65, gpr0=0, channel_mask=mask, data=gb),
            Instruction(Opcode.MAC_ABK, opsize=128, channel_mask=mask, row=5),
            Instruction(Opcode.RD_MAC, gpr0=0, channel_mask=mask),
            Instruction(Opcode.EWMUL, opsize=256, channel_mask=mask, row=6),
            Instruction(Opcode.EOC)]
    lanes = DEVICE.lanes
    last_first = np.concatenate([gb[-lanes:], gb[lanes:-lanes]])  # column 64 wrapped onto 0
    narrow = [Instruction(Opcode.WR_GB, opsize=64, gpr0=0, channel_mask=mask, data=last_first),
              Instruction(Opcode.MAC_ABK, opsize=64, channel_mask=mask, row=5),
              Instruction(Opcode.MAC_ABK, opsize=64, channel_mask=mask, row=5),
              Instruction(Opcode.RD_MAC, gpr0=0, channel_mask=mask),
              Instruction(Opcode.EWMUL, opsize=64, channel_mask=mask, row=6),
              Instruction(Opcode.EOC)]
    models = []
    for program in (wide, narrow):
        model = FunctionalModel(DEVICE.with_(channels=1))
        _random_row(np.random.default_rng(1), model, 5)
        _random_row(np.random.default_rng(2), model, 6)
        models.append((model, model.run(program)))
    (a, reads_a), (b, reads_b) = models
    assert len(reads_a) == len(reads_b) == 1
    assert np.array_equal(reads_a[0].data, reads_b[0].data)
    assert np.array_equal(a.peek(0, 2, 6), b.peek(0, 2, 6))
    assert not np.array_equal(a.peek(0, 2, 6), FunctionalModel(DEVICE).peek(0, 2, 6))
    # the cycle model's schedule carries the same columns: replayed, the same values
    timed = CycleModel(DEVICE.with_(channels=1), record=True).run(wide)
    again = FunctionalModel(DEVICE.with_(channels=1))
    _random_row(np.random.default_rng(1), again, 5)
    _random_row(np.random.default_rng(2), again, 6)
    returned = replay.replay(timed.schedule, again)
    assert [np.array_equal(r.data, reads_a[0].data) for r in returned] == [True]
    assert np.array_equal(again.peek(0, 2, 6), a.peek(0, 2, 6))
