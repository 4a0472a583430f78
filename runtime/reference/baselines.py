"""NumPy references of the baselines' attention, exact against the documented MAC datapath.

QK^T scores are :func:`patton.runtime.reference.attention.qk_exact`'s (one accumulator over
``E`` MAC16s per token, from a zero bias). SV follows a baseline :class:`~.programs.UnitSvPlan`:
per head, channel (ascending) and segment (in order), one accumulator over the segment's
units in column order, read out as bf16 and summed on the host in float32 in that order,
which is the order :meth:`UnitSvPlan.decode` sums the read-outs in.
"""

from __future__ import annotations

import numpy as np
from patton.runtime.baselines.geometry import UNIT
from patton.runtime.baselines.programs import UnitSvPlan
from patton.sim import datapath as dp

__all__ = ["sv_exact"]


def sv_exact(plan: UnitSvPlan, head: int, values: np.ndarray, probs: np.ndarray) -> np.ndarray:
    """Return float32 outputs ``(D,)`` of ``head``.

    Args:
        plan: the request's SV plan.
        head: KV head.
        values: ``(table length * T, D)`` Value bits in table layout, zero past each block's
            last token.
        probs: ``(table length * T,)`` score bits in table layout, zero likewise.
    """
    d = values.shape[1]
    out = np.zeros(d, dtype=np.float32)
    for (h, _c), segments in sorted(plan.segments.items()):
        if h != head:
            continue
        for runs in segments:
            acc = np.zeros(d, dtype=np.uint32)
            for run in runs:
                for u in run:
                    v = values[u * UNIT:(u + 1) * UNIT]
                    p = probs[u * UNIT:(u + 1) * UNIT]
                    acc = dp.mac(acc, v.T, np.broadcast_to(p, (d, UNIT)))
            out += dp.from_bf16(dp.readout(acc)).astype(np.float32)
    return out
