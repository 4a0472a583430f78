"""Commit Zone ablation: row activations, cycles and energy of single-token Value writes.

A decode-only scenario (every request prefilled with 100-200 tokens, then ``--steps``
decode steps, commits included) is generated once and replayed with the Commit Zone (CZ
slots, ``W MEM`` grouped by CRS row), without it using ``WR_ABK`` (one scatter write per
Value row), and without it using ``W MEM`` (one masked burst per bank and Value row, as the
paper describes). Every decode step's Value-write program runs on the cycle model.

    python benchmarks/runtime_value_writes.py [--model llama3-8b] [--requests 32] [--steps 32]
"""

from __future__ import annotations

import argparse
import json
import time

from patton.runtime.config import MODELS, Config, model
from patton.runtime.metadata import Mode
from patton.sim.serving.loop import execute
from patton.sim.serving.scenario import generate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="llama3-8b", choices=sorted(MODELS))
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    c = Config(model(args.model), layers=1)
    log = generate(c, requests=args.requests, steps=args.steps, seed=args.seed,
                   prompt=(100, 200), decode=(10**6, 10**6 + 1), attend_every=10**9)
    out = {}
    for name, mode, op in (("cz", Mode.PATTON, "abk"), ("no_cz_abk", Mode.NO_CZ, "abk"),
                           ("no_cz_mem", Mode.NO_CZ, "mem")):
        start = time.perf_counter()
        _, r = execute(c, log, mode, seed=args.seed, functional=False, cycles=True,
                       token_op=op)
        out[name] = {"activations": r.value_write_activations, "cycles": r.value_write_cycles,
                     "commands": r.value_write_commands, "energy_nj": r.value_write_energy_nj,
                     "writes": r.value_writes, "commits": r.commits,
                     "seconds": round(time.perf_counter() - start, 1)}
    cz = out["cz"]
    for name in ("no_cz_abk", "no_cz_mem"):
        o = out[name]
        out[f"{name}_over_cz"] = {k: o[k] / cz[k] for k in ("activations", "cycles",
                                                             "energy_nj")}
    if args.json:
        print(json.dumps(out))
        return
    print(f"{args.model}, 1 layer, {args.requests} requests, {args.steps} decode steps")
    for name, row in out.items():
        print(f"{name:18} {row}")


if __name__ == "__main__":
    main()
