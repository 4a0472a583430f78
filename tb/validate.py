"""A user's trace or schedule validated on the RTL channel, end to end, as a report.

A trace (``patton rtl run``): :func:`prepare_trace` fills the payloads of writes that carry
none, runs the cycle model and settles the row count; :func:`replay_trace` replays the model's
schedule on a player (:mod:`patton.tb.builds`), channel group by channel group
(:mod:`patton.tb.replays`), every read and mat word scored; :func:`copy_waves` collects its
waveforms, :func:`rtl_readouts` its read values; :func:`run_report` is the report.

A timed schedule (``patton rtl check``): :func:`prepare_schedule` settles the row count, runs
``verify`` on it and keeps what the RTL's port can take (the first command of each channel and
cycle); :func:`replay_schedule` replays that, values scored when every write carries its data;
:func:`check_report` is the report.

The reports are JSON-ready dicts (what ``--json`` prints); :mod:`patton.cli.rtl` prints them.
Both run on a device extension set (default ``aim``), which the reports name (``device_ext``,
after ``timing``) only when it is not ``aim``: a default report is what it always was.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from patton.sim import check
from patton.sim.check import Violation
from patton.sim.cycle_model import CycleModel, RunResult
from patton.sim.extensions import DEFAULT_EXT, NotOnDeviceError, ext_field
from patton.sim.isa import Instruction
from patton.sim.program import Readout
from patton.sim.schedule import WRITES, TimedCommand
from patton.sim.timing import timing_table
from patton.tb.builds import choose_rows, highest_row
from patton.tb.driver import DRAIN
from patton.tb.prepare import check_schedule_rows, check_trace_rows, fill_payloads
from patton.tb.replays import (
    Replay,
    clear_dumps,
    copy_dumps,
    rejected,
    replay_all,
    rtl_objects,
)

if TYPE_CHECKING:
    from patton.tb.player import SchedulePlayer

__all__ = ["PreparedTrace", "prepare_trace", "replay_trace", "clear_waves", "copy_waves",
           "rtl_readouts", "run_report", "PreparedSchedule", "prepare_schedule", "replay_schedule",
           "check_report", "RUN", "CHECK"]

#: The replay names (``build/runs/<name>-ch<channel>-<pid>``) of a trace and of a schedule.
RUN, CHECK = "rtl-run", "rtl-check"

#: Where each replay's simulator output goes (``replay_all``'s ``around``).
Around = Callable[[], contextlib.AbstractContextManager] | None
#: Called before each replay with its group, index and the number of groups (a progress line).
Note = Callable[[list[list[TimedCommand]], int, int], None] | None
#: Called once before side-by-side replays start, with the channel groups and how many run at
#: once (``replay_all``'s ``start``).
Start = Callable[[list[list[list[TimedCommand]]], int], None] | None


def _idle_skipped(replays: Sequence[Replay], quiet: int) -> int:
    """The most idle cycles skipped in one of ``replays`` (``player.idle_skipped``)."""
    from patton.tb.player import idle_skipped  # lazy: it imports Amaranth's back end

    return max((idle_skipped(r.schedule, quiet) for r in replays), default=0)


def _speed(replays: Sequence[Replay], quiet: int, seconds: float) -> dict:
    """What the replays simulated and how fast: ``simulated_cycles`` sums the cycles each
    distinct schedule's simulator ran (skipped idle cycles left out; a group of identical
    channels is simulated once), over ``replay_seconds`` of wall time."""
    from patton.tb.player import idle_skipped  # lazy: it imports Amaranth's back end

    simulated = sum(r.result.cycles - idle_skipped(r.schedule, quiet) for r in replays)
    return {"replay_seconds": round(seconds, 3), "simulated_cycles": simulated,
            "cycles_per_second": round(simulated / seconds) if seconds > 0 else None}


def _rtl_list(replays: Sequence[Replay]) -> list[dict]:
    """Every RTL violation on every channel, as JSON objects (``rtl_objects``), by cycle."""
    out = [obj for r in replays for ch in r.channels for x in r.result.violations
           for obj in rtl_objects(x, ch, r.timing)]
    out.sort(key=lambda o: (o["cycle"], o["channel"]))
    return out


def _total(replays: Sequence[Replay], attr: str) -> int:
    """A verdict counter over all channels (a replay counts once per channel it stands for)."""
    return sum(getattr(r.verdict, attr) * len(r.channels) for r in replays)


def _unflagged(replays: Sequence[Replay]) -> int:
    """Commands refused by design that the RTL did not flag, over all channels."""
    return sum(len(r.unflagged) * len(r.channels) for r in replays)


def _rejections(replays: Sequence[Replay]) -> int:
    """Commands refused by design, over all channels."""
    return sum(sum(r.rejected.values()) * len(r.channels) for r in replays)


def _rtl_cycles(replays: Sequence[Replay]) -> int:
    """The RTL's cycles (in the schedule's own cycles), the most over the replays."""
    return max((r.result.cycles for r in replays), default=0)


# -- a trace ---------------------------------------------------------------------------------


@dataclass(slots=True)
class PreparedTrace:
    """A trace ready for the RTL: payloads filled, run on the cycle model, rows settled."""

    source: str  # the trace's file name, for messages and the report
    seed: int  # of the payloads filled in
    timing: str  # the timing profile of the model and of the RTL's checker
    program: list[Instruction]
    filled: int  # payloads filled in
    model: RunResult  # the cycle model's run, its schedule recorded
    rows: int  # rows per bank of the RTL build
    rows_chosen: bool  # chosen from the schedule (no ``--rows`` given)
    ext: str = DEFAULT_EXT  # the device extension set of the model and of the RTL

    @property
    def schedule(self) -> list[TimedCommand]:
        """The cycle model's schedule of the trace."""
        assert self.model.schedule is not None
        return self.model.schedule


