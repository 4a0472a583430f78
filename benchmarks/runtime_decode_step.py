"""How long PATTON takes to place and generate one decode step, next to the device's time.

Llama-3-8B, one layer (every layer is laid out alike), 32 requests with 2,048 tokens each
(128 full blocks). One decode step appends token 2,049 to every request: a new block is bound
(allocation), the Key and Value of the token are written (CZ), then QK^T and SV programs are
assembled for every request. A second step (token 2,050, no allocation) shows the steady
state. Generation is timed in Python (best of 3, with the set-up's objects frozen out of the
garbage collector's scans, as a long-running server would); the programs run on the cycle
model.

    python benchmarks/runtime_decode_step.py [--requests 32] [--tokens 2048] [--no-cycles]
"""

from __future__ import annotations

import argparse
import gc
import time

import numpy as np

from patton.runtime.config import Config, model
from patton.runtime.lifecycle import Runtime
from patton.sim.cycle_model import CycleModel
from patton.sim.isa import Instruction, Opcode


def build(requests: int, tokens: int) -> Runtime:
    c = Config(model("llama3-8b"), layers=1)
    rt = Runtime(c)
    bid = 0
    zeros = np.zeros((1, 16, c.heads, c.d_head), dtype=np.uint16)
    for block in range(tokens // 16):
        for req in range(requests):
            rt.allocate(req, bid)
            rt.write_many([(bid, 0, zeros, zeros)], emit=False)
            bid += 1
    return rt


def step(rt: Runtime, requests: int, next_id: int, rng: np.random.Generator) -> dict:
    c = rt.config
    t = {}
    start = time.perf_counter()
    items = []
    kv = rng.integers(0x3000, 0x4000, (2, 1, 1, c.heads, c.d_head)).astype(np.uint16)
    for req in range(requests):
        table = rt.requests[req].table
        last = rt.blocks[table[-1]]
        if last.full:
            rt.allocate(req, next_id)
            items.append((next_id, 0, kv[0], kv[1]))
            next_id += 1
        else:
            items.append((last.block_id, last.filled, kv[0], kv[1]))
    t["placement_s"] = time.perf_counter() - start
    start = time.perf_counter()
    writes = rt.write_many(items)
    t["writes_s"] = time.perf_counter() - start
    query = rng.integers(0x3000, 0x4000, (c.heads, c.d_head)).astype(np.uint16)
    start = time.perf_counter()
    qk = []
    for req in range(requests):
        qk += rt.qk(req, 0, query)[0]
    t["qk_s"] = time.perf_counter() - start
    start = time.perf_counter()
    sv = []
    for req in range(requests):
        n = rt.seq_len(req)
        sv += rt.sv(req, 0, np.full((c.heads, n), 0x3800, dtype=np.uint16))[0]
    t["sv_s"] = time.perf_counter() - start
    return {"times": t, "programs": {"writes": writes.all, "qk": qk, "sv": sv},
            "next_id": next_id}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--no-cycles", action="store_true")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    best: dict[str, dict[str, float]] = {}
    for _ in range(3):
        rt = build(args.requests, args.tokens)
        gc.collect()
        gc.freeze()  # the long-lived metadata is not rescanned by every young collection
        next_id = 10**6
        # warm the per-request program caches as binding would (the previous step built them)
        for req in range(args.requests):
            rt.qk(req, 0, np.zeros((rt.config.heads, rt.config.d_head), np.uint16))
        runs = {}
        for name in ("boundary", "steady"):
            r = step(rt, args.requests, next_id, rng)
            next_id = r["next_id"]
            runs[name] = r
            for k, v in r["times"].items():
                best.setdefault(name, {})[k] = min(best.get(name, {}).get(k, 1e9), v)
    cm = CycleModel()
    eoc = [Instruction(Opcode.EOC)]
    print(f"Llama-3-8B, 1 layer, {args.requests} requests x {args.tokens} tokens")
    print(f"{'step':9} {'phase':7} {'instr':>7} {'gen ms':>8} {'device us':>10} {'cycles':>9}")
    for name, r in runs.items():
        tt = best[name]
        phases = [("place", None, tt["placement_s"]), ("writes", "writes", tt["writes_s"]),
                  ("qk", "qk", tt["qk_s"]), ("sv", "sv", tt["sv_s"])]
        for phase, key, sec in phases:
            prog = r["programs"][key] if key else []
            cyc = cm.run(prog + eoc).cycles if key and not args.no_cycles else 0
            print(f"{name:9} {phase:7} {len(prog):7d} {sec * 1e3:8.2f} {cyc * 0.5e-3:10.1f} "
                  f"{cyc:9d}")


if __name__ == "__main__":
    main()
