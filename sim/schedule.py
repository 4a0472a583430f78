"""Timed DRAM command schedules: the record, and its text format.

A schedule is what a controller puts on the command bus: one :class:`TimedCommand` per issued
command, complete with the data it carries. As text, one command per line::

    cycle channel command [bank row col] [data=HHHH:...:HHHH] [mask=0xMMMM] [cfr=B,E,A] [src=N]

with ``-`` for a positional field that does not apply (``74 0 ACT16 - 0 -``,
``130 0 MAC16 - 0 3``, ``45 31 TMOD``). The ``key=value`` fields follow the positional ones, in
any order, each at most once, and are left out at their default, so a line without them is
what it always was:

``data=HHHH:...:HHHH``
    the 16 bfloat16 words the command writes, as exactly 16 words of 4 hex digits separated by
    ``:`` (lane 0 first, as the trace format's ``data=``); only on commands that write (WR, WRA,
    WRGB, WRA16, WRMAC16). Default: no payload (the RTL player then writes zeros; the
    functional replay, ``patton.sim.replay``, needs every write's payload).
``mask=0xMMMM``
    the write's lane mask, a non-zero 16-bit number (decimal or ``0x`` hex); only on commands
    that write. Default: all lanes.
``cfr=B,E,A``
    the configuration registers the command was issued under, by ``Cfr`` id (BROADCAST,
    EWMUL_BG, AFM), each in its ``CFR_RANGE``. Default: the reset values (``0,1,0``).
``src=N``
    position (0-based) in the program of the host instruction the command came from. Default:
    unknown.

Positional fields: ``cycle`` and ``channel`` always; ``bank`` on every command that names a
bank (``-`` on channel-wide ones); ``row`` on the commands that open a row (ACT, ACT4, ACT16:
``RULES[c].row`` is required); ``col`` on every command that addresses a column
(:data:`~patton.sim.protocol.COLUMN`) except a public ``R/W MEM`` line's RD and WR
(:data:`~patton.sim.protocol.UNADDRESSED`, column 0). Numbers are decimal or ``0x`` hex,
exactly (:func:`patton.sim.textfile.number`: no sign, no ``_``, no leading zeros).

A schedule is in cycle order: each line's cycle is at least the one before it (the cycle
model writes them so); a line whose cycle goes backwards is an error, not re-sorted. A ``#``
starts a comment, at the start of a line or after the fields (``45 31 TMOD  # to register
mode``); empty lines and comment lines are skipped. A file is UTF-8 text (a leading BOM is
skipped), ASCII outside comments, and :func:`read` refuses a file without a command. Every
problem is reported as ``file:line: reason`` by :class:`ScheduleError` (with ``file``,
``line`` and ``reason`` attributes); nothing is clamped.
"""

from __future__ import annotations

import gc
import os
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from patton.sim.device import AF_ROW_BASE, DEVICE, Device
from patton.sim.isa import CFR_RANGE, CFR_RESET, COMMAND_SCOPE, Cfr, Command, Scope
from patton.sim.protocol import COLUMN, PAYLOAD, RULES, UNADDRESSED, Operand
from patton.sim.textfile import (
    COMMENT_NOTE,
    FieldCountError,
    ReadError,
    atomic_sink,
    content,
    decimal,
    number,
    read_lines,
    shown,
)

if TYPE_CHECKING:
    from patton.sim.controller import Issue

__all__ = ["TimedCommand", "ScheduleError", "WRITES", "parse", "read", "format_line", "write",
           "dumps", "check_writable"]

#: Commands that never appear on a schedule (refresh is not modelled; SYNC/EOC stay in the
#: controller).
_NOT_ON_BUS = frozenset({Command.REFab, Command.REFpb, Command.SYNC, Command.EOC})
#: Commands that write data (and so may carry ``data=`` and ``mask=``): the protocol's.
WRITES = PAYLOAD
_WRITE_IDS = frozenset(int(c) for c in WRITES)
_LANES = DEVICE.lanes
#: CFR values at reset, by ``Cfr`` id (what an empty ``TimedCommand.cfr`` stands for).
_RESET = tuple(CFR_RESET[c] for c in Cfr)


