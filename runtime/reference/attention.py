"""NumPy attention references: exact against the documented MAC datapath, and float64.

The exact references replay the reduction order a plan fixes (``docs/numerics.md``): each
token score is one accumulator over ``E`` MAC16s from a zero bias, read out as bf16; each SV
output is, per segment, one accumulator over the segment's blocks in order, read out as bf16
and summed on the host in float32 in segment order.
"""

from __future__ import annotations

import numpy as np
from patton.runtime.programs.plans import SvPlan
from patton.sim import datapath as dp

__all__ = ["qk_exact", "sv_exact", "qk_float", "sv_float"]


def qk_exact(keys: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Return bf16 scores of ``keys`` ``(n, D)`` against ``query`` ``(D,)`` (bit patterns)."""
    n, d = keys.shape
    lanes = 16
    a = keys.reshape(n, d // lanes, lanes)
    b = np.broadcast_to(query.reshape(d // lanes, lanes), a.shape)
    return dp.readout(dp.accumulate(np.zeros(n, dtype=np.uint32), a, b))


def sv_exact(blocks: np.ndarray, probs: np.ndarray, plan: SvPlan) -> np.ndarray:
    """Return float32 SV outputs ``(D,)`` for one head.

    Args:
        blocks: ``(table length, T, D)`` Value bits, zero past each block's last token.
        probs: ``(table length, T)`` score bits, zero past each block's last token.
        plan: the segments the program used.
    """
    d = blocks.shape[2]
    out = np.zeros(d, dtype=np.float32)
    for seg in plan.segments:
        acc = np.zeros(d, dtype=np.uint32)
        for run in seg.runs:
            for pos in range(run.first, run.first + run.count):
                acc = dp.mac(acc, blocks[pos].T, np.broadcast_to(probs[pos], (d, probs.shape[1])))
        out += dp.from_bf16(dp.readout(acc)).astype(np.float32)
    return out


def qk_float(keys: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Return float64 scores ``keys @ query`` of bf16 bit patterns."""
    return dp.from_bf16(keys) @ dp.from_bf16(query)


def sv_float(values: np.ndarray, probs: np.ndarray) -> np.ndarray:
    """Return float64 ``probs @ values`` (``(n,)`` and ``(n, D)`` bf16 bit patterns)."""
    return dp.from_bf16(probs) @ dp.from_bf16(values)
