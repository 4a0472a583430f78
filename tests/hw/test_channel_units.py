"""Unit tests (amaranth.sim) of the channel's parts: decoder, bank, global buffer, checker."""

from __future__ import annotations

import pytest
from amaranth.sim import Simulator
from patton.hw.bank import Bank
from patton.hw.decoder import Decoder
from patton.hw.global_buffer import GlobalBuffer
from patton.hw.isa import REJECTED, Opcode, ProtocolCode, command_layout
from patton.hw.params import ChannelParams
from patton.hw.timing_checker import TimingChecker, checked_rules
from patton.sim.device import DEVICE
from patton.sim.isa import Command, Scope
from patton.sim.timing import TIMING

PARAMS = ChannelParams.from_device(DEVICE, rows=4)


def _simulate(dut, bench) -> None:
    sim = Simulator(dut)
    sim.add_clock(1e-9)
    sim.add_testbench(bench)
    sim.run()


def _lanes(*words: int) -> int:
    return sum(w << (16 * i) for i, w in enumerate(words))


# ----------------------------------------------------------------------------- params

def test_params_from_device():
    p = ChannelParams.from_device(DEVICE)
    assert (p.banks, p.rows, p.columns, p.lanes, p.gb_columns) == (16, 16384, 64, 16, 64)
    assert (p.row_bits, p.col_bits, p.width) == (14, 6, 256)
    assert ChannelParams.from_device(DEVICE, rows=4).row_bits == 2


@pytest.mark.parametrize("change, message", [
    ({"rows": 0}, "rows must be a positive integer, got 0"),
    ({"device": DEVICE.with_(column_bytes=16)}, "one lane per bank"),
    ({"rows": 1 << 16}, "at most"),
])
def test_params_reject_bad_values(change, message):
    with pytest.raises(ValueError, match=message):
        ChannelParams(**{**{"rows": 4}, **change})


# ----------------------------------------------------------------------------- bank, GB

def test_bank_row_state_and_column_access():
    dut = Bank(PARAMS)

    async def bench(ctx):
        assert ctx.get(dut.open) == 0
        ctx.set(dut.act, 1)
        ctx.set(dut.act_row, 2)
        await ctx.tick()
        ctx.set(dut.act, 0)
        assert (ctx.get(dut.open), ctx.get(dut.row)) == (1, 2)
        # Write column 5 of row 2 (lanes 0 and 3), and read it in the same cycle: write-first.
        ctx.set(dut.wr_en, 1)
        ctx.set(dut.wr_row, 2)
        ctx.set(dut.wr_col, 5)
        ctx.set(dut.wr_data, _lanes(*range(1, 17)))
        ctx.set(dut.wr_mask, 0b1001)
        ctx.set(dut.rd_col, 5)
        ctx.set(dut.rd_en, 1)
        await ctx.tick()
        ctx.set(dut.wr_en, 0)
        assert ctx.get(dut.rd_data) == _lanes(1, 0, 0, 4)
        # A write to another row leaves the open row's word.
        ctx.set(dut.wr_en, 1)
        ctx.set(dut.wr_row, 1)
        ctx.set(dut.wr_mask, 0xFFFF)
        await ctx.tick()
        ctx.set(dut.wr_en, 0)
        await ctx.tick()
        assert ctx.get(dut.rd_data) == _lanes(1, 0, 0, 4)
        # Without rd_en the read data holds, even over a write to the word; the next read
        # sees the write.
        ctx.set(dut.rd_en, 0)
        ctx.set(dut.wr_en, 1)
        ctx.set(dut.wr_row, 2)
        ctx.set(dut.wr_mask, 0x0002)
        await ctx.tick()
        ctx.set(dut.wr_en, 0)
        await ctx.tick()
        assert ctx.get(dut.rd_data) == _lanes(1, 0, 0, 4)
        ctx.set(dut.rd_en, 1)
        await ctx.tick()
        assert ctx.get(dut.rd_data) == _lanes(1, 2, 0, 4)
        ctx.set(dut.pre, 1)
        await ctx.tick()
        assert ctx.get(dut.open) == 0

    _simulate(dut, bench)


def test_global_buffer_masked_write_and_read():
    dut = GlobalBuffer(PARAMS)

    async def bench(ctx):
        ctx.set(dut.wr_en, 1)
        ctx.set(dut.wr_col, 63)
        ctx.set(dut.wr_data, _lanes(*range(100, 116)))
        ctx.set(dut.wr_mask, 0xFFFF)
        await ctx.tick()
        ctx.set(dut.wr_data, _lanes(*[7] * 16))
        ctx.set(dut.wr_mask, 0x8000)
        ctx.set(dut.rd_col, 63)
        ctx.set(dut.rd_en, 1)
        await ctx.tick()
        ctx.set(dut.wr_en, 0)
        assert ctx.get(dut.rd_data) == _lanes(*range(100, 115), 7)
        ctx.set(dut.rd_col, 0)
        ctx.set(dut.rd_en, 0)
        await ctx.tick()
        assert ctx.get(dut.rd_data) == _lanes(*range(100, 115), 7)  # no read: held
        ctx.set(dut.rd_en, 1)
        await ctx.tick()
        assert ctx.get(dut.rd_data) == 0

    _simulate(dut, bench)