class ScheduleError(ReadError):
    """A malformed schedule line; ``str()`` is ``file:line: reason``.

    ``file``, ``line`` (``None`` for a file that cannot be read or written) and ``reason``
    are attributes; :meth:`~patton.sim.textfile.ReadError.to_json` gives them as a dict.
    """


@dataclass(slots=True, eq=False)
class TimedCommand:
    """One command on one channel's command bus, with the data it carries.

    Invariants: ``bank`` is -1 for channel-scope commands; ``row`` and ``col`` are -1 where
    they do not apply. ``payload`` is None or a ``(16,)`` uint16 array (bfloat16 bit patterns)
    and is set only on a command that writes (:data:`WRITES`); it may be a view of the host
    instruction's data, not a copy. ``mask`` is None (all lanes) or a non-zero 16-bit lane
    mask, also only on writes. ``cfr`` is ``()`` (the reset values) or one value per ``Cfr``
    id. ``source`` is the position in the program of the host instruction, -1 if unknown.
    Equality compares every field but ``line``, payloads by value and ``()`` equal to the
    reset CFRs.
    """

    cycle: int  # controller clock (0.5 ns)
    channel: int  # channel index
    command: Command  # the command
    bank: int = -1  # bank index, -1 for channel-scope commands
    row: int = -1  # row address, -1 if none
    col: int = -1  # column address, -1 if none
    line: int = 0  # source line (0 if not read from a file); not compared
    payload: np.ndarray | None = None  # the 16 words it writes, None if none
    mask: int | None = None  # lane mask of a write, None = all lanes
    cfr: tuple[int, ...] = ()  # CFR values by Cfr id it was issued under; () = reset values
    source: int = -1  # position in the program of its host instruction, -1 if unknown

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TimedCommand):
            return NotImplemented
        if (self.cycle, self.channel, self.command, self.bank, self.row, self.col, self.mask,
                self.source) != (other.cycle, other.channel, other.command, other.bank,
                                 other.row, other.col, other.mask, other.source):
            return False
        if (self.cfr or _RESET) != (other.cfr or _RESET):
            return False
        a, b = self.payload, other.payload
        if a is None or b is None:
            return a is b
        return bool(np.array_equal(a, b))

    @classmethod
    def of(cls, issue: Issue, channel: int) -> TimedCommand:
        """Return the schedule entry of a controller issue on ``channel``."""
        return cls(issue.cycle, channel, issue.command, issue.bank, issue.row, issue.col, 0,
                   *_carried(issue))

    @classmethod
    def each(cls, issue: Issue, channels: Sequence[int]) -> list[TimedCommand]:
        """Return the entries of one issue on each of ``channels`` (data shared, not copied)."""
        payload, mask, cfr, source = _carried(issue)
        cycle, command, bank, row, col = (issue.cycle, issue.command, issue.bank, issue.row,
                                          issue.col)
        return [cls(cycle, ch, command, bank, row, col, 0, payload, mask, cfr, source)
                for ch in channels]


def _carried(issue: Issue) -> tuple[np.ndarray | None, int | None, tuple[int, ...], int]:
    """Return (payload, mask, cfr, source) of an issue, from the request it served."""
    req = issue.request
    if req is None:
        return None, None, (), -1
    if req.final == issue.command and req.final in _WRITE_IDS:
        words = req.ins.data
        if words is not None and words.size != _LANES:
            words = words[req.index * _LANES:(req.index + 1) * _LANES]
        return words, req.ins.mask, req.cfr, req.pos
    return None, None, req.cfr, req.pos


# -- reading ---------------------------------------------------------------------------------

