"""Child processes and interrupts: how every pool of processes the project starts takes ^C
and SIGTERM, how it is stopped, and what else must stop at once.

A terminal's ^C reaches the whole process group; the parent alone decides what it stops
(``patton.cli.interrupt``), so a worker ignores SIGINT (:func:`ignore_interrupts`, the pools'
initializer) and prints no traceback of its own. When the parent stops (an interrupt, a
failure) it calls :func:`stop`: what has not started is cancelled and the workers are
terminated, then killed after :data:`GRACE` seconds. Used by ``patton repro``'s runner
(:mod:`patton.eval.runner`) and the RTL replays' scoring pool (:mod:`patton.tb.replays`).

Children that threads of the command wait on (the RTL's Verilator simulators,
:mod:`patton.tb.session`) would keep those threads, and the command, running after an
interrupt that did not reach them (SIGTERM to the command alone): their owners register a
hook with :func:`at_interrupt`, and the command line's signal handler calls
:func:`interrupted`, which runs the hooks before the command unwinds. A thread that was about
to start such a child when the hooks ran would start it after them, unkilled, and wait for its
whole run: owners ask :func:`stopping` before they start a child and again once it is known
(killing it then). The command line clears the state when the command has unwound
(:func:`settled`), so a caller in the same process (a test, a notebook) starts children again.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import signal
from collections.abc import Callable, Sequence

__all__ = ["GRACE", "ignore_interrupts", "stop", "at_interrupt", "interrupted", "stopping",
           "settled"]

#: Seconds a terminated worker has to exit before it is killed.
GRACE = 5.0


def ignore_interrupts() -> None:
    """Initializer of a worker (or manager) process: SIGINT ignored; SIGTERM, how the parent
    stops it, ends it at once (not the parent's handler, which a fork inherits and which
    would unwind the worker with a traceback)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def stop(pools: Sequence[cf.ProcessPoolExecutor]) -> None:
    """Cancel what the pools have not started and end their processes (terminate, then kill
    after :data:`GRACE` seconds); return when every one has exited."""
    # The processes first: an executor forgets them (``_processes`` None) once shut down.
    processes = [p for pool in pools for p in (getattr(pool, "_processes", None) or {}).values()]
    for pool in pools:
        pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        process.terminate()
    for process in processes:
        process.join(GRACE)
        if process.is_alive():
            process.kill()
            process.join()


#: What :func:`interrupted` runs.
_hooks: list[Callable[[], None]] = []
#: Set (non-empty) by :func:`interrupted`, cleared by :func:`settled`.
_interrupted: list[bool] = []


def at_interrupt(hook: Callable[[], None]) -> None:
    """Have :func:`interrupted` call ``hook()``: it runs inside a signal handler, so it must
    only signal processes (say, kill a simulator), not wait for them or take locks."""
    if hook not in _hooks:
        _hooks.append(hook)


def interrupted() -> None:
    """Note that the command is stopping (:func:`stopping`), then run every
    :func:`at_interrupt` hook (one that fails does not stop the others)."""
    _interrupted[:] = [True]
    for hook in list(_hooks):
        with contextlib.suppress(Exception):
            hook()


def stopping() -> bool:
    """True from :func:`interrupted` until :func:`settled`: start no child; kill one just
    started. (The flag is set before the hooks run, and an owner records its child before it
    asks, so either the hook sees the child or the owner sees the flag.)"""
    return bool(_interrupted)


def settled() -> None:
    """The interrupted command has unwound (its threads have ended): children may start again."""
    _interrupted.clear()
