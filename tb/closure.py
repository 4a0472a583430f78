"""Coverage closure: constrained-random segments on a live channel until every reachable bin is
hit.

:func:`close` drives a channel (a live :class:`~patton.tb.session.Session`, or anything with
its ``run(schedule) -> PlayResult`` and ``mats()``) segment by segment::

    Stimulus --schedule--> channel --PlayResult--> CoverageMonitor (samples every command)
                                               \\-> Scoreboard: checker flags vs the models,
                                                   reads vs the functional model (Reference)

The stimulus aims at the monitor's holes, so each segment is drawn against the coverage so far.
The run stops when every reachable bin is hit or after ``budget`` commands, then compares the
mats. It is a regression as much as a coverage run: every command's checker flags must equal
the models' (``verify``'s algorithm, one command at a time), every read the functional model's,
and every command this RTL version does not implement must be flagged ``REJECTED`` alone. The
command sets are those of the timing table's device extension set (``timing.ext``: the one the
channel was built for).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

from patton.hw.isa import ProtocolCode
from patton.sim.device import DEVICE, Device
from patton.sim.schedule import TimedCommand
from patton.sim.timing import DEFAULT_PROFILE, Timing, timing_table
from patton.tb.coverage import CoverageMonitor
from patton.tb.monitor import PlayResult
from patton.tb.reference import Reference
from patton.tb.scoreboard import Discrepancy, Scoreboard, command_text
from patton.tb.stimulus import Mix, Stimulus

__all__ = ["Channel", "Closure", "close"]


class Channel(Protocol):
    """What closure drives: one live channel (``patton.tb.session.Session`` is one)."""

    def run(self, schedule: list[TimedCommand]) -> PlayResult: ...

    def mats(self) -> dict: ...


@dataclass(slots=True)
class Closure:
    """The outcome of a closure run."""

    monitor: CoverageMonitor  # the cover groups and their hits
    scoreboard: Scoreboard  # what the RTL and the models disagreed on (nothing, if ok)
    seed: int  # the stimulus seed
    seconds: float  # wall time, build excluded
    channel_seconds: float  # of which the channel's replays
    cycles: int  # channel cycles replayed
    rejected_errors: int  # unimplemented commands not flagged REJECTED alone

    @property
    def closed(self) -> bool:
        """Every reachable bin hit."""
        return self.monitor.closed()

    @property
    def agree(self) -> bool:
        """The RTL matched the models on every flag, read and mat word (flags the stimulus
        provoked on purpose are no discrepancy)."""
        board = self.scoreboard
        return not (board.disagreements or board.mismatches or board.mat_mismatches
                    or self.rejected_errors)

    @property
    def ok(self) -> bool:
        """Closed and the RTL agreed with the models throughout."""
        return self.closed and self.agree


def close(channel: Channel, *, seed: int = 1, segment: int = 400, least: int = 0,
          budget: int = 200_000,
          device: Device = DEVICE, timing: Timing = DEFAULT_PROFILE, mix: Mix = Mix(),
          progress: Callable[[CoverageMonitor], None] | None = None) -> Closure:
    """Drive ``channel`` until every reachable bin is hit (and at least ``least`` commands
    ran) or ``budget`` commands ran.

    ``segment`` commands per replay; ``timing``: the profile (and device extension set) the
    channel's checker was built for; ``progress`` is called after each segment.
    """
    if segment < 1 or budget < 1 or not 0 <= least <= budget:
        raise ValueError(f"segment ({segment}) and budget ({budget}) must be positive and "
                         f"least ({least}) between 0 and the budget")
    timing = timing_table(timing)
    started = time.perf_counter()
    monitor = CoverageMonitor(device, timing)
    stimulus = Stimulus(seed, device=device, timing=timing, mix=mix, monitor=monitor)
    reference = Reference(device)
    scoreboard = Scoreboard(strict=False)
    scoreboard.rule_names = {r.id: r.expression for r in timing.rules}
    refused_by_design = monitor.isa.REJECTED
    channel_seconds = 0.0
    cycles = rejected_errors = 0
    while (not monitor.closed() or monitor.commands < least) and monitor.commands < budget:
        schedule = stimulus.segment(min(segment, budget - monitor.commands))
        t = time.perf_counter()
        result = channel.run(schedule)
        channel_seconds += time.perf_counter() - t
        cycles += result.cycles
        found = monitor.sample(schedule, result)
        n = monitor.segments
        rejected_errors += _rejected(schedule, result, scoreboard, n, refused_by_design)
        implemented = [c for c in schedule if c.command not in refused_by_design]
        kept = [v for v in result.violations if v.command not in refused_by_design]
        scoreboard.check(implemented, replace(result, violations=kept), found, n, 0,
                         intended=True)
        refused = {v.cycle for v in found if v.kind == "protocol"}
        expected = reference.run([c for c in implemented if c.cycle not in refused])
        scoreboard.compare([(r.command, r.data, "") for r in expected], result.reads, n, 0)
        scoreboard.settle()
        if progress is not None:
            progress(monitor)
    scoreboard.mats(reference.mats(0), channel.mats(), monitor.segments, 0)
    scoreboard.settle()
    return Closure(monitor, scoreboard, seed, time.perf_counter() - started, channel_seconds,
                   cycles, rejected_errors)


def _rejected(schedule: list[TimedCommand], result: PlayResult, scoreboard: Scoreboard,
              segment: int, refused: frozenset) -> int:
    """Every command the RTL does not implement (``refused``) must be flagged REJECTED, with no
    rule; record and count those that are not."""
    errors = 0
    flags = {v.cycle: v for v in result.violations}
    for cmd in schedule:
        if cmd.command not in refused:
            continue
        got = flags.get(cmd.cycle)
        if got is None or got.protocol != ProtocolCode.REJECTED.value or got.rules:
            actual = "nothing" if got is None else (
                f"{ProtocolCode(got.protocol).name} rules {sorted(got.rules)}")
            errors += 1
            scoreboard.record(Discrepancy("checker", segment, 0, cmd.cycle, command_text(cmd),
                                          "REJECTED", actual))
    return errors
