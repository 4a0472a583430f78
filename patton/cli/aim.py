"""``patton aim run`` and ``patton aim check``: the cycle model on a trace, and the checker on a
schedule (the verbs are described in :mod:`patton.cli`)."""

from __future__ import annotations

import argparse
import json
import sys
import time

from patton.cli.options import (
    add_device_ext_option,
    add_strict_option,
    add_timing_option,
    choice,
    commands,
    read_trace,
)
from patton.sim import check, schedule
from patton.sim import readouts as readouts_format
from patton.sim import reference as references
from patton.sim.cycle_model import FRONTENDS, CycleModel
from patton.sim.energy import STANDBY, energy
from patton.sim.extensions import DEFAULT_EXT, ext_field
from patton.sim.functional import FunctionalModel
from patton.sim.progress import PROGRESS_HELP, Progress
from patton.sim.textfile import shown
from patton.sim.timing import timing_table

__all__ = ["add_parser"]


def _aim_run(args: argparse.Namespace) -> int:
    program, notes = read_trace(args.trace, args.strict, quiet=args.json, ext=args.device_ext)
    # Outputs are checked before the run: a bad path costs no simulation and writes nothing.
    if args.schedule is not None:
        schedule.check_writable(args.schedule)
    if args.readouts is not None:
        readouts_format.check(args.readouts)
    expected = references.read(args.reference, args.trace) if args.reference is not None else None
    bar = Progress(len(program), "aim run", "instruction", show=args.progress)

    def progress(done: int, total: int, cycle: int) -> None:
        bar.total = total
        bar.update(done - bar.n)

    wants_schedule = args.schedule is not None or (expected is not None
                                                   and "schedule" in expected)
    model = CycleModel(timing=timing_table(args.timing, args.device_ext), record=wants_schedule,
                       group=not args.no_group, skip=not args.per_cycle,
                       native=not (args.python or args.per_cycle),
                       frontend=args.frontend,
                       progress=progress if bar.mode is not None else None)
    start = time.perf_counter()
    with bar:
        result = model.run(program)
        bar.update(bar.total - bar.n)  # the model reports about once a second: the rest
    seconds = time.perf_counter() - start
    e = energy(result.command_counts, result.bank_state_cycles, result.cycles,
               standby=args.standby)
    # Files first, results after: what is printed is what was written.
    if args.schedule is not None:
        schedule.write(args.schedule, result.schedule)
    values = None
    if args.readouts is not None:
        values = FunctionalModel(model.device).run(program)
        readouts_format.write(args.readouts, values, str(args.trace), "functional model")
    report = {
        "trace": str(args.trace),
        "timing": model.timing.name,
        **ext_field(model.timing.ext),
        "frontend": args.frontend,  # as records name it: shared or per_channel
        "cycles": result.cycles,
        "time_ns": result.cycles * model.device.cycle_ns,
        "commands": result.commands,
        "command_counts": {str(ch): counts for ch, counts in result.command_counts.items()},
        "bank_state_cycles": {str(ch): s for ch, s in result.bank_state_cycles.items()},
        "energy_nj": e.total,
        "energy_breakdown_nj": e.components,
        "wall_seconds": seconds,
        "warnings": notes,
    }
    if args.schedule is not None:
        report["schedule"] = str(args.schedule)
    if values is not None:
        report["readouts"] = {"file": str(args.readouts), "count": len(values)}
    differences: list[dict] = []
    if args.reference is not None:
        differences = (references.differences(expected, report, result)
                       if expected is not None else [])
        report["reference"] = {"file": str(args.reference), "key": references.key(args.trace),
                               "found": expected is not None,
                               "fields": sorted(expected) if expected is not None else [],
                               "differences": differences}
    status = 1 if differences else 0
    if args.json:
        json.dump(report, sys.stdout)
        sys.stdout.write("\n")
        return status
    totals: dict[str, int] = {}
    for counts in result.command_counts.values():
        for name, n in counts.items():
            totals[name] = totals.get(name, 0) + n
    print(f"trace      {args.trace}")
    print(f"timing     {model.timing.name}")
    if model.timing.ext != DEFAULT_EXT:
        print(f"device     {model.timing.ext}")
    print(f"cycles     {result.cycles} ({result.cycles * model.device.cycle_ns:.1f} ns)")
    print(f"commands   {result.commands} on {len(result.command_counts)} channel(s): "
          + ", ".join(f"{k} {v}" for k, v in sorted(totals.items())))
    print(f"energy     {e.total:.1f} nJ (" + ", ".join(
        f"{k} {v:.1f}" for k, v in e.components.items() if v) + ")")
    print(f"simulated  in {seconds:.2f} s ({result.commands / max(seconds, 1e-9):,.0f} "
          "commands/s)")
    if args.schedule is not None:
        print(f"schedule   {args.schedule}")
    if values is not None:
        print(f"readouts   {len(values)} written to {args.readouts}")
    if args.reference is not None:
        key = references.key(args.trace)
        if expected is None:
            print(f"reference  {args.reference} has no entry {key!r}: nothing compared")
        elif not differences:
            print(f"reference  {args.reference} [{key}]: {', '.join(sorted(expected))} "
                  "all equal")
        else:
            print(f"reference  {args.reference} [{key}]: {len(differences)} difference(s)")
            for d in differences[:_SHOW_DIFFERENCES]:
                print(f"  {d['field']}: reference {d['reference']}, model {d['model']}")
            if len(differences) > _SHOW_DIFFERENCES:
                print(f"  ... {len(differences) - _SHOW_DIFFERENCES} more (--json lists all)")
    return status


