"""Text traces of host instructions: the public AiM simulator's format, plus our extensions.

One instruction per line, tokens separated by whitespace (a line without ``=`` may also use
commas, as the public simulator's comma delimiter allows). A ``#`` starts a comment, at the
start of a line or after the fields (``AiM EOC  # done``); empty lines and comment lines are
skipped. Numbers are decimal or ``0x`` hexadecimal, exactly: no sign, no ``_``, no leading
zeros on decimals (:func:`patton.sim.textfile.number`). A file is UTF-8 text (a leading BOM is
skipped), ASCII outside comments.

``AiM <OPCODE> <fields...> [col=N] [data=HHHH:HHHH:...] [mask=0xMMMM]``
    ``OPCODE`` with or without the ``ISR_`` prefix; the positional fields are exactly those of
    ``OPCODE_INFO[opcode].fields``, in the order opsize, gpr0, gpr1, channel_mask, bank, row.
    The ``key=value`` tokens are our extensions (start column, bfloat16 payload as hex words
    of 1 to 4 digits separated by ``:``, 16-bit lane mask); the public simulator rejects them,
    so a trace without them stays readable by it.
``R MEM <channel> <bank> <row>`` / ``W MEM ...``, ``R GPR <id>`` / ``W GPR <id>``,
``W CFR <id> <value>``
    Host-side lines. ``channel`` is a channel *index* here, not a mask.

The last instruction must be ``AiM EOC``. Every problem is reported as ``file:line: reason`` by
:class:`TraceError` (with ``file``, ``line`` and ``reason`` attributes); nothing out of range is
clamped.

A column instruction whose columns run past the row (``opsize`` above 64, as CENT's rotary
embedding writes ``AiM EWMUL 256 ...``) is read as the public simulator reads it: accepted,
with a :class:`TraceNote` saying what the models do with it (its commands stay in the open row;
the bus column wraps, :func:`patton.sim.protocol.bus_column`). ``strict=True`` refuses it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np
from patton.sim.device import DEVICE, Device
from patton.sim.isa import CFR_RANGE, MASK_BITS, Cfr, Field, Instruction, Opcode
from patton.sim.program import Program
from patton.sim.textfile import (
    COMMENT_NOTE,
    FieldCountError,
    ReadError,
    content,
    number,
    read_lines,
    shown,
    write_text,
)

__all__ = ["TraceError", "TraceNote", "parse", "read", "format_line", "write", "dumps",
           "validate"]


class TraceError(ReadError):
    """A malformed or out-of-range trace line; ``str()`` is ``file:line: reason``.

    ``file``, ``line`` (``None`` for a file that cannot be read or written) and ``reason``
    are attributes; :meth:`~patton.sim.textfile.ReadError.to_json` gives them as a dict.
    """


@dataclass(frozen=True, slots=True)
class TraceNote:
    """A line the public reading accepts and the strict one refuses; ``str()`` is
    ``file:line: reason``."""

    file: str
    line: int
    reason: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.reason}"


_AIM_OPCODES = {op.value: op for op in Opcode if op.is_aim}
_HOST = {("R", "MEM"): Opcode.RD_MEM, ("W", "MEM"): Opcode.WR_MEM,
         ("R", "GPR"): Opcode.RD_GPR, ("W", "GPR"): Opcode.WR_GPR, ("W", "CFR"): Opcode.WR_CFR}
_FIELD_ATTR = {Field.OPSIZE: "opsize", Field.GPR0: "gpr0", Field.GPR1: "gpr1",
               Field.CHANNEL_MASK: "channel_mask", Field.BANK: "bank", Field.ROW: "row"}


_number = number
_HEX_WORD = re.compile(r"[0-9a-fA-F]+")
#: Largest value of a field without a device range (GPR ids, EWADD's opsize, CFR values).
FIELD_MAX = (1 << 31) - 1


def _payload(text: str) -> np.ndarray:
    words = text.split(":")
    if not all(_HEX_WORD.fullmatch(w) for w in words):
        raise ValueError(f"data={text!r}: words must be hex separated by ':'")
    values = [int(w, 16) for w in words]
    if any(v > 0xFFFF for v in values):
        raise ValueError(f"data={text!r}: every word must fit in 16 bits")
    return np.array(values, dtype=np.uint16)


def _tokens(text: str) -> list[str]:
    if "=" not in text and "," in text:
        text = text.replace(",", " ")
    return text.split()


def _parse_line(tokens: list[str]) -> Instruction:
    head = tokens[0]
    if head == "AiM":
        if len(tokens) < 2:
            raise ValueError("'AiM' without an opcode")
        name = tokens[1].removeprefix("ISR_")
        if name not in _AIM_OPCODES:
            raise ValueError(f"unknown AiM opcode {tokens[1]!r}")
        opcode = _AIM_OPCODES[name]
        rest = tokens[2:]
        positional = [t for t in rest if "=" not in t]
        extensions = [t for t in rest if "=" in t]
        if rest[:len(positional)] != positional:
            raise ValueError("positional fields must come before key=value extensions")
        fields = opcode.info.fields
        if len(positional) != len(fields):
            names = ", ".join(f.value for f in fields) or "none"
            raise FieldCountError(f"AiM {name} takes {len(fields)} field(s) ({names}), "
                             f"got {len(positional)}")
        ins = Instruction(opcode)
        _once(tokens)
        for f, token in zip(fields, positional):
            setattr(ins, _FIELD_ATTR[f], _number(token, f.value))
        for token in extensions:
            key, _, value = token.partition("=")
            if key == "col":
                ins.col = _number(value, "col")
            elif key == "mask":
                ins.mask = _number(value, "mask")
            elif key == "data":
                ins.data = _payload(value)
            else:
                raise ValueError(f"unknown extension {key!r} (known: col, data, mask)")
        return ins
    if head in ("R", "W"):
        if len(tokens) < 2 or (head, tokens[1]) not in _HOST:
            raise ValueError(f"unknown host line {' '.join(tokens[:2])!r} "
                             "(known: R/W MEM, R/W GPR, W CFR)")
        opcode = _HOST[(head, tokens[1])]
        positional = [t for t in tokens[2:] if "=" not in t]
        extensions = [t for t in tokens[2:] if "=" in t]
        ins = Instruction(opcode)
        if opcode in (Opcode.RD_MEM, Opcode.WR_MEM):
            names = ("channel", "bank", "row")
        elif opcode == Opcode.WR_CFR:
            names = ("cfr", "value")
        else:
            names = ("gpr",)
        if len(positional) != len(names):
            raise FieldCountError(f"{head} {tokens[1]} takes {len(names)} field(s) "
                             f"({', '.join(names)}), got {len(positional)}")
        _once(tokens)
        for attr, token in zip(names, positional):
            setattr(ins, attr, _number(token, attr))
        for token in extensions:
            key, _, value = token.partition("=")
            info = opcode.info
            if key == "col" and info.addressed:
                ins.col = _number(value, "col")
            elif key == "mask" and info.maskable:
                ins.mask = _number(value, "mask")
            elif key == "data" and info.payload is not None:
                ins.data = _payload(value)
            else:
                raise ValueError(f"extension {key!r} is not allowed on {head} {tokens[1]}")
        return ins
    raise ValueError(f"line must start with 'AiM', 'R' or 'W', not {head!r}")


def _once(tokens: list[str]) -> None:
    """Raise ValueError if a ``key=`` extension appears twice among a line's ``tokens``,
    naming the key and both fields (1-based; the last would otherwise silently win)."""
    first: dict[str, int] = {}
    for i, token in enumerate(tokens, start=1):
        key, eq, _ = token.partition("=")
        if not eq:
            continue
        if key in first:
            raise ValueError(f"{key}= given twice (fields {first[key]} and {i})")
        first[key] = i


def validate(ins: Instruction, device: Device = DEVICE, strict: bool = False) -> str | None:
    """Check an instruction's fields against the device; raise ``ValueError`` naming the field.

    Returns None, or (unless ``strict``, which raises instead) the note for a column
    instruction whose columns run past the row or the global buffer: the public simulator
    accepts it, and so do the models (``docs/isa.md``).
    """
    op = ins.opcode
    if op == Opcode.WR_AFLUT:
        raise ValueError("AiM WR_AFLUT is not supported (the public simulator rejects it too)")
    if ins.channel_mask is not None:
        m = ins.channel_mask
        if m == 0 or m >> MASK_BITS:
            raise ValueError(f"channel_mask {m:#x} must be a non-zero 32-bit mask")
        lowest = MASK_BITS - device.channels  # bits below this select channels >= device.channels
        if m & ((1 << lowest) - 1):
            raise ValueError(f"channel_mask {m:#x} selects channels beyond the device's "
                             f"{device.channels}")
        if op.info.one_channel and m.bit_count() != 1:
            raise ValueError(f"{op.value} needs a channel_mask naming exactly one channel, "
                             f"got {m:#x}")
    if ins.channel is not None and ins.channel >= device.channels:
        raise ValueError(f"channel {ins.channel} out of range 0..{device.channels - 1}")
    if ins.bank is not None and ins.bank >= device.banks:
        raise ValueError(f"bank {ins.bank} out of range 0..{device.banks - 1}")
    if ins.row is not None and ins.row >= device.rows:
        raise ValueError(f"row {ins.row} out of range 0..{device.rows - 1}")
    if ins.opsize is not None and ins.opsize == 0:
        raise ValueError("opsize must be at least 1")
    for name in ("opsize", "gpr0", "gpr1", "gpr", "value", "col", "mask"):
        v = getattr(ins, name)
        if v is not None and v > FIELD_MAX:
            raise ValueError(f"{name} {v} is too large (at most {FIELD_MAX})")
    info = op.info
    note = None
    if ins.col is not None and not info.addressed:
        raise ValueError(f"col= is not allowed on {op.value}")
    if info.addressed:
        limit = device.gb_columns if op == Opcode.WR_GB else device.columns
        what = "global buffer columns" if op == Opcode.WR_GB else "columns per row"
        end = ins.start_col + ins.columns
        if ins.start_col >= limit:
            raise ValueError(f"col={ins.start_col} is past the {limit} {what}")
        if end > limit:
            wide = (f"opsize {ins.columns} exceeds the {limit} {what}" if ins.columns > limit
                    else f"columns {ins.start_col}..{end - 1} exceed the {limit} {what}")
            if strict:
                raise ValueError(wide)
            note = (f"{wide}: accepted as the public simulator accepts it, its {ins.columns} "
                    f"{op.info.final.name} commands in one open row; column c addresses "
                    f"c mod {limit} (--strict refuses it)")
    if op == Opcode.WR_CFR:
        assert ins.cfr is not None and ins.value is not None
        if ins.cfr not in iter(Cfr):
            raise ValueError(f"CFR id {ins.cfr} unknown (0 BROADCAST, 1 EWMUL_BG, 2 AFM)")
        lo, hi = CFR_RANGE[Cfr(ins.cfr)]
        if not lo <= ins.value <= hi:
            raise ValueError(f"CFR {Cfr(ins.cfr).name} value {ins.value} out of range {lo}..{hi}")
    if ins.mask is not None:
        if not info.maskable:
            raise ValueError(f"mask= is not allowed on {op.value}")
        if ins.mask >> device.lanes or ins.mask == 0:
            raise ValueError(f"mask {ins.mask:#x} must be a non-zero {device.lanes}-bit lane mask")
    if ins.data is not None:
        if info.payload is None:
            raise ValueError(f"data= is not allowed on {op.value}")
        words = info.payload_words(ins.columns, device.lanes)
        if ins.data.shape != (words,):
            raise ValueError(f"data= has {ins.data.size} words, {op.value} needs "
                             f"{words} ({words // device.lanes} x {device.lanes})")
    return note


def parse(lines: Iterable[str], source: str = "<trace>", device: Device = DEVICE,
          require_eoc: bool = True, *, strict: bool = False,
          notes: list[TraceNote] | None = None) -> Iterator[Instruction]:
    """Yield the instructions of a trace, validated against ``device``.

    A line accepted under the public reading but refused by the strict one (:func:`validate`)
    is appended to ``notes`` as a :class:`TraceNote`; ``strict`` refuses it instead.

    Raises:
        TraceError: on the first malformed or out-of-range line, or when the trace does not end
            with ``AiM EOC`` (``require_eoc``) or has instructions after it.
    """
    seen_eoc = 0
    last = 0
    for line, text in enumerate(lines, start=1):
        last = line
        try:
            tokens = _tokens(content(text))
            if not tokens:
                continue
            if seen_eoc:
                raise ValueError(f"instruction after AiM EOC (line {seen_eoc})")
            ins = _parse_line(tokens)
            note = validate(ins, device, strict)
        except ValueError as error:
            note = COMMENT_NOTE if isinstance(error, FieldCountError) and "#" in text else ""
            raise TraceError(source, line, f"{error}{note}") from None
        ins.line = line
        if note is not None and notes is not None:
            notes.append(TraceNote(source, line, note))
        if ins.opcode == Opcode.EOC:
            seen_eoc = line
        yield ins
    if require_eoc and not seen_eoc:
        raise TraceError(source, max(last, 1), "trace ends without AiM EOC")


def read(path: str | os.PathLike[str], device: Device = DEVICE,
         require_eoc: bool = True, *, strict: bool = False,
         notes: list[TraceNote] | None = None) -> Program:
    """Read and validate a trace file into a :class:`~patton.sim.program.Program`.

    See :func:`parse` (``strict``, ``notes``); the program's ``line`` holds each
    instruction's line in the file. A gzip file is decompressed as it is read, and ``-`` is
    standard input (:func:`~patton.sim.textfile.read_lines`).

    Raises:
        TraceError: as :func:`parse`; also ``file: cannot read trace: <reason>`` (missing
            file, a directory, no permission, a terminal as standard input; ``line`` None),
            ``file:line: not UTF-8 text`` and ``file:line: not a valid gzip file: ...``.
    """
    source = read_lines(path, TraceError, "trace")
    return Program.of(list(parse(source, shown(path), device, require_eoc, strict=strict,
                                 notes=notes)))


def format_line(ins: Instruction) -> str:
    """Return the trace line for one instruction (extensions only when set)."""
    op = ins.opcode
    if op.is_aim:
        parts = ["AiM", op.value]
        for f in op.info.fields:
            value = getattr(ins, _FIELD_ATTR[f])
            parts.append(f"{value:#010x}" if f == Field.CHANNEL_MASK else str(value))
    elif op in (Opcode.RD_MEM, Opcode.WR_MEM):
        parts = [op.value, str(ins.channel), str(ins.bank), str(ins.row)]
    elif op == Opcode.WR_CFR:
        parts = [op.value, str(ins.cfr), str(ins.value)]
    else:
        parts = [op.value, str(ins.gpr)]
    if ins.col is not None:
        parts.append(f"col={ins.col}")
    if ins.mask is not None:
        parts.append(f"mask={ins.mask:#06x}")
    if ins.data is not None:
        parts.append("data=" + ":".join(f"{int(w):04x}" for w in ins.data))
    return " ".join(parts)


def dumps(program: Program | Iterable[Instruction]) -> str:
    """Return a whole trace as text (a :class:`Program` or instructions)."""
    return "".join(format_line(ins) + "\n" for ins in program)


def write(path: str | os.PathLike[str], program: Program | Iterable[Instruction]) -> None:
    """Write a trace file.

    Raises:
        TraceError: ``file: cannot write trace: <reason>`` (``line`` None).
    """
    write_text(path, dumps(program), TraceError, "trace")
