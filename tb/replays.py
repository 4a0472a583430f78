"""Replaying schedules channel by channel on the RTL and reporting each channel.

:func:`groups` splits a multi-channel schedule by channel and groups channels whose schedules
are identical (same commands, cycles, payloads, masks and CFRs): a trace that sends the same
work to all 32 channels is one replay. :func:`replay_group` replays one group's schedule
(:meth:`SchedulePlayer.play <patton.tb.player.SchedulePlayer.play>`), separates the commands
this RTL version refuses by design (they must be flagged ``REJECTED``), and scores the rest
(:func:`patton.tb.scoreboard.score`); a :class:`Replay`
holds the outcome and its per-channel report (:meth:`Replay.summary`). :func:`copy_dumps`
collects the waveforms. ``patton rtl run`` / ``rtl check`` (:mod:`patton.cli.rtl`) print them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing
import os
import shutil
import sys
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from patton.sim.schedule import TimedCommand
from patton.sim.workers import ignore_interrupts, stop

if TYPE_CHECKING:
    from patton.tb.player import PlayResult, RtlViolation, SchedulePlayer
    from patton.tb.scoreboard import Verdict

__all__ = ["Replay", "groups", "signature", "replay_group", "replay_all", "cores", "scoring_pool",
           "rtl_text", "rtl_objects",
           "rejected", "rejection_note", "channels_text", "run_dir", "clear_dumps",
           "copy_dumps", "stdout_to_stderr"]


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Send what the build and simulator print (file descriptor 1) to stderr meanwhile.

    Keeps stdout for the report, so that ``--json`` output stays one parsable object.
    """
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def signature(cmds: Sequence[TimedCommand]) -> tuple:
    """What makes two channels' schedules replay identically (the channel index excepted)."""
    out = []
    for c in cmds:
        payload = c.payload
        out.append((c.cycle, int(c.command), c.bank, c.row, c.col,
                    None if payload is None else payload.tobytes(), c.mask, c.cfr))
    return tuple(out)


def groups(commands: Sequence[TimedCommand]) -> list[list[list[TimedCommand]]]:
    """Split a schedule by channel and group channels whose schedules are identical.

    Returns a list of groups; each group is a list of per-channel schedules (same commands,
    different channel index), channels in increasing order.
    """
    by_channel: dict[int, list[TimedCommand]] = {}
    for cmd in commands:
        by_channel.setdefault(cmd.channel, []).append(cmd)
    groups: dict[tuple, list[list[TimedCommand]]] = {}
    for ch in sorted(by_channel):
        cmds = sorted(by_channel[ch], key=lambda c: c.cycle)  # stable: file order per cycle
        groups.setdefault(signature(cmds), []).append(cmds)
    return list(groups.values())


@dataclass(slots=True)
class Replay:
    """One distinct channel schedule replayed on the RTL and scored."""

    channels: list[int]  # channels with this schedule
    commands: int  # commands of one channel's schedule
    replayed: int  # commands given to the RTL
    rejected: Counter[str] = field(default_factory=Counter)  # refused by design, by command
    unflagged: list[TimedCommand] = field(default_factory=list)  # refusals the RTL missed
    not_replayed: Counter[str] = field(default_factory=Counter)  # by command (none now)
    result: PlayResult | None = None
    verdict: Verdict | None = None
    schedule: list[TimedCommand] = field(default_factory=list, repr=False)  # what was replayed
    timing: object = None  # the TimingTable the RTL's checker was built for (rule names)

    def summary(self) -> dict:
        """JSON-ready per-channel details."""
        r, v = self.result, self.verdict
        assert r is not None and v is not None
        return {"channels": self.channels, "commands": self.commands,
                "replayed_commands": self.replayed, "rtl_cycles": r.cycles,
                "rtl_seconds": round(r.seconds, 3), "reads": v.reads,
                "mismatches": v.mismatches + v.mat_mismatches,
                "read_mismatches": v.mismatches, "mat_words": v.mat_words,
                "mat_mismatches": v.mat_mismatches, "rtl_violations": v.rtl_violations,
                "model_violations": v.model_violations, "agree": v.agree,
                "rejected": dict(self.rejected), "rejections_not_flagged": len(self.unflagged),
                "not_replayed": dict(self.not_replayed),
                "rtl_list": [obj for x in r.violations
                             for obj in rtl_objects(x, self.channels[0], self.timing)],
                "model_only": sorted(v.model_timing - v.rtl_timing),
                "rtl_only": sorted(v.rtl_timing - v.model_timing),
                "model_only_protocol": sorted(v.model_protocol - v.rtl_protocol),
                "rtl_only_protocol": sorted(v.rtl_protocol - v.model_protocol)}