def prepare_trace(program: Sequence[Instruction], source: str, *, rows: int | None, seed: int,
                  timing: str, waves: str | None = None, ext: str = DEFAULT_EXT
                  ) -> PreparedTrace:
    """Fill the payloads of ``program`` (seeded), run it on the cycle model under ``timing`` on
    device extension set ``ext`` and settle the row count: ``rows``, or
    :func:`~patton.tb.builds.choose_rows` of the schedule (a build with ``waves`` tracing, when
    asked for, is what is looked for).

    Raises :class:`~patton.tb.prepare.RowsError` (``file:line: reason``) when a row is beyond
    ``rows``: in the trace (checked first, before anything runs) or in the schedule;
    :class:`~patton.sim.extensions.NotOnDeviceError` when the trace uses an instruction of an
    extension ``ext`` lacks.
    """
    program = list(program)
    if rows is not None:
        check_trace_rows(program, rows, source)
    filled = fill_payloads(program, seed)
    model = CycleModel(timing=timing_table(timing, ext), record=True).run(program)
    assert model.schedule is not None
    chosen = rows is None
    if rows is None:
        rows = choose_rows(highest_row(c.row for c in model.schedule), waves, timing, ext)
    check_schedule_rows(model.schedule, rows, source)
    return PreparedTrace(source, seed, timing, program, filled, model, rows, chosen, ext)


def replay_trace(play: SchedulePlayer, trace: PreparedTrace, *, around: Around = None,
                 note: Note = None, jobs: int | None = None, start: Start = None
                 ) -> list[Replay]:
    """Replay the model's schedule of ``trace`` on ``play``, reads and mats scored; ``jobs``
    channel schedules at a time (:func:`~patton.tb.replays.replay_all`)."""
    return replay_all(play, trace.schedule, RUN, values=True, around=around, note=note,
                      jobs=jobs, start=start)


def clear_waves(trace: PreparedTrace) -> None:
    """Remove the waveforms an earlier replay of this trace's channels left (before
    :func:`replay_trace` on a waves build)."""
    clear_dumps(trace.schedule, RUN)


def copy_waves(replays: Sequence[Replay], target: Path) -> list[str]:
    """Copy the waveform of each of :func:`replay_trace`'s ``replays`` to ``target`` (suffixed
    by channel if there are several); return the files written.

    Raises ``RuntimeError`` when a replay wrote no waveform.
    """
    return copy_dumps(replays, RUN, target)


def rtl_readouts(replays: Sequence[Replay], program: Sequence[Instruction]) -> list[Readout]:
    """The RTL's read-outs of a replayed trace, as :class:`~patton.sim.program.Readout`\\s in
    their canonical order (by instruction, then column, then channel in send order).

    Each returned read is matched with the command that read it (its cycle minus the read's
    latency) and that command with its instruction (``src=``).
    """
    found: list[tuple[tuple[int, int, int], Readout]] = []
    for r in replays:
        by_cycle = {c.cycle: c for c in r.schedule}
        for read in r.result.reads:
            cmd = by_cycle.get(read.issued)
            if cmd is None or cmd.source < 0:
                continue
            ins = program[cmd.source]
            order = {ch: i for i, ch in enumerate(ins.channels())}
            for ch in r.channels:
                found.append(((cmd.source, cmd.col, order.get(ch, ch)),
                              Readout(ch, ins.opcode, read.data.copy(), cmd.source)))
    found.sort(key=lambda item: item[0])
    return [readout for _, readout in found]


