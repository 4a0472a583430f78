"""One protocol (sim/protocol.py): the functional model, ``verify`` and the RTL decoder agree.

A command sequence on one channel is run three ways: executed on a
:class:`~patton.sim.functional.FunctionalModel` with the register mode enforced (a
``ProtocolError`` flags the command), checked by :func:`~patton.sim.check.verify` (a
``protocol`` violation flags it) and, in the Verilator test, replayed on the RTL channel (a
protocol code flags it). Commands are :data:`TIMING.quiet` cycles apart, so no timing rule
fires. All three must flag the same commands.

The RTL does not implement every command (:data:`patton.hw.isa.REJECTED`: RDA, WRA, ACT4,
PRE4, REFab, REFpb, SYNC, EOC). It must flag each of them as ``REJECTED``; they are left out of
the model side of that comparison (the RTL executes none of them, so the models run the
sequence without them).
"""

from __future__ import annotations

import copy
import dataclasses
from typing import NamedTuple

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from patton.sim.check import verify
from patton.sim.device import AF_ROW_BASE, DEVICE
from patton.sim.functional import FunctionalModel, ProtocolError
from patton.sim.isa import Cfr, Command
from patton.sim.protocol import (
    COLUMN,
    LUT_ROWS,
    PAYLOAD,
    RULES,
    Action,
    CommandRule,
    Need,
    Operand,
    RegisterMode,
    State,
    Targets,
    column_limit,
    column_limits,
    consistent,
    legal_row,
)
from patton.sim.schedule import TimedCommand
from patton.sim.timing import TIMING, timing_table

#: A table whose device has every command of the ISA (every extension).
WHOLE_ISA = timing_table(None, "aim+wr16")

C = Command
#: One channel of 64 rows: the RTL build's organisation (``ChannelParams(rows=64)``).
DEV = DEVICE.with_(channels=1, rows=64)
LUT = AF_ROW_BASE


class Step(NamedTuple):
    """One command of a test sequence (``None``: operand not given)."""

    command: Command
    bank: int | None = None
    row: int | None = None
    col: int | None = None
    broadcast: int = 0  # CFR BROADCAST in effect


def _words(i: int) -> np.ndarray:
    return (np.arange(16, dtype=np.uint16) + 16 * i) & 0x3FFF | 0x3C00


def schedule(steps: list[Step]) -> list[TimedCommand]:
    """Return the steps as a schedule, :data:`TIMING.quiet` cycles apart, with payloads."""
    return [TimedCommand((i + 1) * TIMING.quiet, 0, s.command,
                         -1 if s.bank is None else s.bank, -1 if s.row is None else s.row,
                         -1 if s.col is None else s.col,
                         payload=_words(i) if s.command in PAYLOAD else None,
                         cfr=(s.broadcast, 1, 0))
            for i, s in enumerate(steps)]


def _state(model: FunctionalModel) -> tuple:
    ch = model.channels[0]
    return (ch.protocol.open_rows.tolist(), ch.protocol.reg_mode, ch.gb.copy(), ch.acc.copy(),
            ch.af.copy(), copy.deepcopy(ch.mats))


def _same(a: tuple, b: tuple) -> bool:
    return (a[0] == b[0] and a[1] == b[1] and all(np.array_equal(x, y) for x, y in
                                                  zip(a[2:5], b[2:5]))
            and a[5].keys() == b[5].keys()
            and all(np.array_equal(a[5][r], b[5][r]) for r in a[5]))


def model_flags(steps: list[Step]) -> set[int]:
    """Indices of the steps the functional model (register mode enforced) refuses.

    RD/WR without a column address column 0, as :func:`patton.sim.replay.replay` executes a
    public ``R/W MEM`` line. A refused command must leave the model unchanged.
    """
    model = FunctionalModel(DEV, modes=True)
    flagged = set()
    for i, s in enumerate(steps):
        model.set_cfr(Cfr.BROADCAST, s.broadcast)
        col = 0 if s.col is None and s.command in (C.RD, C.WR) else s.col
        before = _state(model)
        try:
            model.execute(0, s.command, s.bank, s.row, col,
                          _words(i) if s.command in PAYLOAD else None)
        except ProtocolError:
            flagged.add(i)
            assert _same(before, _state(model)), s
    return flagged


