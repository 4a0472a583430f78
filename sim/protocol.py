"""The AiM command protocol, defined once: what each DRAM command needs and what it changes.

Ramulator defines a DRAM standard by per-command prerequisites (``m_preqs``) and actions
(``m_actions``). :data:`RULES` is that table for a GDDR6-AiM channel: for each
:class:`~patton.sim.isa.Command` one :class:`CommandRule` says which banks it targets, what their
row
state must be, which register mode it needs, which operands it takes and what it changes.
:class:`State` holds one channel's row and mode state and applies the table::

    problem = state.check(command, bank, row, col, broadcast)
    if problem is None:
        state.apply(command, bank, row)

The functional model (:mod:`patton.sim.functional`) and the schedule checker
(:func:`patton.sim.check.verify`) both do exactly this; the RTL decoder (``hw/decoder.py``)
implements the same rules for the commands it executes (:data:`patton.hw.isa.IMPLEMENTED`) and
rejects the others. ``docs/protocol.md`` lists the decisions and their reasons.

The command classes of :mod:`patton.sim.isa` (``BANK_ROW_COMMANDS``, ``ALL_ROWS_COMMANDS``,
``REG_MODE_COMMANDS``, ``COMMAND_SCOPE``, ``COMMAND_META``) stay the definition of which
command is which; :func:`consistent` checks that the table agrees with them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import numpy as np
from patton.sim.device import AF_ROW_BASE, Device
from patton.sim.isa import (
    ALL_ROWS_COMMANDS,
    BANK_ROW_COMMANDS,
    CFR_RANGE,
    COMMAND_META,
    COMMAND_SCOPE,
    REG_MODE_COMMANDS,
    Cfr,
    Command,
    Scope,
)

__all__ = [
    "CLOSED", "LUT_ROWS", "Targets", "Need", "RegisterMode", "Action", "Operand", "Columns",
    "CommandRule",
    "RULES", "PAYLOAD", "COLUMN", "UNADDRESSED", "State", "legal_row", "column_limit",
    "column_limits", "bus_column", "consistent",
]

#: Open-row value of a precharged bank.
CLOSED = -1
#: Number of activation-function LUT rows above :data:`AF_ROW_BASE` (one per AFM id).
LUT_ROWS = CFR_RANGE[Cfr.AFM][1] + 1


class Targets(enum.Enum):
    """Banks whose row state a command looks at and changes."""

    NONE = enum.auto()  # no bank (global buffer, accumulators, mode)
    BANK = enum.auto()  # the bank it names
    GROUP = enum.auto()  # the bank group of the bank it names
    ALL = enum.auto()  # every bank of the channel


class Need(enum.Enum):
    """Row state the target banks must be in."""

    ANY = enum.auto()  # no condition
    CLOSED = enum.auto()  # every target bank precharged
    FREE = enum.auto()  # every target bank closed or already open on the command's row
    OPEN = enum.auto()  # every target bank open on one row (the command's row, if it names one)


class RegisterMode(enum.Enum):
    """Register mode (toggled by TMOD) a command needs."""

    ANY = enum.auto()
    NORMAL = enum.auto()
    REGISTER = enum.auto()


class Action(enum.Enum):
    """What a legal command does to the row and mode state."""

    NONE = enum.auto()
    OPEN = enum.auto()  # the target banks open the command's row
    CLOSE = enum.auto()  # the target banks close (precharge or auto-precharge)
    TOGGLE = enum.auto()  # the register mode flips


class Operand(enum.Enum):
    """Whether a command takes an operand."""

    NO = enum.auto()  # ignored if given
    OPTIONAL = enum.auto()  # checked if given
    REQUIRED = enum.auto()  # must be given and in range


class Columns(enum.Enum):
    """Which column range a command's column operand must lie in."""

    ROW = enum.auto()  # a DRAM row's columns
    GB = enum.auto()  # the global buffer's columns
    BOTH = enum.auto()  # both (the command pairs a bank column with a GB column)


