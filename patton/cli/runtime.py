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
import dataclasses
import json
import sys
import time

from patton.runtime.models import MODELS, model
from patton.runtime.patton.config import Config
from patton.runtime.patton.variants import VARIANTS
from patton.sim import trace
from patton.sim.isa import Instruction, Opcode
from patton.sim.schedule import check_writable
from patton.serving.checks import TOLERANCE
from patton.serving.loop import execute
from patton.serving.scenario import generate

from patton.cli.options import SEED, integer

__all__ = ["add_parser", "scenario", "MAX_REQUESTS", "MAX_STEPS", "RUNS"]

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
    sc.add_argument("--model", default="llama3-8b", choices=sorted(MODELS),
                    help="model whose KV geometry is laid out (default llama3-8b)")
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
    sc.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                    help="progress bars on stderr for runs longer than a few seconds "
                         "(default: when stderr is a terminal)")
    sc.set_defaults(func=scenario)
    return parser


#: The runs of a scenario: report key, column label, runtime variant.
RUNS = (("cz", "PATTON (Commit Zone)", VARIANTS["patton"]),
        ("no_cz", "no CZ, WR_ABK", VARIANTS["patton-wo-cz"]),
        ("no_cz_mem", "no CZ, W MEM", dataclasses.replace(VARIANTS["patton-wo-cz"],
                                                          token_op="mem")))
#: Seconds before a run shows its progress bar (on stderr).
PROGRESS_DELAY = 2.0


def _events(log: list, label: str, show: bool):
    """``log``, wrapped in a progress bar on stderr that appears after a few seconds."""
    if not show:
        return log
    from tqdm import tqdm

    return tqdm(log, desc=label, unit="event", file=sys.stderr, delay=PROGRESS_DELAY,
                dynamic_ncols=True, leave=False)


def scenario(args: argparse.Namespace) -> int:
    """Run ``patton runtime scenario``; return the exit status (1 if a check failed)."""
    layers = model(args.model).layers
    if args.layers > layers:
        print(f"error: --layers {args.layers}: {args.model} has {layers} layers", file=sys.stderr)
        return 2
    if args.trace:
        check_writable(args.trace, "trace")
    show = args.progress if args.progress is not None else sys.stderr.isatty()
    start = time.perf_counter()
    config = Config(model(args.model), layers=args.layers)
    log = generate(config, requests=args.requests, steps=args.steps, seed=args.seed)
    programs: list[Instruction] | None = [] if args.trace else None
    _, cz = execute(config, _events(log, RUNS[0][1], show), RUNS[0][2], seed=args.seed,
                    cycles=True, sink=programs)
    if programs is not None:
        trace.write(args.trace, programs + [Instruction(Opcode.EOC)])
    _, no = execute(config, _events(log, RUNS[1][1], show), RUNS[1][2], seed=args.seed,
                    functional=False, cycles=True)
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
        "baselines": {key: label for key, label, _ in RUNS[:2]},
        "value_write_row_activations": {"cz": cz.value_write_activations,
                                        "no_cz": no.value_write_activations},
        "value_write_cycles": {"cz": cz.value_write_cycles, "no_cz": no.value_write_cycles},
        "value_write_energy_nj": {"cz": cz.value_write_energy_nj,
                                  "no_cz": no.value_write_energy_nj},
    }
    if args.mem_baseline:
        _, mem = execute(config, _events(log, RUNS[2][1], show), RUNS[2][2], seed=args.seed,
                         functional=False, cycles=True)
        report["baselines"]["no_cz_mem"] = RUNS[2][1]
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
        _table(report)
    return 0 if ok else 1


def _table(r: dict) -> None:
    """Print a scenario report as labelled lines and one table of the Value-write costs."""
    print(f"scenario   {r['model']}, {r['requests']} request(s), {r['steps']} decode step(s), "
          f"seed {r['seed']}, {r['layers']} layer(s), {r['ch_per_head']} channel(s) per KV "
          f"head: {r['events']} events")
    print(f"attention  {r['attention_checks']} QK^T/SV checks: {r['exact_mismatches_qk']} QK "
          f"and {r['exact_mismatches_sv']} SV exact mismatch(es); worst error "
          f"{r['max_error_over_tolerance']:.3f} x the tolerance ({r['tolerance']}; max abs "
          f"error QK {r['max_abs_err_qk']:.3g}, SV {r['max_abs_err_sv']:.3g})")
    print(f"placement  {r['placement_elements_checked']:,} KV elements read back, "
          f"{r['placement_mismatches']} misplaced")
    print(f"writes     {r['single_token_value_writes']:,} single-token Value writes, "
          f"{r['commits']} commit(s)")
    if "trace" in r:
        print(f"trace      {r['trace']} ({r['trace_instructions']:,} instructions)")
    keys = list(r["baselines"])
    width = max(22, *(len(r["baselines"][k]) + 2 for k in keys))
    print()
    print(f"{'Value writes':<20}" + "".join(f"{r['baselines'][k]:>{width}}" for k in keys))
    rows = (("row activations", "value_write_row_activations", "{:,}"),
            ("cycles", "value_write_cycles", "{:,}"),
            ("energy (nJ)", "value_write_energy_nj", "{:,.1f}"))
    for label, field, fmt in rows:
        print(f"{label:<20}" + "".join(f"{fmt.format(r[field][k]):>{width}}" for k in keys))
    print()
    print("(no CZ: PATTON without the Commit Zone, partial Value blocks written straight to "
          "their O1V: WR_ABK per Value row" + (", or W MEM per bank" if "no_cz_mem" in keys
                                               else "; --mem-baseline adds per-bank W MEM")
          + ")")
    print(f"result     {'OK' if r['ok'] else 'FAIL'} in {r['wall_seconds']:.1f} s")
