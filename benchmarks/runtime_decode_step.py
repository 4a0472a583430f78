"""How long PATTON takes to place and assemble one decode step, next to the device's time.

Llama-3-8B, one layer (every layer is laid out alike), 32 requests, set up with 2,031 tokens
each; ``--warm`` (16) untimed decode steps, one block's worth, bring them to 2,047 tokens (127
full blocks and one of 15 tokens in its Commit Zone slot) with the runtime's caches and the
memory allocator in the state of a server that has been decoding. Decode steps then run back
to back, as an engine's decode loop calls the runtime:

* "commit": token 2,048 fills every last block, which is committed to its O1V (the SV
  programs change: a CZ block becomes part of an O1V run);
* "boundary": token 2,049 binds a new block per request (allocation; the QK^T and SV
  programs grow by one block, the token goes to a new CZ slot);
* "steady": tokens 2,050 .. (no allocation), best of ``--steady`` consecutive steps.

Each step times: "place" (what an engine does to pick each request's block: bind a new one
when the last is full), "writes" (:meth:`Runtime.append`: the Key and Value programs of the
step's tokens), "qk" (:meth:`Runtime.qk_step` for all requests), "buffer"
(:meth:`Runtime.sv_buffer`: the zeroed score array, in table layout, that becomes the SV
payload; it stands for the caller's own score array, and when a table changed it
includes patching or laying out the SV batch), "sv" (:meth:`Runtime.sv_step` on it) and
"sv copy" (``sv_step`` on an ordinary array, which it copies). The step's "total" is
place + writes + qk + sv, and "+buffer" adds the buffer (which holds the SV layout work at a
step that changed a table).
The model's Keys, Values, query and scores are made outside the timed regions. Times are the
best of 3 runs in Python (the set-up's objects frozen out of the garbage collector's scans, as
a long-running server would). With ``--cold``, a 64 MB pass evicts the CPU caches before
every timed phase (the worst case: a host that did unrelated work in between). With
``--stagger``, the requests' last blocks are at every fill level (request ``r`` is
``(r * 16 / requests) % 16`` tokens behind), as in a server whose requests arrived at
different times: every step then binds a block in two requests and commits two others
("staggered", best of ``--steady`` steps).

Assembly builds columnar programs (:class:`patton.sim.program.Program`). Expanding them to
``Instruction`` objects, which the cycle model, the functional model and the trace writer take
(an engine does not), is timed once per step kind after the runs, outside the decode loop, and
the programs run on the cycle model (0.5 ns per cycle) for the device time.

    python benchmarks/runtime_decode_step.py [--requests 32] [--tokens 2048] [--steady 4]
        [--warm 16] [--cold] [--stagger] [--no-cycles] [--json]

``--json`` prints one JSON object instead of the table: the parameters and, per step kind and
phase, the instructions, the times (ms), the device time (us) and their ratio.
"""

from __future__ import annotations

import argparse
import gc
import json
import time
from collections.abc import Callable

import numpy as np
from patton.runtime.decode_batch import prefilled
from patton.runtime.patton.lifecycle import Runtime
from patton.sim.cycle_model import CycleModel
from patton.sim.isa import Instruction, Opcode
from patton.sim.program import Program

PHASES = ("place", "writes", "qk", "buffer", "sv", "sv copy")


def build(requests: int, tokens: int, stagger: bool = False) -> Runtime:
    """Return a runtime holding ``tokens - 1`` tokens per request (data already in place).

    With ``stagger``, request ``r`` holds ``(r * T // requests) % T`` tokens fewer, so the
    requests' last blocks are at every fill level and each step binds and commits a few.
    """
    return prefilled(requests, tokens - 1, stagger=stagger)[0]


class Timer:
    """Times named phases, optionally evicting the CPU caches before each."""

    def __init__(self, cold: bool) -> None:
        self.times: dict[str, float] = {}
        self._junk = np.ones(8 << 20) if cold else None  # 64 MB

    def __call__(self, name: str, fn: Callable[[], object]) -> object:
        if self._junk is not None:
            self._junk.sum()
        start = time.perf_counter()
        out = fn()
        self.times[name] = time.perf_counter() - start
        return out


