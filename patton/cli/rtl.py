"""The ``patton rtl`` commands: validate your own traces and schedules on the RTL channel.

``patton rtl run TRACE [--rows N] [--seed S] [--waves FILE] [--readouts FILE] [--json] [-v]``
    Read an instruction trace, give every write that carries no ``data=`` a seeded random
    bfloat16 payload (``R/W MEM`` without ``col=``: column 0), run the cycle model, replay each
    channel's schedule on the RTL channel under Verilator (identical schedules once) and score
    it: every read bit-exact with the functional model, no violation flagged by the RTL or the
    model. Exit 1 on a mismatch or an unexpected violation. ``--waves`` copies the replay's
    waveform to ``FILE``: VCD for a ``.vcd`` name, FST for ``.fst`` (``patton.tb.fst`` finds the
    LZ4 and zlib libraries it links). ``--readouts`` writes the RTL's read values (JSON or NPY,
    ``patton.sim.readouts``).
``patton rtl check SCHEDULE [--rows N] [--json] [-v] [--timing PROFILE]``
    Replay a timed schedule (``cycle channel command [bank row col] [data=...] [mask=...]
    [cfr=...] [src=N]``, ``patton.sim.schedule``) on the RTL with the payloads, lane masks
    and CFRs it carries (zeros, all lanes and reset CFRs where it carries none) and compare
    the violations the RTL's checker flags with the model's (``patton aim check``). When
    every write carries ``data=`` (``patton aim run --schedule`` of a trace with payloads),
    every read and the final mats are also scored against the functional model's replay of
    the schedule, as ``rtl run`` does. Exit 0 only when both find the schedule legal (and no
    value differs).

Commands this RTL version refuses by design (``patton.hw.isa.REJECTED``: EWMUL16, AF16,
RDAF16, ...) are replayed, must be flagged ``REJECTED`` by the RTL, and are reported as expected
rejections rather than violations; the RTL neither executes nor times them, so they are left
out of the model's side of the comparison. Commands on the activation-function LUT rows
(``2**29 + AFM``: the ACT16 and AF16 of an AF) cannot be expressed on the RTL's 16-bit row
field and are reported as not replayed. Same-cycle commands on one channel (``rtl check``) are
bus conflicts: the model reports them and the RTL replays the first command of each cycle (file
order). Rows beyond ``--rows``, unreadable files and malformed lines exit 2 with
``file:line: reason``.

Without ``--rows`` the row count is chosen from the schedule
(:func:`patton.tb.builds.choose_rows`). Both print the model's or the schedule's cycles next to
the RTL's, which run :data:`~patton.tb.driver.DRAIN` cycles past the last command. Idle gaps
longer than every timing window are skipped in the replay, exactly
(:func:`patton.tb.player.skip_idle`). A build that is not cached says so on stderr; make,
Verilator and cocotb write to a log under ``build/runs/`` (``-v``: to stderr), named when the
build or a replay fails (exit 2).

This module parses the arguments and prints; the work is in :mod:`patton.tb.validate` (``run``
and ``check``, their reports), :mod:`patton.tb.builds` (the players) and
:mod:`patton.tb.coverage_report` (``coverage``'s report files). :func:`add_parser` registers the
``rtl`` group on the ``patton`` command's sub-parsers. The Verilator build is made once per
process, row count and timing profile (and cached on disk under ``build/``). ``--timing``
(default ``aimsim-0f28a07``) sets the profile of the cycle model, of the RTL's timing checker
(generated from it) and of the ``verify`` it is compared with; the JSON output names it
(``"timing"``). ``--device-ext`` (default ``aim``) sets the device extension set of all of them
(``aim+wr16``: the RTL channel decodes and executes WR16, the trace may use WR_ABK_OPEN); the
JSON output names it (``"device_ext"``, after ``"timing"``) when it is not ``aim``. A trace or
schedule that uses an extension the set lacks exits 2, naming the set that has it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from patton.cli.options import (
    SEED,
    add_device_ext_option,
    add_strict_option,
    add_timing_option,
    check_file,
    commands,
    fraction,
    integer,
    read_trace,
)
from patton.sim import readouts as readouts_format
from patton.sim import schedule as schedule_format
from patton.sim.device import DEVICE
from patton.sim.extensions import DEFAULT_EXT, NotOnDeviceError
from patton.sim.textfile import shown
from patton.tb import builds, coverage_report, validate
from patton.tb.closure import close
from patton.tb.driver import DRAIN, DRAIN_MARGIN
from patton.tb.prepare import DEFAULT_ROWS, RowsError
from patton.tb.replays import (
    Replay,
    channels_text,
    cores,
    rejection_note,
    rtl_text,
    stdout_to_stderr,
)
from patton.tb.session import Session
from patton.tb.stimulus import Mix
from patton.tb.toolchain import BUILD_ROOT, quiet
from patton.tb.validate import rtl_readouts

if TYPE_CHECKING:
    from patton.tb.player import SchedulePlayer

__all__ = ["add_parser"]

#: Violation lines printed per channel group in the human summary.
_SHOW = 10


# -- shared helpers -------------------------------------------------------------------------


def _wave_format(path: str) -> str:
    """Return the waveform format a file name asks for (its suffix, lower case, no dot)."""
    return Path(path).suffix.lower().lstrip(".")


class _Output:
    """Where make, Verilator, cocotb and the simulator write: the terminal (``-v``) or a log.

    Without ``-v`` their output goes to ``build/runs/rtl-<verb>-<pid>.log`` (started afresh by
    each command); its path is printed when something fails.
    """

    def __init__(self, verb: str, verbose: bool) -> None:
        self.verbose = verbose
        self.log = BUILD_ROOT / "runs" / f"rtl-{verb}-{os.getpid()}.log"
        if not verbose:
            self.log.parent.mkdir(parents=True, exist_ok=True)
            self.log.write_bytes(b"")

    def __call__(self) -> contextlib.AbstractContextManager:
        if self.verbose:
            return stdout_to_stderr()
        return quiet(self.log)

    def where(self) -> str:
        return "the output above" if self.verbose else f"log: {self.log}"


def _player(rows: int, waves: str | None, timing: str, out: _Output,
            ext: str = DEFAULT_EXT) -> SchedulePlayer:
    """:func:`patton.tb.builds.player`, saying when it builds, with the build's output sent to
    ``out``."""
    pending = builds.pending_build(rows, waves, timing, ext=ext)
    what = f"the RTL channel (rows {rows}" + (f", {waves} tracing)" if waves else ")")
    with builds.announce(pending, what, None if out.verbose else out.log,
                         kind=f"channel-{waves}" if waves else "channel"), out():
        return builds.player(rows, waves, timing, ext)


def _coverage_player(timing: str, out: _Output, ext: str = DEFAULT_EXT) -> SchedulePlayer:
    """:func:`patton.tb.builds.coverage_player`, saying when it builds, with the build's output
    sent to ``out``."""
    pending = builds.pending_build(DEFAULT_ROWS, timing=timing, coverage=True, ext=ext)
    with builds.announce(pending, f"the RTL channel with line and toggle coverage (rows "
                                  f"{DEFAULT_ROWS})", None if out.verbose else out.log,
                         kind="coverage"), out():
        return builds.coverage_player(timing, ext)


class _ToolFailure(Exception):
    """The RTL build or a simulation failed; the message names the log."""


def _reported(checked: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """The verb ``checked``, a build or simulator failure in it reported as an error (exit 2,
    JSON with ``--json``)."""
    def verb(args: argparse.Namespace) -> int:
        try:
            return checked(args)
        except _ToolFailure as failure:
            return _error(str(failure), args.json)

    return verb


def _tool(what: str, out: _Output, call):
    """Run ``call()``; turn a build or simulator failure into a :class:`_ToolFailure`."""
    try:
        return call()
    except (RowsError, KeyboardInterrupt):
        raise
    except Exception as error:
        raise _ToolFailure(f"{what} failed ({type(error).__name__}: {error}); "
                           f"{out.where()}") from error


def _note(out: _Output, quiet: int):
    """A progress line on stderr before each long replay."""
    # lazy: patton.tb.player imports Amaranth's Verilog back end (slow to import)
    from patton.tb.player import idle_skipped

    def note(group: list[list], i: int, n: int) -> None:
        cmds = group[0]
        skipped = idle_skipped(cmds, quiet)
        if len(cmds) < _LONG and not skipped:
            return
        span = cmds[-1].cycle if cmds else 0
        print(f"replaying  {channels_text([g[0].channel for g in group])} ({i + 1}/{n}): "
              f"{len(cmds):,} commands over {span:,} cycles"
              + (f", {skipped:,} idle cycles skipped" if skipped else ""),
              file=sys.stderr, flush=True)

    return note


def _start(quiet: int):
    """One progress line on stderr before channel schedules replay side by side."""
    from patton.tb.player import idle_skipped  # lazy, as in _note

    def start(groups: list[list[list]], jobs: int) -> None:
        commands = sum(len(g[0]) for g in groups)
        span = max((g[0][-1].cycle for g in groups if g[0]), default=0)
        skipped = sum(idle_skipped(g[0], quiet) for g in groups)
        at = "all at once" if jobs >= len(groups) else f"{jobs} at a time"
        print(f"replaying  {len(groups)} channel schedules side by side ({at}): "
              f"{commands:,} commands over {span:,} cycles"
              + (f", {skipped:,} idle cycles skipped" if skipped else ""),
              file=sys.stderr, flush=True)

    return start


#: Commands from which a replay gets a progress line.
_LONG = 100_000


def _emit(report: dict) -> None:
    json.dump(report, sys.stdout)
    sys.stdout.write("\n")


def _error(message: str, json_out: bool = False) -> int:
    print(f"error: {message}", file=sys.stderr)
    if json_out:
        _emit({"error": message, "file": None, "line": None})
    return 2


def _cycles_lines(model_label: str, model_cycles: int, rtl_cycles: int,
                  last_command: int) -> list[str]:
    """The labelled cycle counts of a replay and why the RTL's is larger."""
    return [f"cycles     {model_label} {model_cycles:,}, RTL {rtl_cycles:,}",
            (f"           (the RTL count runs {DRAIN} cycles past the schedule's last command, "
             f"at cycle {last_command:,}: the drain of the last read's latency, up to "
             f"{DRAIN - DRAIN_MARGIN}, plus {DRAIN_MARGIN})")]


