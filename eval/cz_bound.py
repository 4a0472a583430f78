"""How much of Fig. 8's gap to PATTON-wo-CZ the Commit Zone's SV read-outs explain: a bound.

PATTON reads a request's partial last block from its CZ slot as an SV segment of its own
(``runtime/programs/plans.py``, ``Segment.cz``: per Value row a WR_BIAS, one MAC_ABK and an
RD_MAC), the paper's §4.4 command sequence. Folding those reads into the O1V reductions (or
any other way of reading the partial blocks) costs at least nothing, so a run whose SV
programs leave the CZ segments out (:class:`Unread`) is a lower bound for every such variant.
:func:`run` serves one configuration with ``patton repro``'s workload and settings (Fig. 8's
cost tasks): PATTON, PATTON with the CZ segments left out, or PATTON-wo-CZ
(``benchmarks/fig8_cz_bound.py`` prints them side by side).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from patton.eval.cost import PARTS, measure, reference
from patton.eval.figures.common import context_limit
from patton.eval.paper import SETTINGS
from patton.eval.tasks import CONVERSATIONS, conversations
from patton.sim.executor import closed
from patton.sim.program import Program

__all__ = ["Unread", "CONFIGURATIONS", "run"]

#: The configurations: (name, runtime, whether the CZ segments are left out).
CONFIGURATIONS = (("patton", "patton", False), ("patton, CZ reads left out", "patton", True),
                  ("patton-wo-cz", "patton-wo-cz", False))


class Unread:
    """Leaves the CZ-slot segments out of every SV program (an observer of the driver whose
    ``program`` hook replaces what the cost run prices)."""

    def __init__(self) -> None:
        self.runtime: Any = None

    def start(self, driver: Any) -> None:
        self.runtime = driver.attached.runtime

    def program(self, work: Any, phase: str, prog: Program) -> Program:
        """The SV program without its CZ segments (every other program as it is)."""
        if phase != "sv":
            return prog
        rt = self.runtime
        c = rt.config
        rids = [e.request for e in work.decode]
        layer = 0
        _, plans = rt.sv_step(rids, layer, rt.sv_buffer(rids, layer, work.width))
        keep: list[int] = []
        pos = 0
        for plan in plans:  # the program is the segments in plan order (layout.sv_sections)
            for seg in plan.segments:
                n = c.heads * len(seg.runs) + c.v_rows * (len(seg.runs) + 2)
                if seg.cz is None:
                    keep.extend(range(pos, pos + n))
                pos += n
        body = prog[:-1]  # without its EOC
        if pos != len(body):
            raise AssertionError(f"SV program of {len(body)} instructions, plans of {pos}")
        return closed(body.take(np.array(keep, dtype=np.int64)))


def run(name: str, frontend: str, steps: int, model: str) -> dict[str, Any]:
    """One configuration of :data:`CONFIGURATIONS` on ``frontend``: its attention parts."""
    runtime, unread = next((r, u) for n, r, u in CONFIGURATIONS if n == name)
    convs = list(conversations(CONVERSATIONS))  # patton repro's workload and settings
    clients, pool = SETTINGS[model]
    limit = context_limit(model, runtime, "common")
    ref = reference(convs, model, steps=steps, clients=clients, pool=pool, max_model_len=limit)
    rc = measure(convs, model, runtime, steps=steps, frontend=frontend, clients=clients,
                 pool=pool, max_model_len=limit, reference=ref,
                 observers=[Unread()] if unread else [])
    return {"name": name, "frontend": frontend, "steps": rc.steps,
            "seconds": {p: rc.parts[p].seconds for p in PARTS},
            "joules": {p: rc.parts[p].joules for p in PARTS}}
