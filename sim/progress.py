"""Progress of long work on stderr: a bar on a terminal, a line now and then elsewhere.

:class:`Progress` has the part of ``tqdm``'s interface the project uses (``update``,
``close``, ``refresh``, ``n``, ``total``, a context manager) and shows one of three ways
(:func:`mode`):

- ``"bar"``: a tqdm bar, when the stream is a terminal or ``--progress`` forces it;
- ``"lines"``: when the stream is not a terminal (a pipe, a CI log): one line at most every
  :func:`interval` seconds (:data:`INTERVAL` by default, ``PATTON_PROGRESS_INTERVAL``
  overrides; 0 prints on every update that changes the line), e.g. ``repro: 14/52 tasks
  done, 2 min 10 s elapsed, about 3 min left`` (the time left once :data:`ESTIMATE` of the
  work is done), and once at the end if a line was printed before (work shorter than the
  interval stays silent);
- nothing, with ``--no-progress``.

``show`` is the command line's ``--progress``/``--no-progress``: True, False, or None (not
given: the stream decides).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

__all__ = ["INTERVAL", "PROGRESS_HELP", "Progress", "duration", "interval", "mode"]

#: Seconds between two progress lines when the stream is not a terminal.
INTERVAL = 30.0
#: The part of the work done before a line estimates the time left (less is noise).
ESTIMATE = 0.05
#: The environment variable that overrides :data:`INTERVAL` (tests set 0).
ENV = "PATTON_PROGRESS_INTERVAL"
#: The help of every command's ``--progress/--no-progress`` (``show``).
PROGRESS_HELP = (f"progress on stderr: a bar, or nothing with --no-progress (default: a bar "
                 f"on a terminal, else a line every {INTERVAL:g} s)")


def mode(show: bool | None, stream: TextIO | None = None) -> str | None:
    """``"bar"``, ``"lines"`` or None (nothing) for ``show`` (``--progress``: True,
    ``--no-progress``: False, neither: None) on ``stream`` (default stderr)."""
    if show is False:
        return None
    if show:
        return "bar"
    stream = sys.stderr if stream is None else stream
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        tty = False
    return "bar" if tty else "lines"


def interval() -> float:
    """Seconds between two progress lines: ``PATTON_PROGRESS_INTERVAL`` if set (a number of
    seconds >= 0; anything else is reported on stderr once and ignored), else
    :data:`INTERVAL`."""
    text = os.environ.get(ENV)
    if text is None or not text.strip():
        return INTERVAL
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:  # also NaN
        global _warned
        if not _warned:
            print(f"warning: {ENV}={text!r} is not a number of seconds >= 0; using "
                  f"{INTERVAL:g}", file=sys.stderr)
            _warned = True
        return INTERVAL
    return value


_warned = False


def duration(seconds: float) -> str:
    """``seconds`` as people say it: ``45 s``, ``2 min 10 s``, ``1 h 05 min``."""
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s" if s % 60 else f"{s // 60} min"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def _about(seconds: float) -> str:
    """A time left, rounded as an estimate: ``20 s``, ``3 min``, ``1 h 05 min``."""
    if seconds < 60:
        return f"{max(int(round(seconds / 5)) * 5, 5)} s"
    if seconds < 3600:
        return f"{int(round(seconds / 60))} min"
    return duration(seconds)


def _count(n: float, unit: str) -> str:
    """``n`` of ``unit``: bytes in kB, MB, GB; anything else as a whole number."""
    if unit == "B":
        for scale, name in ((2**30, "GB"), (2**20, "MB"), (2**10, "kB")):
            if n >= scale:
                return f"{n / scale:.1f} {name}"
        return f"{int(n)} B"
    return f"{int(n):,}"


class Progress:
    """Progress of ``total`` units of work (None: not known) under the label ``desc``.

    ``unit`` is singular (``"step"``; ``"B"`` counts bytes in kB, MB, GB); ``show`` and
    ``stream`` choose the way (:func:`mode`); ``delay``: seconds before a bar appears (a
    short run shows none); ``leave``: a finished bar stays on the screen. ``status``, if
    given, says how far the work is in a line instead of ``n/total unit``s (the count still
    gives the time left).
    """

    def __init__(self, total: float | None, desc: str, unit: str = "step", *,
                 show: bool | None = None, stream: TextIO | None = None, delay: float = 2.0,
                 leave: bool = False, status: Callable[[], str] | None = None) -> None:
        self.stream = sys.stderr if stream is None else stream
        self.mode = mode(show, self.stream)
        self.desc, self.unit, self.status, self.delay = desc, unit, status, delay
        self._n: float = 0
        self._total = total
        self._bar: Any = None
        self._start = self._last = time.monotonic()
        self._printed: str | None = None  # the last line printed (line mode)
        self._closed = False
        self._every = interval() if self.mode == "lines" else INTERVAL
        if self.mode == "bar":
            from tqdm import tqdm  # lazy: slow to import, and only a terminal needs it

            self._bar = tqdm(total=total, desc=desc, unit=unit, file=self.stream,
                             delay=delay, dynamic_ncols=True, leave=leave,
                             unit_scale=unit == "B", unit_divisor=1024 if unit == "B" else 1000)

    # -- the tqdm subset ------------------------------------------------------------------

    @property
    def n(self) -> float:
        """Units done so far."""
        return self._bar.n if self._bar is not None else self._n

    @property
    def total(self) -> float | None:
        """Units in all (None: not known)."""
        return self._bar.total if self._bar is not None else self._total

    @total.setter
    def total(self, value: float | None) -> None:
        if self._bar is not None:
            self._bar.total = value
            self._bar.refresh()
        self._total = value

    def update(self, n: float = 1) -> None:
        """``n`` more units are done."""
        if self._bar is not None:
            self._bar.update(n)
            return
        self._n += n
        if self.mode == "lines":
            self.refresh()

    def refresh(self) -> None:
        """Show the state now if it is time (a bar redraws; a line prints when
        :func:`interval` seconds passed since the last one): callers that wait without
        updates call it to show the time going by."""
        if self._bar is not None:
            self._bar.refresh()
        elif self.mode == "lines" and not self._closed:
            now = time.monotonic()
            if now - self._last >= self._every:
                self._print(now)

    def _print(self, now: float) -> None:
        line = self.line(now)
        if line != self._printed:  # an interval of 0 would repeat it on every refresh
            self._last = now
            self._write(line)

    def close(self) -> None:
        """End: a bar is removed (or left, with ``leave``); a line is printed if any was."""
        if self._closed:
            return
        self._closed = True
        if self._bar is not None:
            self._bar.close()
        elif self.mode == "lines" and self._printed is not None:
            line = self.line(time.monotonic())
            if line != self._printed:
                self._write(line)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- line mode ------------------------------------------------------------------------

    def line(self, now: float | None = None) -> str:
        """The progress line: ``desc: n/total units, T elapsed, about T left``."""
        now = time.monotonic() if now is None else now
        elapsed = now - self._start
        total = self._total
        if self.status is not None:
            done = self.status()
        else:
            done = _count(self._n, self.unit)
            if total is not None:
                done += f"/{_count(total, self.unit)}"
            if self.unit != "B":
                done += f" {self.unit if self.unit.endswith('s') else self.unit + 's'}"
        text = f"{self.desc}: {done}, {duration(elapsed)} elapsed"
        if total and ESTIMATE <= self._n / total < 1 - 1e-9:
            text += f", about {_about(elapsed * (total - self._n) / self._n)} left"
        return text

    def _write(self, line: str) -> None:
        self._printed = line
        try:
            print(line, file=self.stream, flush=True)
        except (OSError, ValueError):  # a closed pipe or stream: progress is not the work
            self.mode = None
