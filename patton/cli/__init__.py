"""The ``patton`` command.

``patton aim run TRACE [--json] [--schedule OUT] [--readouts FILE] [--reference REF] ...``
    Run the cycle model on a trace (the public AiM simulator's format or ours) and report
    cycles, per-channel command counts and energy. ``--schedule`` writes the timed command
    schedule with the data it carries (the trace's payloads, lane masks, CFR state and the
    instruction each command came from; ``patton.sim.schedule``). ``--readouts`` writes the
    values read (``patton.sim.readouts``: JSON or NPY). ``--reference`` compares the run with the
    public simulator's results for the trace and exits 1 on a difference. Output paths are
    checked before the run, and written before anything is printed.
``patton aim check SCHEDULE [--json] [--progress] [--timing PROFILE]``
    List every timing, bus and protocol violation in a timed schedule; exit 1 if there is any.

``--timing`` picks the public simulator's GDDR6 timing rules: ``aimsim-0f28a07`` (its head, the
default) or ``aimsim-2eb1ee0`` (the commit CENT pins; ``docs/timing-profiles.md``). The JSON
output names the profile used (``"timing"``).
``patton runtime scenario [--model M] [--requests N] [--steps N] [--seed S] [--json]``
    Run a PATTON serving scenario on the functional and cycle models.
``patton rtl run TRACE [--rows N] [--seed S] [--waves FILE] [--readouts FILE] [--json] [-v]``
    Run a trace on the RTL channel under Verilator and score it against the models.
``patton rtl check SCHEDULE [--rows N] [--json] [-v]``
    Replay a timed schedule on the RTL; compare its checker's verdict with the model's.
``patton hw verilog [--rows N] [--out DIR]``
    Write the RTL channel's Verilog and the DRAM mat macro.
``patton demo [--device rtl|model] [--steps N] [--waves STEP] [--json]``
    Serve a multi-turn chat through the PATTON runtime on four live RTL channels (or the
    models), checking every step (``patton.cli.demo``).
``patton repro fig7|fig8|fig9|micro|all [--quick] [--out DIR] [--workers N] [--json] [--ray A]``
    Reproduce the paper's evaluation side by side with its numbers (``patton.eval``,
    ``docs/evaluation.md``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from patton.sim import readouts as readouts_format
from patton.cli.options import add_timing_option
from patton.sim import check, schedule, trace
from patton.sim.check import Violation
from patton.sim.cycle_model import CycleModel, RunResult
from patton.sim.energy import energy
from patton.sim.functional import FunctionalModel
from patton.sim.native import KernelError
from patton.sim.schedule import TimedCommand
from patton.sim.textfile import ReadError


def _aim_run(args: argparse.Namespace) -> int:
    program = trace.read(args.trace)
    # Outputs are checked before the run: a bad path costs no simulation and writes nothing.
    if args.schedule is not None:
        schedule.check_writable(args.schedule)
    if args.readouts is not None:
        readouts_format.check(args.readouts)
    expected = _reference(args.reference, args.trace) if args.reference is not None else None
    show = args.progress or sys.stderr.isatty()
    wants_schedule = args.schedule is not None or (expected is not None
                                                   and "schedule" in expected)
    model = CycleModel(timing=args.timing, record=wants_schedule,
                       group=not args.no_group, skip=not args.per_cycle,
                       native=not (args.python or args.per_cycle),
                       frontend=args.frontend.replace("-", "_"),
                       progress=_progress if show else None)
    start = time.perf_counter()
    result = model.run(program)
    seconds = time.perf_counter() - start
    if show and seconds > 1.0:
        print(file=sys.stderr)
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
        "frontend": args.frontend,
        "cycles": result.cycles,
        "time_ns": result.cycles * model.device.cycle_ns,
        "commands": result.commands,
        "command_counts": {str(ch): counts for ch, counts in result.command_counts.items()},
        "bank_state_cycles": {str(ch): s for ch, s in result.bank_state_cycles.items()},
        "energy_nj": e.total,
        "energy_breakdown_nj": e.components,
        "wall_seconds": seconds,
    }
    if args.schedule is not None:
        report["schedule"] = str(args.schedule)
    if values is not None:
        report["readouts"] = {"file": str(args.readouts), "count": len(values)}
    differences: list[dict] = []
    if args.reference is not None:
        differences = _differences(expected, report, result) if expected is not None else []
        report["reference"] = {"file": str(args.reference), "key": Path(args.trace).stem,
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
        key = Path(args.trace).stem
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


class ReferenceFileError(ReadError):
    """A ``--reference`` file that cannot be read or is not a reference of the right shape."""


def _reference(path: str, trace_path: str) -> dict | None:
    """Return the entry of ``trace_path``'s stem in the reference file (None if it has none).

    The file is the public simulator's results (``tests/data/aim/reference.json``): a JSON
    object keyed by trace stem, each entry with some of ``memory_system_cycles``,
    ``command_counts``, ``bank_state_cycles`` and ``schedule``.
    """
    name = os.fspath(path)
    try:
        text = Path(name).read_text(encoding="utf-8")
    except OSError as failure:
        raise ReferenceFileError(name, None, f"cannot read reference: "
                                         f"{failure.strerror or failure}") from None
    except UnicodeDecodeError:
        raise ReferenceFileError(name, None, "not UTF-8 text") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise ReferenceFileError(name, error.lineno, f"not JSON: {error.msg}") from None
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise ReferenceFileError(name, None, "a reference is a JSON object keyed by trace name, "
                                         "each entry an object")
    entry = data.get(Path(trace_path).stem)
    if entry is not None:
        unknown = set(entry) - set(_REFERENCE_FIELDS)
        if unknown or not entry:
            raise ReferenceFileError(name, None, f"entry {Path(trace_path).stem!r}: fields "
                                             f"{sorted(unknown) or '(none)'}; known: "
                                             + ", ".join(_REFERENCE_FIELDS))
    return entry


#: Reference fields and the report field each is compared with.
_REFERENCE_FIELDS = {"memory_system_cycles": "cycles", "command_counts": "command_counts",
                     "bank_state_cycles": "bank_state_cycles", "schedule": "schedule"}


def _differences(expected: dict, report: dict, result: RunResult) -> list[dict]:
    """Return every difference between a reference entry and this run, one dict each."""
    out: list[dict] = []
    for key, field in _REFERENCE_FIELDS.items():
        if key not in expected:
            continue
        want = expected[key]
        if key == "memory_system_cycles":
            if want != result.cycles:
                out.append({"field": "cycles", "reference": want, "model": result.cycles})
        elif key == "schedule":
            got = [[c.cycle, c.channel, c.command.name] for c in result.schedule]
            if got != want:
                at = next((i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b),
                          min(len(got), len(want)))
                out.append({"field": f"schedule[{at}]",
                            "reference": want[at] if at < len(want) else None,
                            "model": got[at] if at < len(got) else None})
                if len(got) != len(want):
                    out.append({"field": "schedule length", "reference": len(want),
                                "model": len(got)})
        else:
            have = report[field]
            for ch in sorted(set(want) | set(have), key=lambda c: (len(c), c)):
                a, b = want.get(ch, {}), have.get(ch, {})
                for name in sorted(set(a) | set(b)):
                    if a.get(name, 0) != b.get(name, 0):
                        out.append({"field": f"{field}[{ch}][{name}]",
                                    "reference": a.get(name, 0), "model": b.get(name, 0)})
    return out


def _progress(done: int, total: int, cycle: int) -> None:
    print(f"\r  {done:,}/{total:,} instructions retired, cycle {cycle:,}", end="",
          file=sys.stderr, flush=True)


def _bar(show: bool, total: int, unit: str, what: str):
    """A tqdm bar on stderr (shown after two seconds), or None when not shown."""
    if not show:
        return None
    from tqdm import tqdm

    return tqdm(total=total, unit=unit, desc=what, file=sys.stderr, delay=2.0,
                dynamic_ncols=True, leave=False)


def _aim_check(args: argparse.Namespace) -> int:
    show = args.progress or sys.stderr.isatty()
    bar = _bar(show, 0, "line", "reading")

    def read_progress(done: int, total: int) -> None:
        bar.total = total
        bar.update(done - bar.n)

    try:
        commands = schedule.read(args.schedule,
                                 progress=read_progress if bar is not None else None)
    finally:
        if bar is not None:
            bar.close()
    bar = _bar(show, len(commands), "command", "checking")
    found = _verify(commands, args.timing, bar.update if bar is not None else None)
    if bar is not None:
        bar.close()
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


def _verify(commands: list[TimedCommand], timing: str,
            advance: Callable[[int], object] | None = None) -> list[Violation]:
    """``check.verify`` one channel at a time (``advance(n)`` after each), merged in file order.

    Every rule and protocol check is per channel, so each channel's violations are those of
    the whole schedule on that channel; the commands of a file are in cycle order, so sorting
    the merged list by line (stable) gives ``verify``'s order. Without ``advance``, or for
    commands not read from a file, it is ``verify`` itself.
    """
    if advance is None or any(c.line == 0 for c in commands[:1]):
        return check.verify(commands, timing=timing)
    by_channel: dict[int, list] = {}
    for c in commands:
        by_channel.setdefault(c.channel, []).append(c)
    found = []
    for cmds in by_channel.values():
        found.extend(check.verify(cmds, timing=timing))
        advance(len(cmds))
    found.sort(key=lambda v: v.line)
    return found


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
    run.add_argument("--python", action="store_true",
                     help="run the Python cycle model, the reference the compiled kernel is "
                          "tested against (slower, same result)")
    run.add_argument("--per-cycle", action="store_true",
                     help="run the Python model ticking every controller every cycle (much "
                          "slower, same result)")
    run.add_argument("--frontend", choices=("shared", "per-channel"), default="shared",
                     help="how host instructions are decoded: one per cycle for all channels "
                          "(shared, the public simulator's; default) or one per cycle per "
                          "channel (per-channel; docs/cycle-model.md)")
    run.add_argument("--progress", action="store_true",
                     help="report progress on stderr (default when stderr is a terminal)")
    run.add_argument("--readouts", metavar="FILE",
                     help="write every read-out value (RD_MAC, RD_SBK, ... results, from the "
                          "functional model) to FILE: .json or .npy (patton.sim.readouts)")
    run.add_argument("--reference", metavar="REF.json",
                     help="compare with the public simulator's results in REF.json (keyed "
                          "by trace stem, as tests/data/aim/reference.json); print the "
                          "differences, exit 1 on any")
    add_timing_option(run)
    run.set_defaults(func=_aim_run)
    chk = aim.add_parser("check", help="verify a timed command schedule")
    chk.add_argument("schedule", help="schedule file: 'cycle channel command [bank row col] "
                                      "[key=value ...]'")
    chk.add_argument("--json", action="store_true", help="print one JSON object")
    chk.add_argument("--progress", action="store_true",
                     help="report progress on stderr after two seconds (default when stderr "
                          "is a terminal)")
    add_timing_option(chk)
    chk.set_defaults(func=_aim_check)
    from patton.cli import hw as hw_cli
    from patton.cli import runtime as runtime_cli
    from patton.cli import serve as serving_cli
    from patton.cli import rtl as tb_cli

    hw_cli.add_parser(sub)
    runtime_cli.add_parser(sub)
    serving_cli.add_parsers(sub)  # patton workload ..., patton serve
    tb_cli.add_parser(sub)
    from patton.cli import demo

    demo.add_parser(sub)
    from patton.cli import repro as eval_cli

    eval_cli.add_parser(sub)  # patton repro ...
    return top


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    args = parser().parse_args(argv)
    try:
        return args.func(args)
    except KernelError as error:  # the compiled cycle model could not be built or failed
        print(f"error: {error}", file=sys.stderr)
        if getattr(args, "json", False):
            json.dump({"error": str(error), "file": None, "line": None}, sys.stdout)
            sys.stdout.write("\n")
        return 2
    except ReadError as error:  # a trace, schedule or conversation file (file:line: reason)
        print(f"error: {error}", file=sys.stderr)
        if getattr(args, "json", False):
            json.dump(error.to_json(), sys.stdout)
            sys.stdout.write("\n")
        return 2
    except BrokenPipeError:  # the reader of our output went away (``| head``): stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so that the exit's flush does not fail again
        os.close(devnull)
        return 128 + signal.SIGPIPE  # what a process that SIGPIPE ended reports


if __name__ == "__main__":
    sys.exit(main())
