"""The ``patton rtl`` commands: validate your own traces and schedules on the RTL channel.

``patton rtl run TRACE [--rows N] [--seed S] [--waves FILE] [--json]``
    Read an instruction trace, give every write that carries no ``data=`` a seeded random
    bfloat16 payload (``R/W MEM`` without ``col=``: column 0), run the cycle model, replay each
    channel's schedule on the RTL channel under Verilator (identical schedules once) and score
    it: every read bit-exact with the functional model, no violation flagged by the RTL or the
    model. Exit 1 on a mismatch or an unexpected violation. ``--waves`` copies the replay's
    waveform to ``FILE``: VCD for a ``.vcd`` name, FST for ``.fst`` (``patton.tb.fst`` finds the
    LZ4 and zlib libraries it links).
``patton rtl check SCHEDULE [--rows N] [--json]``
    Replay a timed schedule (``cycle channel command [bank row col]``) on the RTL with
    zero payloads and compare the violations the RTL's checker flags with the model's
    (``patton aim check``). Exit 0 only when both find the schedule legal.

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
Verilator build is made once per process and row count (and cached on disk under ``build/``).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import shutil
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..sim import check, schedule as schedule_format, trace as trace_format
from ..sim.cycle_model import CycleModel
from ..sim.device import AF_ROW_BASE, DEVICE
from ..sim.isa import Instruction
from ..sim.schedule import TimedCommand

if TYPE_CHECKING:
    from .player import PlayResult, RtlViolation, SchedulePlayer
    from .scoreboard import Verdict

__all__ = ["add_parser", "player", "fill_payloads", "RowsError"]

#: Rows per bank of the RTL build unless ``--rows`` says otherwise (the regression tests' build).
DEFAULT_ROWS = 64
#: Violation lines printed per channel group in the human summary.
_SHOW = 10

#: Waveform formats by file suffix.

_PLAYERS: dict[tuple[int, bool], SchedulePlayer] = {}


class RowsError(ValueError):
    """The trace or schedule addresses a row the RTL build does not have."""


# -- shared helpers -------------------------------------------------------------------------


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
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


def _wave_format(path: str) -> str:
    """Return the waveform format a file name asks for (its suffix, lower case, no dot)."""
    return Path(path).suffix.lower().lstrip(".")


def player(rows: int = DEFAULT_ROWS, waves: str | None = None) -> SchedulePlayer:
    """Return this process's schedule player for ``rows`` rows per bank (built once)."""
    key = (rows, waves)
    if key not in _PLAYERS:
        from ..hw.params import ChannelParams
        from .player import SchedulePlayer

        with _stdout_to_stderr():
            _PLAYERS[key] = SchedulePlayer(ChannelParams(rows=rows), waves=waves)
    return _PLAYERS[key]


def fill_payloads(program: Sequence[Instruction], seed: int) -> int:
    """Give every write without ``data=`` random bfloat16 words; return how many were filled.

    Payloads follow the ``data=`` extension: 16 words per 32 B column, ``opsize`` columns for
    WR_GB and one column otherwise. Values are normal-distributed floats truncated to bfloat16
    (no subnormals, infinities or NaNs); an instruction's own payload is kept.
    """
    rng = np.random.default_rng(seed)
    filled = 0
    for ins in program:
        if ins.opcode.info.payload is None or ins.data is not None:
            continue
        columns = ins.opcode.info.payload or ins.columns
        values = rng.standard_normal(columns * DEVICE.lanes).astype(np.float32)
        ins.data = (values.view(np.uint32) >> 16).astype(np.uint16)
        filled += 1
    return filled


def _suggest(row: int) -> int:
    """Row count to suggest for a row address: a power of two, at least the default."""
    return max(DEFAULT_ROWS, 1 << row.bit_length())


def _check_trace_rows(program: Sequence[Instruction], rows: int, source: str) -> None:
    for ins in program:
        if ins.row is not None and ins.row >= rows:
            raise RowsError(f"{source}:{ins.line}: {ins.opcode.value} touches row {ins.row}, but "
                            f"the RTL channel is built with --rows {rows} (rows 0..{rows - 1}); "
                            f"pass --rows {_suggest(ins.row)} (a new row count is a new "
                            "Verilator build, about a minute the first time)")


def _check_schedule_rows(commands: Sequence[TimedCommand], rows: int, source: str) -> None:
    for cmd in commands:
        if rows <= cmd.row < AF_ROW_BASE:
            raise RowsError(f"{source}:{cmd.line}: {cmd.command.name} addresses row {cmd.row}, "
                            f"but the RTL channel is built with --rows {rows} "
                            f"(rows 0..{rows - 1}); pass --rows {_suggest(cmd.row)} (a new row "
                            "count is a new Verilator build, about a minute the first time)")


def _signature(cmds: Sequence[TimedCommand]) -> tuple:
    """What makes two channels' schedules replay identically (the channel index excepted)."""
    out = []
    for c in cmds:
        payload = c.payload
        out.append((c.cycle, int(c.command), c.bank, c.row, c.col,
                    None if payload is None else payload.tobytes(), c.mask, c.cfr))
    return tuple(out)


