"""What a serving replay checks: attention against the references, placements in the mats.

:func:`check_attention` runs one request's QK^T and SV in every layer and compares each score
and output read back with :mod:`patton.runtime.reference_attention`: bit-exact against the
documented datapath in the plan's order, and within :data:`TOLERANCE` of float64.
:func:`check_placements` reads every written token of every bound block from the mats where
the metadata says. Both add to a :class:`Report`, which also carries the Value-write figures
:func:`patton.sim.serving.loop.execute` measures.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from patton.runtime import reference_attention as ref
from patton.runtime.lifecycle import Runtime
from patton.runtime.metadata import CzPlace
from patton.sim import datapath as dp
from patton.sim.executor import Executor
from patton.sim.functional import FunctionalModel
from patton.sim.isa import Instruction
from patton.sim.serving.scenario import Tokens

#: Stated float64 tolerance, relative to ``sum |a_i b_i|`` of each dot product: one bf16
#: read-out rounding per segment (at most 2**-8 of the partial, reached when one term dominates
#: and the result sits just above a power of two) plus 2**-16 for the accumulator's error
#: (below 1e-6, ``docs/numerics.md``) and the host's float32 sums of segment read-outs.
TOLERANCE = 2.0 ** -8 + 2.0 ** -16

__all__ = ["TOLERANCE", "Report", "check_attention", "check_placements"]


@dataclass(slots=True)
class Report:
    """What :func:`~patton.sim.serving.loop.execute` measured and checked."""

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
        sv_in = np.zeros((c.heads, n), dtype=np.uint16)
        for g in range(c.heads):
            k, q = keys[layer, :, g], query[layer, g]
            exact = ref.qk_exact(k, q)
            rep.exact_mismatches_qk += int((exact != scores[g]).sum())
            got = dp.from_bf16(scores[g])
            err = np.abs(got - ref.qk_float(k, q))
            bound = TOLERANCE * (np.abs(dp.from_bf16(k)) @ np.abs(dp.from_bf16(q))) + 1e-30
            rep.max_abs_err_qk = max(rep.max_abs_err_qk, float(err.max()))
            rep.max_tol_ratio = max(rep.max_tol_ratio, float((err / bound).max()))
            z = got / np.sqrt(c.d_head)
            p = np.exp(z - z.max())
            sv_in[g] = dp.to_bf16(p / p.sum())
        prog, splan = rt.sv(req, layer, sv_in)
        outs = splan.decode(ex.run(prog).readouts, c)
        if sink is not None:
            sink += prog
        for g in range(c.heads):
            vb = np.zeros((blocks * c.block_size, c.d_head), dtype=np.uint16)
            pb = np.zeros(blocks * c.block_size, dtype=np.uint16)
            vb[idx], pb[idx] = values[layer, :, g], sv_in[g]
            exact = ref.sv_exact(vb.reshape(blocks, c.block_size, -1),
                                 pb.reshape(blocks, c.block_size), splan)
            rep.exact_mismatches_sv += int((exact != outs[g]).sum())
            v, p = values[layer, :, g], sv_in[g]
            err = np.abs(outs[g] - ref.sv_float(v, p))
            bound = TOLERANCE * (np.abs(dp.from_bf16(p)) @ np.abs(dp.from_bf16(v))) + 1e-30
            rep.max_abs_err_sv = max(rep.max_abs_err_sv, float(err.max()))
            rep.max_tol_ratio = max(rep.max_tol_ratio, float((err / bound).max()))


def check_placements(rt: Runtime, model: FunctionalModel, data: Tokens,
                     origin: dict[int, tuple[int, int]]) -> tuple[int, int]:
    """Read every written token of every bound block from the mats; return (bad, checked).

    A Key element is checked at (channel, bank = offset, row, burst, lane) of its O1K; a Value
    element at its CZ slot (lane = offset) or O1V, as :meth:`Runtime.placements` says.
    """
    c = rt.config
    rows: dict[tuple[int, int, int], np.ndarray] = {}

    def peek(ch: int, bank: int, row: int) -> np.ndarray:
        key = (ch, bank, row)
        if key not in rows:
            rows[key] = model.peek(ch, bank, row)
        return rows[key]

    bad = checked = 0
    e, banks = c.bursts, c.device.banks
    for bid, meta in rt.blocks.items():
        conv, pos0 = origin[bid]
        kp, vp = rt.placements(bid)
        keys, values = data.span(conv, pos0, meta.filled)
        for layer in range(c.n_layers):
            for g in range(c.heads):
                kch = c.channel(g, kp.p)
                krow = c.row(layer, kp.row)
                for t in range(meta.filled):
                    got = peek(kch, t, krow)[kp.col:kp.col + e].reshape(-1)
                    bad += int((got != keys[layer, t, g]).sum())
                    checked += c.d_head
                for p in range(c.ch_per_head):
                    ch = c.channel(g, p)
                    for i in range(c.v_rows):
                        if isinstance(vp, CzPlace):
                            row, col = c.row(layer, vp.row), vp.col0 + i
                        else:
                            row, col = c.row(layer, vp.row0 + i), vp.col
                        for b in range(banks):
                            got = peek(ch, b, row)[col, :meta.filled]
                            want = values[layer, :, g, c.value_dim(p, i, b)]
                            bad += int((got != want).sum())
                            checked += meta.filled
    return bad, checked