_COMMANDS = {c.name: c for c in Command}
_DATA = re.compile(rf"[0-9a-fA-F]{{4}}(?::[0-9a-fA-F]{{4}}){{{_LANES - 1}}}")
_KEYS = ("data", "mask", "cfr", "src")
#: Commands whose bank field must be ``-`` (channel scope), by command. ``parse`` checks a
#: line in full (``_validate``) only when a quick look finds something that may be wrong.
_CHANNEL_WIDE = {c: COMMAND_SCOPE[c] == Scope.CHANNEL for c in Command}
_WRITE_NAMES = ", ".join(c.name for c in sorted(WRITES))
#: Commands that must name a row (they open it) and a column (they address one).
_NEEDS_ROW = frozenset(c for c in Command if RULES[c].row is Operand.REQUIRED)
_NEEDS_COL = frozenset(COLUMN - UNADDRESSED)
#: Cycles and ``src=`` positions are below this (64-bit signed, as the models count).
_LIMIT = 1 << 63


def _field(token: str, what: str) -> int:
    """A positional field: a number (:func:`~patton.sim.textfile.number`) or ``-`` (-1)."""
    return number(token, what, dash=True)


def _payload(text: str) -> np.ndarray:
    if not _DATA.fullmatch(text):
        words = text.split(":")
        if len(words) != _LANES:
            raise ValueError(f"data= has {len(words)} words, needs {_LANES}")
        bad = next(w for w in words if not re.fullmatch(r"[0-9a-fA-F]{4}", w))
        raise ValueError(f"data= word {bad!r} is not 4 hex digits")
    return np.frombuffer(bytes.fromhex(text.replace(":", "")), dtype=">u2").astype(np.uint16)


def _cfr(text: str) -> tuple[int, ...]:
    values = text.split(",")
    names = ",".join(c.name for c in Cfr)
    if len(values) != len(Cfr):
        raise ValueError(f"cfr= needs {len(Cfr)} values ({names}), got {len(values)}")
    out = []
    for c, token in zip(Cfr, values):
        value = decimal(token, f"cfr= {c.name} value")
        lo, hi = CFR_RANGE[c]
        if not lo <= value <= hi:
            raise ValueError(f"cfr= {c.name} value {value} out of range {lo}..{hi}")
        out.append(value)
    return tuple(out)


def _extend(cmd: TimedCommand, tokens: list[str], first: int, device: Device,
            payloads: dict[str, np.ndarray]) -> None:
    """Set the ``key=value`` fields of ``cmd`` from ``tokens[first:]``.

    ``payloads`` holds the arrays of the ``data=`` texts seen so far: commands with the same
    words share one array, as those of one issue on a group of channels do in the cycle model.
    """
    seen: set[str] = set()
    for token in tokens[first:]:
        key, eq, value = token.partition("=")
        if not eq:
            raise ValueError(f"positional field {token!r} after key=value fields")
        if key not in _KEYS:
            raise ValueError(f"unknown field {key!r} (known: {', '.join(_KEYS)})")
        if key in seen:
            raise ValueError(f"{key}= given twice")
        seen.add(key)
        if key in ("data", "mask") and cmd.command not in WRITES:
            raise ValueError(f"{key}= only on commands that write ({_WRITE_NAMES}), "
                             f"not {cmd.command.name}")
        if key == "data":
            payload = payloads.get(value)
            if payload is None:
                payload = payloads[value] = _payload(value)
            cmd.payload = payload
        elif key == "mask":
            mask = number(value, "mask=")
            if mask == 0 or mask >> device.lanes:
                raise ValueError(f"mask {value} must be a non-zero {device.lanes}-bit lane mask")
            cmd.mask = mask
        elif key == "cfr":
            cmd.cfr = _cfr(value)
        else:
            source = decimal(value, "src=")
            if source >= _LIMIT:
                raise ValueError(f"src={value} is too large (below 2^63)")
            cmd.source = source


