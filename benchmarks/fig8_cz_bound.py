"""How much of Fig. 8's gap to PATTON-wo-CZ the Commit Zone's SV read-outs explain: a bound.

PATTON reads a request's partial last block from its CZ slot as an SV segment of its own
(``runtime/programs/plans.py``, ``Segment.cz``: per Value row a WR_BIAS, one MAC_ABK and an RD_MAC),
the paper's §4.4 command sequence. Folding those reads into the O1V reductions (or any other
way of reading the partial blocks) costs at least nothing, so a run whose SV programs leave
the CZ segments out (:class:`Unread`) is a lower bound for every such variant. Per front end
the script serves the same workload three times (PATTON, PATTON with the CZ segments left out,
PATTON-wo-CZ) through ``run_cost``, with ``patton repro``'s workload and settings (the same
runs as Fig. 8's cost tasks), and prints each run's attention parts and its latency and
energy against wo-CZ, and the share of wo-CZ's attention its Value writes would need for the
paper's pair of figures (13.0 % less latency from Value writes 5x faster: 16 %).

    python benchmarks/fig8_cz_bound.py [--steps 2000] [--model llama3-8b] [--workers 2] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures import ProcessPoolExecutor

import numpy as np
from patton.eval.paper import SETTINGS
from patton.eval.plan import max_model_len
from patton.eval.tasks import CONVERSATIONS, conversations
from patton.sim.executor import closed
from patton.eval import cost as run_cost
from patton.eval.cost import PARTS

#: The paper's Fig. 8: PATTON's attention latency reduction and Value-write speedup vs wo-CZ.
PAPER_REDUCTION, PAPER_SPEEDUP = 0.130, 5.0


class Unread(run_cost._Meter):
    """A PATTON run whose SV programs leave out the CZ-slot segments (the bound)."""

    def _programs(self, work):  # noqa: ANN001, ANN202 (run_cost's private types)
        progs = super()._programs(work)
        if not work.decode:
            return progs
        c = self.cfg
        rids = [rid for _, rid, _ in work.decode]
        sv, plans = self.rt.sv_step(rids, 0, self.rt.sv_buffer(rids, 0, work.width))
        keep: list[int] = []
        pos = 0
        for plan in plans:  # the program is the segments in plan order (layout.sv_sections)
            for seg in plan.segments:
                n = c.heads * len(seg.runs) + c.v_rows * (len(seg.runs) + 2)
                if seg.cz is None:
                    keep.extend(range(pos, pos + n))
                pos += n
        if pos != len(sv):
            raise AssertionError(f"SV program of {len(sv)} instructions, plans of {pos}")
        bound = closed(sv.take(np.array(keep, dtype=np.int64)))
        return [(p, bound if p == "sv" else prog, r) for p, prog, r in progs]


def one(args: tuple[str, str, str, int, str]) -> dict:
    """Run one configuration: ``(name, runtime, frontend, steps, model)`` -> its parts."""
    name, runtime, frontend, steps, model = args
    meter_class = Unread if name == "patton, CZ reads left out" else run_cost._Meter
    convs = list(conversations(CONVERSATIONS))  # patton repro's workload and settings
    clients, pool = SETTINGS[model]
    limit = max_model_len(model)
    ref = run_cost.reference(convs, model, steps=steps, clients=clients, pool=pool,
                             max_model_len=limit)
    spec = run_cost._model(model)
    meter = meter_class(convs, [spec], runtime, steps=steps, frontends=[frontend],
                        clients=clients, pool=pool, max_model_len=limit,
                        max_batched_tokens=2048, refs=[ref], check=False, num_blocks=None)
    (rc,) = meter.run(None).values()
    return {"name": name, "frontend": frontend, "steps": rc.steps,
            "seconds": {p: rc.parts[p].seconds for p in PARTS},
            "joules": {p: rc.parts[p].joules for p in PARTS}}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--model", default="llama3-8b")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    if a.steps < 1 or a.workers < 1:
        print("error: --steps and --workers must be positive", file=sys.stderr)
        return 2
    names = (("patton", "patton"), ("patton, CZ reads left out", "patton"),
             ("patton-wo-cz", "patton-wo-cz"))
    jobs = [(n, r, f, a.steps, a.model) for f in ("shared", "per_channel") for n, r in names]
    if a.workers == 1:  # in this process
        results = [one(j) for j in jobs]
    else:
        with ProcessPoolExecutor(a.workers) as pool:
            results = list(pool.map(one, jobs))
    if a.json:
        print(json.dumps(results, indent=1))
        return 0
    need = PAPER_REDUCTION / (1 - 1 / PAPER_SPEEDUP)
    print(f"{a.model}, {results[0]['steps']} steps; the paper's -13.0 % from 5x faster Value "
          f"writes needs them at {need:.1%} of wo-CZ's attention")
    for f in ("shared", "per_channel"):
        rows = [r for r in results if r["frontend"] == f]
        wo = next(r for r in rows if r["name"] == "patton-wo-cz")
        lat_wo, en_wo = sum(wo["seconds"].values()), sum(wo["joules"].values())
        print(f"\n{f} front end (seconds: K write / V write / QK^T / SV)")
        for r in rows:
            lat, en = sum(r["seconds"].values()), sum(r["joules"].values())
            parts = " / ".join(f"{r['seconds'][p]:.4g}" for p in PARTS)
            print(f"  {r['name']:27s} {parts}  total {lat:.4g} s; reduction vs wo-CZ: "
                  f"latency {1 - lat / lat_wo:+.1%}, energy {1 - en / en_wo:+.1%}")
        share = wo["seconds"]["v_write"] / lat_wo
        print(f"  wo-CZ's Value writes: {share:.1%} of its attention")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
