"""Timed schedules are complete data: payloads, lane masks, CFR state and the source
instruction survive the text format, and a schedule read back from a file replays exactly as
the cycle model's own (on the functional model and, ``-m verilator``, on the RTL)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from patton.sim import schedule, trace
from patton.sim.cycle_model import CycleModel
from patton.sim.functional import FunctionalModel
from patton.sim.isa import CFR_RESET, Cfr, Command, Instruction, Opcode
from patton.sim.random_programs import KINDS, random_program
from patton.sim.replay import replay
from patton.sim.schedule import WRITES, ScheduleError, TimedCommand

RESET = tuple(CFR_RESET[c] for c in Cfr)
WORDS = ":".join(["3f80"] * 16)


def _program(seed: int, channels: int = 3, length: int = 60,
             kinds: tuple[str, ...] = KINDS) -> list[Instruction]:
    """A random program with payloads on every write, lane masks on some, BROADCAST CFRs."""
    rng = np.random.default_rng(seed)
    program = random_program(rng, length, channels=channels, rows=3, data=True, kinds=kinds,
                             broadcast=True)
    for ins in program:
        if ins.opcode.info.maskable and ins.data is not None and rng.random() < 0.5:
            ins.mask = int(rng.integers(1, 1 << 16))
    return program


def _fields(c: TimedCommand) -> tuple:
    payload = None if c.payload is None else c.payload.tolist()
    return (c.cycle, c.channel, c.command, c.bank, c.row, c.col, payload, c.mask, c.cfr,
            c.source)


@pytest.mark.parametrize("seed", range(6))
def test_text_round_trip_keeps_every_field(seed):
    program = _program(seed)
    recorded = CycleModel(record=True).run(program).schedule
    again = list(schedule.parse(schedule.dumps(recorded).splitlines()))
    assert len(again) == len(recorded)
    for a, b in zip(recorded, again):
        assert _fields(a) == _fields(b)
        assert a == b
        if a.payload is not None:
            assert b.payload.dtype == np.uint16 and np.array_equal(a.payload, b.payload)
    assert [c.line for c in again] == list(range(1, len(again) + 1))


def test_recorded_schedules_carry_what_the_program_says():
    covered = {"payload": 0, "mask": 0, "broadcast": 0}
    for seed in range(6):
        program = _program(seed)
        recorded = CycleModel(record=True).run(program).schedule
        for c in recorded:
            ins = program[c.source]  # the instruction the command came from
            assert c.channel in ins.channels() or ins.opcode in (Opcode.RD_MEM, Opcode.WR_MEM)
            assert len(c.cfr) == len(Cfr)
            if c.payload is not None:
                assert c.command in WRITES and c.command == ins.opcode.info.final
                assert c.payload.shape == (16,) and c.payload.dtype == np.uint16
                covered["payload"] += 1
            elif c.command in WRITES:
                assert ins.data is None
            if c.mask is not None:
                assert c.command in WRITES and c.mask == ins.mask
                covered["mask"] += 1
            covered["broadcast"] += c.cfr[Cfr.BROADCAST]
        assert recorded == CycleModel(record=True, group=False).run(program).schedule
    assert all(covered.values()), covered


def test_wr_gb_payload_is_sliced_by_column():
    data = np.arange(3 * 16, dtype=np.uint16)
    program = [Instruction(Opcode.WR_GB, opsize=3, gpr0=0, channel_mask=1, col=2, data=data),
               Instruction(Opcode.EOC)]
    wrgb = [c for c in CycleModel(record=True).run(program).schedule
            if c.command == Command.WRGB]
    assert [c.col for c in wrgb] == [2, 3, 4]
    for i, c in enumerate(wrgb):
        assert np.array_equal(c.payload, data[16 * i:16 * (i + 1)]) and c.source == 0


def test_lines_without_extensions_stay_what_they_were():
    lines = ["29 0 WR 2 8 -", "45 31 TMOD", "74 0 ACT16 - 0 -", "130 0 MAC16 - 0 3"]
    parsed = list(schedule.parse(lines))
    for c in parsed:
        assert (c.payload, c.mask, c.cfr, c.source) == (None, None, RESET, -1)
    assert [schedule.format_line(c) for c in parsed] == lines
    # An empty cfr stands for the reset values, and is written the same way.
    assert TimedCommand(45, 31, Command.TMOD) == parsed[1]
    assert schedule.format_line(TimedCommand(45, 31, Command.TMOD, cfr=RESET)) == "45 31 TMOD"


def test_extension_fields_are_written_and_read():
    line = (f"33 1 WRGB - - 5 data={WORDS.replace('3f80', '00ff', 1)} mask=0x00f0 "
            "cfr=1,0,7 src=12")
    (c,) = schedule.parse([line])
    assert c.payload[0] == 0x00FF and c.payload[1] == 0x3F80 and c.payload.shape == (16,)
    assert (c.mask, c.cfr, c.source) == (0x00F0, (1, 0, 7), 12)
    assert schedule.format_line(c) == line
    # Any order, upper-case hex and decimal masks are accepted.
    (d,) = schedule.parse([f"33 1 WRGB - - 5 src=12 cfr=1,0,7 mask=240 "
                           f"data={WORDS.replace('3f80', '00FF', 1)}"])
    assert d == c


BAD = [
    (f"12 0 MAC16 - 0 3 data={WORDS}", "data= only on commands that write"),
    (f"12 0 ACT 1 0 - data={WORDS}", "data= only on commands that write"),
    ("12 0 WRGB - - 0 data=" + ":".join(["3f80"] * 15), "data= has 15 words, needs 16"),
    ("12 0 WRGB - - 0 data=" + ":".join(["3f80"] * 17), "data= has 17 words, needs 16"),
    ("12 0 WRGB - - 0 data=" + WORDS.replace("3f80", "3g80", 1), "'3g80' is not 4 hex digits"),
    ("12 0 WRGB - - 0 data=" + WORDS.replace("3f80", "f80", 1), "'f80' is not 4 hex digits"),
    ("12 0 WRGB - - 0 data=" + WORDS.replace("3f80", "03f80", 1), "not 4 hex digits"),
    ("12 0 WR 1 0 0 mask=0", "must be a non-zero 16-bit lane mask"),
    ("12 0 WR 1 0 0 mask=0x10000", "must be a non-zero 16-bit lane mask"),
    ("12 0 WR 1 0 0 mask=ff", "not a decimal or 0x-hex number"),
    ("12 0 MAC 1 0 0 mask=0x1", "mask= only on commands that write"),
    ("12 0 MAC16 - 0 3 cfr=2,1,0", "cfr= BROADCAST value 2 out of range 0..1"),
    ("12 0 MAC16 - 0 3 cfr=0,1,8", "cfr= AFM value 8 out of range 0..7"),
    ("12 0 MAC16 - 0 3 cfr=0,1", "cfr= needs 3 values"),
    ("12 0 MAC16 - 0 3 cfr=0,-1,0", "cfr= EWMUL_BG value '-1' is negative"),
    ("12 0 MAC16 - 0 3 src=-1", "src='-1' is negative"),
    ("12 0 MAC16 - 0 3 foo=1", "unknown field 'foo'"),
    ("12 0 MAC16 - 0 3 src=1 src=2", "src= given twice"),
    ("12 0 MAC16 - 0 src=1 3", "positional field '3' after key=value fields"),
    ("12 0 MAC16 - 0 src=1", "got 5 positional fields"),
]


@pytest.mark.parametrize("line,reason", BAD)
def test_bad_extension_field(line, reason):
    with pytest.raises(ScheduleError) as err:
        list(schedule.parse(["# ok", "1 0 TMOD", line], source="s.sched"))
    assert str(err.value).startswith("s.sched:3: ") and reason in str(err.value)
    assert err.value.line == 3


def _replayed(commands: list[TimedCommand]) -> tuple[list, dict]:
    model = FunctionalModel()
    reads = [(r.command.cycle, r.command.channel, r.command.command, r.data.tolist())
             for r in replay(commands, model)]
    mats = {(ch, row): block.tolist() for ch, channel in enumerate(model.channels)
            for row, block in channel.mats.items()}
    return reads, mats


@pytest.mark.parametrize("seed", range(6))
def test_replay_from_text_equals_replay_in_memory(seed, tmp_path):
    # No EWMUL or AF: their results depend on nothing the schedule leaves out either, but a
    # random mix rarely gets their operands right; the others cover writes of every kind.
    program = _program(seed, kinds=tuple(k for k in KINDS if k not in ("ewmul", "af", "rd_af")))
    recorded = CycleModel(record=True).run(program).schedule
    path = tmp_path / "s.sched"
    schedule.write(path, recorded)
    reads, mats = _replayed(recorded)
    assert reads and any(any(any(w) for w in block) for block in mats.values())
    assert _replayed(schedule.read(path)) == (reads, mats)


@pytest.mark.verilator
def test_cli_round_trip_replays_the_data_rtl_run_replays(tmp_path, capsys):
    from patton.tb.builds import player
    from patton.tb.prepare import DEFAULT_ROWS, fill_payloads

    from patton.cli import main

    program = _program(11, channels=2, length=40, kinds=KINDS)
    fill_payloads(program, 0)  # everything that may carry data does: rtl run fills nothing
    path, out = tmp_path / "data.trace", tmp_path / "data.schedule"
    trace.write(path, program)
    assert main(["aim", "run", str(path), "--schedule", str(out)]) == 0
    capsys.readouterr()

    assert main(["rtl", "run", str(path), "--json"]) == 0
    ran = json.loads(capsys.readouterr().out)
    assert main(["rtl", "check", str(out), "--json"]) == 0
    checked = json.loads(capsys.readouterr().out)
    assert ran["payloads_filled"] == 0 and ran["ok"] and ran["mismatches"] == 0
    assert checked["values"] and checked["ok"] and checked["mismatches"] == 0
    assert checked["reads"] == ran["reads"] > 0
    assert checked["commands"] == ran["commands"]

    # The RTL reads the same values from the file's schedule as from the cycle model's.
    recorded = CycleModel(record=True).run(program).schedule
    read_back = schedule.read(out)
    assert read_back == recorded
    play = player(DEFAULT_ROWS)
    for ch in sorted({c.channel for c in recorded}):
        runs = [play.play([c for c in cmds if c.channel == ch], f"schedule-{kind}-ch{ch}")
                for kind, cmds in (("model", recorded), ("file", read_back))]
        got = [[(r.cycle, r.command, r.data.tolist()) for r in run.reads] for run in runs]
        assert got[0] == got[1] and got[0]
        assert {k: v.tolist() for k, v in runs[0].mats.items()} == \
            {k: v.tolist() for k, v in runs[1].mats.items()}
