"""The serving run's checks: everything the device returns and the runtime places, against the
references.

:class:`Checks` observes the step driver (:mod:`patton.serving.driver`) and checks, per step:

- **placements**: every KV element the step wrote is in the device's mats where the runtime's
  metadata says, read back through every reader the executor offers (the RTL's mats and the
  functional model's);
- **commits** (PATTON): the committed block's O1V is the one reserved at allocation, it holds
  what the Commit Zone slot held (read from the device before the commit) plus the filling
  tokens, the slot is released;
- **attention**: scores and outputs bit-exact against the NumPy reference of the datapath in
  the plan's order (PATTON's, or a baseline's) and within :data:`TOLERANCE` of float64;
- **timing and protocol**: zero violations from ``verify`` on the schedule of every program
  (an executor that checks itself, the RTL, reports its scoreboard's discrepancies instead);
- **the mirror**: the runtime's bound blocks are the engine's running and cached blocks.

Every failure names the step, the block or request, the place or command and the expected and
actual values (:attr:`Found.failures`). :meth:`Checks.sweep` reads every bound block back at
any time. The comparisons themselves are functions (:func:`check_scores`,
:func:`check_outputs`, :func:`block_errors`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np
from patton.runtime.interface import KvRuntime
from patton.runtime.patton.lifecycle import Runtime
from patton.runtime.patton.metadata import CzPlace, ValuePlace
from patton.runtime.programs.plans import SvPlan
from patton.runtime.reference import attention as ref
from patton.runtime.reference.baselines import sv_exact as baseline_sv
from patton.serving.adapter import Attached, mirror_errors
from patton.serving.kv_data import KvData, TokenKV
from patton.serving.work import StepWork
from patton.sim import datapath as dp
from patton.sim.check import verify_program
from patton.sim.executor import Executor, Peek, Result
from patton.sim.timing import DEFAULT_PROFILE

#: Stated float64 tolerance, relative to ``sum |a_i b_i|`` of each dot product: one bf16
#: read-out rounding per segment (at most 2**-8 of the partial, reached when one term dominates
#: and the result sits just above a power of two) plus 2**-16 for the accumulator's error
#: (below 1e-6, ``docs/numerics.md``) and the host's float32 sums of segment read-outs.
TOLERANCE = 2.0 ** -8 + 2.0 ** -16

__all__ = ["TOLERANCE", "Accuracy", "Found", "Checks", "check_scores", "check_outputs",
           "block_errors"]


@dataclass(slots=True)
class Accuracy:
    """The attention results' error against float64, over every check so far."""

    max_abs_err_qk: float = 0.0  # vs float64
    max_abs_err_sv: float = 0.0  # vs float64
    max_tol_ratio: float = 0.0  # worst |err| / tolerance (<= 1 passes)


def check_scores(keys: np.ndarray, query: np.ndarray, scores: np.ndarray,
                 rep: Accuracy) -> int:
    """Compare one layer's QK^T scores with the references; return the exact mismatches.

    ``keys`` ``(n, heads, D)`` are the request's Key tokens in sequence order, ``query``
    ``(heads, D)``, ``scores`` ``(heads, n)`` the bf16 scores read back in the same order. The
    float64 error and its ratio to :data:`TOLERANCE` go into ``rep``'s maxima.
    """
    bad = 0
    for g in range(scores.shape[0]):
        k, q = keys[:, g], query[g]
        bad += int((ref.qk_exact(k, q) != scores[g]).sum())
        err = np.abs(dp.from_bf16(scores[g]) - ref.qk_float(k, q))
        bound = TOLERANCE * (np.abs(dp.from_bf16(k)) @ np.abs(dp.from_bf16(q))) + 1e-30
        rep.max_abs_err_qk = max(rep.max_abs_err_qk, float(err.max()))
        rep.max_tol_ratio = max(rep.max_tol_ratio, float((err / bound).max()))
    return bad


