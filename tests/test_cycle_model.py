"""The cycle model against the public AiM simulator, and its fast paths against plain stepping."""

from __future__ import annotations

import numpy as np
import pytest
from patton.sim import trace
from patton.sim.check import verify
from patton.sim.cycle_model import CycleModel
from patton.sim.executor import closed
from patton.sim.isa import Instruction, Opcode, channel_bit
from patton.sim.random_programs import random_program

SMALL = ["all_isr", "probe_2ch", "probe_act", "probe_af", "probe_block", "probe_gemv",
         "probe_misc"]
LARGE = ["micro_ewmul_16banks", "micro_macab_1024_16banks", "micro_rdmac_1024_16banks",
         "micro_wrab_1024_1bank", "micro_wrbias_1024_16banks",
         "micro_wrbias_mac_af_rdaf_16banks", "micro_wrbias_mac_rdmac_mac_16banks",
         "micro_wrgb_gbbk_bggb_16banks"]


def _check_totals(result, expected):
    assert result.cycles == expected["memory_system_cycles"]
    assert result.command_counts == {int(ch): c for ch, c in expected["command_counts"].items()}
    assert result.bank_state_cycles == {int(ch): s
                                        for ch, s in expected["bank_state_cycles"].items()}


def test_reference_covers_every_trace(reference, traces_dir):
    assert sorted(p.stem for p in traces_dir.glob("*.trace")) == sorted(SMALL + LARGE)
    assert set(reference) == set(SMALL + LARGE)


@pytest.mark.parametrize("name", SMALL)
def test_small_traces_exact_schedule(name, reference, traces_dir):
    expected = reference[name]
    result = CycleModel(record=True).run(trace.read(traces_dir / f"{name}.trace"))
    _check_totals(result, expected)
    assert [[c.cycle, c.channel, c.command.name] for c in result.schedule] == \
        expected["schedule"]
    assert verify(result.schedule) == []


@pytest.mark.parametrize("native", [True, False], ids=["kernel", "python"])
@pytest.mark.parametrize("name", LARGE)
def test_micro_traces_exact_totals(name, native, reference, traces_dir):
    model = CycleModel(native=native)
    _check_totals(model.run(trace.read(traces_dir / f"{name}.trace")), reference[name])


def _signature(result):
    return (result.cycles, result.command_counts, result.bank_state_cycles,
            [(c.cycle, c.channel, c.command, c.bank, c.row, c.col) for c in result.schedule])


@pytest.mark.parametrize("seed", range(25))
def test_fast_paths_equal_plain_stepping(seed):
    """The Python model's shortcuts (skipping quiet cycles, grouping channels) change nothing,
    cycle for cycle (the compiled kernel is compared with it in test_cycle_model_native)."""
    program = random_program(np.random.default_rng(seed), 40, channels=4, rows=3)
    plain = _signature(CycleModel(record=True, native=False, skip=False, group=False)
                       .run(program))
    for options in ({}, {"group": False}, {"skip": False}):
        assert _signature(CycleModel(record=True, native=False, **options).run(program)) == \
            plain
    assert verify(CycleModel(record=True).run(program).schedule) == []


def test_fast_paths_on_a_reference_trace(reference, traces_dir):
    program = closed(trace.read(traces_dir / "micro_wrbias_mac_rdmac_mac_16banks.trace")[:200])
    plain = _signature(CycleModel(record=True, native=False, skip=False, group=False)
                       .run(program))
    assert _signature(CycleModel(record=True, native=False).run(program)) == plain
    assert _signature(CycleModel(record=True).run(program)) == plain


def test_gemv_row_costs_98_plus_2n():
    """Closed form from the table: a MAC_ABK on a new row costs 98 + 2N cycles."""
    def cycles(rows, n):
        program = [Instruction(Opcode.MAC_ABK, opsize=n, channel_mask=channel_bit(0), row=r)
                   for r in range(rows)] + [Instruction(Opcode.EOC)]
        return CycleModel().run(program).cycles

    for n in (1, 8, 64):
        assert cycles(6, n) - cycles(5, n) == 98 + 2 * n


def test_program_must_end_with_eoc():
    with pytest.raises(ValueError, match="must end with AiM EOC"):
        CycleModel().run([Instruction(Opcode.SYNC)])
    with pytest.raises(ValueError, match="only at the end"):
        CycleModel().run([Instruction(Opcode.EOC), Instruction(Opcode.EOC)])


def test_blocking_read_stalls_other_channels(traces_dir):
    """RD_MAC on channel 0 holds back an instruction for channel 1 (public simulator §8.6)."""
    result = CycleModel(record=True).run(trace.read(traces_dir / "probe_block.trace"))
    rdmac = next(c.cycle for c in result.schedule if c.command.name == "RDMAC16")
    first_ch1 = min(c.cycle for c in result.schedule if c.channel == 1)
    assert first_ch1 > rdmac