@dataclass(frozen=True, slots=True)
class CommandRule:
    """Prerequisite and action of one command.

    Invariants: ``need`` is ``ANY`` when ``targets`` is ``NONE``; a command that names a bank
    (``BANK``/``GROUP`` targets) requires it; ``partner`` and ``lut`` only refine ``OPEN``;
    ``OPEN`` actions have a required row.
    """

    targets: Targets
    need: Need = Need.ANY
    action: Action = Action.NONE
    mode: RegisterMode = RegisterMode.NORMAL
    row: Operand = Operand.NO
    # column range, None: the command takes no column
    columns: Columns | None = None  # pragma: no mutate (the annotation is never evaluated)
    payload: bool = False  # carries 16 host words (a write)
    partner: bool = False  # under CFR BROADCAST = 1 bank ``b ^ 1`` must be open on the row
    lut: bool = False  # the open row must be an activation-function LUT row

    def __post_init__(self) -> None:
        if self.targets is Targets.NONE and self.need is not Need.ANY:
            raise ValueError("a command without banks has no row prerequisite")
        if (self.partner or self.lut) and self.need is not Need.OPEN:
            raise ValueError("partner and LUT conditions refine an open-row prerequisite")
        if self.action is Action.OPEN and self.row is not Operand.REQUIRED:
            raise ValueError("a command that opens a row must name it")

    @property
    def bank(self) -> bool:
        """True when the command names a bank (its own or its bank group's)."""
        return self.targets in (Targets.BANK, Targets.GROUP)


_T, _N, _A, _M, _O, _C = Targets, Need, Action, RegisterMode, Operand, Columns
_REQ, _OPT = _O.REQUIRED, _O.OPTIONAL

#: The protocol: one rule per command.
RULES: dict[Command, CommandRule] = {
    # Activations: closed banks open the row; a bank already on that row stays (no-op).
    Command.ACT: CommandRule(_T.BANK, _N.FREE, _A.OPEN, row=_REQ),
    Command.ACT4: CommandRule(_T.GROUP, _N.FREE, _A.OPEN, row=_REQ),
    Command.ACT16: CommandRule(_T.ALL, _N.FREE, _A.OPEN, row=_REQ),
    # Precharges: always legal (a closed bank stays closed).
    Command.PRE: CommandRule(_T.BANK, action=_A.CLOSE),
    Command.PRE4: CommandRule(_T.GROUP, action=_A.CLOSE),
    Command.PREA: CommandRule(_T.ALL, action=_A.CLOSE),
    # Refresh: the banks must be precharged; it changes no row state.
    Command.REFab: CommandRule(_T.ALL, _N.CLOSED),
    Command.REFpb: CommandRule(_T.BANK, _N.CLOSED),
    # Single-bank column commands: the bank open (on the row, if named).
    Command.RD: CommandRule(_T.BANK, _N.OPEN, row=_OPT, columns=_C.ROW),
    Command.WR: CommandRule(_T.BANK, _N.OPEN, row=_OPT, columns=_C.ROW, payload=True),
    Command.RDA: CommandRule(_T.BANK, _N.OPEN, _A.CLOSE, row=_OPT, columns=_C.ROW),
    Command.WRA: CommandRule(_T.BANK, _N.OPEN, _A.CLOSE, row=_OPT, columns=_C.ROW, payload=True),
    Command.MAC: CommandRule(_T.BANK, _N.OPEN, row=_OPT, columns=_C.BOTH, partner=True),
    Command.RDCP: CommandRule(_T.BANK, _N.OPEN, row=_OPT, columns=_C.BOTH),
    Command.WRCP: CommandRule(_T.BANK, _N.OPEN, row=_OPT, columns=_C.BOTH),
    # All-bank commands: one row open in every bank (the row, if named).
    Command.MAC16: CommandRule(_T.ALL, _N.OPEN, row=_OPT, columns=_C.BOTH),
    Command.EWMUL16: CommandRule(_T.ALL, _N.OPEN, row=_OPT, columns=_C.ROW),
    Command.AF16: CommandRule(_T.ALL, _N.OPEN, row=_OPT, lut=True),
    Command.WRA16: CommandRule(_T.ALL, _N.OPEN, _A.CLOSE, row=_OPT, columns=_C.ROW, payload=True),
    # Extension wr16: WRA16 without the auto-precharge (the row stays open).
    Command.WR16: CommandRule(_T.ALL, _N.OPEN, row=_OPT, columns=_C.ROW, payload=True),
    # Register-mode commands: no row state.
    Command.WRGB: CommandRule(_T.NONE, mode=_M.REGISTER, columns=_C.GB, payload=True),
    Command.WRMAC16: CommandRule(_T.NONE, mode=_M.REGISTER, payload=True),
    Command.RDMAC16: CommandRule(_T.NONE, mode=_M.REGISTER),
    Command.RDAF16: CommandRule(_T.NONE, mode=_M.REGISTER),
    # RegisterMode toggle, and the controller's markers (never on the bus).
    Command.TMOD: CommandRule(_T.NONE, action=_A.TOGGLE, mode=_M.ANY),
    Command.SYNC: CommandRule(_T.NONE, mode=_M.ANY),
    Command.EOC: CommandRule(_T.NONE, mode=_M.ANY),
}
del _T, _N, _A, _M, _O, _C, _REQ, _OPT

