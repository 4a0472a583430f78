"""Processes that make one cached build folder take turns (tb.toolchain.locked)."""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path

from patton.tb.toolchain import locked


def _hold(folder: Path, log: Path) -> None:
    with locked(folder):
        log.write_text("in\n")
        time.sleep(0.5)
        with open(log, "a") as f:
            f.write("out\n")


def test_a_second_process_waits_for_the_first_ones_build(tmp_path):
    folder, log = tmp_path / "build" / "model-abc", tmp_path / "log"
    child = multiprocessing.get_context("fork").Process(target=_hold, args=(folder, log))
    child.start()
    deadline = time.monotonic() + 10
    while not log.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert log.exists(), "the first process never took the lock"
    with locked(folder) as got:
        seen = log.read_text()  # the first process has left its block
    child.join(10)
    assert got == folder and seen == "in\nout\n" and child.exitcode == 0
    assert (folder.parent / "model-abc.lock").exists()

