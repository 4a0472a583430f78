"""``patton cost``: the cost of one serving run (``docs/run-cost.md``).

``patton cost [--model M] [--runtime R] [--steps N] [--clients C] [--pool P]
[--conversations FILE] [--frontend shared|per-channel] [--max-model-len L]
[--max-batched-tokens B] [--num-blocks N] [--timing PROFILE] [--gpu analytic|calibrated]
[--standby per-channel|cent] [--wo-cz-write abk|mem] [--device-ext SET] [--check] [--replay]
[--json]``
    Serve a conversation file (default: the first 300 ShareGPT conversations) with a PIM
    runtime attached and print its attention parts' cycles, time and energy on the cycle
    model and the GPU prefill recomputation it causes (:func:`patton.eval.cost.measure`,
    against the GPU reference of :func:`patton.eval.cost.reference`). ``--timing``,
    ``--gpu``, ``--standby`` and ``--wo-cz-write`` are the evaluation's assumptions
    (``docs/evaluation.md``); the defaults are :func:`~patton.eval.cost.measure`'s.
    ``--device-ext`` runs on a device with an extension set (``docs/extensions.md``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from patton.cli.options import (
    BLOCKS,
    CLIENTS,
    MODEL_LEN,
    POOL,
    STEPS,
    TOKENS,
    add_device_ext_option,
    choice,
    spelled,
)
from patton.eval.cost import PARTS, measure, reference
from patton.eval.gpu_calibration import GPU_MODELS
from patton.runtime.models import MODELS
from patton.runtime.patton.lifecycle import TOKEN_OPS
from patton.serving import conversations as cv
from patton.serving.clients import ClientError
from patton.sim.cycle_model import FRONTENDS
from patton.sim.energy import STANDBY
from patton.sim.extensions import DEFAULT_EXT
from patton.sim.progress import PROGRESS_HELP, Progress
from patton.sim.timing import DEFAULT_PROFILE, PROFILES

__all__ = ["add_parser", "cost"]


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``cost`` on the ``patton`` sub-parsers and return its parser."""
    p = subparsers.add_parser("cost", help="the cost of one serving run (PIM attention on the "
                                           "cycle model, GPU recompute)",
                              description="The cost of a serving run (docs/run-cost.md).")
    p.add_argument("--model", default="llama3-8b", type=choice(MODELS), metavar="MODEL",
                   help="model whose KV geometry is laid out and whose prefill the GPU prices: "
                        + ", ".join(MODELS) + " (default llama3-8b)")
    p.add_argument("--runtime", default="patton",
                   help="PIM runtime: PATTON, an ablation or a baseline (default patton)")
    p.add_argument("--steps", type=STEPS, default=300, help="scheduler steps (default 300)")
    p.add_argument("--clients", type=CLIENTS, default=32, help="closed-loop clients (default 32)")
    p.add_argument("--pool", type=POOL, default=64,
                   help="live conversations, a multiple of --clients (default 64)")
    p.add_argument("--conversations", default=None, metavar="FILE.jsonl",
                   help="a conversation file (default: the first 300 ShareGPT conversations)")
    p.add_argument("--frontend", default="shared", type=choice(FRONTENDS),
                   metavar=choice(FRONTENDS).metavar,
                   help="the cycle model's front end (default shared: the public simulator's "
                        "one decoder)")
    p.add_argument("--max-model-len", type=MODEL_LEN, default=2048,
                   help="longest request in tokens (default 2048)")
    p.add_argument("--max-batched-tokens", type=TOKENS, default=2048,
                   help="tokens scheduled per step at most (default 2048)")
    p.add_argument("--num-blocks", type=BLOCKS, default=None,
                   help="KV memory in blocks (default: the 16 GiB AiM device)")
    p.add_argument("--timing", default=DEFAULT_PROFILE, type=choice(PROFILES),
                   metavar=choice(PROFILES).metavar,
                   help=f"the cycle model's timing profile (default {DEFAULT_PROFILE})")
    p.add_argument("--gpu", default="analytic", type=choice(GPU_MODELS),
                   metavar=choice(GPU_MODELS).metavar,
                   help="the GPU prefill model (default analytic; docs/gpu-cost.md)")
    p.add_argument("--standby", default="per-channel", type=choice(STANDBY),
                   metavar=choice(STANDBY).metavar,
                   help="how standby energy is counted (default per-channel; docs/energy.md)")
    p.add_argument("--wo-cz-write", default=None, type=choice(TOKEN_OPS),
                   metavar=choice(TOKEN_OPS).metavar,
                   help="how patton-wo-cz writes a single Value token (default: the "
                        "variant's, abk)")
    add_device_ext_option(p)
    p.add_argument("--check", action="store_true", help="verify every program")
    p.add_argument("--replay", action="store_true",
                   help="also replay on the functional model, attention bit-exact (slow)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help=PROGRESS_HELP)
    p.set_defaults(func=cost)
    return p


def cost(a: argparse.Namespace) -> int:
    """``patton cost``: serve, price, print (one JSON object with ``--json``)."""
    t0 = time.perf_counter()
    convs = cv.read(a.conversations) if a.conversations else cv.from_sharegpt(count=300)
    t1 = time.perf_counter()
    try:
        ref = reference(convs, a.model, steps=a.steps, clients=a.clients, pool=a.pool,
                        max_model_len=a.max_model_len,
                        max_batched_tokens=a.max_batched_tokens, num_blocks=a.num_blocks)
        t2 = time.perf_counter()
        with Progress(a.steps, "cost", "step", show=a.progress) as bar:
            rc = measure(convs, a.model, a.runtime, steps=a.steps, frontend=a.frontend,
                         clients=a.clients, pool=a.pool, max_model_len=a.max_model_len,
                         max_batched_tokens=a.max_batched_tokens, reference=ref,
                         check=a.check, num_blocks=a.num_blocks, replay=a.replay,
                         timing=a.timing, gpu=a.gpu, standby=a.standby,
                         token_op=a.wo_cz_write, device_ext=a.device_ext,
                         on_step=(lambda _: bar.update()) if bar.mode is not None else None)
    except (ValueError, ClientError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if a.json:
        print(json.dumps(rc.as_dict(), indent=1))
        return 0
    on = "" if a.device_ext == DEFAULT_EXT else f", device {a.device_ext}"
    print(f"{rc.model} {rc.runtime} ({spelled(rc.frontend)} front end{on}): {rc.steps} steps, "
          f"{rc.decode_tokens} decode tokens, {rc.prefill_tokens} prefill tokens "
          f"({rc.recomputed_tokens} recomputed), {rc.preemptions} preemptions, "
          f"hit rate {rc.hit_rate:.4f}")
    for name in PARTS:
        part = rc.parts[name]
        print(f"  {name:8s} {part.cycles:>14d} cycles  {part.seconds * 1e3:10.3f} ms  "
              f"{part.joules * 1e3:10.3f} mJ")
    print(f"  PIM      {rc.pim_seconds * 1e3:10.3f} ms  {rc.pim_joules * 1e3:10.3f} mJ; GPU "
          f"recompute {rc.recompute_seconds * 1e3:.3f} ms  {rc.recompute_joules * 1e3:.3f} mJ")
    print(f"  total    {rc.latency_seconds * 1e3:10.3f} ms  {rc.energy_joules * 1e3:10.3f} mJ")
    if a.check or a.replay:
        print(f"  checked {rc.checked_programs} programs: {rc.violations} violations, "
              f"{rc.mismatches} mismatches")
    phases = ", ".join(f"{k} {v:.2f} s" for k, v in rc.seconds_by_phase.items())
    print(f"wall: conversations {t1 - t0:.2f} s, reference {t2 - t1:.2f} s, measure "
          f"{rc.wall_seconds:.2f} s = {rc.wall_seconds / max(rc.steps, 1) * 1e3:.1f} ms/step "
          f"({phases})")
    return 0