#: Commands whose data is a 16-word host payload.
PAYLOAD = frozenset(c for c, r in RULES.items() if r.payload)
#: Commands that address a column (single-bank column commands, MAC16, EWMUL16, WRA16, WRGB).
COLUMN = frozenset(c for c, r in RULES.items() if r.columns is not None)
#: Conventional accesses whose column a public ``R/W MEM`` line leaves unset: they address
#: column 0 (the public format has no column; ``col=`` is our extension).
UNADDRESSED = frozenset({Command.RD, Command.WR})


def _int(value: object) -> int | None:
    """Return ``value`` as an int if it is an integer (not a bool), else None."""
    if type(value) is int:
        return value
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        return int(value)
    return None


def legal_row(device: Device, row: object) -> bool:
    """Return True for a row the device has: ``0..rows-1`` or a LUT row."""
    r = _int(row)
    return r is not None and (0 <= r < device.rows
                              or AF_ROW_BASE <= r < AF_ROW_BASE + LUT_ROWS)


def column_limit(device: Device, command: Command) -> int:
    """Return the number of columns ``command`` may address (it must take a column)."""
    columns = RULES[command].columns
    if columns is Columns.ROW:
        return device.columns
    if columns is Columns.GB:
        return device.gb_columns
    if columns is Columns.BOTH:
        return min(device.columns, device.gb_columns)
    raise ValueError(f"{command.name} takes no column")


def column_limits(device: Device) -> tuple[int, ...]:
    """:func:`column_limit` of every command, by command value (0 for one that takes none)."""
    return tuple(column_limit(device, c) if c in COLUMN else 0 for c in Command)


def bus_column(device: Device, command: Command, column: int) -> int:
    """Return the column ``command`` carries on the bus for an instruction's ``column``.

    An instruction's ``i``-th request addresses column ``col + i``; the device's column
    address has only the bits of :func:`column_limit` (6 for a 64-column row), so a column
    past the row's (or the global buffer's) last wraps to its start. The public simulator
    accepts column instructions wider than a row and keeps issuing their commands in the same
    open row (it has no data); this is the functional reading of that (``docs/isa.md``).
    Commands without a column keep ``column`` as it is.
    """
    if command not in COLUMN or column < 0:  # pragma: no mutate (0 % limit is 0 anyway)
        return column
    return column % column_limit(device, command)


def _said(value: object) -> str:
    """An operand as a message shows it: an integer of any type as a number, else its
    repr."""
    number = _int(value)
    return repr(value) if number is None else str(number)