def verify_flags(steps: list[Step]) -> set[int]:
    """Indices of the steps ``verify`` reports a protocol violation for (and nothing else).

    Checked on a device with every extension, as the functional model executes every command.
    """
    found = verify(schedule(steps), DEV, WHOLE_ISA)
    assert all(v.kind == "protocol" for v in found), found
    index = {c.cycle: i for i, c in enumerate(schedule(steps))}
    return {index[v.cycle] for v in found}


def flags(steps: list[Step]) -> set[int]:
    """The steps both models refuse (they must agree)."""
    fm, checked = model_flags(steps), verify_flags(steps)
    assert fm == checked, (sorted(fm), sorted(checked))
    return fm


# ----------------------------------------------------------------------------- the table

def test_table_agrees_with_the_isa_classes():
    assert consistent() == []
    assert set(RULES) == set(Command)


def test_state_check_then_apply():
    s = State(DEV)
    assert s.check(C.ACT, 3, 7) is None
    s.apply(C.ACT, 3, 7)
    assert s.open_rows[3] == 7 and s.check(C.RD, 3, 7, 0) is None
    assert "has row 7 open, not 8" in s.check(C.RD, 3, 8, 0)
    assert "normal mode" in s.check(C.WRGB, col=0)
    s.apply(C.TMOD)
    assert s.reg_mode and s.check(C.WRGB, col=0) is None
    assert s.check(C.WRGB, col=0, mode=False) is None
    assert s.targets(C.ACT4, 6) == slice(4, 8)
    assert RULES[C.PREA].targets is Targets.ALL


# ----------------------------------------------------------------------------- decided cases
# Each case was decided once (docs/protocol.md); before, the model and verify disagreed.

def test_act_to_a_bank_open_on_the_same_row_is_a_no_op():
    assert flags([Step(C.ACT, 2, 1), Step(C.ACT, 2, 1), Step(C.RD, 2, 1, 0)]) == set()
    assert flags([Step(C.ACT, 2, 1), Step(C.ACT, 2, 3), Step(C.RD, 2, 1, 0)]) == {1}


def test_act16_with_some_banks_open_on_the_same_row():
    assert flags([Step(C.ACT, 5, 4), Step(C.ACT16, row=4), Step(C.MAC16, row=4, col=0)]) \
        == set()
    assert flags([Step(C.ACT, 5, 3), Step(C.ACT16, row=4), Step(C.MAC16, row=4, col=0)]) \
        == {1, 2}


def test_act4_opens_and_pre4_closes_a_bank_group():
    steps = [Step(C.ACT4, 6, 9), Step(C.RD, 4, 9, 0), Step(C.RD, 7, 9, 0),
             Step(C.RD, 3, 9, 0), Step(C.ACT4, 5, 2), Step(C.ACT4, 5, 9),
             Step(C.PRE4, 7), Step(C.RD, 4, 9, 0), Step(C.ACT16, row=1),
             Step(C.PRE4, 0), Step(C.MAC16, row=1, col=0), Step(C.RD, 8, 1, 0)]
    assert flags(steps) == {3, 4, 7, 10}


def test_refresh_needs_its_banks_precharged():
    steps = [Step(C.REFab), Step(C.ACT, 1, 0), Step(C.REFab), Step(C.REFpb, 1),
             Step(C.REFpb, 2), Step(C.PREA), Step(C.REFab)]
    assert flags(steps) == {2, 3}


def test_rda_and_wra_close_their_bank():
    steps = [Step(C.ACT, 0, 1), Step(C.RDA, 0, 1, 0), Step(C.RD, 0, 1, 0),
             Step(C.ACT, 0, 1), Step(C.WRA, 0, 1, 0), Step(C.WR, 0, 1, 0)]
    assert flags(steps) == {2, 5}


def test_wra16_closes_all_banks():
    steps = [Step(C.ACT16, row=2), Step(C.WRA16, row=2, col=0), Step(C.MAC16, row=2, col=0),
             Step(C.ACT, 3, 5)]
    assert flags(steps) == {2}


