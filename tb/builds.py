"""The RTL channel simulators a process replays on: one Verilator build per set of options.

:func:`player` makes a :class:`~patton.tb.player.SchedulePlayer` once per process, row count,
waveform format, timing profile and device extension set (the build itself is cached on disk
under the build root, :data:`patton.sim.native.BUILD_ROOT`; each set has its own);
:func:`pending_build` says beforehand whether asking for one builds, and what, so that a command
can say so; :func:`choose_rows` picks the row count of a schedule that names none, preferring a
build that already exists. :func:`coverage_player` is the channel built with Verilator line and
toggle coverage (``patton rtl coverage --code``). :func:`announce` is what a command says
around a build: nothing when it is cached; else where the build goes, how long it should take
(the last such build's measured time, :func:`patton.tb.toolchain.estimate`) and, while it
runs, a line every :data:`HEARTBEAT_SECONDS`.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from patton.hw.params import ChannelParams
from patton.sim import native
from patton.sim.device import AF_ROW_BASE
from patton.sim.extensions import DEFAULT_EXT
from patton.sim.timing import DEFAULT_PROFILE, timing_table
from patton.tb import toolchain
from patton.tb.prepare import DEFAULT_ROWS, suggest_rows
from patton.tb.replays import stdout_to_stderr
from patton.tb.toolchain import estimate, terminal_stderr

if TYPE_CHECKING:
    from patton.tb.player import SchedulePlayer

__all__ = ["player", "pending_build", "choose_rows", "highest_row", "coverage_player",
           "announce", "HEARTBEAT_SECONDS"]

#: Seconds between the lines :func:`announce` writes while a build runs.
HEARTBEAT_SECONDS = 15.0

#: This process's players, by (rows, waves, timing profile), and the device extension set
#: after them when it is not ``aim`` (:func:`_key`).
_PLAYERS: dict[tuple, SchedulePlayer] = {}


def _key(rows: int, waves: str | None, timing: str, ext: str) -> tuple:
    """A player's key in :data:`_PLAYERS`."""
    return (rows, waves, timing) if ext == DEFAULT_EXT else (rows, waves, timing, ext)


def player(rows: int = DEFAULT_ROWS, waves: str | None = None,
           timing: str = DEFAULT_PROFILE, ext: str = DEFAULT_EXT) -> SchedulePlayer:
    """Return this process's schedule player for ``rows`` rows per bank whose timing checker
    is built for profile ``timing`` on device extension set ``ext`` (built once per
    process)."""
    key = _key(rows, waves, timing, ext)
    if key not in _PLAYERS:
        # lazy: patton.tb.player imports Amaranth's Verilog back end (slow to import)
        from patton.tb.player import SchedulePlayer

        with stdout_to_stderr():
            _PLAYERS[key] = SchedulePlayer(ChannelParams(rows=rows), waves=waves,
                                           timing=timing_table(timing, ext))
    return _PLAYERS[key]


def pending_build(rows: int, waves: str | None = None, timing: str = DEFAULT_PROFILE, *,
                  coverage: bool = False, ext: str = DEFAULT_EXT
                  ) -> Literal["verilog", "new"] | None:
    """What asking for this simulator builds (:func:`player`; ``coverage``:
    :func:`coverage_player`).

    Returns
    -------
    ``None`` when nothing (made in this process or cached under ``build/``), ``"verilog"``
    when a simulator of ``rows`` rows was built from older sources (its Verilog is
    regenerated: seconds, a minute if the Verilog differs), ``"new"`` for a Verilator build.
    """
    from patton.tb.player import SchedulePlayer  # lazy: Amaranth's back end

    params = ChannelParams(rows=rows)
    table = timing_table(timing, ext)
    if coverage:
        return None if SchedulePlayer.cached(params, timing=table, coverage=True) else "new"
    if _key(rows, waves, timing, ext) in _PLAYERS or SchedulePlayer.cached(
            params, waves=waves, timing=table):
        return None
    return "verilog" if rows in SchedulePlayer.built_rows(waves=waves) else "new"


