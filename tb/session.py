"""A live RTL channel: a Verilator simulation of ``tb/player.v`` that stays alive across schedules.

The simulator is the player's own executable (:data:`patton.tb.player.PLAY`,
``tb/player_main.cpp``: it clocks the player until it is done), watched by a background thread.
Its ``+SCHEDULE`` and ``+RESULTS`` files are named pipes in the session's folder
(``build/runs/<name>-<pid>/``): Python writes a segment, the player replays it at its cycles
(a blocking ``$fgets`` on the empty pipe pauses the simulation in between), drains the last
reads and answers ``E <cycle> <counter>``. Protocol (``tb/player.v`` has the details)::

    Python -> schedule.fifo                     player -> results.fifo
    ---------------------------------------     ----------------------------------------
                                                H 0                      (files open)
    <cycle> <mask> <data> <head>   (commands)   R <cycle> <read>  /  V <cycle> <violation>
    S <drain>                      (segment end) E <cycle> <counter>     (flushed)
    M                              (dump mats)  M <cycle>                (mats in mats.hex)
    Q  (or end of file)            (quit)       (files closed, `done` rises, it exits)

Each segment is offset by the channel's cycle at the last end line plus
:attr:`TIMING.quiet <patton.sim.timing.TimingTable.quiet>` (the first by 0: a fresh session
replays cycle ``t`` of its first schedule at channel cycle ``t``, as a one-shot replay does), so
no timing rule spans two segments; returned cycles are the schedule's own again.

Python writes and reads at the same time (``select`` on both pipes): a segment with many reads
would otherwise fill the results pipe while the schedule is still being written. A simulator
that exits (a ``$fatal``, a crash) closes the results pipe: the session raises
:class:`SimulatorError` with the tail of its log (``sim.log``) instead of waiting; so does a
simulator that makes no progress for ``timeout`` seconds (it is then killed). :meth:`close`
(or the context manager, or interpreter exit) sends ``Q`` and waits for the exit.
"""

from __future__ import annotations

import atexit
import errno
import os
import select
import subprocess
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import BinaryIO, Protocol

import numpy as np
from patton.hw.params import ChannelParams
from patton.sim import workers
from patton.sim.schedule import TimedCommand
from patton.sim.timing import TIMING
from patton.tb.driver import DRAIN, Driver
from patton.tb.monitor import Monitor, PlayResult, RtlRead, RtlViolation, parse_mats
from patton.tb.toolchain import BUILD_ROOT


class Build(Protocol):
    """What a session needs of a Verilator build of the player
    (:class:`~patton.tb.player.SchedulePlayer`)."""

    params: ChannelParams  # the channel it was built for
    coverage: bool  # a coverage build (its simulator writes counts)
    waves: str | None  # "vcd", "fst" or None
    binary: Path  # the simulator to run
    build_dir: Path  # where the build is

    def pack(self, cmd: TimedCommand) -> int:
        """The command port word of ``cmd``."""
        ...

    def plusargs(self, work: Path) -> list[str]:
        """The simulator's plusargs for a session in ``work``."""
        ...

__all__ = ["Session", "SimulatorError"]

_LIVE: weakref.WeakSet[Session] = weakref.WeakSet()
_CHUNK = 1 << 16


class SimulatorError(RuntimeError):
    """The simulator of a session died, timed out or could not start."""


class _Simulator:
    """The simulator's process, started by :meth:`run` unless the command is stopping.

    An interrupt (:mod:`patton.sim.workers`) kills the running simulators; one that a thread
    starts after that is not started, and one started as the interrupt lands (its hook could
    not see it yet) is killed by the thread that started it.
    """

    def __init__(self) -> None:
        self.process: subprocess.Popen | None = None
        self.peak_kib: int | None = None  # its peak resident memory (``note_peak``)

    def note_peak(self) -> None:
        """Note the running simulator's peak resident memory so far (``VmHWM`` in
        ``/proc``: its own, since it started; where there is no ``/proc``, nothing)."""
        process = self.process
        if process is None or process.poll() is not None:
            return
        try:
            with open(f"/proc/{process.pid}/status", encoding="ascii") as status:
                for line in status:
                    if line.startswith("VmHWM:"):
                        self.peak_kib = int(line.split()[1])
        except (OSError, ValueError):
            pass

    def run(self, command: list[str], cwd: Path, log: BinaryIO) -> None:
        """Run ``command`` in ``cwd`` (output to ``log``) to its end; raise if it failed."""
        if workers.stopping():
            raise SimulatorError("the command was interrupted")
        self.process = subprocess.Popen(command, cwd=cwd, stdout=log, stderr=subprocess.STDOUT)
        if workers.stopping():
            self.process.kill()
        code = self.process.wait()
        if code != 0:
            raise RuntimeError(f"the simulator exited with code {code}")


