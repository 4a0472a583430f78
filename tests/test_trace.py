"""Trace reader and writer: the public format, our extensions, and every kind of bad line."""

from __future__ import annotations

import numpy as np
import pytest
from patton.sim import trace
from patton.sim.device import DEVICE
from patton.sim.isa import Instruction, Opcode, channel_bit, mask_channels
from patton.sim.random_programs import random_program


def test_every_public_trace_parses_and_round_trips(traces_dir):
    files = sorted(traces_dir.glob("*.trace"))
    assert len(files) >= 15
    for path in files:
        program = trace.read(path)
        assert program[-1].opcode == Opcode.EOC
        again = list(trace.parse(trace.dumps(program).splitlines()))
        assert len(again) == len(program)
        assert all(a.same(b) for a, b in zip(program, again)), path.name


def test_public_fields_decode_as_the_simulator_does(traces_dir):
    program = trace.read(traces_dir / "all_isr.trace")
    wr_gb = next(i for i in program if i.opcode == Opcode.WR_GB)
    assert (wr_gb.opsize, wr_gb.gpr0, wr_gb.channel_mask) == (2, 2, 15)
    assert wr_gb.channels() == [31, 30, 29, 28]  # bit 31 - c selects channel c, bit 0 first
    mem = program[0]
    assert (mem.opcode, mem.channel, mem.bank, mem.row) == (Opcode.WR_MEM, 0, 2, 8)
    assert mask_channels(channel_bit(0)) == [0]


def test_extensions_round_trip():
    rng = np.random.default_rng(1)
    program = random_program(rng, 300, data=True)
    text = trace.dumps(program)
    assert "data=" in text and "col=" in text
    again = list(trace.parse(text.splitlines()))
    assert all(a.same(b) for a, b in zip(program, again))
    assert any(i.data is not None for i in again)


def test_comments_blank_lines_hex_and_isr_prefix():
    text = ["# comment", "", "   ", "AiM ISR_MAC_ABK 0x2 0X80000000 7", "W CFR 2 3",
            "AiM EOC"]
    program = list(trace.parse(text))
    assert [i.opcode for i in program] == [Opcode.MAC_ABK, Opcode.WR_CFR, Opcode.EOC]
    assert program[0].opsize == 2 and program[0].row == 7 and program[0].line == 4


BAD = [
    ("AiM FOO 1", "unknown AiM opcode"),
    ("AiM MAC_ABK 2 0x80000000", "takes 3 field(s)"),
    ("AiM MAC_ABK 2 0x80000000 1 2", "takes 3 field(s)"),
    ("AiM MAC_ABK two 0x80000000 1", "not a decimal"),
    ("AiM MAC_ABK -2 0x80000000 1", "negative"),
    ("AiM MAC_ABK 2 0 1", "non-zero 32-bit mask"),
    ("AiM MAC_ABK 2 0x1ffffffff 1", "non-zero 32-bit mask"),
    ("AiM MAC_ABK 0 0x80000000 1", "at least 1"),
    ("AiM MAC_ABK 1 0x80000000 1 col=64", "col=64 is past the 64 columns"),
    ("AiM WR_GB 1 0 0x80000000 col=64", "col=64 is past the 64 global buffer columns"),
    ("AiM MAC_ABK 2 0x80000000 16384", "row 16384 out of range"),
    ("AiM MAC_SBK 2 0x80000000 16 1", "bank 16 out of range"),
    ("AiM WR_ABK 0 0xc0000000 1", "exactly one channel"),
    ("AiM WR_AFLUT 1", "not supported"),
    ("W CFR 3 0", "CFR id 3 unknown"),
    ("W CFR 2 8", "out of range 0..7"),
    ("W CFR 0 2", "out of range 0..1"),
    ("R MEM 32 0 0", "channel 32 out of range"),
    ("W MEM 0 0", "takes 3 field(s)"),
    ("X MEM 0 0 0", "must start with"),
    ("R CFR 0 0", "unknown host line"),
    ("AiM WR_BIAS 0 0x80000000 data=1:2", "needs 16"),
    ("AiM WR_BIAS 0 0x80000000 data=zz", "hex"),
    ("AiM WR_BIAS 0 0x80000000 data=" + ":".join(["10000"] * 16), "16 bits"),
    ("AiM MAC_ABK 2 0x80000000 1 data=" + ":".join(["0"] * 16), "not allowed"),
    ("AiM MAC_ABK 2 0x80000000 1 mask=0xff", "not allowed"),
    ("AiM WR_SBK 0 0x80000000 1 1 mask=0x10000", "16-bit lane mask"),
    ("AiM RD_MAC 0 0x80000000 col=3", "not allowed"),
    ("AiM MAC_ABK 2 0x80000000 1 foo=3", "unknown extension"),
    ("AiM MAC_ABK 2 col=1 0x80000000 1", "positional fields must come before"),
]