def run_report(trace: PreparedTrace, replays: Sequence[Replay], play: SchedulePlayer, *,
               waves: Sequence[str] = (), readouts: tuple[str, int] | None = None,
               seconds: float = 0.0, replay_seconds: float = 0.0) -> dict:
    """The report of a trace replayed on the RTL (``patton rtl run --json``).

    ``waves`` are the waveform files written, ``readouts`` the file the read values went to
    and how many, ``seconds`` the wall time, ``replay_seconds`` the replays' (all of them,
    run side by side: :func:`_speed`). ``ok``: no read or mat word differs, neither the
    RTL nor the model flagged a violation, every refusal by design was flagged and both
    checkers agree.
    """
    unflagged = _unflagged(replays)
    violations = _total(replays, "rtl_violations")
    model_violations = _total(replays, "model_violations")
    mismatches = _total(replays, "mismatches") + _total(replays, "mat_mismatches")
    agree = all(r.verdict.agree for r in replays)
    ok = not (mismatches or violations or model_violations or unflagged) and agree
    model = trace.model
    last = max((c.cycle for c in trace.schedule), default=0)
    report = {
        "trace": trace.source, "timing": trace.timing, **ext_field(trace.ext),
        "rows": trace.rows,
        "rows_chosen": trace.rows_chosen, "seed": trace.seed,
        "payloads_filled": trace.filled,
        "cycles": _rtl_cycles(replays),
        "rtl_cycles": _rtl_cycles(replays),
        "model_cycles": model.cycles,
        "last_command_cycle": last,
        "drain_cycles": DRAIN,
        "idle_cycles_skipped": _idle_skipped(replays, play.timing.quiet),
        "commands": model.commands,
        "replays": len(replays),
        "replayed_commands": sum(r.replayed for r in replays),
        "reads": _total(replays, "reads"),
        "mismatches": mismatches,
        "read_mismatches": _total(replays, "mismatches"),
        "mat_words": _total(replays, "mat_words"),
        "mat_mismatches": _total(replays, "mat_mismatches"),
        "violations": violations,
        "model_violations": model_violations,
        "rtl_list": _rtl_list(replays),
        "rejections": _rejections(replays),
        "rejected": rejected(replays),
        "rejections_not_flagged": unflagged,
        "agree": agree,
        "ok": ok,
        "channels": {str(ch): r.summary() for r in replays for ch in r.channels},
        "waves": list(waves),
        "build_seconds": round(play.build_seconds, 3),
        "rtl_seconds": round(sum(r.result.seconds for r in replays), 3),
        **_speed(replays, play.timing.quiet, replay_seconds),
        "wall_seconds": round(seconds, 3),
    }
    if readouts is not None:
        report["readouts"] = {"file": readouts[0], "count": readouts[1]}
    return report


# -- a timed schedule ------------------------------------------------------------------------


@dataclass(slots=True)
class PreparedSchedule:
    """A timed schedule checked by the model and ready for the RTL."""

    source: str  # the schedule's file name, for messages and the report
    timing: str  # the timing profile of ``verify`` and of the RTL's checker
    commands: list[TimedCommand]  # as read
    rows: int  # rows per bank of the RTL build
    rows_chosen: bool  # chosen from the schedule (no ``--rows`` given)
    found: list[Violation] = field(default_factory=list)  # ``verify``'s violations
    replayable: list[TimedCommand] = field(default_factory=list)  # what the RTL's port takes
    values: bool = False  # every write carries data=: reads and mats can be scored
    ext: str = DEFAULT_EXT  # the device extension set of ``verify`` and of the RTL

    @property
    def bus(self) -> list[Violation]:
        """The bus conflicts (a second command in one cycle of a channel): not replayed."""
        return [v for v in self.found if v.kind == "bus"]

    @property
    def model_violations(self) -> int:
        """The commands ``verify`` flagged (once per channel and cycle), bus conflicts
        included."""
        flagged = {(v.channel, v.cycle) for v in self.found if v.kind != "bus"}
        return len(flagged) + len(self.bus)