def _validate(cmd: TimedCommand, device: Device) -> None:
    if cmd.command in _NOT_ON_BUS:
        raise ValueError(f"{cmd.command.name} is not a bus command")
    if cmd.channel >= device.channels:
        raise ValueError(f"channel {cmd.channel} out of range 0..{device.channels - 1}")
    scope = COMMAND_SCOPE[cmd.command]
    if scope == Scope.CHANNEL and cmd.bank != -1:
        raise ValueError(f"{cmd.command.name} addresses all banks; bank must be '-'")
    if scope >= Scope.BANK and cmd.bank == -1:
        raise ValueError(f"{cmd.command.name} needs a bank")
    if cmd.bank >= device.banks:
        raise ValueError(f"bank {cmd.bank} out of range 0..{device.banks - 1}")
    if cmd.row == -1 and cmd.command in _NEEDS_ROW:
        raise ValueError(f"{cmd.command.name} opens a row; row must be given, not '-'")
    if cmd.col == -1 and cmd.command in _NEEDS_COL:
        raise ValueError(f"{cmd.command.name} addresses a column; col must be given, not '-'")
    if cmd.row >= device.rows and not AF_ROW_BASE <= cmd.row < AF_ROW_BASE + 8:
        raise ValueError(f"row {cmd.row} out of range 0..{device.rows - 1} "
                         f"(or an AF LUT row {AF_ROW_BASE}+0..7)")
    if cmd.col >= device.columns:
        raise ValueError(f"column {cmd.col} out of range 0..{device.columns - 1}")


def parse(lines: Iterable[str], source: str = "<schedule>",
          device: Device = DEVICE) -> Iterator[TimedCommand]:
    """Yield the commands of a schedule text; raise :class:`ScheduleError` on a bad line.

    A line without ``cfr=`` gets the reset values spelled out (``(0, 1, 0)``). Lines must be
    in cycle order (see the module docstring). An empty schedule yields nothing (:func:`read`
    refuses one).
    """
    names = _COMMANDS
    channels, banks, columns, rows = device.channels, device.banks, device.columns, device.rows
    not_on_bus = _NOT_ON_BUS
    needs_row, needs_col = _NEEDS_ROW, _NEEDS_COL
    reset = _RESET
    limit = _LIMIT
    payloads: dict[str, np.ndarray] = {}
    last = 0  # cycle of the previous command
    last_line = 0

    def field(token: str, what: str) -> int:  # plain-decimal fast path, else _field's rules
        if token.isdecimal() and (token[0] != "0" or len(token) == 1):
            return int(token)  # ASCII: content() checked every non-ASCII line
        return _field(token, what)

    for line, text in enumerate(lines, start=1):
        try:
            body = content(text) if "#" in text or not text.isascii() else text
            tokens = body.split()
            if not tokens:
                continue
            n = first = len(tokens)
            if "=" in body:  # key=value fields start at the first token with '='
                first = 0
                while "=" not in tokens[first]:
                    first += 1
            if first == 6:
                bank = field(tokens[3], "bank")
                row = field(tokens[4], "row")
                col = field(tokens[5], "col")
            elif first == 3:
                bank = row = col = -1
            else:
                late = next((t for t in tokens[first:] if "=" not in t), None)
                if late is not None:
                    raise ValueError(f"positional field {late!r} after key=value fields")
                raise FieldCountError(f"expected 'cycle channel command [bank row col] "
                                      f"[key=value ...]', got {first} positional fields")
            command = names.get(tokens[2])
            if command is None:
                raise ValueError(f"unknown command {tokens[2]!r}")
            cycle = field(tokens[0], "cycle")
            channel = field(tokens[1], "channel")
            if cycle < 0 or channel < 0:
                raise ValueError("cycle and channel are required")
            if cycle < last:
                raise ValueError(f"cycle {cycle} is before cycle {last} of line {last_line}: "
                                 f"a schedule is in cycle order")
            if cycle >= limit:
                raise ValueError(f"cycle {cycle} is too large (below 2^63)")
            cmd = TimedCommand(cycle, channel, command, bank, row, col, line, None, None, reset)
            if first < n:
                _extend(cmd, tokens, first, device, payloads)
            if (command in not_on_bus or channel >= channels or bank >= banks
                    or col >= columns or row >= rows or (bank < 0) != _CHANNEL_WIDE[command]
                    or (row < 0 and command in needs_row) or (col < 0 and command in needs_col)):
                _validate(cmd, device)  # says what is wrong (or accepts an AF LUT row)
        except ValueError as error:
            note = COMMENT_NOTE if isinstance(error, FieldCountError) and "#" in text else ""
            raise ScheduleError(source, line, f"{error}{note}") from None
        last = cycle
        last_line = line
        yield cmd


