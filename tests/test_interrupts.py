"""^C and SIGTERM end a command cleanly (``patton.cli.interrupt``): one ``interrupted:`` line on
stderr, exit status 130, no traceback, no process of the command left, no output file.

Each case (those of ``benchmarks/interrupt_latency.py``, which prints how fast each stops)
starts a real ``python -m patton.cli`` in its own process group, waits until it is working (a
line it prints, or three seconds), sends the signal as a terminal (SIGINT to the group) or a
supervisor (SIGTERM to the process) would, and checks what is left, and that the command
printed nothing of its work's results after the signal: a check on the work, not on time
(``benchmarks/interrupt_latency.py`` measures how fast each stops). The RTL commands are
interrupted while their Verilator simulators and scoring processes run. ``patton repro`` is in
``tests/test_repro_store.py`` (what it keeps, and ``--resume``).
"""

from __future__ import annotations

import importlib.util
import re
import signal
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("interrupt_latency",
                                               ROOT / "benchmarks" / "interrupt_latency.py")
assert _spec is not None and _spec.loader is not None
latency = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(latency)

#: What each command would write; none of it may exist after the interrupt.
OUTPUTS = {"runtime scenario": ["out.trace"], "aim run": ["out.schedule"],
           "demo": ["demo/chat.json", "demo/cycles.png"]}
#: The commands that run Verilator's simulators, and SymbiYosys.
MARKS = {"rtl run": [pytest.mark.verilator], "rtl check": [pytest.mark.verilator],
         "demo": [pytest.mark.verilator], "hw prove": [pytest.mark.formal]}
#: What a command says it kept (a pattern), when it keeps something.
KEPT = {"hw prove": r"interrupted: \d+ proof\(s\) finished, their folders in proofs; "
                    r"[\w-]+'s folder is incomplete; run the command again to prove them all"}


def left(pgid: int) -> list[str]:
    """The processes of group ``pgid`` that still run (zombies, which have exited and wait
    to be reaped by whoever adopted them, are not counted)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        name, rest = text[text.index("(") + 1:text.rindex(")")], text[text.rindex(")") + 2:]
        fields = rest.split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            out.append(f"{stat.parent.name} {name}")
    return out


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The cases' input files (made once)."""
    folder = tmp_path_factory.mktemp("interrupt-inputs")
    latency.inputs(folder)
    return folder


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("name", [pytest.param(n, marks=MARKS.get(n, []))
                                  for n in sorted(latency.CASES)])
def test_a_command_stops_cleanly(tmp_path, inputs, name, sig, sigint_default):
    for made in inputs.iterdir():
        (tmp_path / made.name).symlink_to(made)
    argv, ready = latency.CASES[name]
    seen: list[int] = []
    out = tmp_path / "stdout.txt"
    before: list[str] = []
    code, _, said = latency.stop(tmp_path, argv, ready, sig, started=seen.append,
                                 signalled=lambda: before.append(out.read_text()))
    err = (tmp_path / "stderr.txt").read_text()
    assert code == 130, err
    assert "Traceback" not in err + out.read_text()
    assert len(said) == 1 and re.fullmatch(KEPT.get(name, "interrupted: nothing written"),
                                           said[0]), err
    # It stopped its work: after the signal it printed no more results (at most the end of
    # a line it was writing), where a command that ran on would print the rest of its work.
    after = out.read_text()
    assert after.startswith(before[0])
    assert after[len(before[0]):].count("\n") <= int(not before[0].endswith("\n")
                                                      and bool(before[0])), after
    deadline = time.monotonic() + 10
    while left(seen[0]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert left(seen[0]) == []
    for output in OUTPUTS.get(name, []):
        assert not (tmp_path / output).exists(), output
    assert [p for p in tmp_path.rglob("*") if p.name.startswith(".") or p.suffix == ".tmp"] == []


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


#: A command whose interrupt lands in a finalizer (``__del__``), which Python swallows;
#: without the hook it runs its 20 s to the end and exits 0.
IN_A_FINALIZER = """
import os, signal, sys, time
from patton.cli import interrupt

class Finalized:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(100_000):  # the handler runs here, inside __del__
            pass

with interrupt.handling() as status:
    Finalized()
    {after}
print("ran to the end", file=sys.stderr)
sys.exit(status[0] if status else 0)
"""


@pytest.mark.parametrize("after", ["time.sleep(20); print('slept', file=sys.stderr)", "pass"],
                         ids=["working", "ending"])
def test_an_interrupt_a_finalizer_swallows_still_stops_the_command(after):
    """Raised again outside the finalizer while the command works; reported if the command
    ends first. Either way: the one line, 130, no "Exception ignored" traceback."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", IN_A_FINALIZER.format(after=after)],
                          capture_output=True, text=True, timeout=60, start_new_session=True)
    said = "interrupted: nothing written\nran to the end\n"  # not 'slept': the sleep stopped
    assert (done.returncode, done.stderr) == (130, said)


def test_a_simulator_is_not_started_after_an_interrupt(tmp_path):
    """A replay thread that reaches the simulator's start after the interrupt's hooks ran
    (they killed what ran) does not start it; the command may start them again once it has
    unwound (``workers.settled``)."""
    from patton.sim import workers
    from patton.tb.session import SimulatorError, _Simulator

    simulator = _Simulator()
    workers.interrupted()
    try:
        with open(tmp_path / "log", "wb") as log, \
                pytest.raises(SimulatorError, match="interrupted"):
            simulator.run(["sleep", "600"], tmp_path, log)
        assert simulator.process is None
    finally:
        workers.settled()
    with open(tmp_path / "log", "wb") as log:
        simulator.run(["true"], tmp_path, log)
    assert simulator.process is not None and simulator.process.returncode == 0


def test_a_simulator_started_as_the_interrupt_lands_is_killed(tmp_path, monkeypatch):
    """The interrupt lands between the simulator's start and its record (the hooks could not
    see it): the thread that started it kills it, not waits for its whole run."""
    import subprocess

    from patton.sim import workers
    from patton.tb import session

    popen = subprocess.Popen

    def popen_then_interrupt(*args, **kwargs):
        process = popen(*args, **kwargs)
        workers.interrupted()  # as if the signal came now: the session has not recorded it
        return process

    monkeypatch.setattr(session.subprocess, "Popen", popen_then_interrupt)
    simulator = session._Simulator()
    try:
        with open(tmp_path / "log", "wb") as log, \
                pytest.raises(RuntimeError, match=f"code {-signal.SIGKILL}"):
            simulator.run(["sleep", "600"], tmp_path, log)
    finally:
        workers.settled()
    assert simulator.process is not None and simulator.process.returncode == -signal.SIGKILL


def test_the_command_line_settles_after_an_interrupt():
    """After an interrupted command has unwound, children may start again in the process."""
    from patton.sim import workers

    from patton.cli import interrupt

    with interrupt.handling() as status:
        workers.interrupted()
        assert workers.stopping()
        raise KeyboardInterrupt
    assert status == [130] and not workers.stopping()


def test_no_session_starts_after_an_interrupt():
    """A session asked for after the interrupt is refused before it makes anything."""
    import os

    from patton.sim import workers
    from patton.tb.session import Session, SimulatorError
    from patton.tb.toolchain import BUILD_ROOT

    workers.interrupted()
    try:
        with pytest.raises(SimulatorError, match="'late' not started: the command was "
                                                 "interrupted"):
            Session(object(), "late")  # type: ignore[arg-type]  # never looked at
    finally:
        workers.settled()
    assert not (BUILD_ROOT / "runs" / f"late-{os.getpid()}").exists()
