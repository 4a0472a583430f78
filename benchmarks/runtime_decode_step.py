"""How long PATTON takes to place and assemble one decode step, next to the device's time.

Llama-3-8B, one layer (every layer is laid out alike), 32 requests with 2,048 tokens each
(128 full blocks). One decode step appends token 2,049 to every request: a new block is bound
(allocation), the Key and Value of the token are written (CZ), then one QK^T and one SV program
are assembled for all requests (:meth:`Runtime.qk_step`, :meth:`Runtime.sv_step`; the scores
come in table layout, as QK^T returns them). A second step (token 2,050, no allocation) shows
the steady state (best of ``--steady`` consecutive steps). Assembly builds columnar programs
(:class:`patton.runtime.program.Program`); expanding them to ``Instruction`` objects, which the
cycle model, the functional model and the trace writer take, is timed separately. Times are the best of 3 in Python (the set-up's objects
frozen out of the garbage collector's scans, as a long-running server would); the programs run
on the cycle model (0.5 ns per cycle).

SV takes the scores in an array from :meth:`Runtime.sv_buffer` (row "buffer": it stands for
the caller's own zeroed score array, and at a boundary it also lays out the step's templates),
which becomes the program's payload; row "sv" times :meth:`Runtime.sv_step` on it. Row "sv
copy" passes the scores as an ordinary array, which ``sv_step`` copies into the payload.

    python benchmarks/runtime_decode_step.py [--requests 32] [--tokens 2048] [--steady 4]
        [--no-cycles]
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
    reqs = list(range(requests))
    t: dict[str, float] = {}
    start = time.perf_counter()
    items = []
    kv = rng.integers(0x3000, 0x4000, (2, 1, 1, c.heads, c.d_head)).astype(np.uint16)
    for req in reqs:
        table = rt.requests[req].table
        last = rt.blocks[table[-1]]
        if last.full:
            rt.allocate(req, next_id)
            items.append((next_id, 0, kv[0], kv[1]))
            next_id += 1
        else:
            items.append((last.block_id, last.filled, kv[0], kv[1]))
    t["place"] = time.perf_counter() - start
    start = time.perf_counter()
    w = rt.write_program(items)
    t["writes"] = time.perf_counter() - start
    progs = {"writes": [w.key, w.value, w.commit]}
    query = rng.integers(0x3000, 0x4000, (requests, c.heads, c.d_head)).astype(np.uint16)
    start = time.perf_counter()
    progs["qk"] = rt.qk_step(reqs, 0, query)[0]
    t["qk"] = time.perf_counter() - start
    width = max(len(rt.requests[r].table) for r in reqs) * c.block_size
    probs = np.zeros((requests, c.heads, width), dtype=np.uint16)
    for k, req in enumerate(reqs):
        probs[k][:, rt.token_index(req)] = 0x3800
    start = time.perf_counter()
    buf = rt.sv_buffer(reqs, 0, width)  # allocated where the program reads the scores
    t["buffer"] = time.perf_counter() - start
    buf[:] = probs  # the caller's softmax output (not timed)
    start = time.perf_counter()
    progs["sv"] = rt.sv_step(reqs, 0, buf)[0]
    t["sv"] = time.perf_counter() - start
    start = time.perf_counter()
    progs["sv copy"] = rt.sv_step(reqs, 0, probs)[0]  # batch reused from "sv"
    t["sv copy"] = time.perf_counter() - start
    lists = {}
    for key, prog in progs.items():
        start = time.perf_counter()
        lists[key] = [i for p in prog for i in p.to_instructions()] if isinstance(prog, list) \
            else prog.to_instructions()
        t[key + "_expand"] = time.perf_counter() - start
    return {"times": t, "programs": lists, "next_id": next_id}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--steady", type=int, default=4, help="steady steps per run (best of)")
    ap.add_argument("--no-cycles", action="store_true")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    best: dict[str, dict[str, float]] = {}
    for _ in range(3):
        rt = build(args.requests, args.tokens)
        gc.collect()
        gc.freeze()  # the long-lived metadata is not rescanned by every young collection
        next_id = 10**6
        # the previous step built the attention programs of these tables
        rt.qk_step(list(range(args.requests)), 0,
                   np.zeros((args.requests, rt.config.heads, rt.config.d_head), np.uint16))
        runs = {}
        for name, steps in (("boundary", 1), ("steady", args.steady)):
            for _ in range(steps):
                r = step(rt, args.requests, next_id, rng)
                next_id = r["next_id"]
                runs[name] = r
                for k, v in r["times"].items():
                    best.setdefault(name, {})[k] = min(best.get(name, {}).get(k, 1e9), v)
    cm = CycleModel()
    eoc = [Instruction(Opcode.EOC)]
    print(f"Llama-3-8B, 1 layer, {args.requests} requests x {args.tokens} tokens")
    print(f"{'step':9} {'phase':7} {'instr':>7} {'assemble ms':>11} {'expand ms':>9} "
          f"{'device us':>9} {'assemble/device':>15}")
    for name, r in runs.items():
        tt = best[name]
        print(f"{name:9} {'place':7} {'':7} {tt['place'] * 1e3:11.3f}")
        print(f"{name:9} {'buffer':7} {'':7} {tt['buffer'] * 1e3:11.3f}")
        for phase in ("writes", "qk", "sv", "sv copy")[:3 if name == "boundary" else 4]:
            prog = r["programs"][phase]
            cyc = cm.run(prog + eoc).cycles if not args.no_cycles else 0
            dev = cyc * 0.5e-3
            ratio = f"{tt[phase] * 1e6 / dev:15.2f}" if dev else ""
            print(f"{name:9} {phase:7} {len(prog):7d} {tt[phase] * 1e3:11.3f} "
                  f"{tt[phase + '_expand'] * 1e3:9.2f} {dev:9.1f} {ratio}")


if __name__ == "__main__":
    main()
