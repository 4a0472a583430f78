# amaranth: UnusedElaboratable=no
"""The device extension ``aim+wr16`` on the RTL (amaranth.sim): the ISA, the decoder, the channel.

WR16 is WRA16 without the auto-precharge: word ``b`` of its payload goes into bank ``b``'s
column of the open row (lanes by the mask), and every bank stays open. On ``aim`` the RTL's
ISA is the one it always was (26 commands, the same enum, sets and widths); under ``aim+wr16``
the channel decodes, times and executes WR16, and every value and verdict equals the
functional model's and ``verify``'s.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from amaranth.hdl import ClockDomain, Module
from amaranth.sim import Simulator
from patton.hw import isa as hw
from patton.hw.channel import Channel
from patton.hw.decoder import Decoder
from patton.hw.isa import ProtocolCode, hw_isa
from patton.hw.params import ChannelParams
from patton.hw.timing_checker import TimingChecker, checked_rules
from patton.sim.check import Checker, verify
from patton.sim.cycle_model import CycleModel
from patton.sim.device import DEVICE
from patton.sim.functional import FunctionalModel
from patton.sim.isa import (
    CFR_RESET,
    Cfr,
    Command,
    Instruction,
    Opcode,
    Scope,
    channel_bit,
)
from patton.sim.replay import replay
from patton.sim.schedule import TimedCommand
from patton.sim.timing import SLOTS, TIMING, timing_table

EXT = "aim+wr16"
WR16_TIMING = timing_table(None, EXT)
PARAMS = ChannelParams.from_device(DEVICE, rows=4)
#: Rule WR16 -> PRE/PRE4/PREA (the extension's own slot).
WR16_PRE = 104
DRAIN = max(TIMING.latency[c] for c in (Command.RD, Command.RDMAC16)) + 2


# ----------------------------------------------------------------------------- the ISA

def test_the_default_isa_is_the_one_the_rtl_always_had():
    aim = hw_isa()
    assert aim is hw_isa("aim") is hw_isa("aim", SLOTS) is hw_isa(TIMING.ext, TIMING.slots)
    assert aim.commands == tuple(c for c in Command if c is not Command.WR16)
    assert len(aim.commands) == 26 and aim.Opcode.__name__ == "Opcode"
    assert [m.name for m in aim.Opcode] == [c.name for c in aim.commands]
    assert "WR16" not in aim.Opcode.__members__
    assert (aim.RULES, aim.RULE_BITS) == (104, 7)
    # the module's names are the default set's
    assert (hw.Opcode, hw.IMPLEMENTED, hw.REJECTED, hw.RULES) == (
        aim.Opcode, aim.IMPLEMENTED, aim.REJECTED, aim.RULES)
    assert Command.WR16 not in hw.REJECTED | hw.IMPLEMENTED
    assert sorted(c.name for c in hw.REJECTED) == [
        "ACT4", "EOC", "PRE4", "RDA", "REFab", "REFpb", "SYNC", "WRA"]
    assert hw.violation_layout().size == 122 and hw.command_layout(PARAMS).size == 310


def test_the_extension_isa_implements_wr16():
    isa = hw_isa(WR16_TIMING.ext, WR16_TIMING.slots)
    assert isa is hw_isa(EXT, 105) and isa.ext == EXT
    assert isa.commands[-1] is Command.WR16 and len(isa.commands) == 27
    assert isa.Opcode.__name__ == "Opcode" and isa.Opcode.WR16.value == 26
    assert isa.IMPLEMENTED == hw.IMPLEMENTED | {Command.WR16}
    assert isa.REJECTED == hw.REJECTED  # the same commands refused by design on every set
    assert isa.ALL_ROWS == hw.ALL_ROWS | {Command.WR16} and isa.BANKED == hw.BANKED
    assert (isa.RULES, isa.RULE_BITS) == (105, 7)
    assert isa.violation_layout().size == 123
    # the command port keeps its fields and widths (the player's stream format)
    assert isa.command_layout(PARAMS).size == hw.command_layout(PARAMS).size
    with pytest.raises(ValueError, match="narrower"):
        hw_isa(EXT, SLOTS - 1)
    with pytest.raises(ValueError, match="unknown device extension"):
        hw_isa("aim+nothing")


def test_the_checker_times_wr16_with_the_extension_rules():
    checks = checked_rules(WR16_TIMING)[Scope.CHANNEL]
    assert (WR16_PRE, Command.WR16, 41) in checks[Command.PREA]
    assert (WR16_PRE, Command.WR16, 41) in checks[Command.PRE]
    # WRA16's auto-precharge rules (before an activation) are not WR16's
    assert not any(prev is Command.WR16 for _, prev, _ in checks[Command.ACT16])
    assert {rule for rule, prev, _ in checks[Command.RD] if prev is Command.WR16} == {17, 21}
    assert Command.WR16 not in checked_rules(TIMING)[Scope.CHANNEL]
    checker = TimingChecker(PARAMS, WR16_TIMING)
    assert checker.isa is hw_isa(EXT, 105) and len(checker.rules) == 105
    assert len(TimingChecker(PARAMS).rules) == 104


def test_the_decoder_checks_wr16_as_an_all_bank_command():
    isa = hw_isa(EXT, 105)
    dut = Decoder(PARAMS, isa)
    assert dut.isa is isa and Decoder(PARAMS).isa is hw_isa()
    sim = Simulator(dut)
    seen = {}

    async def bench(ctx):
        def state(rows):
            for b, r in enumerate(rows):
                ctx.set(dut.open[b], int(r >= 0))
                ctx.set(dut.rows[b], max(r, 0))
                ctx.set(dut.luts[b], 0)

        cases = {
            "same": ([2] * 16, 2, 0, 0), "closed": ([-1] * 16, 2, 0, 0),
            "partial": ([2] * 15 + [-1], 2, 0, 0), "other": ([1] * 16, 2, 0, 0),
            "column": ([2] * 16, 2, PARAMS.columns, 0), "register": ([2] * 16, 2, 0, 1),
        }
        for name, (rows, row, col, mode) in cases.items():
            state(rows)
            if ctx.get(dut.reg_mode) != mode:  # TMOD toggles the mode at the clock edge
                ctx.set(dut.cmd.valid, 1)
                ctx.set(dut.cmd.command, isa.Opcode.TMOD)
                await ctx.tick()
            ctx.set(dut.cmd.valid, 1)
            ctx.set(dut.cmd.command, isa.Opcode.WR16)
            ctx.set(dut.cmd.row, row)
            ctx.set(dut.cmd.col, col)
            await ctx.delay(1e-9)
            seen[name] = (ctx.get(dut.error), ctx.get(dut.execute))

    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert seen == {"same": (ProtocolCode.NONE, 1), "closed": (ProtocolCode.NOT_ALL_OPEN, 0),
                    "partial": (ProtocolCode.NOT_ALL_OPEN, 0),
                    "other": (ProtocolCode.WRONG_ROW, 0), "column": (ProtocolCode.RANGE, 0),
                    "register": (ProtocolCode.MODE, 0)}


# ----------------------------------------------------------------------------- the channel

def _words(rng: np.random.Generator, n: int = 1) -> np.ndarray:
    return (rng.standard_normal(16 * n).astype(np.float32).view(np.uint32) >> 16).astype(
        np.uint16)


def _entry(cycle: int, command: Command, bank: int = -1, row: int = -1, col: int = -1,
           words: np.ndarray | None = None, mask: int | None = None) -> TimedCommand:
    return TimedCommand(cycle, 0, command, bank, row, col, payload=words, mask=mask)


def _earliest(commands: list[TimedCommand]) -> list[TimedCommand]:
    """The commands in order, each at the earliest cycle every rule of the extension's table
    allows (their own cycles ignored)."""
    checker = Checker(DEVICE, WR16_TIMING)
    out, now = [], -1
    for cmd in commands:
        cycle = max([now + 1] + [when + gap for _, _, when, gap in checker.measure(cmd)])
        cmd = dataclasses.replace(cmd, cycle=cycle)
        checker.step(cmd)
        out.append(cmd)
        now = cycle
    return out


def _lanes(value: int) -> np.ndarray:
    return np.array([(value >> (16 * i)) & 0xFFFF for i in range(16)], dtype=np.uint16)


def run(schedule: list[TimedCommand], timing=WR16_TIMING) -> dict:
    """Replay ``schedule`` on a channel built for ``timing``: its reads (return cycle, command,
    lanes) and flagged commands (cycle, command, rules, protocol code)."""
    dut = Channel(PARAMS, timing=timing)
    isa = dut.isa
    layout = isa.command_layout(PARAMS)
    top = Module()
    top.submodules.dut = dut
    top.domains.sync = ClockDomain("sync")
    sim = Simulator(top)
    sim.add_clock(1e-9)
    by_cycle = {c.cycle: c for c in schedule}
    out: dict = {"reads": [], "violations": []}
    reset = tuple(CFR_RESET[c] for c in Cfr)

    async def bench(ctx):
        for t in range(max(by_cycle) + DRAIN):
            cmd = by_cycle.get(t)
            if cmd is None:
                ctx.set(dut.cmd.valid, 0)
            else:
                data = 0 if cmd.payload is None else int.from_bytes(
                    np.asarray(cmd.payload, dtype="<u2").tobytes(), "little")
                mask = 0xFFFF if cmd.mask is None else cmd.mask
                cfr = cmd.cfr or reset
                ctx.set(dut.cmd, layout.const({
                    "valid": 1, "command": isa.Opcode[cmd.command.name],
                    "bank": max(cmd.bank, 0), "row": max(cmd.row, 0), "col": max(cmd.col, 0),
                    "data": data, "mask": mask, "broadcast": cfr[Cfr.BROADCAST],
                    "ewmul_bg": cfr[Cfr.EWMUL_BG], "lut": 0}))
                v = ctx.get(dut.violation)
                if v.valid:
                    rules = {i for i in range(isa.RULES) if v.rules >> i & 1}
                    out["violations"].append((t, cmd.command, rules, v.protocol))
            for port in (dut.rdata, dut.rdata_mac):
                r = ctx.get(port)
                if r.valid:
                    out["reads"].append((t, Command(r.command.value), _lanes(r.data)))
            await ctx.tick()

    sim.add_testbench(bench)
    sim.run()
    return out


def _expected(schedule: list[TimedCommand]) -> list[tuple[int, Command, np.ndarray]]:
    model = FunctionalModel(DEVICE)
    got = replay(schedule, model)
    return sorted(((r.command.cycle + TIMING.latency[r.command.command], r.command.command,
                    r.data) for r in got), key=lambda x: x[0])


def test_wr16_writes_every_bank_and_leaves_the_row_open():
    rng = np.random.default_rng(3)
    first, second = _words(rng), _words(rng)
    schedule = _earliest([
        _entry(0, Command.ACT16, row=2),
        _entry(0, Command.WR16, row=2, col=1, words=first),
        _entry(0, Command.WR16, row=2, col=3, words=second, mask=0x00F0),
        # no ACT: the row is still open in every bank
        *[_entry(0, Command.RD, bank=b, row=2, col=c) for b in (0, 5, 15) for c in (1, 3)],
    ])
    assert [c.cycle for c in schedule[:3]] == [0, 28, 30]  # nRCDWR, then nCCDS
    assert verify(schedule, timing=WR16_TIMING) == []
    out = run(schedule)
    assert out["violations"] == []
    want = _expected(schedule)
    assert len(out["reads"]) == len(want) == 6
    for (t, command, data), (et, ecommand, edata) in zip(out["reads"], want):
        assert (t, command) == (et, ecommand) and np.array_equal(data, edata)
    # bank b holds word b in every lane of column 1, and in lanes 4..7 of column 3
    by_issue = {c.cycle: c for c in schedule}
    for t, _, data in out["reads"]:
        cmd = by_issue[t - TIMING.latency[Command.RD]]
        if cmd.col == 1:
            assert (data == first[cmd.bank]).all()
        else:
            assert (data[4:8] == second[cmd.bank]).all() and not data[:4].any()


def test_wra16_still_closes_the_row_under_the_extension():
    rng = np.random.default_rng(4)
    schedule = [_entry(0, Command.ACT16, row=2),
                _entry(28, Command.WRA16, row=2, col=1, words=_words(rng)),
                _entry(120, Command.RD, bank=0, row=2, col=1)]
    out = run(schedule)
    assert out["violations"] == [(120, Command.RD, set(), ProtocolCode.BANK_CLOSED)]
    assert [(v.cycle, v.kind) for v in verify(schedule, timing=WR16_TIMING)] == [
        (120, "protocol")]


@pytest.mark.parametrize("gap", [40, 41])
def test_the_checker_flags_a_precharge_40_cycles_after_wr16_as_rule_104(gap):
    rng = np.random.default_rng(5)
    schedule = [_entry(0, Command.ACT16, row=1),
                _entry(28, Command.WR16, row=1, col=0, words=_words(rng)),
                _entry(28 + gap, Command.PREA)]
    out = run(schedule)
    model = {(v.cycle, v.rule) for v in verify(schedule, timing=WR16_TIMING)}
    if gap == 41:
        assert out["violations"] == [] and model == set()
    else:
        assert out["violations"] == [(68, Command.PREA, {WR16_PRE}, ProtocolCode.NONE)]
        assert model == {(68, WR16_PRE)}


def test_a_cycle_model_schedule_of_open_row_writes_runs_bit_exact():
    """WR_ABK_OPEN to one row (ACT16 once), a row change (PREA, ACT16), WR_ABK and W MEM
    between, then MAC_ABK and RD_MAC of what was written: the RTL returns the functional
    model's values at the cycle model's cycles, flagging nothing."""
    rng = np.random.default_rng(6)
    ch = channel_bit(0)
    program = [Instruction(Opcode.WR_ABK_OPEN, gpr0=0, channel_mask=ch, row=1, col=c or None,
                           data=_words(rng)) for c in range(4)]
    program += [
        Instruction(Opcode.WR_MEM, channel=0, bank=7, row=1, col=5, data=_words(rng)),
        Instruction(Opcode.WR_ABK_OPEN, gpr0=0, channel_mask=ch, row=2, col=0, data=_words(rng)),
        Instruction(Opcode.WR_ABK, gpr0=0, channel_mask=ch, row=1, col=6, data=_words(rng)),
        Instruction(Opcode.WR_ABK_OPEN, gpr0=0, channel_mask=ch, row=1, col=7, data=_words(rng)),
        Instruction(Opcode.WR_GB, opsize=8, gpr0=0, channel_mask=ch, data=_words(rng, 8)),
        Instruction(Opcode.MAC_ABK, opsize=8, channel_mask=ch, row=1),
        Instruction(Opcode.RD_MAC, gpr0=0, channel_mask=ch),
        Instruction(Opcode.EOC),
    ]
    result = CycleModel(timing=WR16_TIMING, record=True).run(program)
    schedule = [c for c in result.schedule if c.channel == 0]
    names = [c.command for c in schedule]
    assert names.count(Command.WR16) == 6 and names.count(Command.WRA16) == 1
    # the first four open-row writes share one activation
    assert names[:5] == [Command.ACT16] + [Command.WR16] * 4
    assert verify(schedule, timing=WR16_TIMING) == []
    out = run(schedule)
    assert out["violations"] == []
    want = _expected(schedule)
    assert len(out["reads"]) == len(want) == 1
    (t, command, data), (et, ecommand, edata) = out["reads"][0], want[0]
    assert (t, command) == (et, ecommand) and np.array_equal(data, edata)


def test_the_default_channel_has_no_wr16():
    dut = Channel(PARAMS)
    assert dut.isa is hw_isa() and "WR16" not in dut.isa.Opcode.__members__
    with pytest.raises(ValueError, match="compiled for device extension"):
        timing_table(WR16_TIMING, "aim")