def read(path: str | os.PathLike[str], device: Device = DEVICE, *,
         allow_empty: bool = False,
         progress: Callable[[int, int], None] | None = None) -> list[TimedCommand]:
    """Read a schedule file (see :func:`parse`), a line at a time
    (:func:`~patton.sim.textfile.read_lines`: at most :data:`~patton.sim.textfile.MAX_LINE`
    bytes a line; a gzip file is decompressed as it is read; ``-`` is standard input).

    ``progress(bytes_read, file_bytes)`` is called after each chunk the reader takes and at
    the end (a progress bar on a long file): of a gzip file, its compressed bytes;
    ``file_bytes`` is 0 when unknown (standard input).

    Raises:
        ScheduleError: as :func:`parse`; ``file: cannot read schedule: <reason>`` (missing
            file, a directory, no permission, a terminal as standard input; ``line`` None);
            ``file:line: not UTF-8 text``; ``file:line: not a valid gzip file: ...``;
            ``file:line: a line longer than ...``; and, unless ``allow_empty``,
            ``file:line: schedule is empty (no command lines)`` at its last line for a file
            without a command.
    """
    name = shown(path)
    counted = [0]

    def source() -> Iterator[str]:
        for counted[0], text in enumerate(read_lines(path, ScheduleError, "schedule",
                                                     progress=progress), start=1):
            yield text

    enabled = gc.isenabled()
    gc.disable()  # millions of new commands would make the collector rescan them over and over
    try:
        commands = list(parse(source(), name, device))
    finally:
        if enabled:
            gc.enable()
    if not commands and not allow_empty:
        raise ScheduleError(name, max(counted[0], 1), "schedule is empty (no command lines)")
    return commands


# -- writing ---------------------------------------------------------------------------------

_NAMES = [c.name for c in sorted(Command)]  # by command value
#: Blocks of lines joined per chunk when a schedule is written to a file.
_CHUNK = 4096


