"""One decode step of one layer on every runtime: cycles of the Key and Value writes, QK^T, SV.

Every runtime (PATTON's variants and the four baselines) is sized for the whole 16 GiB device,
given ``--requests`` requests of ``--tokens`` tokens each (blocks filled in request-interleaved
order, as a batch that prefilled together), then one decode token each: the step's Key writes,
Value writes (and Commit Zone commits), one QK^T and one SV program of layer 0, each timed on
a fresh cycle model under both front ends (``shared``: the public simulator's decoder,
``per_channel``: one per channel). It isolates the layouts' GEMV and write efficiency from
capacity and recomputation, which only a serving run shows (``patton repro``).

    python benchmarks/baseline_decode_step.py [--model llama3-8b] [--requests 32] [--tokens 1024]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from patton.runtime.models import MODELS
from patton.serving.adapter import attach
from patton.serving.capacity import RUNTIMES
from patton.sim.executor import CycleExecutor

PARTS = ("K write", "V write", "commit", "QK^T", "SV")


def step(name: str, model: str, requests: int, tokens: int) -> dict[str, object]:
    """Return the step's programs' cycles per front end and the time to generate them."""
    rt = attach(name, MODELS[model]).runtime
    assert rt is not None
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
    args = ap.parse_args()
    print(f"{args.model}: {args.requests} requests x {args.tokens} tokens, one decode token "
          "each, layer 0 (cycles)")
    print(f"{'runtime':14s} {'front end':11s} " + " ".join(f"{p:>9s}" for p in PARTS)
          + f" {'total':>9s} {'gen ms':>7s}")
    for name in RUNTIMES[1:]:
        r = step(name, args.model, args.requests, args.tokens)
        for frontend in ("shared", "per_channel"):
            cyc = r[frontend]
            assert isinstance(cyc, list)
            print(f"{name:14s} {frontend:11s} " + " ".join(f"{x:9,d}" for x in cyc)
                  + f" {sum(cyc):9,d} {r['generate_ms']:7.0f}")


if __name__ == "__main__":
    main()
