"""Interrupts as part of the command line's interface: ^C and SIGTERM end a command cleanly.

:func:`handling` wraps a whole command. SIGTERM takes the path of SIGINT (Python's
``KeyboardInterrupt``), so both stop the command the same way: the code that runs unwinds
(worker pools stop their processes, live RTL simulators are killed, files being written are
written whole or not at all, ``patton.sim.textfile.write_atomic``), then one line goes to
stderr,

    interrupted: <what was kept>; <how to continue>

and the exit status is 130 (128 + SIGINT, for SIGTERM too: the command was stopped, not
killed). What was kept is ``nothing written`` unless the command said otherwise with
:func:`keep` (``patton repro``: the task results stored so far, and ``--resume``). No
traceback is printed.

A terminal's ^C reaches the command's whole process group: its children (``make``, the C++
compiler, Verilator's simulators) stop as they do on ^C, and its worker pools ignore it (the
command stops them, :mod:`patton.sim.workers`). SIGTERM reaches the command alone: when it
leads its process group (a shell's job, a supervisor's child started in a session of its
own) it passes SIGINT on to the group, so that its children stop the same way; either way
the children the command's threads wait on are killed at once
(:func:`patton.sim.workers.interrupted`). After the first signal, SIGINT and SIGTERM are
ignored until the command has unwound and reported.

An interrupt can land while a finalizer runs (an object's ``__del__``, a weakref callback, the
garbage collector calls them anywhere), and Python swallows what a finalizer raises ("Exception
ignored in ..."). The command would then run on to its end. So a ``KeyboardInterrupt`` that
reaches ``sys.unraisablehook`` is raised again a moment later, from ``SIGALRM``, outside the
finalizer (and again, should that land in one too).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Callable, Iterator

from patton.sim import workers

__all__ = ["EXIT", "handling", "keep"]

#: The exit status of an interrupted command.
EXIT = 128 + signal.SIGINT

#: How soon a swallowed interrupt is raised again (seconds).
AGAIN = 0.001

#: An interrupt a finalizer swallowed (set by :func:`_swallowed`).
_swallowed_once: list[bool] = []

#: What the running command has kept, and how to continue (set by :func:`keep`).
_kept: list[Callable[[], str]] = []


def keep(what: Callable[[], str]) -> None:
    """Say what the running command keeps if it is interrupted now: ``what()`` is called when
    the interrupt is reported, and returns ``"<what was kept>; <how to continue>"``."""
    _kept[:] = [what]


def _interrupt(signum: int, frame: object) -> None:
    """The first ^C or SIGTERM: ignore the next ones, pass SIGTERM on to the group this
    process leads as SIGINT, and unwind."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if signum == signal.SIGTERM and os.getpgrp() == os.getpid():
        os.killpg(0, signal.SIGINT)  # ignored here, now
    workers.interrupted()  # children the command's threads wait on: killed now
    raise KeyboardInterrupt


def _again(signum: int, frame: object) -> None:
    """The timer :func:`_swallowed` set: raise the interrupt a finalizer swallowed."""
    raise KeyboardInterrupt


def _swallowed(unraisable: object, hook: Callable[[object], object]) -> None:
    """``sys.unraisablehook`` while a command runs: an interrupt a finalizer swallowed is
    raised again (:data:`AGAIN` seconds later, from ``SIGALRM``); anything else goes to
    ``hook``, the hook there was before."""
    if isinstance(getattr(unraisable, "exc_value", None), KeyboardInterrupt):
        _swallowed_once[:] = [True]
        signal.setitimer(signal.ITIMER_REAL, AGAIN)
    else:
        hook(unraisable)


@contextlib.contextmanager
def handling() -> Iterator[list[int]]:
    """Run the block with SIGINT and SIGTERM raising ``KeyboardInterrupt`` (once); if either
    ends it, report as the module docstring says and put :data:`EXIT` in the yielded list
    (empty otherwise)."""
    status: list[int] = []
    _kept.clear()
    _swallowed_once.clear()
    previous = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    alarm, hook = signal.getsignal(signal.SIGALRM), sys.unraisablehook
    signal.signal(signal.SIGALRM, _again)
    sys.unraisablehook = lambda unraisable: _swallowed(unraisable, hook)
    signal.signal(signal.SIGTERM, _interrupt)
    if previous[1] is not signal.SIG_IGN:  # a shell's background job keeps ignoring ^C
        signal.signal(signal.SIGINT, _interrupt)
    try:
        yield status
        if _swallowed_once:  # the block ended before the interrupt could be raised again
            raise KeyboardInterrupt
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second ^C: the report still comes
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.setitimer(signal.ITIMER_REAL, 0)  # raised already
        try:
            said = _kept[0]() if _kept else "nothing written"
        except Exception as e:  # noqa: BLE001 - the report must come out whatever failed
            said = f"what was kept is unknown ({type(e).__name__}: {e})"
        with contextlib.suppress(OSError, ValueError):
            print(f"interrupted: {said}", file=sys.stderr, flush=True)
        status.append(EXIT)
    finally:  # a caller in the same process (a test, a notebook) gets its handlers back
        _kept.clear()
        workers.settled()
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, alarm)
        sys.unraisablehook = hook
        signal.signal(signal.SIGTERM, previous[0])
        signal.signal(signal.SIGINT, previous[1])