def replay_group(play: SchedulePlayer, group: list[list[TimedCommand]], name: str,
                 values: bool, scorers: Executor | None = None) -> Replay:
    """Replay the first schedule of a channel group on the RTL and score it (against
    ``verify`` under the timing profile the player's checker was built for).

    What the simulator prints goes to this process's standard output (descriptor 1): the
    caller redirects it (:func:`replay_all` sends it to stderr). ``scorers``: where the
    scoring (the functional model's replay and ``verify``, pure Python) runs; None: here.
    """
    from patton.hw.isa import ProtocolCode, hw_isa
    from patton.tb.player import PlayResult
    from patton.tb.scoreboard import score

    # refused by design on the player's device extension set (the same commands on every set)
    by_design = hw_isa(play.timing.ext, play.timing.slots).REJECTED
    cmds = group[0]
    to_rtl = cmds  # every command, the AF LUT rows' included (the port's ``lut`` field)
    out = Replay([g[0].channel for g in group], len(cmds), len(to_rtl))
    refused = [c for c in to_rtl if c.command in by_design]
    out.rejected.update(c.command.name for c in refused)
    if to_rtl:
        result = play.play(to_rtl, name)
    else:
        result = PlayResult()
    by_cycle = {c.cycle: c for c in refused}
    expected = {v.cycle for v in result.violations if v.cycle in by_cycle
                and v.protocol == ProtocolCode.REJECTED.value and not v.rules}
    out.unflagged = [c for c in refused if c.cycle not in expected]
    kept = [v for v in result.violations if v.cycle not in expected]
    scored = dataclasses.replace(result, violations=kept)
    model_view = [c for c in to_rtl if c.command not in by_design]
    out.result = scored
    if scorers is None:
        out.verdict = score(model_view, scored, values=values, timing=play.timing)
    else:
        out.verdict = scorers.submit(score, model_view, scored, values=values,
                                     timing=play.timing).result()
    out.schedule = to_rtl
    out.timing = play.timing
    return out


def rtl_text(v: RtlViolation, timing=None) -> str:
    """One line of a flagged command: ``cycle 5 WR: rule 90 nRCDWR (ACT -> WR)``, and its
    protocol error."""
    parts = [f"cycle {v.cycle} {v.command.name}"]
    for obj in rtl_objects(v, 0, timing):
        if obj["kind"] == "timing":
            parts.append(f"rule {obj['rule']} {obj['rule_name'] or '?'} ({obj['commands']})")
        else:
            parts.append(f"protocol {obj['protocol']}")
    return ": ".join(parts[:1]) + ": " + "; ".join(parts[1:]) if len(parts) > 1 else parts[0]


def rtl_objects(v: RtlViolation, channel: int, timing=None) -> list[dict]:
    """The JSON objects of one flagged command on ``channel``: one per timing rule it broke
    (``rule`` id, ``rule_name``: the rule's parameter expression, ``commands``: ``"P -> F"``
    from the timing table) and one for a protocol error (``protocol``: its
    ``hw.isa.ProtocolCode`` name)."""
    from patton.hw.isa import ProtocolCode
    from patton.sim.timing import TIMING

    table = timing if timing is not None else TIMING
    base = {"cycle": v.cycle, "channel": channel, "command": v.command.name}
    out = []
    for rule in sorted(v.rules):
        try:
            r = table.rule(rule)
            name = r.expression
            before = "/".join(sorted(c.name for c in r.preceding))
        except KeyError:
            name, before = None, "?"
        out.append({**base, "kind": "timing", "rule": rule, "rule_name": name,
                    "commands": f"{before} -> {v.command.name}", "protocol": None})
    if v.protocol:
        out.append({**base, "kind": "protocol", "rule": None, "rule_name": None,
                    "commands": v.command.name, "protocol": ProtocolCode(v.protocol).name})
    return out