# ----------------------------------------------------------------------------- decoder

def _decode(cases: list[tuple[dict, ProtocolCode]], open_rows: dict[int, int],
            reg_mode: bool = False) -> None:
    dut = Decoder(PARAMS)
    layout = command_layout(PARAMS)

    async def bench(ctx):
        if reg_mode:
            ctx.set(dut.cmd, layout.const({"valid": 1, "command": Opcode.TMOD}))
            await ctx.tick()
        for b in range(PARAMS.banks):
            ctx.set(dut.open[b], b in open_rows)
            ctx.set(dut.rows[b], open_rows.get(b, 0))
        for fields, code in cases:
            ctx.set(dut.cmd, layout.const({"valid": 1, **fields}))
            assert ctx.get(dut.error) == code, fields
            assert ctx.get(dut.execute) == (code == ProtocolCode.NONE), fields

    _simulate(dut, bench)


def test_decoder_row_state_checks():
    P = ProtocolCode
    _decode([
        ({"command": Opcode.ACT, "bank": 3, "row": 1}, P.BANK_OPEN),
        ({"command": Opcode.ACT, "bank": 3, "row": 2}, P.NONE),  # already on row 2: no-op
        ({"command": Opcode.ACT, "bank": 4, "row": 1}, P.NONE),
        ({"command": Opcode.RD, "bank": 3, "row": 2, "col": 5}, P.NONE),
        ({"command": Opcode.RD, "bank": 3, "row": 1, "col": 5}, P.WRONG_ROW),
        ({"command": Opcode.MAC, "bank": 4, "row": 2, "col": 5}, P.BANK_CLOSED),
        ({"command": Opcode.ACT16, "row": 2}, P.NONE),  # bank 3 already on row 2
        ({"command": Opcode.ACT16, "row": 1}, P.ROW_CONFLICT),
        ({"command": Opcode.MAC16, "row": 2}, P.NOT_ALL_OPEN),
        ({"command": Opcode.PRE, "bank": 9}, P.NONE),
        ({"command": Opcode.PREA}, P.NONE),
        ({"command": Opcode.WRGB}, P.MODE),
        ({"command": Opcode.RD, "bank": 3, "row": 2, "col": 64}, P.RANGE),
        ({"command": Opcode.MAC, "bank": 3, "row": 2, "col": 64}, P.RANGE),
        ({"command": Opcode.ACT, "bank": 4, "row": 4}, P.RANGE),
        ({"command": Opcode.PRE, "bank": 16}, P.RANGE),
    ], open_rows={3: 2})


def test_decoder_all_bank_commands():
    P = ProtocolCode
    everywhere = {b: 1 for b in range(16)}
    _decode([
        ({"command": Opcode.MAC16, "row": 1, "col": 63}, P.NONE),
        ({"command": Opcode.WRA16, "row": 1, "col": 0}, P.NONE),
        ({"command": Opcode.MAC16, "row": 0, "col": 0}, P.WRONG_ROW),
        ({"command": Opcode.ACT16, "row": 1}, P.NONE),
        ({"command": Opcode.ACT, "bank": 0, "row": 1}, P.NONE),  # same row: no-op
        ({"command": Opcode.ACT, "bank": 0, "row": 2}, P.BANK_OPEN),
    ], open_rows=everywhere)
    _decode([({"command": Opcode.MAC16, "row": 1}, P.NOT_ALL_OPEN)],
            open_rows={**everywhere, 7: 2})


def test_decoder_broadcast_mac_needs_its_partner():
    # BROADCAST = 1: MAC on bank b reads bank b ^ 1 too, which must be open on the same row
    # (the functional model raises ProtocolError otherwise). Other commands ignore the flag.
    P = ProtocolCode
    mac = {"command": Opcode.MAC, "col": 0, "broadcast": 1}
    _decode([
        ({**mac, "bank": 2, "row": 1}, P.NONE),
        ({**mac, "bank": 3, "row": 1}, P.NONE),
        ({**mac, "bank": 4, "row": 1}, P.PARTNER),  # bank 5 closed
        ({**mac, "bank": 6, "row": 1}, P.PARTNER),  # bank 7 on row 3
        ({**mac, "bank": 7, "row": 3}, P.PARTNER),  # bank 6 on row 1
        ({**mac, "bank": 8, "row": 1}, P.BANK_CLOSED),  # its own bank comes first
        ({**mac, "bank": 4, "row": 1, "broadcast": 0}, P.NONE),
        ({"command": Opcode.RD, "bank": 4, "row": 1, "col": 0, "broadcast": 1}, P.NONE),
        ({"command": Opcode.MAC16, "row": 1, "col": 0, "broadcast": 1}, P.NOT_ALL_OPEN),
    ], open_rows={2: 1, 3: 1, 4: 1, 6: 1, 7: 3})
    _decode([({"command": Opcode.MAC16, "row": 1, "col": 0, "broadcast": 1}, P.NONE)],
            open_rows={b: 1 for b in range(16)})