def _groups(commands: Sequence[TimedCommand]) -> list[list[list[TimedCommand]]]:
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
        groups.setdefault(_signature(cmds), []).append(cmds)
    return list(groups.values())


@dataclass(slots=True)
class Replay:
    """One distinct channel schedule replayed on the RTL and scored."""

    channels: list[int]  # channels with this schedule
    commands: int  # commands of one channel's schedule
    replayed: int  # commands given to the RTL
    rejected: Counter[str] = field(default_factory=Counter)  # refused by design, by command
    unflagged: list[TimedCommand] = field(default_factory=list)  # refusals the RTL missed
    not_replayed: Counter[str] = field(default_factory=Counter)  # AF LUT rows, by command
    result: PlayResult | None = None
    verdict: Verdict | None = None

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
                "rtl_list": [_rtl_text(x) for x in r.violations],
                "model_only": sorted(v.model_timing - v.rtl_timing),
                "rtl_only": sorted(v.rtl_timing - v.model_timing),
                "model_only_protocol": sorted(v.model_protocol - v.rtl_protocol),
                "rtl_only_protocol": sorted(v.rtl_protocol - v.model_protocol)}


def _replay(play: SchedulePlayer, group: list[list[TimedCommand]], name: str,
            values: bool) -> Replay:
    """Replay the first schedule of a channel group on the RTL and score it."""
    from ..hw.isa import REJECTED, ProtocolCode
    from .player import PlayResult
    from .scoreboard import score

    cmds = group[0]
    to_rtl = [c for c in cmds if c.row < AF_ROW_BASE]
    out = Replay([g[0].channel for g in group], len(cmds), len(to_rtl))
    out.not_replayed.update(c.command.name for c in cmds if c.row >= AF_ROW_BASE)
    refused = [c for c in to_rtl if c.command in REJECTED]
    out.rejected.update(c.command.name for c in refused)
    if to_rtl:
        with _stdout_to_stderr():
            result = play.play(to_rtl, name)
    else:
        result = PlayResult()
    by_cycle = {c.cycle: c for c in refused}
    expected = {v.cycle for v in result.violations if v.cycle in by_cycle
                and v.protocol == ProtocolCode.REJECTED.value and not v.rules}
    out.unflagged = [c for c in refused if c.cycle not in expected]
    kept = [v for v in result.violations if v.cycle not in expected]
    scored = dataclasses.replace(result, violations=kept)
    model_view = [c for c in to_rtl if c.command not in REJECTED]
    out.result = scored
    out.verdict = score(model_view, scored, values=values)
    return out


def _rtl_text(v: RtlViolation) -> str:
    from ..hw.isa import ProtocolCode

    parts = [f"cycle {v.cycle} {v.command.name}"]
    if v.rules:
        parts.append("rules " + ",".join(str(r) for r in sorted(v.rules)))
    if v.protocol:
        parts.append(f"protocol {ProtocolCode(v.protocol).name}")
    return ": ".join(parts)


def _replay_all(play: SchedulePlayer, commands: Sequence[TimedCommand], prefix: str,
                values: bool) -> list[Replay]:
    return [_replay(play, group, f"{prefix}-ch{group[0][0].channel}", values)
            for group in _groups(commands)]


def _rejected(replays: Sequence[Replay]) -> dict[str, int]:
    """Commands refused by design over all channels, by command name."""
    out: Counter[str] = Counter()
    for r in replays:
        for name, n in r.rejected.items():
            out[name] += n * len(r.channels)
    return dict(sorted(out.items()))


def _rejection_note(replays: Sequence[Replay]) -> list[str]:
    """Human lines about commands refused by design, not replayed, or not supported."""
    rejected = _rejected(replays)
    skipped: Counter[str] = Counter()
    for r in replays:
        for name, n in r.not_replayed.items():
            skipped[name] += n * len(r.channels)
    lines = []
    if rejected:
        lines.append("note       expected protocol rejections (this RTL version does not "
                     "implement them): " + ", ".join(f"{k} {v}" for k, v in
                                                     sorted(rejected.items())))
    if skipped:
        lines.append("note       not replayed (activation-function LUT rows do not exist in "
                     "the RTL): " + ", ".join(f"{k} {v}" for k, v in sorted(skipped.items())))
    unflagged = sum(len(r.unflagged) * len(r.channels) for r in replays)
    if unflagged:
        lines.append(f"FAIL       {unflagged} command(s) the RTL should refuse were not "
                     "flagged REJECTED")
    return lines


def _channels_text(channels: list[int]) -> str:
    if len(channels) == 1:
        return f"ch {channels[0]}"
    if channels == list(range(channels[0], channels[-1] + 1)):
        return f"ch {channels[0]}-{channels[-1]}"
    return "ch " + ",".join(map(str, channels))


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
    model = CycleModel(record=True).run(program)
    assert model.schedule is not None
    try:
        _check_schedule_rows(model.schedule, args.rows, str(args.trace))
    except RowsError as error:
        return _error(str(error))
    waves = _wave_format(args.waves) if args.waves is not None else None
    if waves is not None and waves not in ("vcd", "fst"):
        return _error(f"--waves {args.waves}: name a .vcd or .fst file")
    try:
        play = player(args.rows, waves)
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
        "trace": str(args.trace), "rows": args.rows, "seed": args.seed,
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
          f"{len(model.command_counts)} channel(s)")
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