def prepare_schedule(commands: Sequence[TimedCommand], source: str, *, rows: int | None,
                     timing: str, ext: str = DEFAULT_EXT) -> PreparedSchedule:
    """Settle the row count of ``commands`` (``rows``, or
    :func:`~patton.tb.builds.choose_rows`), check them with ``verify`` under ``timing`` on
    device extension set ``ext`` (a command of an extension ``ext`` lacks is a protocol
    violation) and keep what the RTL's port takes: one command per channel and cycle, the first
    (file order).

    Raises :class:`~patton.tb.prepare.RowsError` when a row is beyond ``rows``,
    :class:`~patton.sim.extensions.NotOnDeviceError` (``file:line: reason``) at the first
    command of an extension ``ext`` lacks (WR16 on ``aim``).
    """
    commands = list(commands)
    table = timing_table(timing, ext)
    for cmd in commands:
        if cmd.command not in table.commands:
            try:
                table.device.refuse(cmd.command)
            except NotOnDeviceError as error:
                where = f"{source}:{cmd.line}" if cmd.line else source
                raise NotOnDeviceError(f"{where}: {error}") from None
    chosen = rows is None
    if rows is None:
        rows = choose_rows(highest_row(c.row for c in commands), timing=timing, ext=ext)
    check_schedule_rows(commands, rows, source)
    found = check.verify(commands, timing=table)
    seen: set[tuple[int, int]] = set()
    replayable = []
    for cmd in sorted(commands, key=lambda c: c.cycle):
        if (cmd.channel, cmd.cycle) not in seen:
            seen.add((cmd.channel, cmd.cycle))
            replayable.append(cmd)
    # Values can be scored only with every write's data (the functional model needs it).
    values = all(c.payload is not None for c in commands if c.command in WRITES)
    return PreparedSchedule(source, timing, commands, rows, chosen, found, replayable, values,
                            ext)


def replay_schedule(play: SchedulePlayer, schedule: PreparedSchedule, *, around: Around = None,
                    note: Note = None, jobs: int | None = None, start: Start = None
                    ) -> list[Replay]:
    """Replay the replayable commands of ``schedule`` on ``play`` (values scored when every
    write carries its data); ``jobs`` channel schedules at a time."""
    return replay_all(play, schedule.replayable, CHECK, values=schedule.values, around=around,
                      note=note, jobs=jobs, start=start)


def check_report(schedule: PreparedSchedule, replays: Sequence[Replay], play: SchedulePlayer,
                 *, seconds: float = 0.0, replay_seconds: float = 0.0) -> dict:
    """The report of a schedule replayed on the RTL (``patton rtl check --json``).

    ``seconds`` is the wall time, ``replay_seconds`` the replays' (:func:`_speed`). ``ok``:
    neither the RTL nor the model flagged a violation (a bus conflict is one), every refusal by
    design was flagged, and no read or mat word differs.
    """
    commands = schedule.commands
    rtl_violations = _total(replays, "rtl_violations")
    unflagged = _unflagged(replays)
    read_mismatches = _total(replays, "mismatches")
    mat_mismatches = _total(replays, "mat_mismatches")
    mismatches = read_mismatches + mat_mismatches
    model_violations = schedule.model_violations
    ok = not (rtl_violations or model_violations or unflagged or mismatches)
    last = max((c.cycle for c in commands), default=0)
    return {
        "schedule": schedule.source, "timing": schedule.timing, **ext_field(schedule.ext),
        "rows": schedule.rows,
        "rows_chosen": schedule.rows_chosen,
        "commands": len(commands),
        "bus_conflicts": len(schedule.bus),
        "values": schedule.values,
        "reads": _total(replays, "reads"),
        "mismatches": mismatches,
        "read_mismatches": read_mismatches,
        "mat_mismatches": mat_mismatches,
        "replays": len(replays),
        "replayed_commands": sum(r.replayed for r in replays),
        "cycles": _rtl_cycles(replays),
        "rtl_cycles": _rtl_cycles(replays),
        "schedule_cycles": last + 1,
        "last_command_cycle": last,
        "drain_cycles": DRAIN,
        "idle_cycles_skipped": _idle_skipped(replays, play.timing.quiet),
        "rtl_violations": rtl_violations,
        "rtl_list": _rtl_list(replays),
        "model_violations": model_violations,
        "model_violations_replayed": _total(replays, "model_violations"),
        "agree": all(r.verdict.agree for r in replays),
        "rejections": _rejections(replays),
        "rejected": rejected(replays),
        "rejections_not_flagged": unflagged,
        "ok": ok,
        "channels": {str(ch): r.summary() for r in replays for ch in r.channels},
        "model_list": [str(v) for v in schedule.found],
        **_speed(replays, play.timing.quiet, replay_seconds),
        "wall_seconds": round(seconds, 3),
    }