def test_decoder_register_mode_and_rejections():
    P = ProtocolCode
    cases = [({"command": Opcode.WRGB, "col": 63}, P.NONE),
             ({"command": Opcode.WRGB, "col": 64}, P.RANGE),
             ({"command": Opcode.RDMAC16}, P.NONE), ({"command": Opcode.WRMAC16}, P.NONE),
             ({"command": Opcode.ACT, "bank": 0, "row": 0}, P.MODE),
             ({"command": Opcode.TMOD}, P.NONE)]
    cases += [({"command": Opcode[c.name], "bank": 0}, P.REJECTED) for c in sorted(REJECTED)]
    _decode(cases, open_rows={}, reg_mode=True)


def test_decoder_tmod_toggles_mode():
    dut = Decoder(PARAMS)
    layout = command_layout(PARAMS)

    async def bench(ctx):
        seen = []
        for valid in (1, 0, 1, 1):
            ctx.set(dut.cmd, layout.const({"valid": valid, "command": Opcode.TMOD}))
            await ctx.tick()
            seen.append(ctx.get(dut.reg_mode))
        assert seen == [1, 1, 0, 1]

    _simulate(dut, bench)


# ----------------------------------------------------------------------------- checker

def test_checked_rules_come_from_the_table():
    checks = checked_rules()
    # MAC16 after ACT16 waits nRCDRDMAC at channel level (rule 36), as the table says.
    assert (36, Command.ACT16, TIMING.params["nRCDRDMAC"]) in checks[Scope.CHANNEL][Command.MAC16]
    # Bank rules only for single-bank commands; no rule names an unimplemented command.
    assert set(checks[Scope.BANK]) <= {Command.ACT, Command.PRE, Command.RD, Command.WR,
                                       Command.MAC, Command.RDCP, Command.WRCP}
    for table in checks.values():
        for following, rules in table.items():
            for rule, prev, gap in rules:
                r = TIMING.rules[rule]
                assert following in r.following and prev in r.preceding and gap == r.cycles
                assert prev not in REJECTED and following not in REJECTED


def _check(issues: list[tuple[int, Command, int]], end: int) -> list[tuple[int, set[int]]]:
    """Drive the checker with ``(cycle, command, bank)``; return ``(cycle, rules)`` flagged."""
    dut = TimingChecker(PARAMS)
    at = {t: (c, b) for t, c, b in issues}
    out = []

    async def bench(ctx):
        for t in range(end):
            command, bank = at.get(t, (None, 0))
            ctx.set(dut.valid, command is not None)
            ctx.set(dut.command, Opcode[command.name] if command else Opcode.ACT)
            ctx.set(dut.bank, bank)
            if ctx.get(dut.violated):
                rules = {i for i in range(len(TIMING.rules)) if ctx.get(dut.rules) >> i & 1}
                assert ctx.get(dut.rule) == min(rules)
                out.append((t, rules))
            await ctx.tick()

    _simulate(dut, bench)
    return out


def test_checker_bank_and_channel_rules():
    n = TIMING.params
    act_rd = n["nRCDRD"]
    got = _check([
        (0, Command.ACT, 5),
        (act_rd - 1, Command.RD, 5),  # too early in bank 5: bank rule 88 only
        (act_rd + 10, Command.ACT, 6),  # nRRDS = 5 after nothing: fine
        (act_rd + 12, Command.ACT, 7),  # 2 cycles after ACT 6: channel nRRDS, bank group nRRDL
    ], end=act_rd + 14)
    assert got == [(act_rd - 1, {88}), (act_rd + 12, {27, 67})]


def test_checker_only_last_issue_counts():
    # TMOD -> anything waits nMODCH (rule 61), measured from the second TMOD only.
    gap = TIMING.params["nMODCH"]
    got = _check([(0, Command.TMOD, 0), (gap, Command.TMOD, 0),
                  (2 * gap - 1, Command.RDMAC16, 0), (2 * gap + 1, Command.RDMAC16, 0)],
                 end=2 * gap + 3)
    assert got == [(2 * gap - 1, {61})]
