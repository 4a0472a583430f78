"""How much of Fig. 8's gap to PATTON-wo-CZ the Commit Zone's SV read-outs explain: a bound.

Per front end, serves the same workload three times (PATTON, PATTON with the CZ segments of
its SV programs left out, PATTON-wo-CZ) with ``patton repro``'s workload and settings
(:mod:`patton.eval.cz_bound`), and prints each run's attention parts and its latency and
energy against wo-CZ, and the share of wo-CZ's attention its Value writes would need for the
paper's pair of figures (13.0 % less latency from Value writes 5x faster: 16 %).

    python benchmarks/fig8_cz_bound.py [--steps 2000] [--model llama3-8b] [--workers 2] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures import ProcessPoolExecutor

from patton.eval.cost import PARTS
from patton.eval.cz_bound import CONFIGURATIONS, run

#: The paper's Fig. 8: PATTON's attention latency reduction and Value-write speedup vs wo-CZ.
PAPER_REDUCTION, PAPER_SPEEDUP = 0.130, 5.0


def one(job: tuple[str, str, int, str]) -> dict:
    """Run one configuration: ``(name, frontend, steps, model)``."""
    return run(*job)


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
    jobs = [(n, f, a.steps, a.model) for f in ("shared", "per_channel")
            for n, _, _ in CONFIGURATIONS]
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