def test_af16_needs_a_lut_row():
    steps = [Step(C.ACT16, row=1), Step(C.AF16), Step(C.PREA), Step(C.ACT16, row=LUT + 2),
             Step(C.AF16), Step(C.AF16, row=LUT), Step(C.AF16, row=LUT + 2)]
    assert flags(steps) == {1, 5}



def test_the_first_and_last_lut_rows_are_rows_af16_runs_on():
    """AFM 0's LUT row is ``AF_ROW_BASE`` itself and AFM 15's the last: both open and run
    AF16; the rows just outside them are refused."""
    last = LUT + LUT_ROWS - 1
    steps = [Step(C.ACT16, row=LUT), Step(C.AF16), Step(C.AF16, row=LUT), Step(C.PREA),
             Step(C.ACT16, row=last), Step(C.AF16, row=last), Step(C.PREA),
             Step(C.ACT16, row=last + 1)]
    assert flags(steps) == {7}
    assert legal_row(DEVICE, LUT) and legal_row(DEVICE, last)
    assert not legal_row(DEVICE, last + 1) and not legal_row(DEVICE, DEVICE.rows)
    assert DEVICE.rows <= LUT - 1 and not legal_row(DEVICE, LUT - 1)

def test_rows_columns_and_banks_out_of_range():
    steps = [Step(C.ACT, 0, 64), Step(C.ACT, 0, LUT + 8), Step(C.ACT16, row=-5),
             Step(C.ACT, 16, 0), Step(C.PRE, 16), Step(C.ACT, 0, LUT + 7),
             Step(C.RD, 0, LUT + 7, 64), Step(C.MAC, 0, LUT + 7, 63), Step(C.MAC, 0, None, 64),
             Step(C.TMOD), Step(C.WRGB, col=64), Step(C.WRGB, col=63)]
    assert flags(steps) == {0, 1, 2, 3, 4, 6, 8, 10}


def test_missing_operands():
    # RD/WR without a column address column 0; every other column command needs a column.
    steps = [Step(C.ACT, None, 0), Step(C.ACT, 0), Step(C.ACT, 0, 0), Step(C.RD, 0),
             Step(C.RD, None, 0, 0), Step(C.MAC, 0, 0), Step(C.RDCP, 0, None, 1),
             Step(C.ACT16), Step(C.PRE)]
    assert flags(steps) == {0, 1, 4, 5, 7, 8}


def test_register_mode():
    steps = [Step(C.WRGB, col=0), Step(C.RDMAC16), Step(C.TMOD), Step(C.WRGB, col=0),
             Step(C.WRMAC16), Step(C.RDMAC16), Step(C.RDAF16), Step(C.PRE, 0), Step(C.ACT, 0, 0),
             Step(C.PREA), Step(C.TMOD), Step(C.PREA), Step(C.WRMAC16)]
    assert flags(steps) == {0, 1, 7, 8, 9, 12}


def test_broadcast_mac_needs_its_partner_bank():
    steps = [Step(C.ACT, 4, 1), Step(C.MAC, 4, 1, 0, broadcast=1), Step(C.MAC, 4, 1, 0),
             Step(C.ACT, 5, 2), Step(C.MAC, 4, 1, 0, broadcast=1),
             Step(C.MAC, 5, 2, 0, broadcast=1), Step(C.PRE, 5), Step(C.ACT, 5, 1),
             Step(C.MAC, 4, 1, 0, broadcast=1), Step(C.MAC, 5, None, 0, broadcast=1),
             Step(C.RD, 6, 1, 0, broadcast=1)]
    assert flags(steps) == {1, 4, 5, 10}


def test_run_issues_tmods_when_the_mode_is_enforced():
    from patton.sim.isa import Instruction, Opcode, channel_bit

    program = [Instruction(Opcode.WR_GB, opsize=1, gpr0=0, channel_mask=channel_bit(0)),
               Instruction(Opcode.MAC_ABK, opsize=1, channel_mask=channel_bit(0), row=3),
               Instruction(Opcode.RD_MAC, gpr0=0, channel_mask=channel_bit(0))]
    strict, loose = FunctionalModel(DEV, modes=True), FunctionalModel(DEV)
    assert len(strict.run(program)) == len(loose.run(program)) == 1
    assert strict.channels[0].protocol.reg_mode
    with pytest.raises(ProtocolError, match="ACT issued in register mode"):
        strict.execute(0, C.ACT, 0, 3)
    loose.execute(0, C.ACT, 0, 3)  # no mode enforced; bank 0 is on row 3 already


