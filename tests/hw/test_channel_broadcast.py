"""CFR BROADCAST = 1 on the channel (amaranth.sim): the MAC vector from the partner bank.

With BROADCAST = 1 (carried by the command port's ``broadcast`` field), MAC on bank ``b`` takes
its vector from bank ``b ^ 1`` (same open row and column) and MAC16 updates the even banks
only, each with its odd partner's word; the odd accumulators stay. Values are compared bit for
bit with :func:`patton.sim.replay.replay` on the functional model (whose MACs are
:func:`patton.sim.datapath.mac` and :func:`patton.sim.datapath.accumulate`). A MAC whose partner
is not open on the row is refused with ``PARTNER``, as the functional model raises
``ProtocolError`` for it.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from patton.hw.isa import ProtocolCode
from patton.sim.check import verify
from patton.sim.device import DEVICE
from patton.sim.functional import FunctionalModel, ProtocolError
from patton.sim.isa import CFR_RESET, Cfr, Command, Instruction
from patton.sim.isa import Opcode as Op
from patton.sim.schedule import TimedCommand
from test_channel import CH0, assert_same_reads, expected_reads, run_many, schedule_of

_C = Command


def _words(rng: np.random.Generator, columns: int) -> np.ndarray:
    values = rng.standard_normal(columns * 16).astype(np.float32)
    return (values.view(np.uint32) >> 16).astype(np.uint16)


def _cmd(command: Command, bank: int = -1, row: int = -1, col: int = -1, words=None,
         broadcast: int = 0) -> TimedCommand:
    """Return a schedule entry (cycle set later) issued under CFR BROADCAST = ``broadcast``."""
    cfr = dict(CFR_RESET)
    cfr[Cfr.BROADCAST] = broadcast
    return TimedCommand(0, 0, command, bank, row, col,
                        payload=None if words is None else np.asarray(words, np.uint16),
                        cfr=tuple(cfr[c] for c in Cfr))


def timed(commands: list[TimedCommand]) -> list[TimedCommand]:
    """Give each command the earliest cycle after the previous one that meets every timing rule."""
    out: list[TimedCommand] = []
    for cmd in commands:
        cmd.cycle = out[-1].cycle + 1 if out else 0
        while any(v.kind == "timing" for v in verify(out + [cmd])):
            cmd.cycle += 1
        out.append(cmd)
    return out


def mac16_program(rng: np.random.Generator) -> list[Instruction]:
    """Return MAC_ABKs under BROADCAST = 1, 0 and 1 again, each followed by RD_MAC."""
    program = [Instruction(Op.WR_ABK, gpr0=0, channel_mask=CH0, row=2, col=c, opsize=1,
                           data=_words(rng, 1)) for c in range(3)]
    program += [Instruction(Op.WR_SBK, gpr0=0, channel_mask=CH0, bank=b, row=2, col=c,
                            data=_words(rng, 1)) for b in (0, 1, 6, 7, 14) for c in (0, 2)]
    program += [Instruction(Op.WR_GB, opsize=3, gpr0=0, channel_mask=CH0, data=_words(rng, 3)),
                Instruction(Op.WR_BIAS, gpr0=0, channel_mask=CH0, data=_words(rng, 1))]
    for broadcast in (1, 0, 1):
        program += [Instruction(Op.WR_CFR, cfr=int(Cfr.BROADCAST), value=broadcast),
                    Instruction(Op.MAC_ABK, opsize=3, channel_mask=CH0, row=2),
                    Instruction(Op.RD_MAC, gpr0=0, channel_mask=CH0)]
    return program


def mac_schedule(rng: np.random.Generator) -> tuple[list[TimedCommand], list[int]]:
    """Return single-bank MACs under BROADCAST = 1 (legal and refused) and the refused ones.

    The refused MACs name a bank whose partner is closed or open on another row: ``verify``
    lists exactly those as protocol errors; the schedule meets every timing rule.
    """
    commands = [
        _cmd(_C.ACT, 2, 1), _cmd(_C.ACT, 3, 1), _cmd(_C.ACT, 4, 1),
        _cmd(_C.WR, 2, 1, 0, _words(rng, 1)), _cmd(_C.WR, 3, 1, 0, _words(rng, 1)),
        _cmd(_C.WR, 2, 1, 1, _words(rng, 1)), _cmd(_C.WR, 3, 1, 1, _words(rng, 1)),
        _cmd(_C.MAC, 2, 1, 0, broadcast=1), _cmd(_C.MAC, 3, 1, 1, broadcast=1),
        _cmd(_C.MAC, 2, 1, 1, broadcast=1), _cmd(_C.MAC, 3, 1, 0, broadcast=0),
        _cmd(_C.MAC, 4, 1, 0, broadcast=1),  # partner 5 closed
        _cmd(_C.ACT, 5, 2),
        _cmd(_C.MAC, 4, 1, 0, broadcast=1),  # partner 5 open on row 2
        _cmd(_C.MAC, 5, 2, 0, broadcast=1),  # partner 4 open on row 1
        _cmd(_C.MAC, 4, 1, 0, broadcast=0),  # the global buffer needs no partner
        _cmd(_C.TMOD), _cmd(_C.RDMAC16),
    ]
    refused = [11, 13, 14]
    return timed(commands), refused


@pytest.fixture(scope="module")
def runs() -> dict:
    """Run both schedules on one channel; one functional model follows them (mats persist)."""
    rng = np.random.default_rng(5)
    mac16 = schedule_of(mac16_program(rng))
    mac, refused = mac_schedule(rng)
    got = run_many([mac16, mac])
    model = FunctionalModel(DEVICE)
    want16 = expected_reads(mac16, model)
    want = expected_reads([c for i, c in enumerate(mac) if i not in refused], model)
    return {"mac16": (mac16, got[0], want16), "mac": (mac, refused, got[1], want)}


def test_mac16_broadcast_matches_functional_model(runs):
    schedule, got, want = runs["mac16"]
    assert verify(schedule) == []
    flags = [c.cfr[Cfr.BROADCAST] for c in schedule if c.command == _C.MAC16]
    assert flags == [1] * 3 + [0] * 3 + [1] * 3
    assert got["violations"] == [] and got["count"] == 0
    assert [c for _, c, _ in want] == [_C.RDMAC16] * 3
    assert_same_reads(got["reads"], want)
    first, second, third = (data for _, _, data in got["reads"])
    # Under BROADCAST = 1 the odd banks' accumulators stay (lane b = bank b) ...
    bias = next(c.payload for c in schedule if c.command == _C.WRMAC16)
    model = FunctionalModel(DEVICE)
    model.execute(0, _C.WRMAC16, data=bias)
    assert np.array_equal(first[1::2], model.execute(0, _C.RDMAC16)[1::2])
    assert np.array_equal(third[1::2], second[1::2])
    # ... and the even ones change.
    assert not np.array_equal(third[0::2], second[0::2])


def test_mac16_broadcast_differs_from_the_global_buffer(runs):
    schedule, got, _ = runs["mac16"]
    as_gb = []
    for c in schedule:  # the same schedule with BROADCAST = 0 throughout
        as_gb.append(dataclasses.replace(c, cfr=(0,) + tuple(c.cfr[1:]) if c.cfr else ()))
    other = expected_reads(as_gb, FunctionalModel(DEVICE))
    assert not np.array_equal(other[0][2], got["reads"][0][2])


def test_mac_broadcast_and_partner_errors(runs):
    schedule, refused, got, want = runs["mac"]
    found = verify(schedule)  # the model's checker refuses the same MACs
    assert [(v.kind, v.cycle) for v in found] == [("protocol", schedule[i].cycle)
                                                   for i in refused]
    assert all("partner bank" in v.detail for v in found)
    assert [(t, p) for t, _, _, p in got["violations"]] == [
        (schedule[i].cycle, ProtocolCode.PARTNER) for i in refused]
    # The functional model refuses exactly these and executes the rest.
    model = FunctionalModel(DEVICE)
    raised = []
    for i, c in enumerate(schedule):
        if c.command == _C.TMOD:
            continue
        model.set_cfr(Cfr.BROADCAST, c.cfr[Cfr.BROADCAST], [0])
        try:
            model.execute(0, c.command, bank=c.bank if c.bank >= 0 else None,
                          row=c.row if c.row >= 0 else None, col=c.col if c.col >= 0 else None,
                          data=c.payload)
        except ProtocolError:
            raised.append(i)
    assert raised == refused
    assert len(want) == 1 and want[0][2][[2, 3]].any() and want[0][2][4] == 0 == want[0][2][5]
    assert_same_reads(got["reads"], want)
