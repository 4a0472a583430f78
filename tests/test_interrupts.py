"""^C and SIGTERM end a command cleanly (``patton.cli.interrupt``): one ``interrupted:`` line on
stderr, exit status 130, no traceback, no process of the command left, no output file.

Each case starts a real ``python -m patton.cli`` in its own process group, waits until it is
working (a second), sends the signal as a terminal (SIGINT to the group) or a supervisor
(SIGTERM to the process) would, and checks what is left. ``patton repro`` is in
``tests/test_repro_store.py`` (what it keeps, and ``--resume``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

#: Commands that work for well over the wait: (name, argv after ``patton``, output file).
COMMANDS = {
    "runtime scenario": (["runtime", "scenario", "--steps", "2048", "--no-progress",
                          "--trace", "{out}"], "{out}"),
    "cost": (["cost", "--steps", "5000", "--json"], None),
}


def gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_command_stops_cleanly(tmp_path, name, sig):
    argv, out = COMMANDS[name]
    target = tmp_path / "out.trace"
    argv = [a.format(out=target) for a in argv]
    proc = subprocess.Popen([sys.executable, "-m", "patton.cli", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            cwd=tmp_path)
    time.sleep(3.0)
    assert proc.poll() is None, "the command ended before the signal"
    if sig == signal.SIGINT:
        os.killpg(proc.pid, sig)  # a terminal's ^C reaches the whole group
    else:
        os.kill(proc.pid, sig)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    lines = [x for x in stderr.splitlines() if x.startswith("interrupted:")]
    assert lines == ["interrupted: nothing written"], stderr
    assert stdout == ""
    time.sleep(0.2)
    assert gone(proc.pid)
    if out is not None:
        assert not target.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_the_handlers_are_given_back_after_an_interrupt(capsys):
    """In one process (a test, a notebook): the report and 130, then ^C and SIGTERM act as
    before again (a second ^C is ignored only while the command unwinds)."""
    from patton.cli import interrupt

    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    with interrupt.handling() as status:
        interrupt.keep(lambda: "kept 2 things; run it again")
        raise KeyboardInterrupt
    assert status == [interrupt.EXIT] == [130]
    assert capsys.readouterr().err == "interrupted: kept 2 things; run it again\n"
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