# -- patton rtl run --------------------------------------------------------------------------


def _run_checked(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    read, notes = read_trace(args.trace, args.strict, quiet=args.json, ext=args.device_ext)
    program = list(read)
    waves = _wave_format(args.waves) if args.waves is not None else None
    if waves is not None and waves not in ("vcd", "fst"):
        return _error(f"--waves {args.waves}: name a .vcd or .fst file", args.json)
    if args.waves is not None:
        try:
            check_file(args.waves, "--waves")
        except ValueError as error:
            return _error(str(error), args.json)
    if args.readouts is not None:
        readouts_format.check(args.readouts)
    try:
        trace = validate.prepare_trace(program, shown(args.trace), rows=args.rows,
                                       seed=args.seed, timing=args.timing, waves=waves,
                                       ext=args.device_ext)
    except (RowsError, NotOnDeviceError) as error:
        return _error(str(error), args.json)
    out = _Output("run", args.verbose)
    play = _tool("building the RTL channel", out,
                 lambda: _player(trace.rows, waves, args.timing, out, args.device_ext))
    if waves:
        validate.clear_waves(trace)
    replaying = time.perf_counter()
    replays = _tool("the RTL replay", out, lambda: validate.replay_trace(
        play, trace, around=out, note=_note(out, play.timing.quiet), jobs=args.jobs,
        start=_start(play.timing.quiet)))
    replay_seconds = time.perf_counter() - replaying
    dumps: list[str] = []
    if waves:
        try:
            dumps = validate.copy_waves(replays, Path(args.waves))
        except RuntimeError as error:
            return _error(str(error), args.json)
    values = None
    if args.readouts is not None:
        values = rtl_readouts(replays, trace.program)
        readouts_format.write(args.readouts, values, str(args.trace), "rtl")
    seconds = time.perf_counter() - started
    report = validate.run_report(
        trace, replays, play, waves=dumps, seconds=seconds, replay_seconds=replay_seconds,
        readouts=None if values is None else (str(args.readouts), len(values)))
    report["warnings"] = notes
    if args.json:
        _emit(report)
        return 0 if report["ok"] else 1
    _print_run(args, trace, replays, report, seconds)
    return 0 if report["ok"] else 1


def _print_run(args: argparse.Namespace, trace: validate.PreparedTrace,
               replays: list[Replay], report: dict, seconds: float) -> None:
    """The human summary of ``rtl run``."""
    model = trace.model
    print(f"trace      {args.trace} ({trace.filled} payload(s) filled, seed {args.seed})")
    print(f"model      {model.cycles} cycles, {model.commands} commands on "
          f"{len(model.command_counts)} channel(s), timing {args.timing}"
          + _on(args.device_ext))
    print(f"rtl        {len(replays)} distinct schedule(s) replayed, "
          f"{report['replayed_commands']} commands (--rows {trace.rows}"
          f"{', chosen from the trace' if args.rows is None else ''})")
    print(_speed_line(report, args.jobs))
    for r in replays:
        v = r.verdict
        print(f"  {channels_text(r.channels):<12} {r.commands} commands, {v.reads} reads, "
              f"{v.mat_words} mat words, {v.mismatches + v.mat_mismatches} mismatch(es), "
              f"{v.rtl_violations} RTL / {v.model_violations} "
              f"model violation(s){'' if v.agree else ', checkers DISAGREE'}")
        for x in r.result.violations[:_SHOW]:
            print(f"    rtl    {rtl_text(x, r.timing)}")
    for line in _cycles_lines("model", model.cycles, report["rtl_cycles"],
                              report["last_command_cycle"]):
        print(line)
    print(f"reads      {report['reads']} compared, {report['read_mismatches']} mismatch(es)")
    print(f"mats       {report['mat_words']} non-zero words compared, "
          f"{report['mat_mismatches']} mismatch(es)")
    print(f"violations {report['violations']} (RTL), {report['model_violations']} (model)")
    for line in rejection_note(replays):
        print(line)
    for path in report["waves"]:
        print(f"waves      {path}")
    if "readouts" in report:
        print(f"readouts   {report['readouts']['count']} written to {args.readouts}")
    print(f"result     {'OK' if report['ok'] else 'FAIL'} in {seconds:.1f} s")


def _speed_line(report: dict, jobs: int | None) -> str:
    """How long the replays took, side by side, and how many cycles they simulated."""
    jobs = cores() if jobs is None else jobs
    at = "all at once" if jobs >= report["replays"] else f"{jobs} at a time"
    rate = report["cycles_per_second"]
    return (f"speed      {report['replay_seconds']:.1f} s for the replays ({at}): "
            f"{report['simulated_cycles']:,} simulated channel cycles"
            + (f", {rate:,} per second" if rate else ""))


# -- patton rtl check ------------------------------------------------------------------------


def _check_checked(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    commands = schedule_format.read(args.schedule)
    try:
        sched = validate.prepare_schedule(commands, shown(args.schedule), rows=args.rows,
                                          timing=args.timing, ext=args.device_ext)
    except (RowsError, NotOnDeviceError) as error:
        return _error(str(error), args.json)
    out = _Output("check", args.verbose)
    play = _tool("building the RTL channel", out,
                 lambda: _player(sched.rows, None, args.timing, out, args.device_ext))
    replaying = time.perf_counter()
    replays = _tool("the RTL replay", out, lambda: validate.replay_schedule(
        play, sched, around=out, note=_note(out, play.timing.quiet), jobs=args.jobs,
        start=_start(play.timing.quiet)))
    replay_seconds = time.perf_counter() - replaying
    seconds = time.perf_counter() - started
    report = validate.check_report(sched, replays, play, seconds=seconds,
                                   replay_seconds=replay_seconds)
    if args.json:
        _emit(report)
        return 0 if report["ok"] else 1
    _print_check(args, sched, replays, report, seconds)
    return 0 if report["ok"] else 1


def _print_check(args: argparse.Namespace, sched: validate.PreparedSchedule,
                 replays: list[Replay], report: dict, seconds: float) -> None:
    """The human summary of ``rtl check``."""
    bus = report["bus_conflicts"]
    print(f"schedule   {args.schedule}: {report['commands']} commands, "
          f"{len(replays)} distinct channel schedule(s) replayed (--rows {sched.rows}"
          f"{', chosen from the schedule' if args.rows is None else ''})")
    print(f"model      {report['model_violations']} violation(s), timing {args.timing}"
          + _on(args.device_ext)
          + (f", {bus} bus conflict(s) (not replayed)" if bus else ""))
    for v in sched.found[:_SHOW]:
        print(f"  {v.located(shown(args.schedule))}")
    print(f"rtl        {report['rtl_violations']} violation(s)")
    print(_speed_line(report, args.jobs))
    for r in replays:
        for x in r.result.violations[:_SHOW]:
            print(f"  {channels_text(r.channels)}: {rtl_text(x, r.timing)}")
    last = report["last_command_cycle"]
    for line in _cycles_lines("schedule", last + 1, report["rtl_cycles"], last):
        print(line)
    if report["idle_cycles_skipped"]:
        print(f"           ({report['idle_cycles_skipped']:,} idle cycles were skipped in the "
              "replay: no timing window reaches across them)")
    if report["values"]:
        print(f"values     {report['reads']} reads compared, {report['read_mismatches']} "
              f"mismatch(es); {report['mat_mismatches']} mat word(s) differ")
    else:
        print("values     not scored (some writes carry no data=)")
    if bus:
        print(f"           (the RTL replayed the schedule without the {bus} second "
              "command(s) of a cycle; the model finds "
              f"{report['model_violations_replayed']} violation(s) in what it replayed)")
    print(f"verdicts   {'agree' if report['agree'] else 'DISAGREE'} on the replayed commands")
    for r in replays:
        if not r.verdict.agree:
            v = r.verdict
            print(f"  {channels_text(r.channels)}: model only "
                  f"{sorted(v.model_timing - v.rtl_timing)} "
                  f"{sorted(v.model_protocol - v.rtl_protocol)}, RTL only "
                  f"{sorted(v.rtl_timing - v.model_timing)} "
                  f"{sorted(v.rtl_protocol - v.model_protocol)}")
    for line in rejection_note(replays):
        print(line)
    print(f"result     {'legal' if report['ok'] else 'NOT legal'} ({seconds:.1f} s)")


# -- parser ----------------------------------------------------------------------------------

_RUN_HELP = (
    "Run a trace on the cycle model, replay each distinct channel schedule on the RTL channel "
    "under Verilator and score it against the functional model and the schedule checker. "
    "Writes without data= get seeded random bfloat16 payloads. EWMUL16, AF16 and RDAF16 are "
    "refused by this RTL version by design and reported as expected rejections. Exit 1 on a "
    "mismatch or an unexpected violation, 2 on a bad trace or a row beyond --rows.")
_COVERAGE_HELP = (
    "Drive the RTL channel with constrained-random command schedules (legal by construction "
    "from the models' rules, then mutated at chosen rules and operands, aimed at the bins not "
    "yet hit) and sample functional coverage on every command: each timing rule at its "
    "boundary and one cycle short, each command in each bank state and register mode, each "
    "protocol error, CFR BROADCAST x MAC/MAC16, RD and RDMAC16 returning together. Every "
    "flag, read and mat word is scored against the models. Exit 0 when every reachable bin "
    "was hit and the RTL agreed throughout, 1 otherwise.")
_CHECK_HELP = (
    "Replay a timed schedule ('cycle channel command [bank row col] [data=...] [mask=...] "
    "[cfr=...] [src=N]', any channels) on the RTL channel with the payloads and CFRs it "
    "carries and compare the violations its checker flags with the model's (patton aim "
    "check); when every write carries data=, reads and mats are scored against the "
    "functional model too. Same-cycle commands are bus conflicts: the RTL replays the first "
    "of each cycle. Exit 0 only when both find the schedule legal, 2 on a bad line.")

# -- patton rtl coverage ---------------------------------------------------------------------


def _coverage_checked(args: argparse.Namespace) -> int:
    # lazy: tqdm is slow to import, and only this verb draws a progress bar
    from tqdm import tqdm

    if args.budget < args.commands:
        return _error(f"--budget {args.budget} is below --commands {args.commands}", args.json)
    folder = Path(args.out) if args.out is not None else BUILD_ROOT / "coverage"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as error:
        return _error(f"--out {folder}: cannot write there ({error.strerror})", args.json)
    out = _Output("coverage", args.verbose)
    if args.code:
        play = _tool("building the RTL channel with coverage", out,
                     lambda: _coverage_player(args.timing, out, args.device_ext))
    else:
        play = _tool("building the RTL channel", out,
                     lambda: _player(DEFAULT_ROWS, None, args.timing, out, args.device_ext))
    stream = os.fdopen(os.dup(2), "w")  # the progress bar, past the simulator's redirection
    bar = tqdm(total=None, unit=" bins", file=stream, disable=args.json or None,
               desc="coverage", leave=False)

    def progress(monitor) -> None:  # noqa: ANN001 - CoverageMonitor
        figures = monitor.figures()
        bar.total = figures["bins_total"] - figures["bins_unreachable"]
        bar.n = figures["bins_hit"]
        bar.set_postfix_str(f"{figures['commands']:,} commands", refresh=True)

    counts: list[Path] = []

    def run():
        with out(), Session(play, "rtl-coverage") as session:
            if session.coverage_path is not None:
                counts.append(session.coverage_path)
            return close(session, seed=args.seed, least=args.commands, budget=args.budget,
                         timing=play.timing, mix=Mix(targeted=args.targeted),
                         progress=progress)

    try:
        result = _tool("the coverage run", out, run)
    finally:
        bar.close()
        stream.close()
    try:
        written = coverage_report.write(result, folder, counts[0] if counts else None)
    except coverage_report.CountsError as error:
        return _error(f"{error}; {out.where()}", args.json)
    if args.json:
        # the figures name the device extension set (``device_ext``) when it is not aim
        _emit({**written.figures, "out": str(folder), "timing": args.timing})
    else:
        code = [written.code] if written.code else []
        for line in coverage_report.summary(result) + code:
            print(line)
        for group, bins in result.monitor.holes().items():
            print(f"hole       {group}: {', '.join(bins)}")
        for found in result.scoreboard.found[:_SHOW]:
            print(f"mismatch   {found}")
        extra = ", code-coverage.md, coverage.info, coverage.dat" if code else ""
        print(f"report     {folder / 'coverage.md'} (and coverage.json, coverage.xml{extra})")
    return 0 if result.ok else 1


#: ``--rows``: rows per bank of the RTL build, 1 .. the device's rows.
_rows = integer(1, DEVICE.rows)


def _jobs_option(verb: argparse.ArgumentParser) -> None:
    """``--jobs N``: how many channel schedules replay at once (each its own simulator)."""
    verb.add_argument("--jobs", type=integer(1, 32), default=None, metavar="N",
                      help="replay N distinct channel schedules at a time, each on its own "
                           "simulator (default: one per CPU core)")


def _common(verb: argparse.ArgumentParser) -> None:
    """The options every ``rtl`` verb has: ``--json``, ``-v``, ``--timing``, ``--device-ext``."""
    verb.add_argument("--json", action="store_true", help="print one JSON object")
    verb.add_argument("-v", "--verbose", action="store_true",
                      help="show the make/Verilator/cocotb output (default: into a log file "
                           f"under {BUILD_ROOT / 'runs'}, named on failure)")
    add_timing_option(verb)
    add_device_ext_option(verb)


def _on(ext: str) -> str:
    """`` on <ext>`` after a timing profile in the human summaries; nothing on ``aim``."""
    return "" if ext == DEFAULT_EXT else f" on {ext}"


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``rtl`` (``run``, ``check``, ``coverage``) on ``subparsers``; return its
    parser."""
    rtl = subparsers.add_parser("rtl", help="the RTL channel simulated by Verilator: run a "
                                            "trace, replay a schedule, close coverage",
                                description="Run traces and replay schedules on the RTL "
                                            "channel simulated by Verilator, scored against "
                                            "the models, or close its functional coverage.")
    verbs = commands(rtl, "verb")
    run = verbs.add_parser("run", help="run a trace on the RTL and score it against the models",
                           description=_RUN_HELP)
    run.add_argument("trace", help="instruction trace (public AiM format or ours)")
    add_strict_option(run)
    run.add_argument("--rows", type=_rows, default=None,
                     help="rows per bank of the RTL build (default: chosen from the schedule: "
                          "its highest row rounded up to a power of two, at least "
                          f"{DEFAULT_ROWS}, or a larger build already cached)")
    run.add_argument("--seed", type=SEED, default=0,
                     help="seed of the payloads filled in for writes without data= (default 0)")
    run.add_argument("--waves", metavar="FILE",
                     help="build with waveform tracing and copy the dump to FILE (.vcd or .fst)")
    run.add_argument("--readouts", metavar="FILE",
                     help="write the RTL's read-out values (RD_MAC, RD_SBK, ... results) to "
                          "FILE: .json or .npy (patton.sim.readouts)")
    _jobs_option(run)
    _common(run)
    run.set_defaults(func=_reported(_run_checked))
    chk = verbs.add_parser("check", help="replay a schedule on the RTL; compare both checkers",
                           description=_CHECK_HELP)
    chk.add_argument("schedule", help="schedule file: 'cycle channel command [bank row col] "
                                      "[key=value ...]'")
    chk.add_argument("--rows", type=_rows, default=None,
                     help="rows per bank of the RTL build (default: chosen from the schedule: "
                          "its highest row rounded up to a power of two, at least "
                          f"{DEFAULT_ROWS}, or a larger build already cached)")
    _jobs_option(chk)
    _common(chk)
    chk.set_defaults(func=_reported(_check_checked))
    cov = verbs.add_parser("coverage", help="functional coverage closure of the RTL channel",
                           description=_COVERAGE_HELP)
    cov.add_argument("--out", metavar="DIR", default=None,
                     help="where the report goes: coverage.md, coverage.json and "
                          "cocotb-coverage's coverage.xml (default build/coverage)")
    cov.add_argument("--seed", type=SEED, default=1, help="stimulus seed (default 1)")
    cov.add_argument("--commands", type=integer(0, 10**8), default=20_000,
                     help="commands to run at least, even once every bin is hit (default "
                          "20,000)")
    cov.add_argument("--budget", type=integer(1, 10**8), default=200_000,
                     help="commands after which the run stops, closed or not (default 200,000)")
    cov.add_argument("--targeted", type=fraction, default=Mix().targeted, metavar="SHARE",
                     help="share of the steps aimed at bins not hit yet (default "
                          f"{Mix().targeted}; 0: plain constrained random)")
    cov.add_argument("--code", action="store_true",
                     help="run on a Verilator build with line and toggle coverage (its own "
                          "build the first time) and report code coverage too: "
                          "code-coverage.md, coverage.info (lcov), coverage.dat")
    _common(cov)
    cov.set_defaults(func=_reported(_coverage_checked))
    return rtl
