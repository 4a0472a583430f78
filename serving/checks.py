"""What a serving replay checks: attention against the references, placements in the mats.

:func:`check_attention` runs one request's QK^T and SV in every layer and compares each score
and output read back with :mod:`patton.runtime.reference.attention`: bit-exact against the
documented datapath in the plan's order, and within :data:`TOLERANCE` of float64.
:func:`check_placements` reads every written token of every bound block from the mats where
the metadata says. Both add to a :class:`Report`, which also carries the Value-write figures
:func:`patton.serving.loop.execute` measures.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from patton.runtime.reference import attention as ref
from patton.runtime.patton.lifecycle import Runtime
from patton.runtime.patton.metadata import CzPlace, ValuePlace
from patton.runtime.programs.plans import SvPlan
from patton.sim import datapath as dp
from patton.sim.executor import Executor
from patton.sim.functional import FunctionalModel
from patton.sim.isa import Instruction
from patton.serving.scenario import Tokens

#: Stated float64 tolerance, relative to ``sum |a_i b_i|`` of each dot product: one bf16
#: read-out rounding per segment (at most 2**-8 of the partial, reached when one term dominates
#: and the result sits just above a power of two) plus 2**-16 for the accumulator's error
#: (below 1e-6, ``docs/numerics.md``) and the host's float32 sums of segment read-outs.
TOLERANCE = 2.0 ** -8 + 2.0 ** -16

__all__ = ["TOLERANCE", "Report", "Peek", "check_scores", "softmax", "check_outputs",
           "check_attention", "block_errors", "check_placements"]


@dataclass(slots=True)
class Report:
    """What :func:`~patton.serving.loop.execute` measured and checked."""

    attends: int = 0  # attention checks run
    max_abs_err_qk: float = 0.0  # vs float64
    max_abs_err_sv: float = 0.0  # vs float64
    max_tol_ratio: float = 0.0  # worst |err| / tolerance (<= 1 passes)
    exact_mismatches_qk: int = 0  # scores differing from the datapath reference
    exact_mismatches_sv: int = 0  # outputs differing from the datapath reference
    placement_mismatches: int = 0  # K/V elements not where the metadata says
    placement_checked: int = 0  # K/V elements checked
    decode_steps: int = 0  # decode events
    value_writes: int = 0  # single-token Value writes
    commits: int = 0  # CZ commits
    value_write_activations: int = 0  # bank-row activations of decode Value writes + commits
    value_write_cycles: int = 0  # cycle-model cycles of those programs
    value_write_commands: int = 0  # DRAM commands of those programs
    value_write_energy_nj: float = 0.0  # energy model of those programs


def check_scores(keys: np.ndarray, query: np.ndarray, scores: np.ndarray,
                 rep: Report) -> int:
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


def softmax(scores: np.ndarray, d_head: int) -> np.ndarray:
    """Return the host's softmax of bf16 ``scores`` ``(heads, n)`` scaled by 1/sqrt(d_head),
    as bf16 bits (float64 on the host, one rounding)."""
    z = dp.from_bf16(scores) / np.sqrt(d_head)
    p = np.exp(z - z.max(axis=1, keepdims=True))
    return dp.to_bf16(p / p.sum(axis=1, keepdims=True))


def check_outputs(values: np.ndarray, probs: np.ndarray, outs: np.ndarray, plan: SvPlan,
                  index: np.ndarray, blocks: int, block_size: int, rep: Report) -> int:
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


def check_attention(rt: Runtime, ex: Executor, data: Tokens, req: int, conv: int, step: int,
                    seed: int, rep: Report, sink: list[Instruction] | None = None) -> None:
    """Run QK^T and SV of one request in every layer on ``ex``; compare with the references.

    The query of ``(req, step)`` is random (from ``seed``), the scores' softmax is computed on
    the host; every program run is appended to ``sink`` when given.
    """
    c = rt.config
    n = rt.seq_len(req)
    keys, values = data.span(conv, 0, n)  # the request's logical sequence
    idx = rt.token_index(req)
    blocks = len(rt.table(req))
    rng = np.random.default_rng([seed, req, step, 7])
    query = dp.to_bf16(rng.standard_normal((c.n_layers, c.heads, c.d_head)))
    rep.attends += 1
    for layer in range(c.n_layers):
        prog, plan = rt.qk(req, layer, query[layer])
        scores = plan.decode(ex.run(prog).readouts, c)[:, idx]
        if sink is not None:
            sink += prog
        rep.exact_mismatches_qk += check_scores(keys[layer], query[layer], scores, rep)
        sv_in = softmax(scores, c.d_head)
        prog, splan = rt.sv(req, layer, sv_in)
        outs = splan.decode(ex.run(prog).readouts, c)
        if sink is not None:
            sink += prog
        rep.exact_mismatches_sv += check_outputs(values[layer], sv_in, outs, splan, idx,
                                                 blocks, c.block_size, rep)


#: Reads one bank row of a device: ``(channel, bank, row) -> (columns, lanes)`` uint16.
Peek = Callable[[int, int, int], np.ndarray]


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


def check_placements(rt: Runtime, model: FunctionalModel, data: Tokens,
                     origin: dict[int, tuple[int, int]]) -> tuple[int, int]:
    """Read every written token of every bound block from the mats; return (bad, checked).

    A Key element is checked at (channel, bank = offset, row, burst, lane) of its O1K; a Value
    element at its CZ slot (lane = offset) or O1V, as :meth:`Runtime.placements` says.
    """
    rows: dict[tuple[int, int, int], np.ndarray] = {}

    def peek(ch: int, bank: int, row: int) -> np.ndarray:
        key = (ch, bank, row)
        if key not in rows:
            rows[key] = model.peek(ch, bank, row)
        return rows[key]

    bad = checked = 0
    for bid, meta in rt.blocks.items():
        conv, pos0 = origin[bid]
        keys, values = data.span(conv, pos0, meta.filled)
        b, n, _ = block_errors(rt, peek, bid, keys, values, range(meta.filled))
        bad += b
        checked += n
    return bad, checked
