"""The model's forward pass on the PIM, one scheduler step: KV writes, commits, decode attention.

Between the engine's ``schedule()`` and ``update()`` (every block the step needs is bound),
:meth:`Forward.run` asks the runtime for the step's programs and runs them on the executor:

1. **writes**: the scheduled tokens' Keys and Values (and, for PATTON, the Commit Zone commits
   the writes trigger), batched as :class:`Batching` says;
2. **attention** of the decode requests, layer by layer: one batched QK^T program, the host's
   softmax over the scores read back, one batched SV program (prefill attention is the
   GPU's: the PIM keeps the KV and runs decode attention).

Without an executor the programs are built but not run (a cost run prices them itself, and
the SV program is built from a zero score buffer: timing does not depend on data).

Every program goes through the observers' ``program`` hook (which may replace it: fault
injection) before it runs and their ``ran`` hook after; decoded scores and outputs reach their
``scores`` and ``outputs`` hooks (the checks). The hooks are methods of the step driver's
observers (:mod:`patton.serving.driver`).

Phases of the programs: ``writes`` (one write call's Keys and Values together), ``k_write`` and
``v_write`` (apart), ``commits``, ``qk``, ``sv``; :attr:`StepWork.call
<patton.serving.work.StepWork.call>` says which runtime call a program comes from.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from patton.runtime.interface import ColumnarWrites, KvRuntime, Plans
from patton.serving.kv_data import KvData
from patton.serving.work import StepWork
from patton.sim import datapath as dp
from patton.sim.executor import Executor, Result, closed
from patton.sim.program import Program, concat

__all__ = ["Batching", "STEP", "PARTS", "Forward", "softmax"]


@dataclass(frozen=True, slots=True)
class Batching:
    """How a step's KV writes become programs.

    ``append``: the decode tokens go in one ``append`` call (the runtime's decode path) before
    the prefill chunks' write call; else every scheduled token goes in one write call, in
    scheduling order. ``together``: a write call's Key and Value programs run as one program
    (phase ``writes``); else apart (``k_write``, ``v_write``). Commits always run apart.
    """

    append: bool
    together: bool


#: The chat's: the step's tokens in one write call, Keys and Values in one program.
STEP = Batching(append=False, together=True)
#: The cost runs': decode tokens appended, then the prefill chunks; every part on its own
#: (Fig. 7's stacks).
PARTS = Batching(append=True, together=False)


def softmax(scores: np.ndarray, d_head: int) -> np.ndarray:
    """Return the host's softmax of bf16 ``scores`` ``(heads, n)`` scaled by 1/sqrt(d_head),
    as bf16 bits (float64 on the host, one rounding)."""
    z = dp.from_bf16(scores) / np.sqrt(d_head)
    z = np.exp(z - z.max(axis=1, keepdims=True))
    return dp.to_bf16(z / z.sum(axis=1, keepdims=True))


Hook = Callable[..., Any]


class Forward:
    """The forward pass of every step on one runtime and (optionally) one executor.

    Args:
        runtime: the attached runtime.
        data: the Keys, Values and queries written and asked.
        executor: the device, or None (programs built, not run).
        batching: how writes become programs (:data:`STEP`, :data:`PARTS`).
        hooks: the observers' hooks by name (``writing``, ``program``, ``ran``, ``wrote``,
            ``attending``, ``scores``, ``outputs``), each a list of callables.
    """

    def __init__(self, runtime: KvRuntime, data: KvData, executor: Executor | None,
                 batching: Batching, hooks: dict[str, list[Hook]]) -> None:
        self.runtime = runtime
        self.config = runtime.config
        self.data = data
        self.executor = executor
        self.batching = batching
        self._hooks = hooks

    def run(self, work: StepWork) -> None:
        """Write the step's KV, then run decode attention (see the module docstring)."""
        self._writes(work)
        if work.decode:
            self._attention(work)

    # ------------------------------------------------------------------ writes

    def _writes(self, work: StepWork) -> None:
        """Write the step's KV; the ``writing``/``wrote`` hooks get every written piece as
        ``(block, offset, keys, values)`` (decode tokens first when they are appended)."""
        rt, data = self.runtime, self.data
        bs = self.config.block_size
        decode = work.decode if self.batching.append else []
        pieces = [p for p in work.pieces if not p.entry.decode] if decode else work.pieces
        appended: list[tuple[int, int, np.ndarray, np.ndarray]] = []
        blocks = [e.table[e.start // bs] for e in decode]
        if decode:
            keys, values = data.last_kv([e.seq for e in decode])
            if self._hooks["writing"] or self._hooks["wrote"]:
                appended = [(blocks[i], e.start % bs, keys[i][:, None], values[i][:, None])
                            for i, e in enumerate(decode)]
        items = []
        if self.batching.append:
            for p in pieces:
                k, v = data.kv(p.entry.seq, p.position, p.tokens)
                items.append((p.block, p.offset, k, v))
        else:  # one draw per entry, cut into its blocks
            drawn: dict[int, tuple[np.ndarray, np.ndarray]] = {}
            for p in pieces:
                e = p.entry
                kv = drawn.get(id(e))
                if kv is None:
                    kv = drawn[id(e)] = data.kv(e.seq, e.start, e.tokens)
                lo, hi = p.position - e.start, p.position - e.start + p.tokens
                items.append((p.block, p.offset, kv[0][:, lo:hi], kv[1][:, lo:hi]))
        written = appended + items
        if not all(h(work, written) is not False for h in self._hooks["writing"]):
            return  # an observer found the runtime's state wrong: nothing is written
        programs: list[tuple[str, str, Program]] = []
        if decode:
            programs += self._split("append", rt.append(blocks, keys, values))
        if items:
            w = rt.write_program(items) if isinstance(rt, ColumnarWrites) else \
                rt.write_many(items, emit=True)
            programs += self._split("write", w)
        for call, phase, prog in programs:
            work.call = call
            self._run(work, phase, prog)
        for h in self._hooks["wrote"]:
            h(work, written)

    def _split(self, call: str, w: Any) -> list[tuple[str, str, Program]]:
        """The programs of a write call (``Writes`` or ``WriteProgram``), non-empty, closed."""
        key, value, commit = (p if isinstance(p, Program) else Program.of(list(p))
                              for p in (w.key, w.value, w.commit))
        if self.batching.together:
            parts = [("writes", concat([key, value])), ("commits", commit)]
        else:
            parts = [("k_write", key), ("v_write", value), ("commits", commit)]
        return [(call, phase, closed(prog)) for phase, prog in parts if len(prog)]

    # ------------------------------------------------------------------ attention

    def _attention(self, work: StepWork) -> None:
        rt, c = self.runtime, self.config
        decode = work.decode
        for h in self._hooks["attending"]:
            h(work)
        work.call = "attention"
        rids = [e.request for e in decode]
        queries = self.data.queries([e.seq for e in decode])
        index = [rt.token_index(r) for r in rids] if self.executor is not None else None
        for layer in range(c.n_layers):
            qk, plans = rt.qk_step(rids, layer, queries[:, layer])
            result = self._run(work, "qk", closed(qk))
            buf = rt.sv_buffer(rids, layer, work.width)
            if result is not None and index is not None:
                scores = self._decoded(plans, result)
                scores = [s[:, index[i]] for i, s in enumerate(scores)]
                for h in self._hooks["scores"]:
                    h(work, layer, queries[:, layer], scores)
                for i, s in enumerate(scores):
                    buf[i][:, index[i]] = softmax(s, c.d_head)
            sv, plans = rt.sv_step(rids, layer, buf)
            result = self._run(work, "sv", closed(sv))
            if result is not None and index is not None:
                outputs = self._decoded(plans, result)
                for h in self._hooks["outputs"]:
                    h(work, layer, buf, plans, index, outputs)

    def _decoded(self, plans: Plans, result: Result) -> list[np.ndarray]:
        """Each request's read-outs of a batch program, decoded by its plan."""
        per = plans.split(result.readouts)
        return [plan.decode(r, self.config) for plan, r in zip(plans, per)]

    # ------------------------------------------------------------------ the device

    def _run(self, work: StepWork, phase: str, prog: Program) -> Result | None:
        for h in self._hooks["program"]:
            prog = h(work, phase, prog)
        result = self.executor.run(prog) if self.executor is not None else None
        for h in self._hooks["ran"]:
            h(work, phase, prog, result)
        return result
