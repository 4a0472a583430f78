"""The cycle model's compiled kernel: build on first use, load with ctypes, run a program.

``native/cycle_kernel.c`` restates :mod:`patton.sim.controller` and the DMA of
:mod:`patton.sim.cycle_model` over flat arrays; it includes ``native/cycle_decode.c`` (a
program decoded as :class:`Decoded` decodes it) and ``native/cycle_memo.c`` (the exact reuse
of segments of runs, :class:`Memo`, and the cost cache's keys). This module is their only
door. It compiles them with the C compiler (``$CC``, else ``cc``) into ``build/native/``
(``$PATTON_BUILD`` overrides ``build/``; an installed package, outside a checkout, builds under
``~/.cache/patton``), keyed by the sources' hash, so a changed kernel is
rebuilt and an unchanged one loads in milliseconds. No Python headers are needed: the kernel
is a plain shared library and every fact it uses (timing rules, latencies, command classes,
device organisation, the per-op facts, the decoded program) is passed in as arrays built
here from the one definition of each.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from patton.sim.device import AF_ROW_BASE, Device
from patton.sim.isa import (
    ALL_ROWS_COMMANDS,
    BANK_ROW_COMMANDS,
    COMMAND_META,
    COMMAND_SCOPE,
    MASK_BITS,
    Cfr,
    Command,
    Opcode,
    Scope,
)
from patton.sim.program import OP_ID, OPCODES, UNSET, Program
from patton.sim.protocol import column_limits
from patton.sim.timing import TimingTable

__all__ = ["KernelError", "KernelRun", "Decoded", "Memo", "Trace", "run", "decode",
           "program_key", "library", "BUILD_ROOT", "FRONTENDS"]

SOURCE = Path(__file__).resolve().parent / "native" / "cycle_kernel.c"
#: Every file the kernel is built from (SOURCE includes the others).
SOURCES = (SOURCE, SOURCE.with_name("cycle_decode.c"), SOURCE.with_name("cycle_memo.c"))


def _build_root() -> Path:
    """``$PATTON_BUILD``; else ``build/`` of the source checkout this module is in (a
    ``pyproject.toml`` beside the package's folders); else, in an installed package,
    ``$XDG_CACHE_HOME/patton`` (``~/.cache/patton``), never the installation itself."""
    if os.environ.get("PATTON_BUILD"):
        return Path(os.environ["PATTON_BUILD"])
    checkout = Path(__file__).resolve().parents[1]
    if (checkout / "pyproject.toml").is_file():
        return checkout / "build"
    cache = os.environ.get("XDG_CACHE_HOME", "")  # the XDG rule: a relative one is ignored
    return (Path(cache) if os.path.isabs(cache) else Path.home() / ".cache") / "patton"


#: Build outputs (git-ignored), shared with the Verilator builds of :mod:`patton.tb`.
BUILD_ROOT = _build_root()
#: Cycles without any change after which a run is reported stalled (no legal program waits
#: more than a few hundred cycles for a timing rule or a completion).
STALL_LIMIT = 1 << 20
#: With a memo, the shared front end's memo points fall every this many instructions besides
#: those after blocking instructions (:class:`Memo`): long runs of instructions without one
#: (token writes) are cut into segments of this length.
MEMO_STRIDE = 64
#: Bytes of stored segments a :class:`Memo` keeps by default before it starts over.
MEMO_BUDGET = 1 << 30
#: Where a traced run takes its checkpoints (:class:`Trace`), as shares of its instructions:
#: close together at first, where two runs of a program from different rows meet (after the
#: first row each bank opens), since each costs a copy of the whole state.
CHECKPOINTS = (1 / 64, 1 / 32, 1 / 16, 1 / 8, 1 / 4, 1 / 2)

_OP_NONE, _OP_CFR, _OP_SYNC, _OP_DRAM = range(4)
#: The kernel's front ends, by the index it takes (``CycleModel(frontend=...)``).
FRONTENDS = ("shared", "per_channel")
_KIND_AIM, _KIND_READ, _KIND_WRITE = range(3)
_CONVERGED = 1
_ERRORS = {-1: "out of memory", -2: "stalled: no controller can make progress"}


class KernelError(RuntimeError):
    """The kernel could not be built or loaded, or a run failed inside it."""


_i64p = ctypes.POINTER(ctypes.c_int64)
_u64p = ctypes.POINTER(ctypes.c_uint64)


class _Config(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int64) for n in
                ("channels", "banks", "banks_per_group", "bankgroups", "commands")] + \
               [(n, _i64p) for n in ("after_start", "after_follow", "after_gap", "latency",
                                     "closing", "opening", "channel_scoped", "bank_preq",
                                     "all_rows_preq", "col_limit")] + \
               [(n, ctypes.c_int64) for n in ("act", "pre", "prea", "act16", "tmod", "wra16",
                                             "eoc", "record", "drain", "stall_limit",
                                             "frontend", "memo_stride")]


class _Program(ctypes.Structure):
    _fields_ = [("n", ctypes.c_int64)] + \
               [(n, _i64p) for n in ("op_class", "final", "kind", "reg_mode", "blocking",
                                     "reader")] + \
               [("targets", _u64p)] + \
               [(n, _i64p) for n in ("bank", "row", "first_col", "columns")]


class _Start(ctypes.Structure):
    _fields_ = [("groups", ctypes.c_int64), ("members", _u64p), ("open_row", _i64p),
                ("reg_mode", _i64p)]


class _Trace(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int64) for n in ("mode", "cap")] + [("at_head", _i64p),
                                                                 ("n", ctypes.c_int64)] + \
               [(n, _i64p) for n in ("cycle", "index", "counts", "stats", "offset")] + \
               [("state", ctypes.c_void_p), ("state_cap", ctypes.c_int64),
                ("matched", ctypes.c_int64), ("at", ctypes.c_int64),
                ("now_counts", _i64p), ("now_stats", _i64p)]


RECORD_FIELDS = ("cycle", "members", "command", "bank", "row", "col", "pos", "index", "final")


class _Result(ctypes.Structure):
    _fields_ = [("cycles", ctypes.c_int64), ("retired", ctypes.c_int64),
                ("controllers", ctypes.c_int64), ("members", _u64p), ("counts", _i64p),
                ("stats", _i64p), ("open_row", _i64p), ("reg_mode", _i64p),
                ("records", ctypes.c_void_p), ("n_records", ctypes.c_int64)]


_PROGRESS = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64)
_lock = threading.Lock()
_library: ctypes.CDLL | None = None


def _compile(target: Path) -> None:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise KernelError("no C compiler found (set CC, or install cc/gcc); "
                          "CycleModel(native=False) runs the pure-Python model")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
            out = Path(tmp) / target.name
            cmd = [cc, "-O2", "-shared", "-fPIC", "-std=c11", "-o", str(out), str(SOURCE)]
            try:
                done = subprocess.run(cmd, capture_output=True, text=True)
            except OSError as exc:
                raise KernelError(f"cannot run the C compiler {cc}: {exc.strerror or exc} "
                                  "(set CC to a C compiler)") from None
            if done.returncode != 0:
                raise KernelError(f"building the cycle kernel failed ({' '.join(cmd)}):\n"
                                  f"{done.stderr.strip()}")
            os.replace(out, target)  # atomic: concurrent builders all load a complete one
    except OSError as exc:
        raise KernelError(f"cannot build the cycle kernel in {target.parent}: "
                          f"{exc.strerror or exc} (set PATTON_BUILD to a writable folder)"
                          ) from None


def library() -> ctypes.CDLL:
    """Return the loaded kernel, building it first if this source has not been built."""
    global _library
    with _lock:
        if _library is None:
            digest = hashlib.sha256(b"".join(f.read_bytes() for f in SOURCES)).hexdigest()[:16]
            target = BUILD_ROOT / "native" / f"cycle_kernel-{digest}.so"
            if not target.exists():
                _compile(target)
            try:
                lib = ctypes.CDLL(str(target))
            except OSError as exc:
                raise KernelError(f"loading the cycle kernel {target} failed: {exc}") from None
            lib.aim_run.restype = ctypes.c_int64
            lib.aim_run.argtypes = [ctypes.POINTER(_Config), ctypes.POINTER(_Program),
                                    ctypes.POINTER(_Start), ctypes.POINTER(_Result), _PROGRESS,
                                    ctypes.POINTER(_Trace), ctypes.c_void_p]
            lib.aim_memo_new.restype = ctypes.c_void_p
            lib.aim_memo_new.argtypes = [ctypes.c_int64]
            for name in ("aim_memo_free", "aim_memo_clear"):
                getattr(lib, name).restype = None
                getattr(lib, name).argtypes = [ctypes.c_void_p]
            lib.aim_memo_stats.restype = None
            lib.aim_memo_stats.argtypes = [ctypes.c_void_p, _i64p]
            lib.aim_decode.restype = ctypes.c_int64
            lib.aim_decode.argtypes = [ctypes.POINTER(_Raw), ctypes.POINTER(_OpTable),
                                       ctypes.c_void_p, ctypes.c_int64,
                                       ctypes.POINTER(_DecodedOut)]
            lib.aim_program_key.restype = ctypes.c_int64
            lib.aim_program_key.argtypes = [ctypes.POINTER(_Raw), ctypes.POINTER(_OpTable),
                                            ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                                            ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64,
                                            ctypes.c_void_p, ctypes.c_void_p]
            lib.aim_free.restype = None
            lib.aim_free.argtypes = [ctypes.c_void_p]
            _library = lib
        return _library


def _ptr(a: np.ndarray, kind=_i64p):
    return a.ctypes.data_as(kind)


class _Tables:
    """The device and timing facts as the kernel's arrays (kept alive with the config)."""

    def __init__(self, device: Device, timing: TimingTable) -> None:
        n = len(Command)
        starts, follow, gap = [], [], []
        for level in (Scope.CHANNEL, Scope.BANKGROUP, Scope.BANK):
            offsets = [len(follow)]  # absolute into the one follow/gap array
            for c in range(n):
                for f, g in timing.after[level][c]:
                    follow.append(int(f))
                    gap.append(int(g))
                offsets.append(len(follow))
            starts.append(offsets)
        self.after_start = np.array(starts, dtype=np.int64).reshape(-1)
        self.after_follow = np.array(follow or [0], dtype=np.int64)
        self.after_gap = np.array(gap or [0], dtype=np.int64)
        self.latency = np.array([timing.latency.get(Command(c), -1) for c in range(n)],
                                dtype=np.int64)

        def flags(pred: Callable[[Command], bool]) -> np.ndarray:
            return np.array([1 if pred(Command(c)) else 0 for c in range(n)], dtype=np.int64)

        self.closing = flags(lambda c: COMMAND_META[c].closing)
        self.opening = flags(lambda c: COMMAND_META[c].opening)
        self.channel_scoped = flags(lambda c: COMMAND_SCOPE[c] == Scope.CHANNEL)
        self.bank_preq = flags(lambda c: c in BANK_ROW_COMMANDS)
        self.all_rows_preq = flags(lambda c: c in ALL_ROWS_COMMANDS)
        self.col_limit = np.array(column_limits(device), dtype=np.int64)
        self.device = device
        self._configs: dict[tuple[bool, bool, str, int, int], _Config] = {}
        if (self.after_gap < 0).any():  # the kernel's checkpoints rely on it (``ahead``)
            raise KernelError("a timing rule with a negative gap")

    def config(self, record: bool, drain: bool, frontend: str) -> _Config:
        """The kernel's configuration (made once per setting: the kernel only reads it)."""
        key = (record, drain, frontend, STALL_LIMIT, MEMO_STRIDE)
        made = self._configs.get(key)
        if made is None:
            made = self._configs[key] = self._config(record, drain, frontend)
        return made

    def _config(self, record: bool, drain: bool, frontend: str) -> _Config:
        dev = self.device
        return _Config(
            dev.channels, dev.banks, dev.banks_per_group, dev.bankgroups, len(Command),
            _ptr(self.after_start), _ptr(self.after_follow), _ptr(self.after_gap),
            _ptr(self.latency), _ptr(self.closing), _ptr(self.opening),
            _ptr(self.channel_scoped), _ptr(self.bank_preq), _ptr(self.all_rows_preq),
            _ptr(self.col_limit), int(Command.ACT), int(Command.PRE), int(Command.PREA),
            int(Command.ACT16),
            int(Command.TMOD), int(Command.WRA16), int(Command.EOC), int(record), int(drain),
            STALL_LIMIT, FRONTENDS.index(frontend), MEMO_STRIDE)


_tables: dict[tuple[Device, str], _Tables] = {}


def _tables_for(device: Device, timing: TimingTable) -> _Tables:
    key = (device, timing.fingerprint())
    if key not in _tables:
        _tables[key] = _Tables(device, timing)
    return _tables[key]


@dataclass(frozen=True, slots=True)
class KernelRun:
    """What one kernel run returns, in the shapes the cycle model's result is built from.

    ``members[i]`` is controller ``i``'s channel bit set; ``counts[i]``, ``stats[i]``
    (active, precharged, idle), ``open_row[i]`` and ``reg_mode[i]`` hold for each of its
    channels. ``records`` (if recorded) has one row per issue, columns :data:`RECORD_FIELDS`.
    """

    cycles: int  # memory-system cycles
    members: list[int]  # per controller: channel bit set
    counts: np.ndarray  # (controllers, commands) issued
    stats: np.ndarray  # (controllers, 3): active, precharged, idle cycles
    open_row: np.ndarray  # (controllers, banks): open row or -1
    reg_mode: np.ndarray  # (controllers,): register mode at the end
    records: np.ndarray | None  # (issues, len(RECORD_FIELDS)) if recorded
    trace: Trace | None = None  # if asked for: the run's checkpoints, to follow
    followed: bool = False  # True if the run stopped at a checkpoint of the trace it followed


class Trace:
    """A run's checkpoints, so that a later run of the same program from another start can
    stop as soon as it is in the same state, and take the rest from this one.

    From a checkpoint on, two runs of one program in the same state (every controller's rows,
    modes, timing windows and requests, the front end's position; times relative to the
    checkpoint's cycle: ``cycle_kernel.c``, ``state_of``) issue the same commands at the same
    distance from it. So a run that meets checkpoint ``j`` of the traced run at cycle ``k2``
    (the traced run was there at ``k1``) ends at ``cycles + k2 - k1`` in the traced run's end
    state, with per channel the counts and statistics it had at ``k2`` plus what the traced
    run added after ``k1``. Equality is decided on the whole state, word for word, not on a
    digest. Decode steps run a program once per query head of a GQA group (the second from
    the state the first left), and the two runs meet within the first few checkpoints.
    """

    def __init__(self, decoded: Decoded, key: tuple, channels: int, commands: int) -> None:
        self.decoded = decoded
        self.key = key  # device, timing, front end and drain of the traced run
        self.at_head = np.unique(np.maximum(1, (np.array(CHECKPOINTS) * decoded.n).astype(
            np.int64)))
        cap = len(self.at_head)
        self.cycle = np.zeros(cap, dtype=np.int64)
        self.index = np.zeros(cap, dtype=np.int64)
        self.counts = np.zeros((cap, channels, commands), dtype=np.int64)
        self.stats = np.zeros((cap, channels, 3), dtype=np.int64)
        self.offset = np.zeros(cap + 1, dtype=np.int64)
        self.now_counts = np.zeros((channels, commands), dtype=np.int64)
        self.now_stats = np.zeros((channels, 3), dtype=np.int64)
        self.struct = _Trace(1, cap, _ptr(self.at_head), 0, _ptr(self.cycle), _ptr(self.index),
                             _ptr(self.counts), _ptr(self.stats), _ptr(self.offset), None, 0,
                             -1, 0, _ptr(self.now_counts), _ptr(self.now_stats))
        self.end: KernelRun | None = None  # the traced run's result, one "controller" a channel
        self._lib = library()

    def __del__(self) -> None:
        if self.struct.state:
            self._lib.aim_free(self.struct.state)
            self.struct.state = None

    def follows(self, decoded: Decoded) -> bool:
        """True if ``decoded`` is the traced program (the same arrays)."""
        d = self.decoded
        return d is decoded or (d.n == decoded.n and np.array_equal(d.targets, decoded.targets)
                                and all(np.array_equal(getattr(d, c), getattr(decoded, c))
                                        for c in COLUMNS))

    def rest(self, cycles_at: int) -> KernelRun:
        """The followed run's result, stopped at checkpoint ``struct.matched`` at cycle
        ``cycles_at``."""
        assert self.end is not None
        e = int(self.struct.matched)
        end = self.end
        shift = cycles_at - int(self.cycle[e])
        return KernelRun(end.cycles + shift, end.members,
                         self.now_counts + end.counts - self.counts[e],
                         self.now_stats + end.stats - self.stats[e], end.open_row, end.reg_mode,
                         None, followed=True)


#: A memo's counters (:meth:`Memo.stats`), in the kernel's order.
MEMO_STATS = ("hits", "misses", "stored", "clears", "dropped", "unstorable",
              "taken_instructions", "entries", "bytes")


class Memo:
    """Segments of runs that later runs take instead of simulating them again (exact).

    A run that is given a memo looks up, at each memo point of its program (the start, after
    each blocking instruction or barrier, and under the shared front end every
    :data:`MEMO_STRIDE`-th instruction), its state and the instructions up to the next point;
    a stored segment gives its cycles, counts, statistics and end state at once, and a missing
    one is simulated and stored. Rows enter only through which of them are equal, as in
    :mod:`patton.sim.cost_cache`; the key is 128 bits (``native/cycle_memo.c`` says why this is
    exact). Runs that record schedules or trace checkpoints do not use it.

    One memo serves runs of one setting (device, timing table, front end, drain): the first
    run fixes it, and a run of another raises ``ValueError``. It keeps ``budget`` bytes of
    segments, then starts over. Runs on one memo are serialised.
    """

    def __init__(self, budget: int = MEMO_BUDGET) -> None:
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
            raise ValueError(f"a memo's budget is a positive number of bytes, not {budget!r}")
        self._lib = library()
        self._ptr = self._lib.aim_memo_new(budget)
        if not self._ptr:
            raise KernelError("out of memory for the cycle kernel's memo")
        self.budget = budget
        self.setting: tuple | None = None
        self.lock = threading.Lock()

    def __del__(self) -> None:
        if getattr(self, "_ptr", None):
            self._lib.aim_memo_free(self._ptr)
            self._ptr = None

    def stats(self) -> dict[str, int]:
        """Counters: segments taken (``hits``) and simulated (``misses``), ``stored``,
        ``clears`` (budget reached), ``dropped`` (a run left a segment at a point it could not
        stop at), ``unstorable`` (0 unless out of memory), ``taken_instructions``, and the
        ``entries`` and ``bytes`` kept now."""
        out = np.zeros(len(MEMO_STATS), dtype=np.int64)
        self._lib.aim_memo_stats(self._ptr, _ptr(out))
        return dict(zip(MEMO_STATS, out.tolist()))

    def clear(self) -> None:
        """Forget every stored segment (the setting stays)."""
        self._lib.aim_memo_clear(self._ptr)

    def _claim(self, setting: tuple) -> None:
        if self.setting is None:
            self.setting = setting
        elif self.setting != setting:
            raise ValueError("a memo serves runs of one setting (device, timing, front end, "
                             "drain); this run's differs from the memo's first")


def _per_channel(out: KernelRun, channels: int) -> KernelRun:
    """``out`` with one controller per channel, in channel order."""
    where = np.zeros(channels, dtype=np.intp)
    for i, bits in enumerate(out.members):
        for c in range(channels):
            if bits >> c & 1:
                where[c] = i
    return KernelRun(out.cycles, [1 << c for c in range(channels)], out.counts[where],
                     out.stats[where], out.open_row[where], out.reg_mode[where], None)


#: The kernel's per-instruction arrays, in :class:`_Program` order (``targets`` apart).
COLUMNS = ("op_class", "final", "kind", "reg_mode", "blocking", "reader", "bank", "row",
           "first_col", "columns")


def _per_op(fn: Callable[[Opcode], int]) -> np.ndarray:
    return np.array([fn(op) for op in OPCODES], dtype=np.int64)


def _op_class(op: Opcode) -> int:
    if op == Opcode.WR_CFR:
        return _OP_CFR
    if op.info.final is None:
        return _OP_NONE
    return _OP_SYNC if op in (Opcode.SYNC, Opcode.EOC) else _OP_DRAM


def _kind(op: Opcode) -> int:
    if not op.info.conventional:
        return _KIND_AIM
    return _KIND_READ if op.info.final == Command.RD else _KIND_WRITE


_OP_CLASS = _per_op(_op_class)
_FINAL = _per_op(lambda op: -1 if op.info.final is None else int(op.info.final))
_KIND = _per_op(_kind)
_REG_MODE = _per_op(lambda op: int(op.info.reg_mode))
_BLOCKING = _per_op(lambda op: int(op.info.blocking))
_READER = _per_op(lambda op: int(_kind(op) == _KIND_READ or op.info.blocking))
_HAS_COLUMNS = _per_op(lambda op: int(op.info.columns))
_ONE_CHANNEL = _per_op(lambda op: int(op in (Opcode.RD_MEM, Opcode.WR_MEM)))
_AF, _WR_CFR = OP_ID[Opcode.AF], OP_ID[Opcode.WR_CFR]


#: The per-op facts as the kernel takes them: zero where the instruction class does not use
#: them (``final`` below SYNC, the rest outside DRAM instructions).
_DRAM = _OP_CLASS == _OP_DRAM
_FINAL_OF = np.where(_OP_CLASS >= _OP_SYNC, _FINAL, 0)
_KIND_OF, _REG_MODE_OF, _BLOCKING_OF, _READER_OF = (
    np.where(_DRAM, t, 0) for t in (_KIND, _REG_MODE, _BLOCKING, _READER))
#: One number per distinct tuple of those per-op facts (what the cost cache keys on instead).
_BEHAVIOUR = np.unique(np.stack((_OP_CLASS, _FINAL_OF, _KIND_OF, _REG_MODE_OF, _BLOCKING_OF,
                                 _READER_OF)), axis=1, return_inverse=True)[1].reshape(-1)

_REVERSED_8 = np.array([int(f"{b:08b}"[::-1], 2) for b in range(256)], dtype=np.uint64)
_REVERSED_16 = (_REVERSED_8[np.arange(1 << 16) & 0xFF] << np.uint64(8)) | \
    _REVERSED_8[np.arange(1 << 16) >> 8]


def _reversed(mask: np.ndarray) -> np.ndarray:
    """Bit-reverse 32-bit masks (mask bit ``31 - c`` becomes bit ``c``), as uint64."""
    m = mask.astype(np.uint64)
    low = (m & np.uint64(0xFFFF)).astype(np.intp)
    high = (m >> np.uint64(16)).astype(np.intp)
    return (_REVERSED_16[low] << np.uint64(16)) | _REVERSED_16[high]


class Decoded:
    """A program as the kernel takes it: what each instruction asks of the controllers.

    The arrays of :data:`COLUMNS` and ``targets`` (channel bit sets), one entry per
    instruction, are everything the timing depends on: column addresses do not matter and rows
    only through which of them are equal (what :mod:`patton.sim.cost_cache` keys on).
    ``behaviour`` numbers each instruction's tuple of the per-op columns (``op_class`` to
    ``reader``), one to one. ``cfr[c]`` is the value of CFR ``c`` each instruction is decoded
    under, ``end_cfr`` the CFR tuple the program leaves.
    """

    def __init__(self, program: Program, cfr: dict[Cfr, int], channels: int) -> None:
        op = np.asarray(program.op)
        self.n = len(op)
        self.cfr: dict[Cfr, np.ndarray] = {}
        writes = op == _WR_CFR
        if not writes.any():  # no W CFR: every instruction sees the start's CFRs
            for c in Cfr:
                self.cfr[c] = np.full(self.n, cfr[c], dtype=np.int64)
            self.end_cfr = tuple(int(cfr[c]) for c in Cfr)
        else:
            ends = []
            which = np.asarray(program.cfr)
            for c in Cfr:  # forward-fill each CFR from the W CFR lines before each instruction
                sets = writes & (which == int(c))
                values = np.concatenate(([cfr[c]], np.asarray(program.value)[sets])).astype(
                    np.int64)
                before = np.cumsum(sets) - sets  # W CFRs strictly before each instruction
                self.cfr[c] = values[before]
                ends.append(int(values[-1]))
            self.end_cfr = tuple(ends)
        self.op_class = _OP_CLASS[op]
        self.final = _FINAL_OF[op]
        self.kind = _KIND_OF[op]
        self.reg_mode = _REG_MODE_OF[op]
        self.blocking = _BLOCKING_OF[op]
        self.reader = _READER_OF[op]
        self.behaviour = _BEHAVIOUR[op]
        dram = _DRAM[op]
        one = _ONE_CHANNEL[op] == 1
        col = np.asarray(program.col)
        opsize = np.asarray(program.opsize)
        row = np.where(op == _AF, AF_ROW_BASE + self.cfr[Cfr.AFM], program.row)
        self.bank = np.where(dram, program.bank, 0).astype(np.int64, copy=False)
        self.row = np.where(dram, row, 0).astype(np.int64, copy=False)
        self.first_col = np.where(dram & (one | (col != UNSET)), col, 0).astype(np.int64,
                                                                                copy=False)
        self.columns = np.where(dram, np.where((_HAS_COLUMNS[op] == 0) | (opsize == UNSET), 1,
                                               opsize), 0).astype(np.int64, copy=False)
        mask = np.asarray(program.channel_mask)
        bits = np.zeros(self.n, dtype=np.uint64)
        masked = np.flatnonzero(dram & ~one & (mask != UNSET) & (mask != 0))
        bits[masked] = _reversed(mask[masked] & 0xFFFFFFFF)  # bit 31 - c: channel c
        bits &= np.uint64((1 << min(channels, MASK_BITS)) - 1)
        channel = np.asarray(program.channel)
        inside = one & (channel >= 0) & (channel < channels)
        bits[one] = 0
        bits[inside] = np.left_shift(np.uint64(1), channel[inside].astype(np.uint64))
        bits[~dram] = 0
        self.targets = bits

    def cfr_at(self, pos: int) -> tuple[int, ...]:
        """The CFR tuple instruction ``pos`` was decoded under."""
        return tuple(int(self.cfr[c][pos]) for c in Cfr)

    def struct(self) -> _Program:
        """The kernel's view of these arrays (made once: they do not change)."""
        made = self.__dict__.get("_struct")
        if made is None:
            made = self._struct = _Program(
                self.n, *(_ptr(getattr(self, n)) for n in COLUMNS[:6]),
                _ptr(self.targets, _u64p), *(_ptr(getattr(self, n)) for n in COLUMNS[6:]))
        return made


class _Raw(ctypes.Structure):  # addresses as plain integers (``ndarray.ctypes.data``)
    _fields_ = [("n", ctypes.c_int64)] + [(n, ctypes.c_void_p) for n in (
        "op", "opsize", "channel_mask", "bank", "row", "channel", "col", "cfr_id", "cfr_value")]


class _OpTable(ctypes.Structure):
    _fields_ = [("nops", ctypes.c_int64)] + \
               [(n, _i64p) for n in ("op_class", "final", "kind", "reg_mode", "blocking",
                                     "reader", "behaviour", "dram", "one_channel",
                                     "has_columns")] + \
               [(n, ctypes.c_int64) for n in ("af", "wr_cfr", "afm", "cfrs", "af_row_base",
                                             "mask_bits", "unset")]


class _DecodedOut(ctypes.Structure):
    _fields_ = [(n, ctypes.c_void_p) for n in (
        "op_class", "final", "kind", "reg_mode", "blocking", "reader", "behaviour", "bank",
        "row", "first_col", "columns", "targets", "cfr", "end_cfr")]


#: The per-op facts :class:`Decoded` is built from, as the kernel's decoder takes them.
_OP_ARRAYS = tuple(np.ascontiguousarray(a, dtype=np.int64) for a in (
    _OP_CLASS, _FINAL_OF, _KIND_OF, _REG_MODE_OF, _BLOCKING_OF, _READER_OF, _BEHAVIOUR,
    _DRAM.astype(np.int64), _ONE_CHANNEL, _HAS_COLUMNS))
_OP_TABLE = _OpTable(len(OPCODES), *(_ptr(a) for a in _OP_ARRAYS), _AF, _WR_CFR,
                     int(Cfr.AFM), len(Cfr), AF_ROW_BASE, MASK_BITS, UNSET)
_RAW_FIELDS = ("op", "opsize", "channel_mask", "bank", "row", "channel", "col", "cfr", "value")


def decode(program: Program, cfr: dict[Cfr, int], channels: int) -> Decoded:
    """:class:`Decoded` of ``program`` built by the kernel (the same arrays, at C speed; the
    Python constructor is the reference, ``tests/test_cycle_model_native.py``).

    Raises:
        KernelError: an op id the ISA does not know.
    """
    n = len(program)
    struct, keep = _raw(program)
    out = np.empty((11, n), dtype=np.int64)
    targets = np.empty(n, dtype=np.uint64)
    cfrs = np.empty((len(Cfr), n), dtype=np.int64)
    end = np.empty(len(Cfr), dtype=np.int64)
    start = np.array([cfr[c] for c in Cfr], dtype=np.int64)
    rows = out.ctypes.data
    step = out.strides[0]
    writes = library().aim_decode(
        ctypes.byref(struct), ctypes.byref(_OP_TABLE), start.ctypes.data, channels,
        ctypes.byref(_DecodedOut(*(rows + i * step for i in range(11)), targets.ctypes.data,
                                 cfrs.ctypes.data, end.ctypes.data)))
    del keep
    if writes < 0:
        raise KernelError("a program with an op id the ISA does not know")
    d = Decoded.__new__(Decoded)
    d.n = n
    d.cfr = {c: cfrs[i] if writes else np.broadcast_to(start[i], (n,))
             for i, c in enumerate(Cfr)}
    d.end_cfr = tuple(end.tolist())
    (d.op_class, d.final, d.kind, d.reg_mode, d.blocking, d.reader, d.behaviour, d.bank,
     d.row, d.first_col, d.columns) = out
    d.targets = targets
    return d


def _raw(program: Program) -> tuple[_Raw, list[np.ndarray]]:
    """The kernel's view of ``program``'s columns (and the arrays it points into)."""
    raw = [a if a.dtype == np.int64 and a.flags.c_contiguous else
           np.ascontiguousarray(a, dtype=np.int64)
           for a in (getattr(program, f) for f in _RAW_FIELDS)]
    return _Raw(len(program), *(a.ctypes.data for a in raw)), raw


def program_key(program: Program, cfr: dict[Cfr, int], channels: int, open_rows: np.ndarray,
                reg_mode: np.ndarray, salt: int) -> tuple[bytes, np.ndarray]:
    """The cost cache's key of ``program`` (decoded under ``cfr`` for ``channels`` channels)
    from a start state (its open rows ``(channels, banks)`` and register modes) under setting
    ``salt``, and the rows it names in order of first appearance (``cycle_memo.c``,
    ``aim_program_key``: made from the columns, no decoded program needed).

    Raises:
        KernelError: an op id the ISA does not know, or out of memory.
    """
    struct, keep = _raw(program)
    rows = np.empty(max(len(program), 1), dtype=np.int64)
    key = np.empty(2, dtype=np.uint64)
    open_rows = np.ascontiguousarray(open_rows, dtype=np.int64)
    modes = np.ascontiguousarray(reg_mode, dtype=np.int64)
    start = np.array([cfr[c] for c in Cfr], dtype=np.int64)
    named = library().aim_program_key(
        ctypes.byref(struct), ctypes.byref(_OP_TABLE), start.ctypes.data, channels,
        open_rows.shape[1], open_rows.ctypes.data, modes.ctypes.data,
        ctypes.c_uint64(salt & 0xFFFFFFFFFFFFFFFF), key.ctypes.data, rows.ctypes.data)
    del keep
    if named < 0:
        raise KernelError("a program with an op id the ISA does not know (or out of memory)")
    return key.tobytes(), rows[:named]


def run(decoded: Decoded, device: Device, timing: TimingTable, groups: list[list[int]],
        open_rows: Sequence[Sequence[int]], reg_mode: Sequence[bool], *, record: bool,
        drain: bool, frontend: str = "shared",
        progress: Callable[[int, int], None] | None = None, trace: bool = False,
        follow: Trace | None = None, memo: Memo | None = None) -> KernelRun:
    """Simulate a decoded program (validated, ending with EOC) from the given start.

    ``groups`` are the channel groups that start alike, in order of their lowest channel;
    ``frontend`` is one of :data:`FRONTENDS` (:class:`patton.sim.cycle_model.CycleModel`);
    ``progress(retired, cycle)`` is called every 2^20 cycles. ``trace`` returns the run's
    :class:`Trace` with it; ``follow`` (a trace of this program under the same settings) lets
    the run stop where it meets it (the result is exact either way). ``memo`` (:class:`Memo`)
    lets the run take segments earlier runs simulated (exact); a recording or traced run does
    not use it.
    """
    if frontend not in FRONTENDS:
        raise ValueError(f"unknown front end {frontend!r} (choices: {', '.join(FRONTENDS)})")
    if device.channels > 64:
        raise KernelError(f"the kernel simulates at most 64 channels, not {device.channels}")
    lib = library()
    traced = None
    if trace or follow is not None:
        if record:
            raise ValueError("a traced or following run records no schedule")
        key = (device, timing.fingerprint(), frontend, drain)
        if follow is not None and (follow.key != key or not follow.follows(decoded)):
            raise ValueError("a run follows only a trace of the same program and settings")
        if trace:
            traced = Trace(decoded, key, device.channels, len(Command))
    checkpoints = traced.struct if traced is not None else \
        follow.struct if follow is not None else None
    if follow is not None:
        follow.struct.mode = 2
    config = _tables_for(device, timing).config(record, drain, frontend)
    prog = decoded.struct()
    members = np.array([sum(1 << c for c in g) for g in groups], dtype=np.uint64)
    rows = np.array(open_rows, dtype=np.int64).reshape(device.channels, device.banks)
    modes = np.array([int(m) for m in reg_mode], dtype=np.int64)
    start = _Start(len(groups), _ptr(members, _u64p), _ptr(rows), _ptr(modes))
    nch, ncmd = device.channels, len(Command)
    out_members = np.zeros(nch, dtype=np.uint64)
    out_counts = np.zeros((nch, ncmd), dtype=np.int64)
    out_stats = np.zeros((nch, 3), dtype=np.int64)
    out_rows = np.zeros((nch, device.banks), dtype=np.int64)
    out_modes = np.zeros(nch, dtype=np.int64)
    result = _Result(0, 0, 0, _ptr(out_members, _u64p), _ptr(out_counts), _ptr(out_stats),
                     _ptr(out_rows), _ptr(out_modes), None, 0)
    callback = _PROGRESS(progress) if progress is not None else _PROGRESS()
    held = None
    if memo is not None and not record and checkpoints is None:
        memo._claim((device, timing.fingerprint(), frontend, drain))
        held = memo.lock
        held.acquire()
    try:
        status = lib.aim_run(ctypes.byref(config), ctypes.byref(prog), ctypes.byref(start),
                             ctypes.byref(result), callback,
                             ctypes.byref(checkpoints) if checkpoints is not None else None,
                             memo._ptr if held is not None else None)
    finally:
        if held is not None:
            held.release()
    records = None
    try:
        if result.n_records:
            raw = np.ctypeslib.as_array(ctypes.cast(result.records, _i64p),
                                        shape=(result.n_records, len(RECORD_FIELDS)))
            records = raw.copy()
        elif record:
            records = np.zeros((0, len(RECORD_FIELDS)), dtype=np.int64)
    finally:
        if result.records:
            lib.aim_free(result.records)
    if status == _CONVERGED:
        assert follow is not None
        return follow.rest(int(result.cycles))
    if status != 0:
        raise KernelError(f"cycle kernel {_ERRORS.get(status, f'error {status}')} at cycle "
                          f"{result.cycles} (instruction {result.retired} of {decoded.n}; "
                          "please report this program)")
    k = result.controllers
    out = KernelRun(result.cycles, [int(m) for m in out_members[:k]], out_counts[:k],
                    out_stats[:k], out_rows[:k], out_modes[:k], records)
    if traced is None:
        return out
    traced.end = _per_channel(out, device.channels)
    return KernelRun(out.cycles, out.members, out.counts, out.stats, out.open_row,
                     out.reg_mode, records, trace=traced)