def _where(rows: np.ndarray, bank: int) -> str:
    row = int(rows[bank])
    return "has no open row" if row == CLOSED else f"has row {row} open"


@dataclass(slots=True)
class State:
    """Row and register-mode state of one channel, as the protocol sees it.

    Invariants: ``open_rows`` is an int64 array of ``device.banks`` entries (all
    :data:`CLOSED` when not given), each :data:`CLOSED` or a row :func:`legal_row` accepts.
    Only :meth:`apply` of a command :meth:`check` accepted changes them (or a testbench that
    resets them).
    """

    device: Device
    open_rows: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))  # per bank
    reg_mode: bool = False  # register read/write mode (TMOD toggles it)

    def __post_init__(self) -> None:
        if not len(self.open_rows):
            self.open_rows = np.full(self.device.banks, CLOSED, dtype=np.int64)
        self.open_rows = np.asarray(self.open_rows, dtype=np.int64)
        if self.open_rows.shape != (self.device.banks,):
            raise ValueError(f"{len(self.open_rows)} open rows for {self.device.banks} banks")

    def targets(self, command: Command, bank: int | None) -> slice:
        """Return the banks ``command`` targets (its bank must have passed :meth:`check`)."""
        kind = RULES[command].targets
        if kind is Targets.ALL:
            return slice(0, self.device.banks)
        if kind is Targets.NONE:
            return slice(0)
        assert bank is not None
        if kind is Targets.GROUP:
            per = self.device.banks_per_group
            start = bank // per * per
            return slice(start, start + per)
        return slice(bank, bank + 1)

    def check(self, command: Command, bank: int | None = None, row: int | None = None,
              col: int | None = None, broadcast: bool = False, *,
              mode: bool = True) -> str | None:
        """Return why ``command`` is illegal now (None if it is legal).

        Args:
            command: the command.
            bank: its bank (``None``: not given; ignored by commands without one).
            row: the row it opens, or the row it expects open (``None``: not given).
            col: its column (``None``: not given).
            broadcast: CFR BROADCAST is 1 (MAC then reads partner bank ``bank ^ 1``).
            mode: also check the register mode (False: any mode is accepted).
        """
        rule = RULES[command]
        name = command.name
        if mode and rule.mode is not RegisterMode.ANY and \
                (rule.mode is RegisterMode.REGISTER) != self.reg_mode:
            return f"{name} issued in {'register' if self.reg_mode else 'normal'} mode"
        problem = self._operands(command, rule, bank, row, col)
        if problem:
            return problem
        b = _int(bank)
        r = _int(row)
        rows = self.open_rows
        banks = self.targets(command, b)
        first = banks.start
        need = rule.need
        if need is Need.ANY:
            return None
        if need is Need.FREE:
            for t, x in enumerate(rows[banks].tolist(), first):
                if x != CLOSED and x != r:
                    return (f"{name} row {r}: bank {t} has another row ({x}) open; "
                            f"precharge first")
        elif need is Need.CLOSED:
            for t, x in enumerate(rows[banks].tolist(), first):
                if x != CLOSED:
                    return f"{name} needs its banks precharged (bank {t} has row {x} open)"
        elif need is Need.OPEN and rule.targets is Targets.BANK:
            assert b is not None
            current = int(rows[b])
            if current == CLOSED:
                return f"{name}: bank {b} has no open row"
            if r is not None and r != current:
                return f"{name}: bank {b} has row {current} open, not {r}"
            if rule.partner and broadcast:
                partner = b ^ 1
                if partner >= self.device.banks:
                    return f"{name} under CFR BROADCAST = 1: bank {b} has no partner bank"
                if rows[partner] != current:
                    state = " (closed)" if rows[partner] == CLOSED else ""
                    return (f"{name} under CFR BROADCAST = 1 reads its vector from partner "
                            f"bank {partner}, but bank {partner} {_where(rows, partner)}"
                            f"{state}, not row {current}")
        elif need is Need.OPEN:
            every = rows[banks].tolist()
            row0 = every[0]
            if row0 == CLOSED or every.count(row0) != len(every):
                return f"{name} needs one row open in all banks; open rows {rows.tolist()}"
            if r is not None and r != row0:
                return f"{name}: row {row0} is open, not {r}"
            if rule.lut and row0 < AF_ROW_BASE:
                return f"{name} needs a LUT row ({AF_ROW_BASE} + AFM) open, not {row0}"
        return None

    def _operands(self, command: Command, rule: CommandRule, bank: object, row: object,
                  col: object) -> str | None:
        """Return what is wrong with the operands ``command`` takes (None if nothing)."""
        if self._plain(command, rule, bank, row, col):
            return None
        d = self.device
        name = command.name
        if rule.bank:
            b = _int(bank)
            if b is None or not 0 <= b < d.banks:
                return f"{name}: bank {_said(bank)} outside 0..{d.banks - 1}"
        if rule.row is Operand.REQUIRED and not legal_row(d, row):
            return (f"{name}: row {_said(row)} outside 0..{d.rows - 1} and the LUT rows "
                    f"{AF_ROW_BASE}..{AF_ROW_BASE + LUT_ROWS - 1}")
        if rule.row is Operand.OPTIONAL and row is not None and _int(row) is None:
            return f"{name}: row {row!r} is not an integer"
        if rule.columns is not None:
            limit = column_limit(d, command)
            c = _int(col)
            if c is None or not 0 <= c < limit:
                return f"{name}: column {_said(col)} outside 0..{limit - 1}"
        return None

    def _plain(self, command: Command, rule: CommandRule, bank: object, row: object,
               col: object) -> bool:
        """True when the operands ``command`` takes are plain ints in range (the common case,
        accepted without building a message); False sends them to the full checks."""
        d = self.device
        return (not rule.bank or type(bank) is int and 0 <= bank < d.banks) \
            and (rule.columns is None
                 or type(col) is int and 0 <= col < column_limit(d, command)) \
            and (row is None or type(row) is int) \
            and (rule.row is not Operand.REQUIRED or legal_row(d, row))

    def apply(self, command: Command, bank: int | None = None, row: int | None = None) -> None:
        """Change the state as ``command`` does (it must have passed :meth:`check`)."""
        action = RULES[command].action
        if action is Action.TOGGLE:
            self.reg_mode = not self.reg_mode
        elif action is not Action.NONE:
            value = int(row) if action is Action.OPEN else CLOSED  # type: ignore[arg-type]
            self.open_rows[self.targets(command, None if bank is None else int(bank))] = value


def consistent() -> list[str]:
    """Return every way :data:`RULES` disagrees with the command classes of the ISA."""
    out: list[str] = []
    scope_targets = {Scope.CHANNEL: (Targets.ALL, Targets.NONE),
                     Scope.BANKGROUP: (Targets.GROUP,),
                     Scope.BANK: (Targets.BANK,), Scope.ROW: (Targets.BANK,),
                     Scope.COLUMN: (Targets.BANK,)}
    for command in Command:
        rule = RULES[command]
        meta = COMMAND_META[command]
        facts = {
            "scope": rule.targets in scope_targets[COMMAND_SCOPE[command]],
            "opening": meta.opening == (rule.action is Action.OPEN),
            "closing": meta.closing == (rule.action is Action.CLOSE),
            "bank row": (command in BANK_ROW_COMMANDS)
            == (rule.targets is Targets.BANK and rule.need is Need.OPEN),
            "all rows": (command in ALL_ROWS_COMMANDS)
            == (rule.targets is Targets.ALL and rule.need is Need.OPEN),
            "register mode": (command in REG_MODE_COMMANDS) == (rule.mode is RegisterMode.REGISTER),
        }
        out += [f"{command.name}: {what}" for what, ok in facts.items() if not ok]
    return out
