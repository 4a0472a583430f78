"""Processes that make one cached build folder take turns (tb.toolchain.locked)."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

from patton.tb.toolchain import locked


def _hold(folder: Path, log: Path, holding, release) -> None:
    with locked(folder):
        log.write_text("in\n")
        holding.set()
        release.wait(60)
        with open(log, "a") as f:
            f.write("out\n")


def _take(folder: Path, log: Path, took) -> None:
    with locked(folder):
        took.put(log.read_text())


def _blocked(pid: int) -> bool:
    """Whether process ``pid`` waits for a lock (the kernel lists it with ``->`` in
    ``/proc/locks``)."""
    return any(line.split()[1] == "->" and line.split()[5] == str(pid)
               for line in Path("/proc/locks").read_text().splitlines())


def test_a_second_process_waits_for_the_first_ones_build(tmp_path):
    """The second process asks for the lock while the first holds it and is blocked (the
    kernel says so) until the first has left its block; what it reads then is the whole log.
    Events and the kernel's lock table order the steps; nothing depends on timing."""
    folder, log = tmp_path / "build" / "model-abc", tmp_path / "log"
    fork = multiprocessing.get_context("fork")
    holding, release, took = fork.Event(), fork.Event(), fork.Queue()
    first = fork.Process(target=_hold, args=(folder, log, holding, release))
    first.start()
    assert holding.wait(60), "the first process never took the lock"
    second = fork.Process(target=_take, args=(folder, log, took))
    second.start()
    while took.empty() and second.is_alive() and not _blocked(second.pid):
        second.join(0.01)
    assert took.empty(), "the second process read the log while the first held the lock"
    assert _blocked(second.pid), f"the second process ended (exit {second.exitcode})"
    release.set()
    assert took.get(timeout=60) == "in\nout\n"
    first.join(60)
    second.join(60)
    assert first.exitcode == second.exitcode == 0
    assert (folder.parent / "model-abc.lock").exists()