def _blocks(schedule: Iterable[TimedCommand]) -> Iterator[str]:
    """Yield the text of ``schedule`` in blocks of whole lines, each ending in a newline.

    A block is one run of commands that differ only in channel (one issue of a group of
    channels: the cycle model's schedules are mostly such runs): its ``command bank row col
    key=value`` tail is formatted once, each payload array once, and the run's lines are
    joined from cached channel prefixes, so a line costs a field comparison, not a format.
    """
    names = _NAMES
    payloads: dict[int, tuple[np.ndarray, str]] = {}  # id -> (the array, kept alive; text)
    cfrs: dict[tuple[int, ...], str] = {(): "", _RESET: ""}
    prefixes: dict[tuple[int, ...], list[str]] = {}  # channels of a run -> [" ch", ...]
    prev: tuple | None = None  # (cycle, command, bank, row, col, mask, cfr, source) of the run
    prev_payload: np.ndarray | None = None
    channels: list[int] = []
    tail_key: tuple | None = None
    tail = ""

    def block() -> str:
        nonlocal tail_key, tail
        assert prev is not None
        key = prev[1:]
        if key != tail_key or payloads.get(id(prev_payload), (None,))[0] is not prev_payload:
            tail_key = key
            command, bank, row, col, mask, cfr, source = key
            if bank < 0 and row < 0 and col < 0:
                tail = f" {names[command]}"
            else:
                tail = (f" {names[command]} {'-' if bank < 0 else bank} "
                        f"{'-' if row < 0 else row} {'-' if col < 0 else col}")
            if prev_payload is not None:
                known = payloads.get(id(prev_payload))
                if known is None or known[0] is not prev_payload:
                    known = payloads[id(prev_payload)] = (prev_payload, " data=" + np.asarray(
                        prev_payload, dtype=">u2").tobytes().hex(":", 2))
                tail += known[1]
            if mask is not None:
                tail += f" mask={mask:#06x}"
            text = cfrs.get(cfr)
            if text is None:
                text = cfrs[cfr] = " cfr=" + ",".join(map(str, cfr))
            tail += text
            if source >= 0:
                tail += f" src={source}"
        cycle = str(prev[0])
        if len(channels) == 1:
            return f"{cycle} {channels[0]}{tail}\n"
        run = tuple(channels)
        heads = prefixes.get(run)
        if heads is None:
            heads = prefixes[run] = [f" {ch}" for ch in run]
        return cycle + (tail + "\n" + cycle).join(heads) + tail + "\n"

    out: list[str] = []
    append = out.append
    for c in schedule:
        rest = (c.cycle, c.command, c.bank, c.row, c.col, c.mask, c.cfr, c.source)
        payload = c.payload
        if rest == prev and payload is prev_payload:
            channels.append(c.channel)
            continue
        if prev is not None:
            append(block())
            if len(out) >= _CHUNK:
                yield "".join(out)
                out.clear()
        prev, prev_payload, channels = rest, payload, [c.channel]
    if prev is not None:
        append(block())
    if out:
        yield "".join(out)


def _lines(schedule: Iterable[TimedCommand]) -> list[str]:
    """Return the text lines (no newline) of ``schedule``."""
    return "".join(_blocks(schedule)).splitlines()


def format_line(cmd: TimedCommand) -> str:
    """Return the text line of one command (``key=value`` fields only when not default)."""
    return _lines([cmd])[0]


def dumps(schedule: Iterable[TimedCommand]) -> str:
    """Return a schedule as text."""
    return "".join(_blocks(schedule))


def write(path: str | os.PathLike[str], schedule: Iterable[TimedCommand]) -> None:
    """Write a schedule file, in blocks (:func:`_blocks`), as ASCII text.

    Raises:
        ScheduleError: ``file: cannot write schedule: <reason>`` (``line`` None).
    """
    try:
        with atomic_sink(path) as sink:  # whole or absent, interrupted or not
            for text in _blocks(schedule):
                sink.write(text.encode("ascii"))
    except OSError as failure:
        raise ScheduleError(os.fspath(path), None,
                            f"cannot write schedule: {failure.strerror or failure}") from None


def check_writable(path: str | os.PathLike[str], what: str = "schedule") -> None:
    """Refuse, before any work, an output path that cannot be written.

    The path must not be a directory and its folder must exist and be writable (an existing
    file must be writable); nothing is created.

    Raises:
        ScheduleError: ``file: cannot write <what>: <reason>`` (``line`` None).
    """
    name = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(name))
    reason = None
    if os.path.isdir(name):
        reason = "Is a directory"
    elif not os.path.isdir(folder):
        reason = f"no folder {folder}"
    elif os.path.exists(name) and not os.access(name, os.W_OK):
        reason = "Permission denied"
    elif not os.path.exists(name) and not os.access(folder, os.W_OK | os.X_OK):
        reason = f"Permission denied (folder {folder})"
    if reason is not None:
        raise ScheduleError(name, None, f"cannot write {what}: {reason}")
