"""Interrupts as part of the command line's interface: ^C and SIGTERM end a command cleanly.

:func:`handling` wraps a whole command. SIGTERM takes the path of SIGINT (Python's
``KeyboardInterrupt``), so both stop the command the same way: the code that runs unwinds
(worker pools stop their processes, files being written are written whole or not at all,
``patton.sim.textfile.write_atomic``), then one line goes to stderr,

    interrupted: <what was kept>; <how to continue>

and the exit status is 130 (128 + SIGINT, for SIGTERM too: the command was stopped, not
killed). What was kept is ``nothing written`` unless the command said otherwise with
:func:`keep` (``patton repro``: the task results stored so far, and ``--resume``). A second
^C while the command unwinds is ignored; no traceback is printed.
"""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import Callable, Iterator

__all__ = ["EXIT", "handling", "keep"]

#: The exit status of an interrupted command.
EXIT = 128 + signal.SIGINT

#: What the running command has kept, and how to continue (set by :func:`keep`).
_kept: list[Callable[[], str]] = []


def keep(what: Callable[[], str]) -> None:
    """Say what the running command keeps if it is interrupted now: ``what()`` is called when
    the interrupt is reported, and returns ``"<what was kept>; <how to continue>"``."""
    _kept[:] = [what]


def _terminate(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


@contextlib.contextmanager
def handling() -> Iterator[list[int]]:
    """Run the block with SIGTERM raising ``KeyboardInterrupt`` like SIGINT; if either ends
    it, report as the module docstring says and put :data:`EXIT` in the yielded list (empty
    otherwise)."""
    status: list[int] = []
    _kept.clear()
    previous = signal.signal(signal.SIGTERM, _terminate), signal.getsignal(signal.SIGINT)
    try:
        yield status
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second ^C: the report still comes
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            said = _kept[0]() if _kept else "nothing written"
        except Exception as e:  # noqa: BLE001 - the report must come out whatever failed
            said = f"what was kept is unknown ({type(e).__name__}: {e})"
        with contextlib.suppress(OSError, ValueError):
            print(f"interrupted: {said}", file=sys.stderr, flush=True)
        status.append(EXIT)
    finally:  # a caller in the same process (a test, a notebook) gets its handlers back
        _kept.clear()
        signal.signal(signal.SIGTERM, previous[0])
        signal.signal(signal.SIGINT, previous[1])