def check_outputs(values: np.ndarray, probs: np.ndarray, outs: np.ndarray, plan: SvPlan,
                  index: np.ndarray, blocks: int, block_size: int, rep: Accuracy) -> int:
    """Compare one layer's SV outputs with the references; return the exact mismatches.

    ``values`` ``(n, heads, D)`` are the request's Value tokens in sequence order, ``probs``
    ``(heads, n)`` the scores given to SV, ``outs`` ``(heads, D)`` the float32 outputs read
    back; ``index`` is :meth:`Runtime.token_index` (table layout of the ``n`` tokens) of a
    table of ``blocks`` blocks.
    """
    bad = 0
    for g in range(outs.shape[0]):
        vb = np.zeros((blocks * block_size, values.shape[2]), dtype=np.uint16)
        pb = np.zeros(blocks * block_size, dtype=np.uint16)
        vb[index], pb[index] = values[:, g], probs[g]
        exact = ref.sv_exact(vb.reshape(blocks, block_size, -1), pb.reshape(blocks, block_size),
                             plan)
        bad += int((exact != outs[g]).sum())
        v, p = values[:, g], probs[g]
        err = np.abs(outs[g] - ref.sv_float(v, p))
        bound = TOLERANCE * (np.abs(dp.from_bf16(p)) @ np.abs(dp.from_bf16(v))) + 1e-30
        rep.max_abs_err_sv = max(rep.max_abs_err_sv, float(err.max()))
        rep.max_tol_ratio = max(rep.max_tol_ratio, float((err / bound).max()))
    return bad


def block_errors(rt: Runtime, peek: Peek, block_id: int, keys: np.ndarray,
                 values: np.ndarray, offsets: range,
                 value_place: ValuePlace | CzPlace | None = None) -> tuple[int, int, str | None]:
    """Compare tokens ``offsets`` of a block with what the mats hold where the metadata says.

    ``keys``/``values`` are ``(layers, len(offsets), heads, D)`` bf16 bits. A Key element is
    looked up at (channel, bank = offset, row, burst, lane) of the block's O1K, a Value element
    at ``value_place`` (default: the block's visible CZ slot or O1V; lane = offset). Returns
    (elements wrong, elements checked, the first wrong one described, or None).
    """
    c = rt.config
    kp, visible = rt.placements(block_id)
    vp = visible if value_place is None else value_place
    e, banks = c.bursts, c.device.banks
    offs = np.arange(offsets.start, offsets.stop)
    bad = checked = 0
    first: str | None = None

    def wrong(got: np.ndarray, want: np.ndarray, where: str) -> None:
        nonlocal bad, first
        diff = got != want
        n = int(diff.sum())
        if n and first is None:
            k = tuple(int(i[0]) for i in np.nonzero(diff))
            first = (f"{where}: expected 0x{int(want[k]):04x}, found 0x{int(got[k]):04x} "
                     f"({n} element(s) wrong here)")
        bad += n

    for layer in range(c.n_layers):
        for g in range(c.heads):
            kch, krow = c.channel(g, kp.p), c.row(layer, kp.row)
            for j, t in enumerate(offs.tolist()):
                got = peek(kch, t, krow)[kp.col:kp.col + e].reshape(-1)
                wrong(got, keys[layer, j, g], f"block {block_id} layer {layer} head {g} Key "
                      f"offset {t} (channel {kch} bank {t} row {krow} columns {kp.col}.."
                      f"{kp.col + e - 1})")
                checked += c.d_head
            for p in range(c.ch_per_head):
                ch = c.channel(g, p)
                for i in range(c.v_rows):
                    if isinstance(vp, CzPlace):
                        row, col, what = c.row(layer, vp.row), vp.col0 + i, "CZ slot"
                    else:
                        row, col, what = c.row(layer, vp.row0 + i), vp.col, "O1V"
                    for b in range(banks):
                        got = peek(ch, b, row)[col, offs]
                        want = values[layer, :, g, c.value_dim(p, i, b)]
                        if (got != want).any():
                            wrong(got, want, f"block {block_id} layer {layer} head {g} Value "
                                  f"({what}) offsets {offs[0]}..{offs[-1]} dim "
                                  f"{c.value_dim(p, i, b)} (channel {ch} bank {b} row {row} "
                                  f"column {col})")
                        checked += len(offs)
    return bad, checked, first


