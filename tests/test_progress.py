"""Progress on stderr (``patton.sim.progress``): a bar on a terminal, a line now and then
elsewhere, nothing with ``--no-progress``; and quick or reduced runs saying so."""

from __future__ import annotations

import argparse
import io
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from patton.eval import report, runner
from patton.eval.figures import NAMES
from patton.eval.plan import FULL, QUICK
from patton.eval.tasks import FragmentationTask
from patton.sim import progress as progress_module
from patton.sim.progress import ENV, INTERVAL, Progress, duration, interval, mode

from patton.cli import main

ROOT = Path(__file__).resolve().parent.parent
TRACE = ROOT / "tests" / "data" / "aim" / "micro_wrab_1024_1bank.trace"


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def every_update(monkeypatch):
    """A progress line on every update that changes it (what the tests of commands use)."""
    monkeypatch.setenv(ENV, "0")


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    c = _Clock()
    monkeypatch.setattr(progress_module.time, "monotonic", c)
    return c


# -- the reporter --------------------------------------------------------------------------


def test_mode_follows_the_flag_then_the_stream():
    assert mode(False, _Tty()) is None and mode(False, io.StringIO()) is None
    assert mode(True, io.StringIO()) == "bar"  # --progress forces the bar
    assert mode(None, _Tty()) == "bar" and mode(None, io.StringIO()) == "lines"


def test_lines_at_most_every_interval_and_once_at_the_end(monkeypatch, clock):
    monkeypatch.delenv(ENV, raising=False)
    out = io.StringIO()
    bar = Progress(52, "repro", "task", stream=out)
    assert bar.mode == "lines"
    bar.update(10)
    clock.now += INTERVAL - 1
    bar.update(4)
    assert out.getvalue() == ""  # not yet an interval
    clock.now += 1
    bar.update(0)
    assert out.getvalue() == "repro: 14/52 tasks, 30 s elapsed, about 1 min left\n"
    clock.now += 20
    bar.update(38)  # less than an interval since: nothing until the end
    assert out.getvalue().count("\n") == 1
    bar.close()
    bar.close()  # once
    assert out.getvalue().splitlines() == ["repro: 14/52 tasks, 30 s elapsed, about 1 min left",
                                           "repro: 52/52 tasks, 50 s elapsed"]
    assert bar.n == 52 and bar.total == 52


def test_short_work_prints_nothing(monkeypatch, clock):
    monkeypatch.delenv(ENV, raising=False)
    out = io.StringIO()
    with Progress(3, "short", stream=out) as bar:
        bar.update(3)
        clock.now += 5
    assert out.getvalue() == ""


def test_refresh_shows_the_time_going_by(monkeypatch, clock):
    monkeypatch.setenv(ENV, "10")
    out = io.StringIO()
    bar = Progress(None, "build", "file", stream=out)
    bar.refresh()
    clock.now += 10
    bar.refresh()
    clock.now += 5
    bar.refresh()
    assert out.getvalue() == "build: 0 files, 10 s elapsed\n"


def test_the_time_left_once_enough_is_done(every_update, clock):
    out = io.StringIO()
    bar = Progress(100, "x", stream=out)
    clock.now += 10
    bar.update(4)  # 4 %: no estimate yet
    clock.now += 10
    bar.update(46)
    assert out.getvalue().splitlines() == ["x: 4/100 steps, 10 s elapsed",
                                           "x: 50/100 steps, 20 s elapsed, about 20 s left"]


def test_no_progress_prints_nothing_and_still_counts(every_update):
    out = _Tty()
    with Progress(10, "x", show=False, stream=out) as bar:
        bar.update(4)
        bar.total = 12
        bar.refresh()
    assert out.getvalue() == "" and bar.mode is None and (bar.n, bar.total) == (4, 12)


def test_the_bar_is_tqdm(every_update):
    out = io.StringIO()
    with Progress(8, "bar", show=True, stream=out, delay=0) as bar:
        bar.update(3)
        assert bar.n == 3 and bar.total == 8
        bar.total = 9
        assert bar.total == 9
    assert "bar" in out.getvalue() and "3/9" in out.getvalue()


def test_bytes_status_and_durations(every_update):
    out = io.StringIO()
    bar = Progress(None, "reading", "B", stream=out)
    bar.update(3 * 2**20)
    bar = Progress(100, "repro", stream=out, status=lambda: "1/2 tasks done")
    bar.update(1)
    assert out.getvalue().splitlines() == ["reading: 3.0 MB, 0 s elapsed",
                                           "repro: 1/2 tasks done, 0 s elapsed"]
    assert [duration(s) for s in (0, 45.4, 60, 130, 3725)] == \
        ["0 s", "45 s", "1 min", "2 min 10 s", "1 h 02 min"]


def test_a_bad_interval_is_reported_and_ignored(monkeypatch, capsys):
    monkeypatch.setattr(progress_module, "_warned", False)
    for bad in ("soon", "-1", "nan"):
        monkeypatch.setenv(ENV, bad)
        assert interval() == INTERVAL
    err = capsys.readouterr().err
    assert err.count("warning:") == 1 and "PATTON_PROGRESS_INTERVAL='soon'" in err
    monkeypatch.setenv(ENV, "2.5")
    assert interval() == 2.5