class Session:
    """One channel's RTL simulation that keeps its state (mats, rows, registers) across schedules.

    Args:
        player: the Verilator build to run (its parameters, packing and waves option).
        name: the session's folder, ``build/runs/<name>-<pid>`` (the waveform lands there).
        timeout: seconds without progress (nothing written, nothing read) before the
            simulator is declared hung, killed and reported.
        start_timeout: seconds the simulator may take to open its files.

    A coverage build's simulator (``SchedulePlayer(coverage=True)``) writes its counts to
    :attr:`coverage_path` (``coverage.dat`` in the session's folder) when it exits: after
    :meth:`close` (``None`` for other builds).

    Invariants: :attr:`offset` is the channel cycle the next schedule's cycle 0 is replayed
    at; after a segment it is the end line's cycle plus ``TIMING.quiet``. Cycles in the
    returned :class:`PlayResult` are the schedule's own (offset removed).
    """

    def __init__(self, player: Build, name: str = "session", *,
                 timeout: float = 120.0, start_timeout: float = 120.0) -> None:
        if workers.stopping():
            raise SimulatorError(f"RTL session {name!r} not started: the command was "
                                 "interrupted")
        self.player = player
        self.params = player.params
        self.name = name
        self.timeout = timeout
        self.work = BUILD_ROOT / "runs" / f"{name}-{os.getpid()}"
        self.work.mkdir(parents=True, exist_ok=True)
        self.schedule_path = self.work / "schedule.fifo"
        self.results_path = self.work / "results.fifo"
        self.mats_path = self.work / "mats.hex"
        self.log_path = self.work / "sim.log"
        self.coverage_path = self.work / "coverage.dat" if player.coverage else None
        if any(other.work == self.work for other in _LIVE):
            raise ValueError(f"a live session already runs in {self.work}; give this one "
                             "another name")
        for path in (self.schedule_path, self.results_path, self.mats_path, self.coverage_path):
            if path is not None and (path.exists() or path.is_symlink()):
                path.unlink()
        os.mkfifo(self.schedule_path)
        os.mkfifo(self.results_path)
        self.driver = Driver(player.pack)
        self.monitor = Monitor(self.params, getattr(player, "timing", None))
        self.offset = 0
        self.segments = 0  # segments replayed
        self.cycles = 0  # channel cycles simulated so far (the last end line's cycle)
        self.closed = False
        self._error: BaseException | None = None
        self._schedule = -1
        self._results = os.open(self.results_path, os.O_RDONLY | os.O_NONBLOCK)
        self._simulator = _Simulator()
        self._thread = threading.Thread(target=self._simulate, name=f"patton-sim-{name}",
                                        daemon=True)
        self._thread.start()
        _LIVE.add(self)
        try:
            self._schedule = self._connect(start_timeout)
            self._pump(b"", lambda: self.monitor.ready, "starting", start_timeout)
        except BaseException:
            self.close()
            raise

    # -- the simulator thread ------------------------------------------------------------------

    def _simulate(self) -> None:
        command = [str(self.player.binary)] + (["--trace"] if self.player.waves else []) \
            + self.player.plusargs(self.work)
        try:
            with open(self.log_path, "wb") as log:
                self._simulator.run(command, self.work, log)
        except BaseException as error:  # noqa: BLE001 - reported by the session's thread
            self._error = error

    @property
    def peak_memory_mib(self) -> float | None:
        """The simulator's peak resident memory in MiB, noted when the session closed
        (``None`` before, or where the system does not say)."""
        kib = self._simulator.peak_kib
        return None if kib is None else kib / 1024

    @property
    def alive(self) -> bool:
        """True while the simulator runs."""
        return self._thread.is_alive()

    def _log_tail(self, lines: int = 12) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return "(no simulator log)"
        keep = [t for t in text if t.strip()][-lines:]
        return "\n".join("    " + t for t in keep)

    def _signal_kill(self) -> None:
        """Send the simulator SIGKILL if it runs (our own child, by its pid); no waiting, so
        a signal handler may call it."""
        process = self._simulator.process
        if process is not None and process.poll() is None:
            process.kill()

    def _kill(self) -> None:
        self._signal_kill()
        self._thread.join(10)

    def _failure(self, what: str, hung: bool = False) -> SimulatorError:
        if hung:
            self._kill()
        else:
            self._thread.join(10)
        process = self._simulator.process
        code = None if process is None else process.poll()
        cause = (f"made no progress for {self.timeout:.0f} s (killed)" if hung else
                 f"exited (code {code})" if code is not None else "is gone")
        reason = f": {self._error}" if self._error is not None and not hung else ""
        return SimulatorError(f"RTL session {self.name!r}: the simulator {cause} while "
                              f"{what}{reason}; log {self.log_path}:\n{self._log_tail()}")

    # -- transport -----------------------------------------------------------------------------

    def _connect(self, timeout: float) -> int:
        """Open the schedule pipe for writing once the simulator has opened it for reading."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return os.open(self.schedule_path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as error:
                if error.errno != errno.ENXIO:  # ENXIO: no reader yet
                    raise
            if not self.alive:
                raise self._failure("starting")
            if time.monotonic() > deadline:
                self._kill()
                raise SimulatorError(f"RTL session {self.name!r}: the simulator did not open "
                                     f"its schedule within {timeout:.0f} s; log "
                                     f"{self.log_path}:\n{self._log_tail()}")
            time.sleep(0.005)

    def _pump(self, data: bytes, done: Callable[[], bool], what: str,
              timeout: float | None = None) -> None:
        """Write ``data`` to the schedule pipe while reading results, until ``done()``."""
        limit = self.timeout if timeout is None else timeout
        view = memoryview(data)
        sent = 0
        quiet_since = time.monotonic()
        while not (sent == len(data) and done()):
            writing = [self._schedule] if sent < len(data) else []
            readable, writable, _ = select.select([self._results], writing, [], 0.25)
            progress = False
            if writable:
                try:
                    n = os.write(self._schedule, view[sent:sent + _CHUNK])
                except BlockingIOError:
                    n = 0
                except BrokenPipeError:
                    raise self._failure(what) from None
                sent += n
                progress = n > 0
            if readable:
                chunk = os.read(self._results, 1 << 20)
                if chunk:
                    self.monitor.feed(chunk)
                    progress = True
                elif self.monitor.ready:  # every writer closed the pipe: the simulator ended
                    raise self._failure(what)
                else:
                    time.sleep(0.005)  # the simulator has not opened the results yet
            now = time.monotonic()
            if progress:
                quiet_since = now
            elif not self.alive:
                raise self._failure(what)
            elif now - quiet_since > limit:
                raise self._failure(what, hung=True)

    # -- use -------------------------------------------------------------------------------

    def run(self, schedule: Sequence[TimedCommand], drain: int | None = None) -> PlayResult:
        """Replay one channel's schedule (cycles strictly increasing) as the next segment.

        Returns the reads, the violations and the cycles of the segment, in the schedule's
        own cycles (``cycles``: the end line's cycle, the drain included; ``seconds``: the
        segment's wall time). The channel keeps its state for the next call.
        """

        self._live()
        offset = self.offset
        data = self.driver.segment(schedule, offset, DRAIN if drain is None else drain)
        started = time.perf_counter()
        self._pump(data, lambda: bool(self.monitor.segments), f"replaying segment "
                   f"{self.segments + 1} ({len(schedule)} commands)")
        got = self.monitor.take()
        assert got is not None
        self.segments += 1
        self.cycles = self.monitor.cycle
        self.offset = self.monitor.cycle + TIMING.quiet
        return PlayResult(
            reads=[RtlRead(r.cycle - offset, r.command, r.data) for r in got.reads],
            violations=[RtlViolation(v.cycle - offset, v.command, v.rules, v.protocol)
                        for v in got.violations],
            counter=got.counter, cycles=got.cycles - offset,
            seconds=time.perf_counter() - started)

    @property
    def error(self) -> BaseException | None:
        """What ended the simulator thread abnormally (``None``: nothing, or still running)."""
        return self._error

    def mats(self) -> dict[tuple[int, int, int], np.ndarray]:
        """Return the mats' current contents: every non-zero word by (bank, row, column)."""
        self._live()
        self.mats_path.write_text("")
        self._pump(self.driver.dump(), lambda: bool(self.monitor.dumps), "dumping the mats")
        cycle = self.monitor.dumps.popleft()
        self.offset = max(self.offset, cycle + TIMING.quiet)
        return parse_mats(self.mats_path, self.params)

    def _live(self) -> None:
        if self.closed:
            raise SimulatorError(f"RTL session {self.name!r} is closed")
        if not self.alive:
            raise self._failure("idle")

    def close(self, timeout: float = 60.0) -> None:
        """End the simulation (``Q``) and wait for the simulator to exit (waves, final mats)."""
        if self.closed:
            return
        self.closed = True
        self._simulator.note_peak()  # before it ends: the peak of the whole run
        if self._schedule >= 0:
            try:
                os.write(self._schedule, self.driver.quit())
            except OSError:
                pass  # it is gone already
            os.close(self._schedule)
            self._schedule = -1
        deadline = time.monotonic() + timeout
        while self._thread.is_alive() and time.monotonic() < deadline:
            try:  # keep the results pipe drained so the player can finish writing
                if select.select([self._results], [], [], 0.1)[0]:
                    chunk = os.read(self._results, 1 << 20)
                    if not chunk:
                        self._thread.join(0.1)
            except OSError:
                break
        if self._thread.is_alive():
            self._kill()
        os.close(self._results)
        _LIVE.discard(self)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _kill_all() -> None:
    """Kill every live session's simulator (an interrupt: :mod:`patton.sim.workers`); the
    threads waiting on them see it and end, and :meth:`Session.close` finds them gone."""
    for session in list(_LIVE):
        session._signal_kill()


workers.at_interrupt(_kill_all)


@atexit.register
def _close_all() -> None:
    for session in list(_LIVE):
        try:
            session.close(timeout=10)
        except Exception:  # noqa: BLE001 - interpreter exit: best effort
            pass
