"""The instruction program of the project, and the values a program reads out.

:class:`Program` is *the* program type: every producer (the trace reader, the PATTON runtime,
the random-program generators) makes one and every executor (:mod:`patton.sim.executor`,
:mod:`patton.tb.executor`) runs one. It holds host instructions of the ISA
(:mod:`patton.sim.isa`) as columns, one NumPy array per instruction field plus one payload
array, so a program whose addresses are fixed (by the block placements) is built once and, per
step, only its payload and a few token-dependent fields change.

Iterating a program, or indexing it with an integer, gives :class:`~patton.sim.isa.Instruction`
objects: a *view* for tests and for the models' per-instruction code paths, not a second
currency. :meth:`Program.of` builds the columnar form from instructions.

:class:`Readout` is one value a program read out (RD_MAC, RD_AF, R MEM, R GPR). Every executor
returns read-outs in one canonical order (see :class:`Readout`), so the runtime's plans decode
any executor's results.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
from patton.sim.isa import Instruction, Opcode

__all__ = ["OPCODES", "OP_ID", "FIELDS", "HOST_FIELDS", "UNSET", "Program", "Readout", "make",
           "concat", "same", "zeros"]

#: Opcode of each ``op`` id.
OPCODES: tuple[Opcode, ...] = tuple(Opcode)
#: ``op`` id of each opcode.
OP_ID: dict[Opcode, int] = {op: i for i, op in enumerate(OPCODES)}
#: The integer fields every program stores (the ones the runtime emits), in array order.
FIELDS = ("opsize", "gpr0", "channel_mask", "bank", "row", "channel", "col", "mask")
#: Fields only host-side lines use (EWADD's gpr1, ``R/W GPR``, ``W CFR``); a program that has
#: none of them stores one broadcast :data:`UNSET` per field.
HOST_FIELDS = ("gpr1", "gpr", "cfr", "value")
#: Marks an unset (``None``) field.
UNSET = -1


def _ro(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


@dataclass(frozen=True, slots=True)
class Program:
    """A program of the shared ISA as arrays, one entry per instruction.

    Invariants: every field array, ``op``, ``start`` and ``size`` are int64 of one length
    ``n`` (possibly read-only broadcasts of one value); ``op`` indexes :data:`OPCODES`;
    :data:`UNSET` marks a ``None`` field (so every set field is non-negative); instruction
    ``i``'s payload is ``data[start[i]:start[i] + size[i]]`` and it has none when
    ``size[i] == 0``. Payloads may overlap (every WR_BIAS can point at one zero burst). The
    field arrays are read-only views and may be shared by several programs (a step's program
    reuses the addresses of the last); ``data`` belongs to this program. A producer that
    rewrites its arrays in place for a later program says so, with the lifetime of the ones it
    returns (:meth:`copy` to keep one). ``line`` (optional) is the 1-based trace line of each
    instruction, for error messages; the :data:`HOST_FIELDS` default to all unset.
    """

    op: np.ndarray  # opcode id per instruction
    opsize: np.ndarray  # columns (column instructions)
    gpr0: np.ndarray  # GPR id
    channel_mask: np.ndarray  # bit 31 - c selects channel c
    bank: np.ndarray  # bank index
    row: np.ndarray  # row address
    channel: np.ndarray  # channel index (R/W MEM)
    col: np.ndarray  # start column
    mask: np.ndarray  # element write mask
    start: np.ndarray  # payload offset into data
    size: np.ndarray  # payload words (0: no payload)
    data: np.ndarray  # uint16 payload words
    gpr1: np.ndarray | None = None  # second GPR id (EWADD)
    gpr: np.ndarray | None = None  # GPR id (R/W GPR)
    cfr: np.ndarray | None = None  # configuration register id (W CFR)
    value: np.ndarray | None = None  # configuration register value (W CFR)
    line: np.ndarray | None = field(default=None, compare=False)  # trace line, if read

    def __post_init__(self) -> None:
        for name in HOST_FIELDS:
            if getattr(self, name) is None:
                object.__setattr__(self, name, same(len(self.op), UNSET))

    def __len__(self) -> int:
        return len(self.op)

    def __iter__(self) -> Iterator[Instruction]:
        return iter(self.to_instructions())

    def __getitem__(self, index: int | slice) -> Instruction | Program:
        """Instruction ``index`` (a view), or the sub-program of a slice."""
        if isinstance(index, slice):
            return self.take(np.arange(len(self))[index])
        n = len(self)
        i = int(index)
        if not -n <= i < n:
            raise IndexError(f"instruction {index} of a {n}-instruction program")
        return self.take(np.array([i % n])).to_instructions()[0]

    def take(self, index: np.ndarray) -> Program:
        """Return the instructions at ``index`` (int array), payloads copied, in that order."""
        size = np.asarray(self.size)[index]
        start = np.asarray(self.start)[index]
        total = int(size.sum())
        offsets = np.concatenate(([0], np.cumsum(size)[:-1])).astype(np.int64)
        if total:
            words = np.repeat(start - offsets, size) + np.arange(total)
            data = self.data[words]
        else:
            data = np.zeros(0, dtype=np.uint16)
        arrays = {f: _ro(np.asarray(getattr(self, f))[index].astype(np.int64))
                  for f in ("op",) + FIELDS + HOST_FIELDS}
        line = None if self.line is None else _ro(np.asarray(self.line)[index])
        return Program(**arrays, start=_ro(offsets[:len(size)]), size=_ro(size.astype(np.int64)),
                       data=data, line=line)

    def with_data(self, data: np.ndarray) -> Program:
        """Return the same instructions over another payload array (same layout)."""
        return Program(self.op, self.opsize, self.gpr0, self.channel_mask, self.bank, self.row,
                       self.channel, self.col, self.mask, self.start, self.size, data,
                       self.gpr1, self.gpr, self.cfr, self.value, self.line)

    def copy(self) -> Program:
        """Return a program that owns copies of every array (one-value broadcasts stay)."""
        def own(a: np.ndarray | None) -> np.ndarray | None:
            return a if a is None or a.strides == (0,) else _ro(a.copy())

        names = ("op",) + FIELDS + ("start", "size")
        return Program(*(own(getattr(self, f)) for f in names), self.data.copy(),
                       *(own(getattr(self, f)) for f in HOST_FIELDS), own(self.line))

    def to_instructions(self) -> list[Instruction]:
        """Expand to instruction objects (payloads are views of :attr:`data`)."""
        def column(name: str) -> list[int | None]:
            a = getattr(self, name)
            if a.strides == (0,):  # one value for all (a broadcast)
                v = int(a[0]) if len(a) else UNSET
                return [None if v == UNSET else v] * len(a)
            o = a.astype(object)
            o[a == UNSET] = None
            return o.tolist()

        ops = [OPCODES[i] for i in self.op.tolist()]
        d = self.data
        data = [d[s:s + z] if z else None for s, z in zip(self.start.tolist(), self.size.tolist())]
        lines = [0] * len(ops) if self.line is None else self.line.tolist()
        # positional in Instruction's field order: opcode, opsize, gpr0, gpr1, channel_mask,
        # bank, row, channel, gpr, cfr, value, col, data, mask, line
        return [Instruction(*fields) for fields in zip(
            ops, column("opsize"), column("gpr0"), column("gpr1"), column("channel_mask"),
            column("bank"), column("row"), column("channel"), column("gpr"), column("cfr"),
            column("value"), column("col"), data, column("mask"), lines)]

    @classmethod
    def of(cls, instructions: Sequence[Instruction] | Program) -> Program:
        """Return the columnar form of ``instructions`` (payloads copied, in order)."""
        if isinstance(instructions, Program):
            return instructions
        names = FIELDS + HOST_FIELDS
        cols: dict[str, list[int]] = {f: [] for f in names}
        ops, sizes, chunks, lines = [], [], [], []
        for inst in instructions:
            ops.append(OP_ID[inst.opcode])
            for f in names:
                v = getattr(inst, f)
                cols[f].append(UNSET if v is None else v)
            d = inst.data
            sizes.append(0 if d is None else len(d))
            if d is not None:
                chunks.append(np.asarray(d, dtype=np.uint16))
            lines.append(inst.line)
        size = np.array(sizes, dtype=np.int64)
        start = np.concatenate(([0], np.cumsum(size)[:-1])).astype(np.int64)
        data = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.uint16)
        arrays = {f: _ro(np.array(v, dtype=np.int64)) for f, v in cols.items()}
        line = _ro(np.array(lines, dtype=np.int64)) if any(lines) else None
        return cls(_ro(np.array(ops, dtype=np.int64)), **arrays,
                   start=_ro(start[:len(size)]), size=_ro(size), data=data, line=line)


@dataclass(frozen=True, slots=True)
class Readout:
    """One value the host received.

    ``channel`` is ``None`` for an ``R GPR`` line; ``data`` holds 16 bfloat16 bit patterns (one
    column for RD, one value per bank for RDMAC16/RDAF16). ``index`` is the position in its
    program of the instruction that read it (-1 when not known).

    Canonical order (every executor returns this): by instruction, then by column of the
    instruction, then by channel in the order :meth:`Instruction.channels` sends to them.
    """

    channel: int | None  # channel the data came from
    opcode: Opcode  # instruction that read it
    data: np.ndarray = field(compare=False)  # (16,) uint16
    index: int = field(default=-1, compare=False)  # instruction position in its program


def make(op: Opcode, n: int, data: np.ndarray, start: np.ndarray | int = 0,
         size: np.ndarray | int = 0, **fields: np.ndarray | int) -> Program:
    """Return ``n`` instructions of one opcode; each field an array of ``n`` or one value.

    Fields not given are unset; ``start`` and ``size`` address ``data`` as in :class:`Program`.
    A field given as one value is a read-only broadcast of it (no per-instruction storage).
    """
    unknown = set(fields) - set(FIELDS) - set(HOST_FIELDS)
    if unknown:
        raise ValueError(f"unknown fields {sorted(unknown)}")

    def col(v: np.ndarray | int) -> np.ndarray:
        if isinstance(v, (int, np.integer)):  # one value stored once (a read-only view)
            return same(n, int(v))
        a = np.empty(n, dtype=np.int64)
        a[:] = v
        return _ro(a)

    arrays = {f: col(fields.get(f, UNSET)) for f in FIELDS + HOST_FIELDS}
    return Program(col(OP_ID[op]), **arrays, start=col(start), size=col(size), data=data)


@lru_cache(maxsize=1024)
def same(n: int, value: int) -> np.ndarray:
    """Return ``n`` copies of ``value`` as a read-only int64 array that stores one (cached)."""
    return np.broadcast_to(np.int64(value), (n,))


@lru_cache(maxsize=256)
def zeros(n: int) -> np.ndarray:
    """Return ``n`` read-only uint16 zeros that store one (cached, like :func:`same`: a
    ``broadcast_to`` costs about 4 µs)."""
    return np.broadcast_to(np.uint16(0), (n,))


@lru_cache(maxsize=1)
def _empty() -> Program:
    return make(Opcode.EOC, 0, _ro(np.zeros(0, dtype=np.uint16)))


def concat(programs: Sequence[Program]) -> Program:
    """Return the programs one after another (payloads concatenated, offsets shifted)."""
    if len(programs) == 1:
        return programs[0]
    if not programs:
        return _empty()
    shift = np.cumsum([0] + [len(p.data) for p in programs[:-1]])
    arrays = {f: _ro(np.concatenate([getattr(p, f) for p in programs]))
              for f in ("op",) + FIELDS + HOST_FIELDS + ("size",)}
    start = np.concatenate([p.start + s for p, s in zip(programs, shift.tolist())])
    line = None
    if any(p.line is not None for p in programs):
        line = _ro(np.concatenate([np.zeros(len(p), np.int64) if p.line is None else p.line
                                   for p in programs]))
    return Program(**arrays, start=_ro(start), data=np.concatenate([p.data for p in programs]),
                   line=line)