@dataclass(slots=True)
class Found:
    """What the checks found in one step.

    Invariants: ``failures`` is empty iff every check of the step passed.
    """

    step: int
    attentions: int = 0  # decode requests' attention checked, one per request and layer
    commits: int = 0  # Commit Zone slots committed to their O1V (and checked)
    placement_checked: int = 0  # KV elements read back
    placement_mismatches: int = 0  # of those, not where the metadata says
    mismatches: int = 0  # attention results and device reads differing from the references
    violations: int = 0  # timing/protocol violations (verify, or the executor's own checks)
    failures: list[str] = field(default_factory=list)

    def add(self, other: Found) -> None:
        """Add ``other``'s counts and failures to these (``step`` stays)."""
        for f in fields(self):
            if f.name != "step":
                setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


class Checks:
    """Checks every step of a run (see the module docstring); an observer of the driver.

    Args:
        attached: the adapter (its runtime is checked; its mirror against the engine's pool).
        data: the Keys, Values and queries the run wrote and asked.
        executor: the device (its mats are read back), or None (attention and device checks
            need one).
        placements: check what every write and commit left in the mats (PATTON's metadata).
        mirror: check the runtime's blocks against the engine's after every step.

    Attributes:
        found: the current step's findings (a new :class:`Found` when a step is scheduled).
        total: every step's findings added up (its ``failures`` too), step -1.
        accuracy: the attention error maxima over the run.
    """

    def __init__(self, attached: Attached, data: KvData, executor: Executor | None, *,
                 placements: bool = True, mirror: bool = True) -> None:
        assert attached.runtime is not None, "checks need a runtime"
        self.attached = attached
        self.runtime: KvRuntime = attached.runtime
        self.config = attached.runtime.config
        self.data = data
        self.executor = executor
        # the rules a schedule is verified against: the executor's table (its profile and
        # device extension set), else the default profile on AiM
        timing = getattr(executor, "timing", None)
        self._timing = DEFAULT_PROFILE if timing is None else timing
        self.placements = placements
        self.mirror = mirror
        self.patton = isinstance(attached.runtime, Runtime)
        self.accuracy = Accuracy()
        self.found = Found(-1)
        self.total = Found(-1)
        self.pool: Any = None
        self.engine: Any = None
        self._staged: dict[int, tuple] = {}
        self._names: dict[int, str] = {}  # runtime request -> engine request id
        self._written: dict[int, tuple[str, int]] = {}  # block -> (request id, first position)
        self._sequences: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # this step's draws

    # ------------------------------------------------------------------ hooks

    def start(self, driver: Any) -> None:
        """Take the engine (its sequences and block pool)."""
        self.engine = driver.engine
        self.pool = driver.engine.pool

    def scheduled(self, work: StepWork) -> None:
        """Begin the step's findings."""
        self.found = Found(work.index)
        self._sequences = {}

    def _sequence(self, e: Any) -> tuple[np.ndarray, np.ndarray]:
        """A decode request's whole sequence's Keys and Values (drawn once a step)."""
        kv = self._sequences.get(e.seq.request_id)
        if kv is None:
            kv = self._sequences[e.seq.request_id] = self.data.kv(e.seq, 0, len(e.seq.tokens))
        return kv

    def writing(self, work: StepWork, items: list) -> bool:
        """Before the writes: the runtime expects the offsets the engine schedules; what each
        Commit Zone slot about to be committed holds now."""
        self._staged = {}
        if not self.placements:
            return True
        rt, t, step = self.runtime, self.config.block_size, work.index
        staged = {}
        for block, offset, keys, _ in items:
            meta = rt.blocks[block]
            if meta.filled != offset:
                self.found.failures.append(f"step {step}: block {block} holds {meta.filled} "
                                           f"tokens but the engine schedules offset {offset}")
                return False
            if meta.cz is not None and offset + keys.shape[1] == t:  # this write commits it
                staged[block] = (meta.cz, meta.slot, meta.value, meta.filled)
        if staged:
            peeks = self._readers()
            for b, (cz, _, _, filled) in staged.items():
                keys, values = self._block_kv(b, filled)
                for name, peek in peeks:
                    bad, _, first = block_errors(rt, peek, b, keys, values, range(filled), cz)
                    if bad:
                        self.found.failures.append(f"step {step}: CZ slot of block {b} before "
                                                   f"its commit, in {name}: {first}")
        self._staged = staged
        return True

    def ran(self, work: StepWork, phase: str, prog: Any, result: Result | None) -> None:
        """After a program: the executor's own findings, or ``verify`` of its schedule."""
        if result is None:
            return
        where = f"step {work.index} {phase}"
        found = self.found
        if result.discrepancies is not None:
            for d in result.discrepancies:
                if d.kind in ("violation", "checker"):
                    found.violations += 1
                else:
                    found.mismatches += 1
                found.failures.append(f"{where}: {d}")
            return
        if result.schedule is None or result.start is None:
            return
        for ch, violations in verify_program(result.start, result.schedule,
                                             self.config.device, self._timing).items():
            found.violations += len(violations)
            for v in violations[:3]:
                found.failures.append(f"{where}: channel {ch}: {v}")

    def wrote(self, work: StepWork, items: list) -> None:
        """After the writes and commits: every written element and every commit in the mats."""
        for piece in work.pieces:
            if piece.offset == 0:  # the block's first token: whose tokens it holds
                self._written[piece.block] = (piece.entry.seq.request_id, piece.position)
        if not self.placements:
            return
        rt, step, t = self.runtime, work.index, self.config.block_size
        found = self.found
        peeks = self._readers()
        wrote: dict[int, tuple[int, int]] = {}
        for block, offset, keys, _ in items:
            wrote[block] = (offset, offset + keys.shape[1])
        for block, (_, slot, reserved, filled) in self._staged.items():
            meta = rt.blocks[block]
            if meta.visible != reserved or not isinstance(meta.visible, ValuePlace):
                found.failures.append(f"step {step}: block {block} committed to "
                                      f"{meta.visible}, not its reserved O1V {reserved}")
            crs = rt.alloc.crs
            s, q = divmod(slot, crs.per_set)
            holders = [m.block_id for m in rt.blocks.values() if m.slot == slot]
            if meta.cz is not None or meta.slot is not None or block in holders or (
                    crs.used[s] >> q & 1) != bool(holders):
                found.failures.append(f"step {step}: block {block}'s CZ slot {slot} was not "
                                      f"released by its commit (held by "
                                      f"{holders or 'nobody'}, allocator bit "
                                      f"{crs.used[s] >> q & 1})")
            keys, values = self._block_kv(block, t)
            for name, peek in peeks:
                bad, n, first = block_errors(rt, peek, block, keys, values, range(t), reserved)
                found.placement_checked += n
                found.placement_mismatches += bad
                if bad:
                    found.failures.append(f"step {step}: commit of block {block} (CZ slot "
                                          f"{slot} held {filled} tokens) in {name}: {first}")
        found.commits += len(self._staged)
        for block, (lo, hi) in wrote.items():
            if block in self._staged:  # committed: the whole block is checked above
                continue
            keys, values = self._block_kv(block, hi)
            keys, values = keys[:, lo:], values[:, lo:]
            for name, peek in peeks:
                bad, n, first = block_errors(rt, peek, block, keys, values, range(lo, hi))
                found.placement_checked += n
                found.placement_mismatches += bad
                if bad:
                    found.failures.append(f"step {step}: placement in {name}: {first}")

    def attending(self, work: StepWork) -> None:
        """Before attention: the runtime holds every decode request's tokens."""
        if not self.patton:
            return
        for e in work.decode:
            n = self.runtime.seq_len(e.request)
            if n != len(e.seq.tokens):
                self.found.failures.append(f"step {work.index}: request {e.seq.request_id} has "
                                           f"{n} tokens in the runtime, {len(e.seq.tokens)} in "
                                           "the engine")

    def scores(self, work: StepWork, layer: int, queries: np.ndarray,
               scores: list[np.ndarray]) -> None:
        """QK^T scores against the references."""
        self.found.attentions += len(work.decode)
        for i, e in enumerate(work.decode):
            keys, _ = self._sequence(e)
            bad = check_scores(keys[layer], queries[i], scores[i], self.accuracy)
            if bad:
                self.found.mismatches += bad
                self.found.failures.append(f"step {work.index}: layer {layer} request "
                                           f"{e.seq.request_id}: {bad} QK^T score(s) differ "
                                           "from the reference")

    def outputs(self, work: StepWork, layer: int, probs: np.ndarray, plans: list,
                index: list[np.ndarray], outputs: list[np.ndarray]) -> None:
        """SV outputs against the references (PATTON's reduction order, or the baseline's)."""
        c = self.config
        for i, e in enumerate(work.decode):
            _, values = self._sequence(e)
            blocks = len(e.table)
            plan, idx = plans[i], index[i]
            if self.patton:
                bad = check_outputs(values[layer], probs[i][:, idx], outputs[i], plan, idx,
                                    blocks, c.block_size, self.accuracy)
            else:  # a baseline's plan: its own reduction order
                bad = 0
                for h in range(c.heads):
                    table = np.zeros((blocks * c.block_size, c.d_head), np.uint16)
                    table[idx] = values[layer][:, h]
                    bad += int((outputs[i][h] != baseline_sv(plan, h, table, probs[i][h])).sum())
            if bad:
                self.found.mismatches += bad
                self.found.failures.append(f"step {work.index}: layer {layer} request "
                                           f"{e.seq.request_id}: {bad} SV output(s) differ "
                                           "from the reference")

    def stepped(self, work: StepWork | None, out: Any) -> None:
        """After the step: the attention error bound; the mirror."""
        step = self.found.step
        if self.accuracy.max_tol_ratio > 1.0 and work is not None and work.decode:
            self.found.failures.append(f"step {step}: attention error "
                                       f"{self.accuracy.max_tol_ratio:.3f} x the float64 "
                                       "tolerance")
        if self.mirror:
            for problem in mirror_errors(self.pool, self.attached):
                self.found.mismatches += 1
                self.found.failures.append(f"step {step}: {problem}")
        self.total.add(self.found)

    # ------------------------------------------------------------------ reading back

    def sweep(self) -> tuple[int, int, list[str]]:
        """Read every bound block's written tokens back from the mats now; return (elements
        wrong, elements checked, the first failure of each block that has one)."""
        rt = self.runtime
        bad = checked = 0
        failures = []
        peeks = self._readers()
        for block, meta in rt.blocks.items():
            keys, values = self._written_kv(block, meta.filled)
            for name, peek in peeks:
                b, n, first = block_errors(rt, peek, block, keys, values, range(meta.filled))
                bad += b
                checked += n
                if b:
                    failures.append(f"sweep: block {block} in {name}: {first}")
        return bad, checked, failures

    def _readers(self) -> list[tuple[str, Peek]]:
        return self.executor.readers() if self.executor is not None else []

    def _owner(self, block: int) -> str:
        """The engine request id of the request that owns ``block`` in the runtime."""
        rid = self.runtime.blocks[block].owner
        if rid not in self._names:
            self._names = {v: k for k, v in self.attached.ids.items()}
        return self._names[rid]

    def _block_kv(self, block: int, n: int) -> tuple[np.ndarray, np.ndarray]:
        """The expected Keys and Values of a block's first ``n`` offsets (its owner's tokens)."""
        rt = self.runtime
        engine_id = self._owner(block)
        seq = self.engine.requests[engine_id]
        position = rt.requests[rt.blocks[block].owner].table.index(block) * \
            self.config.block_size
        return self.data.kv(seq, position, n)

    def _written_kv(self, block: int, n: int) -> tuple[np.ndarray, np.ndarray]:
        """The Keys and Values written into a block's first ``n`` offsets, from the prefix
        of the request that wrote its first token (recorded when it was written)."""
        rid, position = self._written[block]
        assert isinstance(self.data, TokenKV), "reading back needs the run's token data"
        return self.data.written(rid, position, n)