def _run_dir(name: str) -> Path:
    """Where :meth:`SchedulePlayer.play` runs a replay called ``name`` in this process."""
    from .toolchain import BUILD_ROOT

    return BUILD_ROOT / "runs" / f"{name}-{os.getpid()}"


def _clear_dumps(commands: Sequence[TimedCommand], prefix: str) -> None:
    for ch in {c.channel for c in commands}:
        for old in _run_dir(f"{prefix}-ch{ch}").glob("dump.*"):
            old.unlink()


def _copy_dumps(replays: Sequence[Replay], prefix: str, target: Path) -> list[str]:
    """Copy each replay's waveform to ``target`` (suffixed by channel if there are several)."""
    out = []
    for r in replays:
        found = sorted(_run_dir(f"{prefix}-ch{r.channels[0]}").glob("dump.*"))
        if not found:
            raise RuntimeError("the waves build wrote no dump (expected dump.vcd or dump.fst "
                               f"in {_run_dir(prefix + '-ch' + str(r.channels[0]))}); the "
                               "cocotb/Verilator tracing path did not produce a waveform")
        dump = found[0]
        path = target if len(replays) == 1 else target.with_name(
            f"{target.stem}.ch{r.channels[0]}{target.suffix}")
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(dump, path)
        out.append(str(path))
    return out


# -- patton rtl check ------------------------------------------------------------------------


def _check(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    commands = schedule_format.read(args.schedule)
    try:
        _check_schedule_rows(commands, args.rows, str(args.schedule))
    except RowsError as error:
        return _error(str(error))
    found = check.verify(commands)
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
    play = player(args.rows)
    replays = _replay_all(play, replayable, "rtl-check", values=False)
    seconds = time.perf_counter() - started
    rtl_violations = sum(r.verdict.rtl_violations * len(r.channels) for r in replays)
    unflagged = sum(len(r.unflagged) * len(r.channels) for r in replays)
    agree = all(r.verdict.agree for r in replays)
    ok = not (rtl_violations or model_violations or unflagged)
    report = {
        "schedule": str(args.schedule), "rows": args.rows, "commands": len(commands),
        "bus_conflicts": len(bus),
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
    print(f"model      {model_violations} violation(s)"
          + (f", {len(bus)} bus conflict(s) (not replayed)" if bus else ""))
    for v in found[:_SHOW]:
        print(f"  {args.schedule}:{v}")
    print(f"rtl        {rtl_violations} violation(s)")
    for r in replays:
        for line in r.summary()["rtl_list"][:_SHOW]:
            print(f"  {_channels_text(r.channels)}: {line}")
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
    "Replay a timed schedule ('cycle channel command [bank row col]', any channels) on the RTL "
    "channel with zero payloads and compare the violations its checker flags with the model's "
    "(patton aim check). Same-cycle commands are bus conflicts: the RTL replays the first of "
    "each cycle. Exit 0 only when both find the schedule legal, 2 on a bad line.")


def _rows(text: str) -> int:
    try:
        value = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not 0 < value <= DEVICE.rows:
        raise argparse.ArgumentTypeError(f"rows must be 1..{DEVICE.rows}, got {value}")
    return value


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``rtl`` (with ``run`` and ``check``) on ``subparsers``; return its parser."""
    rtl = subparsers.add_parser("rtl", help="the RTL channel under Verilator",
                                description="Replay traces and schedules on the RTL channel.")
    verbs = rtl.add_subparsers(dest="verb", required=True)
    run = verbs.add_parser("run", help="run a trace on the RTL and score it against the models",
                           description=_RUN_HELP)
    run.add_argument("trace", help="instruction trace (public AiM format or ours)")
    run.add_argument("--rows", type=_rows, default=DEFAULT_ROWS,
                     help=f"rows per bank of the RTL build (default {DEFAULT_ROWS}; the trace's "
                          "rows must fit)")
    run.add_argument("--seed", type=int, default=0,
                     help="seed of the payloads filled in for writes without data= (default 0)")
    run.add_argument("--waves", metavar="FILE",
                     help="build with waveform tracing and copy the dump to FILE (.vcd or .fst)")
    run.add_argument("--json", action="store_true", help="print one JSON object")
    run.set_defaults(func=_run)
    chk = verbs.add_parser("check", help="replay a schedule on the RTL; compare both checkers",
                           description=_CHECK_HELP)
    chk.add_argument("schedule", help="schedule file: 'cycle channel command [bank row col]'")
    chk.add_argument("--rows", type=_rows, default=DEFAULT_ROWS,
                     help=f"rows per bank of the RTL build (default {DEFAULT_ROWS})")
    chk.add_argument("--json", action="store_true", help="print one JSON object")
    chk.set_defaults(func=_check)
    return rtl
