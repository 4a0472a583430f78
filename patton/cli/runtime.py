"""``patton runtime ...``: the PATTON runtime's sub-commands.

``patton runtime scenario [--model M] [--requests N] [--steps N] [--seed S] [--layers L]
[--mem-baseline] [--device-ext SET] [--trace OUT] [--json]``
    Serve random multi-turn conversations through the embedded engine with PATTON attached, on
    the cycle and functional models (prefill chunks, decode across block boundaries, prefix
    hits, preemption and eviction under a tight block pool, block-id reuse), checking every
    step: every KV element's placement, every commit, every QK^T and SV result, every schedule
    against the timing rules, the engine/runtime mirror. Then serve the same workload without
    the Commit Zone, and report the single-token Value writes' row activations, cycles and
    energy of both. ``--device-ext aim+wr16`` serves every run on a device with the open-row
    all-bank write, which the Commit Zone's single-token Value writes then use (WR_ABK_OPEN).
    ``--trace`` writes every program of the Commit Zone run, in order, as one replayable
    trace.

:func:`add_parser` registers the group on the ``patton`` command's sub-parsers.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from typing import Any

from patton.cli.options import SEED, add_device_ext_option, choice, commands, integer, plain
from patton.runtime.models import MODELS, model
from patton.runtime.patton.config import Config
from patton.runtime.patton.variants import VARIANTS
from patton.serving.checks import TOLERANCE
from patton.serving.scenario import Scenario, Served, run
from patton.sim import trace
from patton.sim.extensions import DEFAULT_EXT, ext_field
from patton.sim.isa import Instruction, Opcode
from patton.sim.program import Program
from patton.sim.progress import PROGRESS_HELP, Progress
from patton.sim.schedule import check_writable

__all__ = ["add_parser", "scenario", "MAX_REQUESTS", "MAX_STEPS", "RUNS"]

#: Bounds of a scenario: a few minutes of checking at the largest (every program of it runs
#: on the functional and the cycle model); larger serving runs are ``patton serve``'s.
MAX_REQUESTS = 64
MAX_STEPS = 2048


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``runtime`` (with its ``scenario`` sub-command) and return its parser."""
    parser = subparsers.add_parser("runtime", help="the PATTON runtime on the device models: "
                                                   "a checked serving scenario",
                                   description="The PATTON runtime on the device models.")
    sub = commands(parser, "runtime_command")
    sc = sub.add_parser("scenario", help="serve a random scenario end to end, every step checked",
                        description=plain(__doc__.split("\n\n")[1].split("\n", 2)[2]))
    models = choice(sorted(MODELS))
    sc.add_argument("--model", default="llama3-8b", type=models, metavar=models.metavar,
                    help="model whose KV geometry is laid out (default llama3-8b)")
    sc.add_argument("--requests", type=integer(1, MAX_REQUESTS), default=4,
                    help=f"concurrent requests (clients), 1..{MAX_REQUESTS} (default 4)")
    sc.add_argument("--steps", type=integer(1, MAX_STEPS), default=40,
                    help=f"scheduler steps, 1..{MAX_STEPS} (default 40)")
    sc.add_argument("--seed", type=SEED, default=0,
                    help="conversations and data seed, >= 0 (default 0)")
    sc.add_argument("--layers", type=integer(1), default=1,
                    help="layers to lay out and run (all layers are laid out alike; default 1)")
    sc.add_argument("--mem-baseline", action="store_true",
                    help="also time the no-CZ ablation with W MEM single-token writes")
    add_device_ext_option(sc)
    sc.add_argument("--trace", metavar="OUT", help="write the PATTON run's programs as a trace")
    sc.add_argument("--json", action="store_true", help="print one JSON object")
    sc.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                    help=PROGRESS_HELP)
    sc.set_defaults(func=scenario)
    return parser


#: The runs of a scenario: report key, column label, runtime variant.
RUNS = (("cz", "PATTON (Commit Zone)", VARIANTS["patton"]),
        ("no_cz", "no CZ, WR_ABK", VARIANTS["patton-wo-cz"]),
        ("no_cz_mem", "no CZ, W MEM", dataclasses.replace(VARIANTS["patton-wo-cz"],
                                                          token_op="mem")))
#: Seconds before a run shows its progress bar (on stderr).
PROGRESS_DELAY = 2.0


class _Bar:
    """Progress on stderr over a run's steps (an observer of its driver): a bar, or a line
    now and then (``show``: ``--progress``, :mod:`patton.sim.progress`)."""

    def __init__(self, label: str, steps: int, show: bool | None = True) -> None:
        self.bar = Progress(steps, f"scenario {label}", "step", show=show,
                            delay=PROGRESS_DELAY)

    def stepped(self, work: Any, out: Any) -> None:
        self.bar.update(1)


class _Programs:
    """Every program of a run, in order, without their EOCs (an observer of its driver)."""

    def __init__(self) -> None:
        self.instructions: list[Instruction] = []

    def ran(self, work: Any, phase: str, program: Program, result: Any) -> None:
        self.instructions += program[:-1].to_instructions()


def _run(config: Config, sc: Scenario, index: int, show: bool | None,
         extra: list[object] | None = None, device_ext: str = DEFAULT_EXT) -> Served:
    """Serve the scenario on run ``index`` of :data:`RUNS` on a device of extension set
    ``device_ext``; only PATTON's run is checked (the others are served for their Value
    writes' figures)."""
    _, label, variant = RUNS[index]
    bar = _Bar(label, sc.steps, show) if show is not False else None
    try:
        return run(config, sc, variant, check=index == 0,
                   observers=[*(extra or []), *([bar] if bar else [])],
                   device_ext=device_ext)
    finally:
        if bar is not None:
            bar.bar.close()


