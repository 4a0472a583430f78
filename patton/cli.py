"""The ``patton`` command.

``patton aim run TRACE [--json] [--schedule OUT] [--timing PROFILE]``
    Run the cycle model on a trace (the public AiM simulator's format or ours) and report
    cycles, per-channel command counts and energy. ``--schedule`` writes the timed command
    schedule with the data it carries (the trace's payloads, lane masks, CFR state and the
    instruction each command came from; ``patton.sim.schedule``).
``patton aim check SCHEDULE [--json] [--timing PROFILE]``
    List every timing, bus and protocol violation in a timed schedule; exit 1 if there is any.

``--timing`` picks the public simulator's GDDR6 timing rules: ``aimsim-0f28a07`` (its head, the
default) or ``aimsim-2eb1ee0`` (the commit CENT pins; ``docs/timing-profiles.md``). The JSON
output names the profile used (``"timing"``).
``patton runtime scenario [--model M] [--requests N] [--steps N] [--seed S] [--json]``
    Run a PATTON serving scenario on the functional and cycle models.
``patton rtl run TRACE [--rows N] [--seed S] [--waves FILE] [--json]``
    Run a trace on the RTL channel under Verilator and score it against the models.
``patton rtl check SCHEDULE [--rows N] [--json]``
    Replay a timed schedule on the RTL; compare its checker's verdict with the model's.
``patton hw verilog [--rows N] [--out DIR]``
    Write the RTL channel's Verilog and the DRAM mat macro.
``patton demo [--device rtl|model] [--steps N] [--waves STEP] [--json]``
    Serve a multi-turn chat through the PATTON runtime on four live RTL channels (or the
    models), checking every step (``patton.demo``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence

from patton.sim import check, schedule, trace
from patton.sim.textfile import ReadError
from patton.options import add_timing_option
from patton.sim.cycle_model import CycleModel
from patton.sim.energy import energy


def _aim_run(args: argparse.Namespace) -> int:
    program = trace.read(args.trace)
    show = args.progress or sys.stderr.isatty()
    model = CycleModel(timing=args.timing, record=args.schedule is not None,
                       group=not args.no_group, skip=not args.per_cycle,
                       progress=_progress if show else None)
    start = time.perf_counter()
    result = model.run(program)
    seconds = time.perf_counter() - start
    if show and seconds > 1.0:
        print(file=sys.stderr)
    e = energy(result.command_counts, result.bank_state_cycles, result.cycles,
               standby=args.standby)
    if args.schedule is not None:
        schedule.write(args.schedule, result.schedule)
    report = {
        "trace": str(args.trace),
        "timing": model.timing.name,
        "cycles": result.cycles,
        "time_ns": result.cycles * model.device.cycle_ns,
        "commands": result.commands,
        "command_counts": {str(ch): counts for ch, counts in result.command_counts.items()},
        "bank_state_cycles": {str(ch): s for ch, s in result.bank_state_cycles.items()},
        "energy_nj": e.total,
        "energy_breakdown_nj": e.components,
        "wall_seconds": seconds,
    }
    if args.json:
        json.dump(report, sys.stdout)
        sys.stdout.write("\n")
        return 0
    totals: dict[str, int] = {}
    for counts in result.command_counts.values():
        for name, n in counts.items():
            totals[name] = totals.get(name, 0) + n
    print(f"trace      {args.trace}")
    print(f"timing     {model.timing.name}")
    print(f"cycles     {result.cycles} ({result.cycles * 0.5:.1f} ns)")
    print(f"commands   {result.commands} on {len(result.command_counts)} channel(s): "
          + ", ".join(f"{k} {v}" for k, v in sorted(totals.items())))
    print(f"energy     {e.total:.1f} nJ (" + ", ".join(
        f"{k} {v:.1f}" for k, v in e.components.items() if v) + ")")
    print(f"simulated  in {seconds:.2f} s ({result.commands / max(seconds, 1e-9):,.0f} "
          "commands/s)")
    if args.schedule is not None:
        print(f"schedule   {args.schedule}")
    return 0


def _progress(done: int, total: int, cycle: int) -> None:
    print(f"\r  {done:,}/{total:,} instructions retired, cycle {cycle:,}", end="",
          file=sys.stderr, flush=True)


def _aim_check(args: argparse.Namespace) -> int:
    commands = schedule.read(args.schedule)
    found = check.verify(commands, timing=args.timing)
    if args.json:
        json.dump({"schedule": str(args.schedule), "timing": args.timing,
                   "commands": len(commands),
                   "violations": len(found),
                   "list": [{"kind": v.kind, "cycle": v.cycle, "channel": v.channel,
                             "command": v.command.name, "rule": v.rule,
                             "preceding": v.preceding.name if v.preceding else None,
                             "required": v.required, "actual": v.actual, "detail": v.detail,
                             "line": v.line} for v in found]}, sys.stdout)
        sys.stdout.write("\n")
    else:
        for v in found:
            print(v.located(args.schedule))
        print(f"{len(commands)} commands, {len(found)} violation(s) (timing {args.timing})")
    return 1 if found else 0


def parser() -> argparse.ArgumentParser:
    """Return the command-line parser."""
    top = argparse.ArgumentParser(prog="patton", description=__doc__.split("\n\n")[0])
    sub = top.add_subparsers(dest="part", required=True)
    aim = sub.add_parser("aim", help="the AiM device model").add_subparsers(dest="verb",
                                                                           required=True)
    run = aim.add_parser("run", help="run the cycle model on a trace")
    run.add_argument("trace", help="instruction trace (public AiM format or ours)")
    run.add_argument("--json", action="store_true", help="print one JSON object")
    run.add_argument("--schedule", metavar="OUT",
                     help="write the timed command schedule (with the trace's payloads, masks "
                          "and CFRs)")
    run.add_argument("--standby", choices=("per_channel", "cent"), default="per_channel",
                     help="standby energy: every channel (default) or the CENT script's value")
    run.add_argument("--no-group", action="store_true",
                     help="simulate every channel separately (slower, same result)")
    run.add_argument("--per-cycle", action="store_true",
                     help="tick every controller every cycle (slower, same result)")
    run.add_argument("--progress", action="store_true",
                     help="report progress on stderr (default when stderr is a terminal)")
    add_timing_option(run)
    run.set_defaults(func=_aim_run)
    chk = aim.add_parser("check", help="verify a timed command schedule")
    chk.add_argument("schedule", help="schedule file: 'cycle channel command [bank row col] "
                                      "[key=value ...]'")
    chk.add_argument("--json", action="store_true", help="print one JSON object")
    add_timing_option(chk)
    chk.set_defaults(func=_aim_check)
    from patton.hw import cli as hw_cli
    from patton.runtime import cli as runtime_cli
    from patton.sim.serving import cli as serving_cli
    from patton.tb import cli as tb_cli

    hw_cli.add_parser(sub)
    runtime_cli.add_parser(sub)
    serving_cli.add_parsers(sub)  # patton workload ..., patton serve
    tb_cli.add_parser(sub)
    from patton import demo

    demo.add_parser(sub)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    args = parser().parse_args(argv)
    try:
        return args.func(args)
    except ReadError as error:  # a trace, schedule or conversation file (file:line: reason)
        print(f"error: {error}", file=sys.stderr)
        if getattr(args, "json", False):
            json.dump(error.to_json(), sys.stdout)
            sys.stdout.write("\n")
        return 2


if __name__ == "__main__":
    sys.exit(main())