def step(rt: Runtime, requests: int, next_id: int, rng: np.random.Generator,
         timer: Timer) -> tuple[dict[str, Program], int]:
    """Run one decode step; return its programs (valid until the next step) and next id."""
    c = rt.config
    reqs = list(range(requests))
    # the model's Keys, Values and query of this step (not timed)
    kv = rng.integers(0x3000, 0x4000, (2, requests, c.n_layers, c.heads, c.d_head),
                      dtype=np.uint16)
    query = rng.integers(0x3000, 0x4000, (requests, c.heads, c.d_head), dtype=np.uint16)

    def place() -> list[int]:
        nonlocal next_id
        ids = []
        for req in reqs:
            last = rt.blocks[rt.requests[req].table[-1]]
            if last.full:
                rt.allocate(req, next_id)
                ids.append(next_id)
                next_id += 1
            else:
                ids.append(last.block_id)
        return ids

    ids = timer("place", place)
    progs: dict[str, Program] = {}
    w = timer("writes", lambda: rt.append(ids, kv[0], kv[1]))
    progs["writes"] = w.all  # a copy (concatenated), not timed
    progs["qk"] = timer("qk", lambda: rt.qk_step(reqs, 0, query))[0]
    width = max(len(rt.requests[r].table) for r in reqs) * c.block_size
    probs = np.zeros((requests, c.heads, width), dtype=np.uint16)
    for k, req in enumerate(reqs):  # the caller's softmax output (not timed)
        probs[k][:, rt.token_index(req)] = 0x3800
    buf = timer("buffer", lambda: rt.sv_buffer(reqs, 0, width))
    buf[:] = probs
    progs["sv"] = timer("sv", lambda: rt.sv_step(reqs, 0, buf))[0]
    progs["sv copy"] = timer("sv copy", lambda: rt.sv_step(reqs, 0, probs))[0]
    return progs, next_id


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--steady", type=int, default=4, help="steady steps per run (best of)")
    ap.add_argument("--warm", type=int, default=16,
                    help="untimed decode steps before the timed ones (one block's worth)")
    ap.add_argument("--cold", action="store_true", help="evict the caches before each phase")
    ap.add_argument("--stagger", action="store_true",
                    help="requests at every fill level: each step binds and commits a few")
    ap.add_argument("--no-cycles", action="store_true")
    ap.add_argument("--json", action="store_true",
                    help="print one JSON object (every figure of the table) instead")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    best: dict[str, dict[str, float]] = {}
    kept: dict[str, dict[str, Program]] = {}
    for _ in range(3):
        rt = build(args.requests, args.tokens - args.warm, args.stagger)
        c = rt.config
        reqs = list(range(args.requests))
        # the previous step built the attention programs of these tables
        width = max(len(rt.requests[r].table) for r in reqs) * c.block_size
        rt.qk_step(reqs, 0, np.zeros((args.requests, c.heads, c.d_head), np.uint16))
        rt.sv_step(reqs, 0, rt.sv_buffer(reqs, 0, width))
        next_id = 10**6
        for _ in range(args.warm):  # the server has been running: untimed decode steps
            next_id = step(rt, args.requests, next_id, rng, Timer(False))[1]
        gc.collect()
        gc.freeze()  # the long-lived metadata is not rescanned by every young collection
        kinds = (("staggered", args.steady),) if args.stagger else \
            (("commit", 1), ("boundary", 1), ("steady", args.steady))
        for name, steps in kinds:
            for _ in range(steps):
                timer = Timer(args.cold)
                progs, next_id = step(rt, args.requests, next_id, rng, timer)
                kept[name] = {k: p.with_data(p.data.copy()) for k, p in progs.items()}
                for k, v in timer.times.items():
                    best.setdefault(name, {})[k] = min(best.get(name, {}).get(k, 1e9), v)
        gc.unfreeze()
    cm = CycleModel()
    eoc = [Instruction(Opcode.EOC)]
    rows: list[dict] = []
    for name, progs in kept.items():
        tt = best[name]
        total = sum(tt[p] for p in ("place", "writes", "qk", "sv"))
        device = 0.0
        for phase in PHASES:
            prog = progs.get(phase)
            if prog is None:
                rows.append({"step": name, "phase": phase, "assemble_ms": tt[phase] * 1e3})
                continue
            start = time.perf_counter()
            insts = prog.to_instructions()
            expand = time.perf_counter() - start
            cyc = cm.run(insts + eoc).cycles if not args.no_cycles else 0
            dev = cyc * 0.5e-3
            if phase != "sv copy":
                device += dev
            rows.append({"step": name, "phase": phase, "instructions": len(prog),
                         "assemble_ms": tt[phase] * 1e3, "expand_ms": expand * 1e3,
                         "cycles": cyc, "device_us": dev,
                         "assemble_over_device": tt[phase] * 1e6 / dev if dev else None})
        for label, t, what in (("total", total, "place + writes + qk + sv"),
                               ("+buffer", total + tt["buffer"], "and the SV buffer")):
            rows.append({"step": name, "phase": label, "assemble_ms": t * 1e3,
                         "device_us": device,
                         "assemble_over_device": t * 1e6 / device if device else None,
                         "what": what})
    if args.json:
        print(json.dumps({"params": vars(args), "rows": rows}, indent=1))
        return
    print(f"Llama-3-8B, 1 layer, {args.requests} requests x {args.tokens} tokens"
          f"{', caches evicted before each phase' if args.cold else ''}")
    print(f"{'step':9} {'phase':7} {'instr':>7} {'assemble ms':>11} {'expand ms':>9} "
          f"{'device us':>9} {'assemble/device':>15}")
    for r in rows:
        ratio = "" if r.get("assemble_over_device") is None \
            else f"{r['assemble_over_device']:15.2f}"
        if "what" in r:
            print(f"{r['step']:9} {r['phase']:7} {'':7} {r['assemble_ms']:11.3f} {'':9} "
                  f"{r['device_us']:9.1f} {ratio}   ({r['what']})")
        elif "instructions" not in r:
            print(f"{r['step']:9} {r['phase']:7} {'':7} {r['assemble_ms']:11.3f}")
        else:
            print(f"{r['step']:9} {r['phase']:7} {r['instructions']:7d} {r['assemble_ms']:11.3f} "
                  f"{r['expand_ms']:9.2f} {r['device_us']:9.1f} {ratio}")

if __name__ == "__main__":
    main()