def replay_all(play: SchedulePlayer, commands: Sequence[TimedCommand], prefix: str,
               values: bool, *, around: Callable[[], contextlib.AbstractContextManager] | None
               = None, note: Callable[[list[list[TimedCommand]], int, int], None] | None = None,
               jobs: int | None = None,
               start: Callable[[list[list[list[TimedCommand]]], int], None] | None = None
               ) -> list[Replay]:
    """Replay every channel group (:func:`groups`) of ``commands``, ``jobs`` at a time.

    Each group is one simulator of its own (a one-segment session, :meth:`SchedulePlayer.play
    <patton.tb.player.SchedulePlayer.play>`); ``jobs`` of them run at once (``None``: one per
    CPU core, :func:`cores`), each waited on by a thread of this process, and their scoring,
    which is Python and would hold the interpreter's lock, runs in a pool of as many
    processes (:func:`scoring_pool`). One at a time, ``note(group, i, n)`` is called before
    group ``i`` of ``n`` starts (a progress line); side by side, ``start(groups, jobs)`` once
    before they all start. The replays run inside ``around()`` (where the simulators' output
    goes). Returns the replays in group order.
    """
    found = groups(commands)
    workers = max(1, min(cores() if jobs is None else jobs, len(found)))
    context = around if around is not None else contextlib.nullcontext

    def one(group: list[list[TimedCommand]], scorers: Executor | None = None) -> Replay:
        return replay_group(play, group, f"{prefix}-ch{group[0][0].channel}", values, scorers)

    if workers <= 1:
        out = []
        for i, group in enumerate(found):
            if note is not None:
                note(group, i, len(found))
            with context(), stdout_to_stderr():
                out.append(one(group))
        return out
    if start is not None:
        start(found, workers)
    # one redirection for all threads: file descriptors are the process's, not a thread's
    with context(), stdout_to_stderr(), scoring_pool(workers) as scorers, ThreadPoolExecutor(
            max_workers=workers, thread_name_prefix="rtl-replay") as pool:
        try:
            return list(pool.map(lambda group: one(group, scorers), found))
        except BaseException:  # ^C, SIGTERM, a failed replay: stop the scorers, not wait
            pool.shutdown(wait=False, cancel_futures=True)
            stop([scorers])
            raise


def cores() -> int:
    """CPU cores this process may use."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


def scoring_pool(jobs: int) -> ProcessPoolExecutor:
    """Processes that score replays (:func:`~patton.tb.scoreboard.score`): at most ``jobs``
    and at most one per CPU core; started by ``spawn`` (this process has threads, which
    ``fork`` does not copy safely); they ignore ^C (:mod:`patton.sim.workers`: the command
    stops them)."""
    return ProcessPoolExecutor(max_workers=max(1, min(jobs, cores())),
                               mp_context=multiprocessing.get_context("spawn"),
                               initializer=ignore_interrupts)


def rejected(replays: Sequence[Replay]) -> dict[str, int]:
    """Commands refused by design over all channels, by command name."""
    out: Counter[str] = Counter()
    for r in replays:
        for name, n in r.rejected.items():
            out[name] += n * len(r.channels)
    return dict(sorted(out.items()))


def rejection_note(replays: Sequence[Replay]) -> list[str]:
    """Human lines about commands refused by design, not replayed, or not supported."""
    refused = rejected(replays)
    skipped: Counter[str] = Counter()
    for r in replays:
        for name, n in r.not_replayed.items():
            skipped[name] += n * len(r.channels)
    lines = []
    if refused:
        lines.append("note       expected protocol rejections (this RTL version does not "
                     "implement them): " + ", ".join(f"{k} {v}" for k, v in
                                                     sorted(refused.items())))
    if skipped:
        lines.append("note       not replayed: " + ", ".join(f"{k} {v}" for k, v in
                                                         sorted(skipped.items())))
    unflagged = sum(len(r.unflagged) * len(r.channels) for r in replays)
    if unflagged:
        lines.append(f"FAIL       {unflagged} command(s) the RTL should refuse were not "
                     "flagged REJECTED")
    return lines


def channels_text(channels: list[int]) -> str:
    if len(channels) == 1:
        return f"ch {channels[0]}"
    if channels == list(range(channels[0], channels[-1] + 1)):
        return f"ch {channels[0]}-{channels[-1]}"
    return "ch " + ",".join(map(str, channels))


def run_dir(name: str) -> Path:
    """Where :meth:`SchedulePlayer.play` runs a replay called ``name`` in this process."""
    from patton.tb.toolchain import BUILD_ROOT

    return BUILD_ROOT / "runs" / f"{name}-{os.getpid()}"


def clear_dumps(commands: Sequence[TimedCommand], prefix: str) -> None:
    for ch in {c.channel for c in commands}:
        for old in run_dir(f"{prefix}-ch{ch}").glob("dump.*"):
            old.unlink()


def copy_dumps(replays: Sequence[Replay], prefix: str, target: Path) -> list[str]:
    """Copy each replay's waveform to ``target`` (suffixed by channel if there are several)."""
    out = []
    for r in replays:
        found = sorted(run_dir(f"{prefix}-ch{r.channels[0]}").glob("dump.*"))
        if not found:
            raise RuntimeError("the waves build wrote no dump (expected dump.vcd or dump.fst "
                               f"in {run_dir(prefix + '-ch' + str(r.channels[0]))}); the "
                               "cocotb/Verilator tracing path did not produce a waveform")
        dump = found[0]
        path = target if len(replays) == 1 else target.with_name(
            f"{target.stem}.ch{r.channels[0]}{target.suffix}")
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(dump, path)
        out.append(str(path))
    return out
