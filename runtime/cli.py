"""``patton runtime ...``: the PATTON runtime's sub-commands.

``patton runtime scenario [--model M] [--requests N] [--steps N] [--seed S] [--layers L]
[--mem-baseline] [--trace OUT] [--json]``
    Generate a random multi-request scenario (prefill, decode across block boundaries, prefix
    sharing, caching, eviction and block-id reuse), run it on the functional model with the
    Commit Zone (checking every QK^T and SV result and every token's placement), then replay
    the same events without the Commit Zone, and report the Value-write row activations,
    cycles and energy of both from the cycle model. ``--trace`` writes every program of the
    Commit Zone run, in order, as one replayable trace.

:func:`add_parser` registers the group on the ``patton`` command's sub-parsers.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from patton.options import SEED, integer
from patton.runtime.config import MODELS, Config, model
from patton.runtime.metadata import Mode
from patton.sim import trace
from patton.sim.isa import Instruction, Opcode
from patton.sim.serving.checks import TOLERANCE
from patton.sim.serving.loop import execute
from patton.sim.serving.scenario import generate

__all__ = ["add_parser", "scenario", "MAX_REQUESTS", "MAX_STEPS"]

#: Bounds of a scenario: about a minute of checking at the largest (every program of it runs
#: on the functional and the cycle model); larger serving runs are ``patton serve``'s.
MAX_REQUESTS = 64
MAX_STEPS = 2048


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``runtime`` (with its ``scenario`` sub-command) and return its parser."""
    parser = subparsers.add_parser("runtime", help="the PATTON runtime",
                                   description="The PATTON runtime on the device models.")
    sub = parser.add_subparsers(dest="runtime_command", required=True)
    sc = sub.add_parser("scenario", help="run a random serving scenario end to end",
                        description=__doc__.split("\n\n")[1])
    sc.add_argument("--model", default="llama3-8b", choices=sorted(MODELS))
    sc.add_argument("--requests", type=integer(1, MAX_REQUESTS), default=4,
                    help=f"concurrent requests, 1..{MAX_REQUESTS} (default 4)")
    sc.add_argument("--steps", type=integer(1, MAX_STEPS), default=40,
                    help=f"decode steps, 1..{MAX_STEPS} (default 40)")
    sc.add_argument("--seed", type=SEED, default=0, help="data seed, >= 0 (default 0)")
    sc.add_argument("--layers", type=integer(1), default=1,
                    help="layers to lay out and run (all layers are laid out alike; default 1)")
    sc.add_argument("--mem-baseline", action="store_true",
                    help="also time the no-CZ ablation with W MEM single-token writes")
    sc.add_argument("--trace", metavar="OUT", help="write the PATTON run's programs as a trace")
    sc.add_argument("--json", action="store_true", help="print one JSON object")
    sc.set_defaults(func=scenario)
    return parser


def scenario(args: argparse.Namespace) -> int:
    """Run ``patton runtime scenario``; return the exit status (1 if a check failed)."""
    layers = model(args.model).layers
    if args.layers > layers:
        print(f"error: --layers {args.layers}: {args.model} has {layers} layers", file=sys.stderr)
        return 2
    start = time.perf_counter()
    config = Config(model(args.model), layers=args.layers)
    log = generate(config, requests=args.requests, steps=args.steps, seed=args.seed)
    programs: list[Instruction] | None = [] if args.trace else None
    _, cz = execute(config, log, Mode.PATTON, seed=args.seed, cycles=True, sink=programs)
    if programs is not None:
        trace.write(args.trace, programs + [Instruction(Opcode.EOC)])
    _, no = execute(config, log, Mode.NO_CZ, seed=args.seed, functional=False, cycles=True)
    report = {
        "model": args.model, "requests": args.requests, "steps": args.steps,
        "seed": args.seed, "layers": args.layers, "ch_per_head": config.ch_per_head,
        "events": len(log), "attention_checks": cz.attends,
        "max_abs_err_qk": cz.max_abs_err_qk, "max_abs_err_sv": cz.max_abs_err_sv,
        "tolerance": f"{TOLERANCE!r} * sum|a*b| per dot product",
        "max_error_over_tolerance": cz.max_tol_ratio,
        "exact_mismatches_qk": cz.exact_mismatches_qk,
        "exact_mismatches_sv": cz.exact_mismatches_sv,
        "placement_mismatches": cz.placement_mismatches,
        "placement_elements_checked": cz.placement_checked,
        "single_token_value_writes": cz.value_writes, "commits": cz.commits,
        "value_write_row_activations": {"cz": cz.value_write_activations,
                                        "no_cz": no.value_write_activations},
        "value_write_cycles": {"cz": cz.value_write_cycles, "no_cz": no.value_write_cycles},
        "value_write_energy_nj": {"cz": cz.value_write_energy_nj,
                                  "no_cz": no.value_write_energy_nj},
    }
    if args.mem_baseline:
        _, mem = execute(config, log, Mode.NO_CZ, seed=args.seed, functional=False,
                         cycles=True, token_op="mem")
        report["value_write_row_activations"]["no_cz_mem"] = mem.value_write_activations
        report["value_write_cycles"]["no_cz_mem"] = mem.value_write_cycles
        report["value_write_energy_nj"]["no_cz_mem"] = mem.value_write_energy_nj
    if args.trace:
        report["trace"] = args.trace
        report["trace_instructions"] = len(programs) + 1
    report["wall_seconds"] = round(time.perf_counter() - start, 3)
    ok = (cz.placement_mismatches == 0 and cz.exact_mismatches_qk == 0
          and cz.exact_mismatches_sv == 0 and cz.max_tol_ratio <= 1.0)
    report["ok"] = ok
    if args.json:
        json.dump(report, sys.stdout)
        sys.stdout.write("\n")
    else:
        for key, value in report.items():
            print(f"{key:32} {value}")
    return 0 if ok else 1