# ----------------------------------------------------------------------------- properties

#: Commands, the row-changing and column ones more often than the rest.
_CMD = st.sampled_from(list(Command) + [C.ACT] * 4 + [C.ACT16] * 3 + [C.PREA, C.PRE, C.TMOD]
                       + [C.RD, C.WR, C.MAC, C.MAC, C.RDCP, C.WRCP, C.MAC16, C.MAC16, C.WRA16,
                          C.WRGB, C.RDMAC16])
_BANKS = [0, 1, 2, 3] * 4 + [4, 5, 15, 16]
_COLS = [0, 1, 63] * 4 + [64]


@st.composite
def steps(draw, complete: bool = False, lut: bool = True, size: tuple[int, int] = (1, 60)):
    """Random sequences: few banks and rows (so same/other/closed rows all occur), TMODs,
    BROADCAST 0/1, some operands out of range or (unless ``complete``) missing.

    To reach deep states, a shadow :class:`State` steers the choices half of the time: the
    row a command expects is then the one open in its bank, and a command of the other
    register mode is preceded by a TMOD.
    """
    rows = [0] * 8 + [1] * 4 + [2, 63, 64] + ([LUT, LUT, LUT + 1, LUT + 8] if lut else [])
    shadow = State(DEV)
    out: list[Step] = []
    count = draw(st.integers(*size))
    while len(out) < count:
        command = draw(_CMD)
        rule = RULES[command]
        bank = draw(st.sampled_from(_BANKS))
        row = draw(st.sampled_from(rows))
        col = draw(st.sampled_from(_COLS))
        broadcast = draw(st.sampled_from([0, 0, 1]))
        if draw(st.booleans()):  # steer: the mode and row it needs, as a controller would
            ahead = []
            if rule.mode is not RegisterMode.ANY and \
                    (rule.mode is RegisterMode.REGISTER) != shadow.reg_mode:
                ahead.append(Step(C.TMOD))
            if rule.need is Need.OPEN and bank < DEV.banks:
                where = bank if rule.targets is Targets.BANK else 0
                if shadow.open_rows[where] >= 0:
                    row = int(shadow.open_rows[where])
                elif rule.targets is Targets.BANK:
                    ahead.append(Step(C.ACT, bank, row))
                else:
                    ahead.append(Step(C.ACT16, row=row))
            for extra in ahead:
                if shadow.check(*extra) is None:
                    shadow.apply(extra.command, extra.bank, extra.row)
            out += ahead
        if not complete:
            bank, row, col = (draw(st.sampled_from([v] * 9 + [None])) for v in (bank, row, col))
        step = Step(command, bank if rule.bank else None,
                    row if rule.row is not Operand.NO else None,
                    col if rule.columns is not None else None, broadcast)
        if shadow.check(*step) is None:
            shadow.apply(step.command, step.bank, step.row)
        out.append(step)
    return out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps())
def test_functional_model_and_verify_refuse_the_same_commands(sequence):
    flags(sequence)


# ----------------------------------------------------------------------------- RTL

@pytest.fixture(scope="module")
def player():
    from patton.hw.params import ChannelParams
    from patton.tb.player import SchedulePlayer

    return SchedulePlayer(ChannelParams(rows=64), timing=WHOLE_ISA)  # every command