def _value_writes(served: Served) -> dict[str, float]:
    """The single-token Value writes' figures: the decode tokens' Value programs and the
    Commit Zone commits they trigger."""
    out = {"activations": 0, "cycles": 0, "energy_nj": 0.0}
    for key in ("append v_write", "append commits"):
        f = served.phases.figures.get(key)
        if f is not None:
            for k in out:
                out[k] += f[k]
    return out


def scenario(args: argparse.Namespace) -> int:
    """Run ``patton runtime scenario``; return the exit status (1 if a check failed)."""
    layers = model(args.model).layers
    if args.layers > layers:
        print(f"error: --layers {args.layers}: {args.model} has {layers} layers", file=sys.stderr)
        return 2
    if args.trace:
        check_writable(args.trace, "trace")
    show = args.progress
    start = time.perf_counter()
    config = Config(model(args.model), layers=args.layers)
    sc = Scenario(requests=args.requests, steps=args.steps, seed=args.seed)
    programs = _Programs() if args.trace else None
    ext = args.device_ext
    cz = _run(config, sc, 0, show, [programs] if programs is not None else None, ext)
    if programs is not None:
        trace.write(args.trace, programs.instructions + [Instruction(Opcode.EOC)])
    runs = {"cz": cz, "no_cz": _run(config, sc, 1, show, device_ext=ext)}
    if args.mem_baseline:
        runs["no_cz_mem"] = _run(config, sc, 2, show, device_ext=ext)
    assert cz.checks is not None
    total, acc = cz.checks.total, cz.checks.accuracy
    writes = {k: _value_writes(r) for k, r in runs.items()}
    report: dict[str, Any] = {
        "model": args.model, "requests": args.requests, "steps": args.steps,
        "seed": args.seed, "layers": args.layers, "ch_per_head": config.ch_per_head,
        **ext_field(ext),
        "served": cz.run.report().as_dict(), "events": dict(cz.counts.events),
        "refusals": cz.attached.refused, "placement_evictions": cz.attached.placement_evictions,
        "attention_checks": total.attentions,
        "max_abs_err_qk": acc.max_abs_err_qk, "max_abs_err_sv": acc.max_abs_err_sv,
        "tolerance": f"{TOLERANCE!r} * sum|a*b| per dot product",
        "max_error_over_tolerance": acc.max_tol_ratio,
        "mismatches": total.mismatches, "violations": total.violations,
        "placement_mismatches": total.placement_mismatches,
        "placement_elements_checked": total.placement_checked,
        "single_token_value_writes": cz.counts.decode_tokens,
        "prefill_tokens": cz.counts.prefill_tokens,
        "commits": total.commits, "failures": total.failures[:20],
        "baselines": {key: label for key, label, _ in RUNS if key in runs},
        "value_write_row_activations": {k: w["activations"] for k, w in writes.items()},
        "value_write_cycles": {k: w["cycles"] for k, w in writes.items()},
        "value_write_energy_nj": {k: w["energy_nj"] for k, w in writes.items()},
        "phases": {k: r.phases.figures for k, r in runs.items()},
    }
    if args.trace:
        report["trace"] = args.trace
        report["trace_instructions"] = len(programs.instructions) + 1
    report["wall_seconds"] = round(time.perf_counter() - start, 3)
    report["ok"] = ok = all(r.ok for r in runs.values())
    if args.json:
        json.dump(report, sys.stdout)
        sys.stdout.write("\n")
    else:
        _table(report)
    return 0 if ok else 1


def _table(r: dict) -> None:
    """Print a scenario report as labelled lines and one table of the Value-write costs."""
    served, events = r["served"], r["events"]
    print(f"scenario   {r['model']}, {r['requests']} client(s), {r['steps']} scheduler step(s), "
          f"seed {r['seed']}, {r['layers']} layer(s), {r['ch_per_head']} channel(s) per KV "
          f"head" + (f", device {r['device_ext']}" if "device_ext" in r else ""))
    print(f"served     {served['requests']} request(s) finished, {r['prefill_tokens']:,} "
          f"prefill tokens, hit rate {served['hit_rate']:.3f}, {served['preemptions']} "
          "preemption(s); block events " + ", ".join(f"{k} {v}" for k, v in events.items())
          + f"; {r['refusals']} placement refusal(s)")
    print(f"attention  {r['attention_checks']} request-layer(s) checked: {r['mismatches']} "
          f"mismatch(es); worst error {r['max_error_over_tolerance']:.3f} x the tolerance "
          f"({r['tolerance']}; max abs error QK {r['max_abs_err_qk']:.3g}, SV "
          f"{r['max_abs_err_sv']:.3g})")
    print(f"placement  {r['placement_elements_checked']:,} KV elements read back, "
          f"{r['placement_mismatches']} misplaced; {r['violations']} timing violation(s)")
    print(f"writes     {r['single_token_value_writes']:,} single-token Value writes, "
          f"{r['commits']} commit(s)")
    for failure in r["failures"]:
        print(f"FAIL       {failure}")
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
    if "device_ext" in r:
        print(f"(device {r['device_ext']}: the Commit Zone's single-token Value writes are one "
              "WR_ABK_OPEN per head, channel and Value row, its commits W MEM; no CZ's WR_ABK "
              "are WR_ABK_OPEN, sorted by row)")
    print(f"result     {'OK' if r['ok'] else 'FAIL'} in {r['wall_seconds']:.1f} s")
