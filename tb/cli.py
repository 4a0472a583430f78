"""The ``patton rtl`` commands: validate your own traces and schedules on the RTL channel.

``patton rtl run TRACE [--rows N] [--seed S] [--waves FILE] [--json] [--timing PROFILE]``
    Read an instruction trace, give every write that carries no ``data=`` a seeded random
    bfloat16 payload (``R/W MEM`` without ``col=``: column 0), run the cycle model, replay each
    channel's schedule on the RTL channel under Verilator (identical schedules once) and score
    it: every read bit-exact with the functional model, no violation flagged by the RTL or the
    model. Exit 1 on a mismatch or an unexpected violation. ``--waves`` copies the replay's
    waveform to ``FILE``: VCD for a ``.vcd`` name, FST for ``.fst`` (``patton.tb.fst`` finds the
    LZ4 and zlib libraries it links).
``patton rtl check SCHEDULE [--rows N] [--json] [--timing PROFILE]``
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

:func:`add_parser` registers the ``rtl`` group on the ``patton`` command's sub-parsers. The
Verilator build is made once per process, row count and timing profile (and cached on disk under
``build/``). ``--timing`` (default ``aimsim-0f28a07``) sets the profile of the cycle model, of
the RTL's timing checker (generated from it) and of the ``verify`` it is compared with; the JSON
output names it (``"timing"``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from patton.options import integer
from patton.sim import check
from patton.sim import schedule as schedule_format
from patton.sim import trace as trace_format
from patton.sim.cycle_model import CycleModel
from patton.sim.device import DEVICE
from patton.sim.schedule import WRITES
from patton.sim.timing import DEFAULT_PROFILE
from patton.tb.prepare import DEFAULT_ROWS, RowsError, fill_payloads
from patton.tb.prepare import check_schedule_rows as _check_schedule_rows
from patton.tb.prepare import check_trace_rows as _check_trace_rows
from patton.tb.replays import Replay
from patton.tb.replays import channels_text as _channels_text
from patton.tb.replays import clear_dumps as _clear_dumps
from patton.tb.replays import copy_dumps as _copy_dumps
from patton.tb.replays import rejected as _rejected
from patton.tb.replays import rejection_note as _rejection_note
from patton.tb.replays import replay_all as _replay_all
from patton.tb.replays import stdout_to_stderr as _stdout_to_stderr

if TYPE_CHECKING:
    from patton.tb.player import SchedulePlayer

__all__ = ["add_parser", "player", "fill_payloads", "RowsError", "Replay"]

#: Violation lines printed per channel group in the human summary.
_SHOW = 10

_PLAYERS: dict[tuple[int, str | None, str], SchedulePlayer] = {}


# -- shared helpers -------------------------------------------------------------------------


def _wave_format(path: str) -> str:
    """Return the waveform format a file name asks for (its suffix, lower case, no dot)."""
    return Path(path).suffix.lower().lstrip(".")


def player(rows: int = DEFAULT_ROWS, waves: str | None = None,
           timing: str = DEFAULT_PROFILE) -> SchedulePlayer:
    """Return this process's schedule player for ``rows`` rows per bank whose timing checker
    is built for profile ``timing`` (built once per process)."""
    key = (rows, waves, timing)
    if key not in _PLAYERS:
        from patton.hw.params import ChannelParams
        from patton.tb.player import SchedulePlayer

        with _stdout_to_stderr():
            _PLAYERS[key] = SchedulePlayer(ChannelParams(rows=rows), waves=waves, timing=timing)
    return _PLAYERS[key]


def _emit(report: dict) -> None:
    json.dump(report, sys.stdout)
    sys.stdout.write("\n")


def _error(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


# -- patton rtl run --------------------------------------------------------------------------


def _run(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    program = list(trace_format.read(args.trace))
    try:
        _check_trace_rows(program, args.rows, str(args.trace))
    except RowsError as error:
        return _error(str(error))
    filled = fill_payloads(program, args.seed)
    model = CycleModel(timing=args.timing, record=True).run(program)
    assert model.schedule is not None
    try:
        _check_schedule_rows(model.schedule, args.rows, str(args.trace))
    except RowsError as error:
        return _error(str(error))
    waves = _wave_format(args.waves) if args.waves is not None else None
    if waves is not None and waves not in ("vcd", "fst"):
        return _error(f"--waves {args.waves}: name a .vcd or .fst file")
    try:
        play = player(args.rows, waves, args.timing)
    except RuntimeError as error:
        if waves == "fst" and "FST waveforms need" in str(error):
            return _error(str(error))
        raise
    prefix = "rtl-run"
    if waves:
        _clear_dumps(model.schedule, prefix)
    replays = _replay_all(play, model.schedule, prefix, values=True)
    dumps: list[str] = []
    if waves:
        try:
            dumps = _copy_dumps(replays, prefix, Path(args.waves))
        except RuntimeError as error:
            return _error(str(error))
    seconds = time.perf_counter() - started

    def total(attr: str) -> int:
        return sum(getattr(r.verdict, attr) * len(r.channels) for r in replays)

    unflagged = sum(len(r.unflagged) * len(r.channels) for r in replays)
    rejections = sum(sum(r.rejected.values()) * len(r.channels) for r in replays)
    violations, model_violations = total("rtl_violations"), total("model_violations")
    mismatches = total("mismatches") + total("mat_mismatches")
    agree = all(r.verdict.agree for r in replays)
    ok = not (mismatches or violations or model_violations or unflagged) and agree
    report = {
        "trace": str(args.trace), "timing": args.timing, "rows": args.rows, "seed": args.seed,
        "payloads_filled": filled,
        "cycles": max((r.result.cycles for r in replays), default=0),
        "model_cycles": model.cycles,
        "commands": model.commands,
        "replays": len(replays),
        "replayed_commands": sum(r.replayed for r in replays),
        "reads": total("reads"),
        "mismatches": mismatches,
        "read_mismatches": total("mismatches"),
        "mat_words": total("mat_words"),
        "mat_mismatches": total("mat_mismatches"),
        "violations": violations,
        "model_violations": model_violations,
        "rejections": rejections,
        "rejected": _rejected(replays),
        "rejections_not_flagged": unflagged,
        "agree": agree,
        "ok": ok,
        "channels": {str(ch): r.summary() for r in replays for ch in r.channels},
        "waves": dumps,
        "build_seconds": round(play.build_seconds, 3),
        "rtl_seconds": round(sum(r.result.seconds for r in replays), 3),
        "wall_seconds": round(seconds, 3),
    }
    if args.json:
        _emit(report)
        return 0 if ok else 1
    print(f"trace      {args.trace} ({filled} payload(s) filled, seed {args.seed})")
    print(f"model      {model.cycles} cycles, {model.commands} commands on "
          f"{len(model.command_counts)} channel(s), timing {args.timing}")
    print(f"rtl        {len(replays)} distinct schedule(s) replayed, "
          f"{report['replayed_commands']} commands, {report['cycles']} cycles max, "
          f"{report['rtl_seconds']:.2f} s (--rows {args.rows})")
    for r in replays:
        v = r.verdict
        print(f"  {_channels_text(r.channels):<12} {r.commands} commands, {v.reads} reads, "
              f"{v.mat_words} mat words, {v.mismatches + v.mat_mismatches} mismatch(es), "
              f"{v.rtl_violations} RTL / {v.model_violations} "
              f"model violation(s){'' if v.agree else ', checkers DISAGREE'}")
        for line in r.summary()["rtl_list"][:_SHOW]:
            print(f"    rtl    {line}")
    print(f"reads      {report['reads']} compared, {report['read_mismatches']} mismatch(es)")
    print(f"mats       {report['mat_words']} non-zero words compared, "
          f"{report['mat_mismatches']} mismatch(es)")
    print(f"violations {violations} (RTL), {model_violations} (model)")
    for line in _rejection_note(replays):
        print(line)
    for path in dumps:
        print(f"waves      {path}")
    print(f"result     {'OK' if ok else 'FAIL'} in {seconds:.1f} s")
    return 0 if ok else 1


# -- patton rtl check ------------------------------------------------------------------------


def _check(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    commands = schedule_format.read(args.schedule)
    try:
        _check_schedule_rows(commands, args.rows, str(args.schedule))
    except RowsError as error:
        return _error(str(error))
    found = check.verify(commands, timing=args.timing)
    bus = [v for v in found if v.kind == "bus"]
    flagged = {(v.channel, v.cycle) for v in found if v.kind != "bus"}
    model_violations = len(flagged) + len(bus)
    # The RTL's port takes one command per cycle: keep the first of each (channel, cycle).
    seen: set[tuple[int, int]] = set()
    replayable = []
    for cmd in sorted(commands, key=lambda c: c.cycle):
        if (cmd.channel, cmd.cycle) not in seen:
            seen.add((cmd.channel, cmd.cycle))
            replayable.append(cmd)
    # Values can be scored only with every write's data (the functional model needs it).
    values = all(c.payload is not None for c in commands if c.command in WRITES)
    play = player(args.rows, timing=args.timing)
    replays = _replay_all(play, replayable, "rtl-check", values=values)
    seconds = time.perf_counter() - started
    rtl_violations = sum(r.verdict.rtl_violations * len(r.channels) for r in replays)
    unflagged = sum(len(r.unflagged) * len(r.channels) for r in replays)
    agree = all(r.verdict.agree for r in replays)
    reads = sum(r.verdict.reads * len(r.channels) for r in replays)
    read_mismatches = sum(r.verdict.mismatches * len(r.channels) for r in replays)
    mat_mismatches = sum(r.verdict.mat_mismatches * len(r.channels) for r in replays)
    mismatches = read_mismatches + mat_mismatches
    ok = not (rtl_violations or model_violations or unflagged or mismatches)
    report = {
        "schedule": str(args.schedule), "timing": args.timing, "rows": args.rows,
        "commands": len(commands),
        "bus_conflicts": len(bus),
        "values": values,
        "reads": reads,
        "mismatches": mismatches,
        "read_mismatches": read_mismatches,
        "mat_mismatches": mat_mismatches,
        "replays": len(replays),
        "replayed_commands": sum(r.replayed for r in replays),
        "cycles": max((r.result.cycles for r in replays), default=0),
        "rtl_violations": rtl_violations,
        "model_violations": model_violations,
        "model_violations_replayed": sum(r.verdict.model_violations * len(r.channels)
                                         for r in replays),
        "agree": agree,
        "rejections": sum(sum(r.rejected.values()) * len(r.channels) for r in replays),
        "rejected": _rejected(replays),
        "rejections_not_flagged": unflagged,
        "ok": ok,
        "channels": {str(ch): r.summary() for r in replays for ch in r.channels},
        "model_list": [str(v) for v in found],
        "wall_seconds": round(seconds, 3),
    }
    if args.json:
        _emit(report)
        return 0 if ok else 1
    print(f"schedule   {args.schedule}: {len(commands)} commands, "
          f"{len(replays)} distinct channel schedule(s) replayed (--rows {args.rows})")
    print(f"model      {model_violations} violation(s), timing {args.timing}"
          + (f", {len(bus)} bus conflict(s) (not replayed)" if bus else ""))
    for v in found[:_SHOW]:
        print(f"  {v.located(args.schedule)}")
    print(f"rtl        {rtl_violations} violation(s)")
    for r in replays:
        for line in r.summary()["rtl_list"][:_SHOW]:
            print(f"  {_channels_text(r.channels)}: {line}")
    if values:
        print(f"values     {reads} reads compared, {read_mismatches} mismatch(es); "
              f"{mat_mismatches} mat word(s) differ")
    else:
        print("values     not scored (some writes carry no data=)")
    if bus:
        print(f"           (the RTL replayed the schedule without the {len(bus)} second "
              "command(s) of a cycle; the model finds "
              f"{report['model_violations_replayed']} violation(s) in what it replayed)")
    print(f"verdicts   {'agree' if agree else 'DISAGREE'} on the replayed commands")
    for r in replays:
        if not r.verdict.agree:
            v = r.verdict
            print(f"  {_channels_text(r.channels)}: model only "
                  f"{sorted(v.model_timing - v.rtl_timing)} "
                  f"{sorted(v.model_protocol - v.rtl_protocol)}, RTL only "
                  f"{sorted(v.rtl_timing - v.model_timing)} "
                  f"{sorted(v.rtl_protocol - v.model_protocol)}")
    for line in _rejection_note(replays):
        print(line)
    print(f"result     {'legal' if ok else 'NOT legal'} ({seconds:.1f} s)")
    return 0 if ok else 1


# -- parser ----------------------------------------------------------------------------------

_RUN_HELP = (
    "Run a trace on the cycle model, replay each distinct channel schedule on the RTL channel "
    "under Verilator and score it against the functional model and the schedule checker. "
    "Writes without data= get seeded random bfloat16 payloads. EWMUL16, AF16 and RDAF16 are "
    "refused by this RTL version by design and reported as expected rejections. Exit 1 on a "
    "mismatch or an unexpected violation, 2 on a bad trace or a row beyond --rows.")
_CHECK_HELP = (
    "Replay a timed schedule ('cycle channel command [bank row col] [data=...] [mask=...] "
    "[cfr=...] [src=N]', any channels) on the RTL channel with the payloads and CFRs it "
    "carries and compare the violations its checker flags with the model's (patton aim "
    "check); when every write carries data=, reads and mats are scored against the "
    "functional model too. Same-cycle commands are bus conflicts: the RTL replays the first "
    "of each cycle. Exit 0 only when both find the schedule legal, 2 on a bad line.")


#: ``--rows``: rows per bank of the RTL build, 1 .. the device's rows.
_rows = integer(1, DEVICE.rows)


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``rtl`` (with ``run`` and ``check``) on ``subparsers``; return its parser."""
    from patton.options import SEED, add_timing_option
    rtl = subparsers.add_parser("rtl", help="the RTL channel under Verilator",
                                description="Replay traces and schedules on the RTL channel.")
    verbs = rtl.add_subparsers(dest="verb", required=True)
    run = verbs.add_parser("run", help="run a trace on the RTL and score it against the models",
                           description=_RUN_HELP)
    run.add_argument("trace", help="instruction trace (public AiM format or ours)")
    run.add_argument("--rows", type=_rows, default=DEFAULT_ROWS,
                     help=f"rows per bank of the RTL build (default {DEFAULT_ROWS}; the trace's "
                          "rows must fit)")
    run.add_argument("--seed", type=SEED, default=0,
                     help="seed of the payloads filled in for writes without data= (default 0)")
    run.add_argument("--waves", metavar="FILE",
                     help="build with waveform tracing and copy the dump to FILE (.vcd or .fst)")
    run.add_argument("--json", action="store_true", help="print one JSON object")
    add_timing_option(run)
    run.set_defaults(func=_run)
    chk = verbs.add_parser("check", help="replay a schedule on the RTL; compare both checkers",
                           description=_CHECK_HELP)
    chk.add_argument("schedule", help="schedule file: 'cycle channel command [bank row col] "
                                      "[key=value ...]'")
    chk.add_argument("--rows", type=_rows, default=DEFAULT_ROWS,
                     help=f"rows per bank of the RTL build (default {DEFAULT_ROWS})")
    chk.add_argument("--json", action="store_true", help="print one JSON object")
    add_timing_option(chk)
    chk.set_defaults(func=_check)
    return rtl