@pytest.mark.verilator
@settings(max_examples=6, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(sequence=steps(complete=True, size=(150, 250)))
def test_rtl_refuses_the_same_commands(player, sequence):
    """The RTL flags exactly the models' commands; it rejects every command it does not
    implement (those are left out of the models' sequence: the RTL executes none of them).

    The RTL port always carries a bank, row and column (0 when absent), so the sequences name
    every operand; LUT rows (``AF_ROW_BASE + k``, one out of range) go as ``lut = 1, row = k``.
    """
    from patton.hw.isa import ProtocolCode

    IMPLEMENTED = player.isa.IMPLEMENTED
    timed = schedule(sequence)
    result = player.play(timed, "protocol")
    assert all(not v.rules for v in result.violations), "no timing rule may fire"
    by_cycle = {v.cycle: ProtocolCode(v.protocol) for v in result.violations}
    kept = [i for i, s in enumerate(sequence) if s.command in IMPLEMENTED]
    for i, s in enumerate(sequence):
        code = by_cycle.get(timed[i].cycle, ProtocolCode.NONE)
        if s.command not in IMPLEMENTED:
            assert code is ProtocolCode.REJECTED, s
        else:
            assert code is not ProtocolCode.REJECTED, s
    rtl = {n for n, i in enumerate(kept) if timed[i].cycle in by_cycle}
    models = flags([sequence[i] for i in kept])
    assert rtl == models, [(n, sequence[kept[n]], by_cycle.get(timed[kept[n]].cycle))
                           for n in sorted(rtl ^ models)]


# -- the rules' own checks and small helpers (mutation testing found them untested) ----------


@pytest.mark.parametrize("rule, said", [
    (dict(targets=Targets.NONE, need=Need.OPEN),
     "a command without banks has no row prerequisite"),
    (dict(targets=Targets.BANK, need=Need.FREE, partner=True),
     "partner and LUT conditions refine an open-row prerequisite"),
    (dict(targets=Targets.BANK, need=Need.FREE, lut=True),
     "partner and LUT conditions refine an open-row prerequisite"),
    (dict(targets=Targets.BANK, need=Need.FREE, action=Action.OPEN, row=Operand.OPTIONAL),
     "a command that opens a row must name it"),
])
def test_a_rule_that_breaks_an_invariant_is_refused(rule, said):
    with pytest.raises(ValueError) as error:
        CommandRule(**rule)
    assert str(error.value) == said


def test_a_rule_states_only_what_it_changes():
    """The defaults: no row condition, no action, normal mode, no row, column or payload."""
    rule = CommandRule(Targets.BANK)
    assert (rule.need, rule.action, rule.mode, rule.row, rule.columns, rule.payload,
            rule.partner, rule.lut) == (Need.ANY, Action.NONE, RegisterMode.NORMAL, Operand.NO,
                                        None, False, False, False)
    assert rule.bank and CommandRule(Targets.GROUP).bank
    assert not CommandRule(Targets.ALL).bank and not CommandRule(Targets.NONE).bank


def test_the_commands_that_carry_host_words():
    """The writes that take 16 host words from the bus (``docs/protocol.md``)."""
    assert PAYLOAD == {Command.WR, Command.WRA, Command.WRA16, Command.WRGB, Command.WRMAC16,
                       Command.WR16}


def test_a_command_of_an_extension_the_device_lacks_is_a_protocol_violation():
    """WR16 on ``aim`` is refused by the checker; on ``aim+wr16`` it is legal and leaves the
    row open (the next WR16 needs no activation)."""
    steps = [Step(C.ACT16, None, 3, None, 0), Step(C.WR16, None, 3, 0, 0),
             Step(C.WR16, None, 3, 1, 0), Step(C.MAC16, None, 3, 1, 0)]
    found = verify(schedule(steps), DEV)
    assert [(v.kind, v.command) for v in found] == [("protocol", C.WR16)] * 2
    assert "not a command of device 'aim'" in found[0].detail
    assert verify(schedule(steps), DEV, WHOLE_ISA) == []


@pytest.mark.parametrize("row", [True, False, np.bool_(True), 1.0, 1.5, "1", None, [1]])
def test_a_row_that_is_not_an_integer_is_not_a_row(row):
    assert not legal_row(DEVICE, row)


@pytest.mark.parametrize("row", [0, np.int64(1), np.int32(DEVICE.rows - 1), np.uint16(7)])
def test_numpy_integers_are_rows(row):
    assert legal_row(DEVICE, row)


def test_column_limits_by_command():
    limits = column_limits(DEVICE)
    assert len(limits) == len(Command)
    for command in Command:
        if command in COLUMN:
            assert limits[int(command)] == column_limit(DEVICE, command) > 0
        else:
            assert limits[int(command)] == 0
            with pytest.raises(ValueError, match=f"^{command.name} takes no column$"):
                column_limit(DEVICE, command)
    assert column_limit(DEVICE, Command.RD) == DEVICE.columns
    assert column_limit(DEVICE, Command.WRGB) == DEVICE.gb_columns
    assert column_limit(DEVICE, Command.MAC16) == min(DEVICE.columns, DEVICE.gb_columns)


def _opened(rows: dict[int, int], reg_mode: bool = False) -> State:
    state = State(DEVICE, reg_mode=reg_mode)
    for bank, row in rows.items():
        state.open_rows[bank] = row
    return state


@pytest.mark.parametrize("rows, call, said", [
    ({2: 5}, dict(command=Command.MAC, bank=2, row=5, col=0, broadcast=True),
     "MAC under CFR BROADCAST = 1 reads its vector from partner bank 3, but bank 3 has no "
     "open row (closed), not row 5"),
    ({2: 5, 3: 7}, dict(command=Command.MAC, bank=2, row=5, col=0, broadcast=True),
     "MAC under CFR BROADCAST = 1 reads its vector from partner bank 3, but bank 3 has row 7 "
     "open, not row 5"),
    ({}, dict(command=Command.RD, bank=4, col=0), "RD: bank 4 has no open row"),
    ({4: 9}, dict(command=Command.RD, bank=4, row=8, col=0), "RD: bank 4 has row 9 open, not 8"),
    ({1: 3}, dict(command=Command.ACT, bank=1, row=4), "ACT row 4: bank 1 has another row (3) "
     "open; precharge first"),
    ({6: 2}, dict(command=Command.REFab), "REFab needs its banks precharged (bank 6 has row 2 "
     "open)"),
    ({}, dict(command=Command.RDMAC16), "RDMAC16 issued in normal mode"),
    ({}, dict(command=Command.RD, bank=DEVICE.banks, col=0),
     f"RD: bank {DEVICE.banks} outside 0..{DEVICE.banks - 1}"),
    ({}, dict(command=Command.RD, bank=0, row="x", col=0), "RD: row 'x' is not an integer"),
    ({0: 1}, dict(command=Command.RD, bank=0, col=DEVICE.columns),
     f"RD: column {DEVICE.columns} outside 0..{DEVICE.columns - 1}"),
    ({}, dict(command=Command.ACT, bank=0, row=-5),
     f"ACT: row -5 outside 0..{DEVICE.rows - 1} and the LUT rows "
     f"{AF_ROW_BASE}..{AF_ROW_BASE + LUT_ROWS - 1}"),
    ({}, dict(command=Command.MAC16, col=0),
     "MAC16 needs one row open in all banks; open rows " + str([-1] * DEVICE.banks)),
    ({b: 4 for b in range(DEVICE.banks)}, dict(command=Command.MAC16, row=5, col=0),
     "MAC16: row 4 is open, not 5"),
    ({b: 4 for b in range(DEVICE.banks)}, dict(command=Command.AF16),
     f"AF16 needs a LUT row ({AF_ROW_BASE} + AFM) open, not 4"),
    ({0: 3}, dict(command=Command.ACT16, row=4),
     "ACT16 row 4: bank 0 has another row (3) open; precharge first"),
    ({0: 3}, dict(command=Command.REFab), "REFab needs its banks precharged (bank 0 has row 3 "
     "open)"),
])
def test_what_a_violation_says(rows, call, said):
    assert _opened(rows).check(**call) == said


def test_a_mac_reads_its_partner_bank_only_under_broadcast():
    state = _opened({2: 5})
    assert state.check(Command.MAC, bank=2, row=5, col=0) is None  # broadcast off by default
    assert state.check(Command.MAC, bank=2, row=5, col=0, broadcast=True) is not None


def test_a_state_of_the_wrong_size_is_refused():
    with pytest.raises(ValueError) as error:
        State(DEVICE, open_rows=np.full(3, -1))
    assert str(error.value) == f"3 open rows for {DEVICE.banks} banks"


def test_rules_and_states_are_slotted_records():
    """A rule cannot be changed once made; neither record grows attributes."""
    rule = RULES[C.ACT]
    with pytest.raises(dataclasses.FrozenInstanceError):
        rule.need = Need.ANY  # type: ignore[misc]
    for record in (rule, State(DEVICE)):
        assert not hasattr(record, "__dict__")


def test_a_command_without_banks_targets_none():
    state = State(DEVICE)
    for command in Command:
        banks = range(DEVICE.banks)[state.targets(command, 0)]
        expected = {Targets.NONE: 0, Targets.BANK: 1, Targets.GROUP: DEVICE.banks_per_group,
                    Targets.ALL: DEVICE.banks}[RULES[command].targets]
        assert len(banks) == expected, command.name


def test_plain_operands_in_range_take_the_short_path():
    """Plain ints in range are accepted without the full checks; anything else (a NumPy
    integer, a value out of range, a missing operand) goes to them."""
    state = State(DEVICE)
    rows = (0, DEVICE.rows - 1, AF_ROW_BASE, AF_ROW_BASE + LUT_ROWS - 1)
    for command in Command:
        rule = RULES[command]
        limit = column_limit(DEVICE, command) if rule.columns is not None else 1
        for bank in (0, DEVICE.banks - 1):
            for col in (0, limit - 1):
                for row in (*rows, *([] if rule.row is Operand.REQUIRED else [None])):
                    assert state._plain(command, rule, bank, row, col), (command.name, bank,
                                                                         row, col)
        refused = [dict(bank=np.int64(0)) if rule.bank else None,
                   dict(bank=-1) if rule.bank else None,
                   dict(bank=DEVICE.banks) if rule.bank else None,
                   dict(col=np.int64(0)) if rule.columns is not None else None,
                   dict(col=-1) if rule.columns is not None else None,
                   dict(col=limit) if rule.columns is not None else None,
                   dict(row=np.int64(0)),
                   dict(row=DEVICE.rows) if rule.row is Operand.REQUIRED else None]
        for change in filter(None, refused):
            call = dict(bank=0, row=0, col=0) | change
            assert not state._plain(command, rule, call["bank"], call["row"], call["col"]), \
                (command.name, change)


@pytest.mark.parametrize("col", [np.int64(0), np.int32(DEVICE.columns - 1)])
def test_numpy_integers_are_banks_and_columns(col):
    state = _opened({0: 3})
    assert state.check(Command.RD, bank=np.int64(0), row=np.int64(3), col=col) is None
    assert state.check(Command.RD, bank=np.int64(0), col=col + DEVICE.columns) == \
        f"RD: column {col + DEVICE.columns} outside 0..{DEVICE.columns - 1}"


def test_the_last_bank_of_an_odd_device_has_no_partner():
    device = DEVICE.with_(bankgroups=1, banks_per_group=3)
    state = State(device)
    state.open_rows[:] = 5
    assert state.check(Command.MAC, bank=1, row=5, col=0, broadcast=True) is None
    assert state.check(Command.MAC, bank=2, row=5, col=0, broadcast=True) == \
        "MAC under CFR BROADCAST = 1: bank 2 has no partner bank"


def test_an_all_bank_command_on_a_one_bank_device():
    state = State(DEVICE.with_(bankgroups=1, banks_per_group=1))
    state.open_rows[0] = 4
    assert state.check(Command.MAC16, row=4, col=0) is None
    assert state.check(Command.MAC16, row=5, col=0) == "MAC16: row 4 is open, not 5"


def test_every_disagreement_with_the_isa_is_named(monkeypatch):
    """``consistent`` lists each broken fact of each command, not only the last."""
    from patton.sim import protocol

    broken = dict(RULES)
    broken[C.ACT] = CommandRule(Targets.ALL, Need.FREE, row=Operand.REQUIRED)
    broken[C.PRE] = CommandRule(Targets.BANK, Need.OPEN, mode=RegisterMode.REGISTER)
    broken[C.MAC16] = CommandRule(Targets.BANK, Need.OPEN, columns=RULES[C.MAC16].columns)
    monkeypatch.setattr(protocol, "RULES", broken)
    assert consistent() == ["ACT: scope", "ACT: opening", "PRE: closing", "PRE: bank row",
                            "PRE: register mode", "MAC16: scope", "MAC16: bank row",
                            "MAC16: all rows"]