@pytest.mark.parametrize("line,reason", BAD)
def test_bad_line_names_file_line_and_reason(line, reason):
    with pytest.raises(trace.TraceError) as err:
        list(trace.parse(["# header", line, "AiM EOC"], source="t.trace"))
    assert str(err.value).startswith("t.trace:2: ")
    assert reason in str(err.value)
    assert err.value.line == 2


#: Column instructions that run past the row or the global buffer: the public simulator takes
#: them (and so does the default reading, with a note); ``strict`` refuses them.
WIDE = [
    ("AiM MAC_ABK 65 0x80000000 1", "opsize 65 exceeds the 64 columns per row"),
    ("AiM MAC_ABK 8 0x80000000 1 col=60", "columns 60..67 exceed the 64 columns per row"),
    ("AiM WR_GB 65 0 0x80000000", "opsize 65 exceeds the 64 global buffer columns"),
    ("AiM EWMUL 256 0x80000000 1", "opsize 256 exceeds the 64 columns per row"),
    ("AiM COPY_BKGB 100 0x80000000 3 1", "opsize 100 exceeds the 64 columns per row"),
]


@pytest.mark.parametrize("line,reason", WIDE)
def test_wide_column_instructions_are_noted_or_refused_when_strict(line, reason):
    notes: list[trace.TraceNote] = []
    program = list(trace.parse(["# header", line, "AiM EOC"], source="t.trace", notes=notes))
    assert len(program) == 2 and [n.line for n in notes] == [2]
    assert str(notes[0]).startswith(f"t.trace:2: {reason}: accepted as the public simulator")
    assert "mod 64" in notes[0].reason and "--strict" in notes[0].reason
    with pytest.raises(trace.TraceError) as err:
        list(trace.parse(["# header", line, "AiM EOC"], source="t.trace", strict=True))
    assert str(err.value) == f"t.trace:2: {reason}"


def test_mask_beyond_a_smaller_device():
    small = DEVICE.with_(channels=4)
    with pytest.raises(trace.TraceError, match="beyond the device's 4"):
        list(trace.parse(["AiM MAC_ABK 1 0x08000000 0", "AiM EOC"], device=small))
    assert len(list(trace.parse(["AiM MAC_ABK 1 0xf0000000 0", "AiM EOC"], device=small))) == 2


def test_eoc_is_required_and_last(tmp_path):
    with pytest.raises(trace.TraceError, match=r"t:2: trace ends without AiM EOC"):
        list(trace.parse(["AiM SYNC", "# end"], source="t"))
    with pytest.raises(trace.TraceError, match=r"t:2: instruction after AiM EOC \(line 1\)"):
        list(trace.parse(["AiM EOC", "AiM SYNC"], source="t"))
    missing = tmp_path / "none.trace"
    with pytest.raises(trace.TraceError, match="cannot read trace"):
        trace.read(missing)


def test_write_then_read(tmp_path):
    program = [Instruction(Opcode.WR_GB, opsize=1, gpr0=3, channel_mask=channel_bit(5),
                           col=7, data=np.arange(16, dtype=np.uint16)),
               Instruction(Opcode.WR_MEM, channel=5, bank=2, row=9, col=1, mask=0x00ff,
                           data=np.full(16, 0x3f80, dtype=np.uint16)),
               Instruction(Opcode.EOC)]
    path = tmp_path / "p.trace"
    trace.write(path, program)
    again = trace.read(path)
    assert all(a.same(b) for a, b in zip(program, again))
    assert again[1].line == 2
