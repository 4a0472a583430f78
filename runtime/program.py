"""Columnar programs: one NumPy array per instruction field, plus one payload array.

A list of :class:`~patton.sim.isa.Instruction` objects costs about a microsecond per 32 B
burst to build, far more than the device takes to execute it. A :class:`Program` holds the
same instructions as arrays, so a program whose addresses are fixed (by the block placements)
is built once and, per step, only its payload (and the few token-dependent fields) changes.
:meth:`Program.to_instructions` expands it to exactly the instruction list the models and the
trace writer consume.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from patton.sim.isa import Instruction, Opcode

__all__ = ["OPCODES", "OP_ID", "FIELDS", "UNSET", "Program", "make", "concat", "same", "zeros"]

#: Opcode of each ``op`` id.
OPCODES: tuple[Opcode, ...] = tuple(Opcode)
#: ``op`` id of each opcode.
OP_ID: dict[Opcode, int] = {op: i for i, op in enumerate(OPCODES)}
#: The integer fields a program stores (the ones the runtime emits), in array order.
FIELDS = ("opsize", "gpr0", "channel_mask", "bank", "row", "channel", "col", "mask")
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
    ``size[i] == 0``. Payloads may overlap (every WR_BIAS can point at one zero burst). The field arrays are read-only
    views and may be shared by several programs (a step's program reuses the addresses of the
    last); ``data`` belongs to this program. A producer that rewrites its arrays in place for a
    later program says so, with the lifetime of the ones it returns (:meth:`copy` to keep one).
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

    def __len__(self) -> int:
        return len(self.op)

    def with_data(self, data: np.ndarray) -> Program:
        """Return the same instructions over another payload array (same layout)."""
        return Program(self.op, self.opsize, self.gpr0, self.channel_mask, self.bank, self.row,
                       self.channel, self.col, self.mask, self.start, self.size, data)

    def copy(self) -> Program:
        """Return a program that owns copies of every array (one-value broadcasts stay)."""
        def own(a: np.ndarray) -> np.ndarray:
            return a if a.strides == (0,) else _ro(a.copy())

        return Program(*(own(getattr(self, f)) for f in ("op",) + FIELDS + ("start", "size")),
                       self.data.copy())

    def to_instructions(self) -> list[Instruction]:
        """Expand to instruction objects (payloads are views of :attr:`data`)."""
        cols = []
        for f in FIELDS:
            a = getattr(self, f)
            o = a.astype(object)
            o[a == UNSET] = None
            cols.append(o.tolist())
        opsize, gpr0, cmask, bank, row, channel, col, mask = cols
        ops = [OPCODES[i] for i in self.op.tolist()]
        d = self.data
        data = [d[s:s + z] if z else None for s, z in zip(self.start.tolist(), self.size.tolist())]
        return [Instruction(op, opsize=a, gpr0=b, channel_mask=c, bank=e, row=r, channel=h,
                            col=k, data=x, mask=m)
                for op, a, b, c, e, r, h, k, x, m
                in zip(ops, opsize, gpr0, cmask, bank, row, channel, col, data, mask)]

    @classmethod
    def of(cls, instructions: Sequence[Instruction]) -> Program:
        """Return the columnar form of ``instructions`` (payloads copied, in order).

        Raises:
            ValueError: an instruction sets a field a program does not store
                (``gpr1``, ``gpr``, ``cfr``, ``value``).
        """
        cols: dict[str, list[int]] = {f: [] for f in FIELDS}
        ops, sizes, chunks = [], [], []
        for inst in instructions:
            if (inst.gpr1, inst.gpr, inst.cfr, inst.value) != (None, None, None, None):
                raise ValueError(f"{inst.opcode} sets gpr1/gpr/cfr/value, not storable")
            ops.append(OP_ID[inst.opcode])
            for f in FIELDS:
                v = getattr(inst, f)
                cols[f].append(UNSET if v is None else v)
            d = inst.data
            sizes.append(0 if d is None else len(d))
            if d is not None:
                chunks.append(np.asarray(d, dtype=np.uint16))
        size = np.array(sizes, dtype=np.int64)
        start = np.concatenate(([0], np.cumsum(size)[:-1])).astype(np.int64)
        data = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.uint16)
        arrays = {f: _ro(np.array(v, dtype=np.int64)) for f, v in cols.items()}
        return cls(_ro(np.array(ops, dtype=np.int64)), **arrays,
                   start=_ro(start[:len(size)]), size=_ro(size), data=data)


def make(op: Opcode, n: int, data: np.ndarray, start: np.ndarray | int = 0,
         size: np.ndarray | int = 0, **fields: np.ndarray | int) -> Program:
    """Return ``n`` instructions of one opcode; each field an array of ``n`` or one value.

    Fields not given are unset; ``start`` and ``size`` address ``data`` as in :class:`Program`.
    A field given as one value is a read-only broadcast of it (no per-instruction storage).
    """
    unknown = set(fields) - set(FIELDS)
    if unknown:
        raise ValueError(f"unknown fields {sorted(unknown)}")

    def col(v: np.ndarray | int) -> np.ndarray:
        if isinstance(v, (int, np.integer)):  # one value stored once (a read-only view)
            return same(n, int(v))
        a = np.empty(n, dtype=np.int64)
        a[:] = v
        return _ro(a)

    arrays = {f: col(fields.get(f, UNSET)) for f in FIELDS}
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
              for f in ("op",) + FIELDS + ("size",)}
    start = np.concatenate([p.start + s for p, s in zip(programs, shift.tolist())])
    return Program(**arrays, start=_ro(start), data=np.concatenate([p.data for p in programs]))