def test_a_closed_stream_ends_the_lines(every_update):
    out = io.StringIO()
    bar = Progress(3, "x", stream=out)
    out.close()
    bar.update(1)  # no ValueError: progress is not the work
    assert bar.mode is None


# -- the runner: one line for every task -----------------------------------------------------


def test_runner_prints_one_line_for_all_tasks(every_update, capsys):
    tasks = [FragmentationTask(fragments=2), FragmentationTask(fragments=4)]
    runner.execute(tasks, workers=1, progress=None)
    lines = capsys.readouterr().err.splitlines()
    assert lines and all(re.fullmatch(r"repro: [0-2]/2 tasks done, \d+ s elapsed.*", x)
                         for x in lines), lines
    assert lines[-1].startswith("repro: 2/2 tasks done")
    runner.execute(tasks, workers=1, progress=False)
    assert capsys.readouterr().err == ""


# -- the commands ----------------------------------------------------------------------------


def _repro(tmp_path: Path, *flags: str) -> subprocess.CompletedProcess:
    env = {**os.environ, ENV: "0"}
    return subprocess.run([sys.executable, "-m", "patton.cli", "repro", "micro", "--quick",
                           "--out", str(tmp_path / "out"), *flags],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)


def test_repro_quick_on_a_pipe_shows_life_and_says_it_is_quick(tmp_path):
    done = _repro(tmp_path)
    assert done.returncode == 0, done.stderr
    progress = [x for x in done.stderr.splitlines() if x.startswith("repro: ")]
    assert progress and progress[-1].startswith("repro: 2/2 tasks done"), done.stderr
    out = done.stdout.splitlines()
    assert out[0].startswith("repro       micro in ") and out[0].endswith("(quick run)")
    assert any(x.startswith("micro       quick run: CZ activations") for x in out), out
    note = [x for x in out if x.startswith("note        ")]
    assert note == ["note        quick run: a pipeline check, not the paper's scale: 16 "
                    "Value-write steps (full: 32); run without --quick for the paper's "
                    "numbers"]
    md = (tmp_path / "out" / "repro.md").read_text()
    assert "**Quick run**: a pipeline check, not the paper's scale: 16 Value-write steps" in md
    assert "*Quick run, not the paper's scale: 16 Value-write steps (full: 32).*" in md


def test_repro_no_progress_prints_none(tmp_path):
    done = _repro(tmp_path, "--no-progress")
    assert done.returncode == 0 and done.stderr == "", done.stderr


def test_aim_run_and_check_print_progress_lines(every_update, tmp_path, capsys):
    sched = tmp_path / "s.sched"
    assert main(["aim", "run", str(TRACE), "--schedule", str(sched)]) == 0
    err = capsys.readouterr().err
    assert re.search(r"^aim run: ([0-9,]+)/\1 instructions, \d+ s elapsed$", err, re.M), err
    assert main(["aim", "check", str(sched)]) == 0
    err = capsys.readouterr().err.splitlines()
    assert any(x.startswith("aim check: reading: ") for x in err), err
    assert re.fullmatch(r"aim check: ([0-9,]+)/\1 commands, \d+ s elapsed", err[-1]), err
    assert main(["aim", "check", str(sched), "--no-progress"]) == 0
    assert main(["aim", "run", str(TRACE), "--no-progress"]) == 0
    assert capsys.readouterr().err == ""


# -- quick and reduced runs say so -------------------------------------------------------------


def test_scale_note_names_what_the_figures_run_less_of():
    assert report.scale_note(NAMES, FULL) is None
    assert not any(report.reduced(f, FULL) for f in NAMES)
    fewer = FULL.with_(steps=500)
    assert report.scale_note(["fig9"], fewer) is None and not report.reduced("fig9", fewer)
    assert report.scale_note(["fig7", "fig9"], fewer) == "500 steps per cost run (full: 12,000)"
    assert report.reduced("fig7", fewer) and report.reduced("sensitivity", fewer)
    one = FULL.with_(models=("llama3-8b",), fig8_models=("llama3-8b",))
    assert report.scale_note(["fig8"], one) == "Fig. 8 on 1 of 4 models"
    assert report.scale_note(["fig7"], QUICK).startswith(
        "100 steps per cost run (full: 12,000), 2 of 4 models")


def test_report_header_without_figures_or_scale():
    full = report.markdown({}, scale=FULL)
    assert "run**" not in full and "pipeline check" not in full
    assert "**Quick run**" not in report.markdown({}, quick=True, scale=QUICK)  # no figure
    assert "**--quick**" in report.markdown({}, quick=True)  # no scale: what --quick means


def _commands(parser: argparse.ArgumentParser, name: str = "") -> dict[str, Any]:
    """Every (sub-)command's parser by its words (``"aim run"``)."""
    out = {name: parser}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for word, sub in action.choices.items():
                out.update(_commands(sub, f"{name} {word}".strip()))
    return out


def test_every_progress_option_is_tri_state():
    from patton.cli import parser

    having = {}
    for name, p in _commands(parser()).items():
        for action in p._actions:
            if action.dest == "progress":
                having[name] = action
    assert set(having) >= {"aim run", "aim check", "repro", "runtime scenario", "serve", "cost",
                           "hw prove"}
    for name, action in having.items():
        assert isinstance(action, argparse.BooleanOptionalAction), name
        assert action.option_strings == ["--progress", "--no-progress"] and \
            action.default is None, name