def coverage_player(timing: str = DEFAULT_PROFILE, ext: str = DEFAULT_EXT) -> SchedulePlayer:
    """The :data:`~patton.tb.prepare.DEFAULT_ROWS`-row channel built with Verilator line and
    toggle coverage for profile ``timing`` on extension set ``ext`` (each session writes its
    counts)."""
    from patton.tb.player import SchedulePlayer  # lazy: Amaranth's back end

    return SchedulePlayer(ChannelParams(rows=DEFAULT_ROWS), timing=timing_table(timing, ext),
                          coverage=True)


def choose_rows(row: int, waves: str | None = None, timing: str = DEFAULT_PROFILE,
                ext: str = DEFAULT_EXT) -> int:
    """The ``--rows`` of a schedule whose highest row is ``row`` when none is given.

    The smallest power of two that holds the row (at least ``DEFAULT_ROWS``), unless a larger
    simulator is built under ``build/`` (``SchedulePlayer.built_rows``): then the smallest such
    that is today's build for ``timing`` on ``ext`` (``SchedulePlayer.cached``), or, for the
    default profile and extension set, the smallest such at all (it costs no Verilator build
    when only its Verilog needs regenerating after a source change). A larger build replays the
    schedule exactly as a smaller one would: the rows it adds are never touched.
    """
    from patton.tb.player import SchedulePlayer  # lazy: Amaranth's back end

    needed = suggest_rows(row) if row >= 0 else DEFAULT_ROWS
    larger = [r for r in SchedulePlayer.built_rows(waves=waves) if r >= needed]
    table = timing_table(timing, ext)
    for rows in larger:
        if _key(rows, waves, timing, ext) in _PLAYERS or SchedulePlayer.cached(
                ChannelParams(rows=rows), waves=waves, timing=table):
            return rows
    if larger and timing == DEFAULT_PROFILE and ext == DEFAULT_EXT:
        return larger[0]
    return needed


def highest_row(rows: Iterable[int]) -> int:
    """The highest normal row in ``rows`` (-1 if none): what :func:`choose_rows` takes. The AF
    LUT rows are left out: every build has them, behind its normal rows."""
    return max((r for r in rows if r < AF_ROW_BASE), default=-1)


@contextmanager
def announce(pending: Literal["verilog", "new"] | None, what: str, log: Path | None, *,
             kind: str = "channel") -> Iterator[None]:
    """Say around the block (which builds ``what``, as :func:`pending_build` said:
    ``pending``) what it does, on this process's standard error as it was before any
    :func:`patton.tb.toolchain.quiet` block.

    Nothing when ``pending`` is None (the build is cached). Else a line naming the build root
    (:data:`patton.sim.native.BUILD_ROOT`), the estimate (:func:`~patton.tb.toolchain.estimate`)
    and ``log`` (where the build's output goes; None: to the terminal), and, while the block
    runs with its output in ``log``, a line every :data:`HEARTBEAT_SECONDS`: ``building the
    RTL channel (rows 64): 45 s (the last build took 182 s), log: PATH``. A Verilator build
    that finishes records its time (:func:`~patton.tb.toolchain.last_build_seconds`).
    """
    if pending is None:
        yield
        return
    where = f", log: {log}" if log is not None else ""
    if pending == "verilog":
        doing = "its sources changed since its last build: regenerating its Verilog"
        expected = "seconds, or a Verilator build if the Verilog differs"
    else:
        doing, expected = "a Verilator build", estimate(kind)
    fd = os.dup(terminal_stderr())
    os.write(fd, f"building {what} under {native.BUILD_ROOT}: {doing}, {expected}{where}\n"
             .encode())
    started = time.monotonic()
    done = threading.Event()

    def heartbeat() -> None:
        while not done.wait(HEARTBEAT_SECONDS):
            line = (f"building {what}: {time.monotonic() - started:.0f} s ({expected})"
                    f"{where}\n")
            try:
                os.write(fd, line.encode())
            except OSError:
                return

    beat = threading.Thread(target=heartbeat, name="build heartbeat", daemon=True)
    if log is not None:
        beat.start()
    try:
        yield
    finally:
        done.set()
        if beat.is_alive():
            beat.join()
        os.close(fd)
    if pending == "new":
        toolchain.record_build_seconds(kind, time.monotonic() - started)
