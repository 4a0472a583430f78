"""Scheduler steps per second: the embedded engine, and real vLLM 0.33 beside it when importable.

Drives ``tests/data/serving/sharegpt-llama3-300.jsonl`` through the client model
(:func:`patton.serving.clients.run`) at concurrency 32 over a live pool of 64 (the paper's
Llama-3-8B setting) and times, in CPU seconds of this process, the engine's ``add``/``step``
calls alone (the client model's own time left out) and the whole run. With the vLLM
virtualenv's python, and vLLM importable, the same run goes through
:class:`patton.serving.vllm_engine.VllmEngine` (the real ``Scheduler``) and the two results
must agree step for step:

    python benchmarks/serving_engine_speed.py [--steps 3000] [--num-blocks 1024]
    /work/venv-vllm/bin/python benchmarks/serving_engine_speed.py
    python benchmarks/serving_engine_speed.py --python /work/venv-vllm/bin/python  # the same

``--runtime patton`` (or any of ``runtimes.VARIANTS``; repeatable) adds a row for the embedded
engine with that runtime attached (``serving/runtimes.py``: every block event applied to
the runtime, every new block asked of its granule capacity), sized like ``patton serve``:
``--num-blocks`` blocks of memory, or with ``--num-blocks 0`` the 16 GiB AiM device. Its
``steps_per_s`` counts the engine and the runtime's placement bookkeeping together:

    python benchmarks/serving_engine_speed.py --runtime patton --num-blocks 0 --no-vllm
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from patton.runtime.models import MODELS
from patton.serving.adapter import Attached, attach
from patton.serving.capacity import RUNTIMES
from patton.serving.conversations import read
from patton.serving.driver import Driver, EngineFactory
from patton.serving.engine import EmbeddedEngine
from patton.serving.interface import Engine, EngineParams, Request, StepOutput
from patton.serving.vllm_engine import VllmEngine, VllmUnavailable

ROOT = Path(__file__).resolve().parent.parent
CONVERSATIONS = ROOT / "tests/data/serving/sharegpt-llama3-300.jsonl"


class Timed:
    """An engine wrapper that adds up the CPU time spent inside ``add`` and ``step``.

    CPU time (``time.process_time``), not wall time: on a shared machine it is what one core
    spends on the engine, whatever else runs.
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.seconds = 0.0

    def add(self, request: Request) -> None:
        t = time.process_time()
        self.engine.add(request)
        self.seconds += time.process_time() - t

    def step(self) -> StepOutput:
        t = time.process_time()
        out = self.engine.step()
        self.seconds += time.process_time() - t
        return out


def measure(name: str, engine: EngineFactory, params: EngineParams, args: argparse.Namespace,
            attached: Attached | None = None) -> tuple[dict[str, Any], Any]:
    """Run the workload through the engine ``engine`` builds on the step driver; return its
    timing row and the run."""
    conversations = read(CONVERSATIONS)
    timed: list[Timed] = []

    def build(params: EngineParams, **hooks: Any) -> Timed:
        timed.append(Timed(engine(params, **hooks)))
        return timed[0]

    driver = Driver(build, params, conversations, clients=args.clients, pool=args.pool,
                    attached=attached, max_steps=args.steps)
    t, w = time.process_time(), time.perf_counter()
    result = driver.run()
    total, wall = time.process_time() - t, time.perf_counter() - w
    steps = len(result.steps)
    report = result.report()
    return {"engine": name, "steps": steps, "engine_s": round(timed[0].seconds, 3),
            "steps_per_s": round(steps / timed[0].seconds),
            "with_clients_steps_per_s": round(steps / total),
            "wall_steps_per_s": round(steps / wall),
            "requests": report.requests, "hit_rate": round(report.hit_rate, 4),
            "preemptions": report.preemptions}, result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--pool", type=int, default=64)
    ap.add_argument("--steps", type=int, default=3000, help="scheduler steps to run at most")
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--num-blocks", type=int, default=1024)
    ap.add_argument("--max-num-seqs", type=int, default=32)
    ap.add_argument("--max-num-batched-tokens", type=int, default=2048)
    ap.add_argument("--max-model-len", type=int, default=4096)
    ap.add_argument("--no-vllm", action="store_true", help="time the embedded engine only")
    ap.add_argument("--runtime", action="append", choices=RUNTIMES, default=[],
                    help="also time the embedded engine with this runtime attached "
                         "(repeatable)")
    ap.add_argument("--model", choices=sorted(MODELS), default="llama3-8b",
                    help="the runtime's model (default llama3-8b)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--python", metavar="PATH",
                    help="run under this interpreter (e.g. the vLLM virtualenv's python)")
    args = ap.parse_args()
    if args.python and not os.environ.get("PATTON_BENCH_REEXEC"):
        os.environ["PATTON_BENCH_REEXEC"] = "1"
        os.execv(args.python, [args.python, __file__, *sys.argv[1:]])
    if args.runtime or not args.num_blocks:
        # one memory for every row: num_blocks blocks of KV, or (0) the 16 GiB AiM device
        args.num_blocks = attach("gpu", MODELS[args.model], num_blocks=args.num_blocks or None,
                                 block_size=args.block_size).capacity.num_blocks
    params = EngineParams(block_size=args.block_size, num_blocks=args.num_blocks,
                        max_num_seqs=args.max_num_seqs,
                        max_num_batched_tokens=args.max_num_batched_tokens,
                        max_model_len=args.max_model_len)
    rows = []
    ours, ours_run = measure("embedded", EmbeddedEngine, params, args)
    rows.append(ours)
    for variant in args.runtime:
        att = attach(variant, MODELS[args.model], num_blocks=args.num_blocks,
                     block_size=args.block_size)
        row, _ = measure(f"embedded+{variant}", EmbeddedEngine, params, args, att)
        row["runtime_blocks"] = att.capacity.blocks
        row["refusals"] = att.refused
        rows.append(row)
    note = None
    if not args.no_vllm:
        try:
            theirs, theirs_run = measure("vllm-0.33.0", VllmEngine, params, args)
        except VllmUnavailable as e:
            note = f"real vLLM not measured: {e}"
        else:
            theirs["same_steps"] = theirs_run.as_dict()["steps"] == ours_run.as_dict()["steps"]
            theirs["same_requests"] = (theirs_run.as_dict()["requests"]
                                       == ours_run.as_dict()["requests"])
            rows.append(theirs)
            for r in rows[:-1]:
                r["speedup_vs_vllm"] = round(r["steps_per_s"] / theirs["steps_per_s"], 1)
    if args.json:
        print(json.dumps({"params": vars(args), "rows": rows, "note": note}, indent=1))
        return
    print(f"c{args.clients}/p{args.pool}, {params}")
    for r in rows:
        extra = "".join(f", {k}={r[k]}" for k in ("speedup_vs_vllm", "same_steps",
                                                   "same_requests", "runtime_blocks",
                                                   "refusals") if k in r)
        print(f"{r['engine']:>22}: {r['steps_per_s']:>7} steps/s (engine CPU time; "
              f"{r['with_clients_steps_per_s']} with the client model, {r['wall_steps_per_s']} "
              f"wall-clock), {r['steps']} steps, "
              f"{r['requests']} requests, hit rate {r['hit_rate']}, "
              f"{r['preemptions']} preemptions{extra}")
    if note:
        print(note)


if __name__ == "__main__":
    main()