#: Reference differences printed in the human output (``--json`` lists every one).
_SHOW_DIFFERENCES = 20


def _aim_check(args: argparse.Namespace) -> int:
    # progress (patton.sim.progress): reading the file, then checking its commands
    with Progress(None, "aim check: reading", "B", show=args.progress) as bar:
        def read_progress(done: int, total: int) -> None:
            bar.total = total or None  # 0: standard input, size unknown
            bar.update(done - bar.n)

        commands = schedule.read(args.schedule,
                                 progress=read_progress if bar.mode is not None else None)
    with Progress(len(commands), "aim check", "command", show=args.progress) as bar:
        found = check.verify_by_channel(commands, timing_table(args.timing, args.device_ext),
                                        bar.update if bar.mode is not None else None)
    if args.json:
        json.dump({"schedule": str(args.schedule), "timing": args.timing,
                   **ext_field(args.device_ext), "commands": len(commands),
                   "violations": len(found),
                   "list": [{"kind": v.kind, "cycle": v.cycle, "channel": v.channel,
                             "command": v.command.name, "rule": v.rule,
                             "preceding": v.preceding.name if v.preceding else None,
                             "required": v.required, "actual": v.actual, "detail": v.detail,
                             "line": v.line} for v in found]}, sys.stdout)
        sys.stdout.write("\n")
    else:
        for v in found:
            print(v.located(shown(args.schedule)))
        print(f"{len(commands)} commands, {len(found)} violation(s) (timing {args.timing})")
    return 1 if found else 0




def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``aim`` (``run`` and ``check``) on the ``patton`` sub-parsers."""
    group = sub.add_parser("aim", help="the AiM device's cycle model: run a trace, check a "
                                       "schedule",
                           description="The AiM device's cycle model: run an instruction "
                                       "trace, or check a timed command schedule.")
    aim = commands(group, "verb")
    run = aim.add_parser("run", help="run the cycle model on a trace",
                         description="Run the cycle model on an instruction trace (the public "
                                     "AiM simulator's format or ours) and report cycles, "
                                     "per-channel command counts and energy; optionally write "
                                     "the timed schedule and the read-out values, and compare "
                                     "with the public simulator's results (exit 1 on a "
                                     "difference).")
    run.add_argument("trace", help="instruction trace (public AiM format or ours)")
    add_strict_option(run)
    run.add_argument("--json", action="store_true", help="print one JSON object")
    run.add_argument("--schedule", metavar="OUT",
                     help="write the timed command schedule (with the trace's payloads, masks "
                          "and CFRs)")
    standby = choice(STANDBY)
    run.add_argument("--standby", type=standby, metavar=standby.metavar, default="per-channel",
                     help="standby energy: every channel (default) or the CENT script's value")
    run.add_argument("--no-group", action="store_true",
                     help="simulate every channel separately (slower, same result)")
    run.add_argument("--python", action="store_true",
                     help="run the Python cycle model, the reference the compiled kernel is "
                          "tested against (slower, same result)")
    run.add_argument("--per-cycle", action="store_true",
                     help="run the Python model ticking every controller every cycle (much "
                          "slower, same result)")
    frontend = choice(FRONTENDS)
    run.add_argument("--frontend", type=frontend, metavar=frontend.metavar, default="shared",
                     help="how host instructions are decoded: one per cycle for all channels "
                          "(shared, the public simulator's; default) or one per cycle per "
                          "channel (per-channel; docs/cycle-model.md)")
    run.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                     help=PROGRESS_HELP)
    run.add_argument("--readouts", metavar="FILE",
                     help="write every read-out value (RD_MAC, RD_SBK, ... results, from the "
                          "functional model) to FILE: .json or .npy (patton.sim.readouts)")
    run.add_argument("--reference", metavar="REF",
                     help="compare with the public simulator's results: REF.json keyed by "
                          "trace stem (as tests/data/aim/reference.json), or REF.yaml, the "
                          "statistics it printed for this trace; print the differences, exit "
                          "1 on any")
    add_timing_option(run)
    add_device_ext_option(run)
    run.set_defaults(func=_aim_run)
    chk = aim.add_parser("check", help="verify a timed command schedule",
                         description="List every timing, bus and protocol violation in a "
                                     "timed command schedule; exit 1 if there is any.")
    chk.add_argument("schedule", help="schedule file: 'cycle channel command [bank row col] "
                                      "[key=value ...]'")
    chk.add_argument("--json", action="store_true", help="print one JSON object")
    chk.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                     help=PROGRESS_HELP)
    add_timing_option(chk)
    add_device_ext_option(chk)
    chk.set_defaults(func=_aim_check)
