"""One decode step of one layer on every runtime: cycles of the Key and Value writes, QK^T, SV.

Every runtime (PATTON's variants and the four baselines) is sized for the whole 16 GiB device,
given ``--requests`` requests of ``--tokens`` tokens each (blocks filled in request-interleaved
order, as a batch that prefilled together), then one decode token each: the step's Key writes,
Value writes (and Commit Zone commits), one QK^T and one SV program of layer 0, each timed on
a fresh cycle model under both front ends (``shared``: the public simulator's decoder,
``per_channel``: one per channel). It isolates the layouts' GEMV and write efficiency from
capacity and recomputation, which only a serving run shows (``patton repro``).

``--runtime`` runs only the runtimes named; ``--aligned on|off`` overrides the baselines'
``Policy.aligned`` (whether a request's KV head starts on all its channels at one step;
``docs/baselines.md``); ``--json`` prints the rows as one JSON object instead of the table.

    python benchmarks/baseline_decode_step.py [--model llama3-8b] [--requests 32] [--tokens 1024]
        [--runtime NAME ...] [--aligned policy|on|off] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
from patton.runtime.models import MODELS
from patton.serving.adapter import attach
from patton.serving.capacity import RUNTIMES
from patton.sim.executor import CycleExecutor

PARTS = ("K write", "V write", "commit", "QK^T", "SV")


def step(name: str, model: str, requests: int, tokens: int,
         aligned: bool | None = None) -> dict[str, object]:
    """Return the step's programs' cycles per front end and the time to generate them;
    ``aligned`` (a baseline only) overrides its policy's ``aligned``."""
    rt = attach(name, MODELS[model]).runtime
    assert rt is not None
    if aligned is not None:
        policy = getattr(rt, "policy", None)
        if policy is None:
            raise SystemExit(f"--aligned: {name} is not a baseline (it has no policy)")
        policy.aligned = aligned
    c = rt.config
    t = c.block_size
    next_id = 1
    for _ in range(-(-tokens // t)):
        for r in range(requests):
            rt.allocate(r, next_id)
            z = np.zeros((c.n_layers, t, c.heads, c.d_head), np.uint16)
            rt.write_many([(next_id, 0, z, z)], emit=False)
            next_id += 1
    reqs = list(range(requests))
    ids = []
    for r in reqs:
        rt.allocate(r, next_id)
        ids.append(next_id)
        next_id += 1
    one = np.full((requests, c.n_layers, c.heads, c.d_head), 0x3F80, np.uint16)
    t0 = time.perf_counter()
    wp = rt.append(ids, one, one)
    qk, _ = rt.qk_step(reqs, 0, np.full((requests, c.heads, c.d_head), 0x3F80, np.uint16))
    width = max(len(rt.table(r)) for r in reqs) * t
    sv, _ = rt.sv_step(reqs, 0, rt.sv_buffer(reqs, 0, width))
    out: dict[str, object] = {"generate_ms": (time.perf_counter() - t0) * 1e3}
    for frontend in ("shared", "per_channel"):
        ex = CycleExecutor(frontend=frontend)
        out[frontend] = [ex.run(p).cycles if len(p) else 0
                         for p in (wp.key, wp.value, wp.commit, qk, sv)]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="llama3-8b", choices=sorted(MODELS))
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--tokens", type=int, default=1024)
    ap.add_argument("--runtime", nargs="+", choices=RUNTIMES[1:], default=list(RUNTIMES[1:]),
                    metavar="NAME", help="runtimes to run (default: all but gpu)")
    ap.add_argument("--aligned", choices=("policy", "on", "off"), default="policy",
                    help="the baselines' aligned timelines: their policy's (default), on, off")
    ap.add_argument("--json", action="store_true",
                    help="print one JSON object (rows of cycles per part) instead of the table")
    args = ap.parse_args()
    aligned = None if args.aligned == "policy" else args.aligned == "on"
    rows: list[dict[str, object]] = []
    if not args.json:
        print(f"{args.model}: {args.requests} requests x {args.tokens} tokens, one decode "
              "token each, layer 0 (cycles)")
        print(f"{'runtime':14s} {'front end':11s} " + " ".join(f"{p:>9s}" for p in PARTS)
              + f" {'total':>9s} {'gen ms':>7s}")
    for name in args.runtime:
        if args.json:
            print(f"{name} ...", file=sys.stderr, flush=True)
        r = step(name, args.model, args.requests, args.tokens, aligned)
        for frontend in ("shared", "per_channel"):
            cyc = r[frontend]
            assert isinstance(cyc, list)
            rows.append({"runtime": name, "frontend": frontend,
                         **dict(zip(PARTS, cyc)), "total": sum(cyc),
                         "generate_ms": r["generate_ms"]})
            if not args.json:
                print(f"{name:14s} {frontend:11s} " + " ".join(f"{x:9,d}" for x in cyc)
                      + f" {sum(cyc):9,d} {r['generate_ms']:7.0f}")
    if args.json:
        print(json.dumps({"model": args.model, "requests": args.requests,
                          "tokens": args.tokens, "aligned": args.aligned, "rows": rows},
                         indent=1))


if __name__ == "__main__":
    main()
