# ruff: noqa: F811 - test_repro's fake_run_cost fixture is imported and used by name
"""Stored task results that cannot lie (``patton.eval.store``): a result is taken back only as
it was written, by the same code, for the same task, with its checks passed; the rest runs
again with a line saying why. One run at a time per folder; files whole or absent.

The CLI cases run ``patton repro fig7 --quick`` on the fake cost functions of
``test_repro`` (5 tasks), so each takes a fraction of a second.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from patton.eval import runner, tasks
from patton.eval.repro import without_wall_times
from patton.eval.store import FORMAT, Store, StoreBusy, digest
from patton.eval.tasks import CostTask
from patton.sim import workers
from patton.sim.textfile import write_atomic
from test_repro import SMALL, fake_run_cost  # noqa: F401 - the fixture, used by name

from patton.cli import main

TASK = CostTask("llama3-8b", "patton", 10, 4, 8)
RESULT = {"task": tasks.describe(TASK),
          "result": {"latency_seconds": 1.25, "violations": 0, "mismatches": 0,
                     "parts": {"qk": {"seconds": 0.5}}},
          "wall_seconds": 0.5}


def stored(tmp_path: Path) -> tuple[Store, Path]:
    store = Store(tmp_path / "tasks", code="abc")
    return store, store.put(TASK, RESULT)


def rewrite(path: Path, edit, *, sign: bool) -> None:
    """Apply ``edit`` to a stored file's data; ``sign``: recompute its digest (as someone who
    knows the format would), so that only the other checks can refuse it."""
    data = json.loads(path.read_text())
    edit(data)
    if sign:
        data["digest"] = digest(data["task"], data["code"], data["run"])
    path.write_text(json.dumps(data))


# ----------------------------------------------------------------------------- the store


def test_a_result_is_taken_back_as_it_was_written(tmp_path):
    store, path = stored(tmp_path)
    found = store.look(TASK)
    assert found.result == RESULT and found.reason is None and found.path == path
    data = json.loads(path.read_text())
    assert data["format"] == FORMAT and data["digest"] == digest(data["task"], "abc", RESULT)
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary left
    assert store.look(CostTask("llama3-8b", "patton", 11, 4, 8)).reason is None  # no file


@pytest.mark.parametrize("edit, sign, reason", [
    # a hand edit of a figure: the "seconds" edit that turned 1.109x into 0.231x
    (lambda d: d["run"]["result"]["parts"]["qk"].update(seconds=0.1), False,
     "its content does not match its digest (damaged or edited)"),
    (lambda d: d["run"]["result"].update(violations=5, mismatches=3), False,
     "its content does not match its digest"),
    # the same, with the digest recomputed: the checks themselves refuse it
    (lambda d: d["run"]["result"].update(violations=5, mismatches=3), True,
     "its checks failed (5 violations, 3 mismatches)"),
    (lambda d: d["run"]["result"].update(violations="none"), True,
     "its checks failed (violations 'none' is not a count)"),
    (lambda d: d.update(run={}), True,
     "not a task's result (expected task, result and wall_seconds)"),
    (lambda d: d.update(code="other"), True, "computed by other code"),
    (lambda d: d["task"].update(steps=11), True, "another task's result"),
    (lambda d: d.update(format="patton-task/1"), True, "not a stored task of this format"),
    (lambda d: d.pop("digest"), False, "not a stored task (expected one object with"),
])
def test_what_does_not_check_is_not_taken_and_says_why(tmp_path, edit, sign, reason):
    store, path = stored(tmp_path)
    rewrite(path, edit, sign=sign)
    found = store.look(TASK)
    assert found.result is None and found.reason.startswith(reason), found.reason
    assert store.get(TASK) is None


@pytest.mark.parametrize("text, reason", [
    ("{not json", "not a stored task ("),
    ('{"format": 1, "format": 2}', "not a stored task ("),  # a repeated key
    ("[" * 100_000, "not a stored task ("),  # deeper than the reader goes
    ('{"run": ' + "9" * 5000 + "}", "not a stored task ("),
    ("", "not a stored task ("),
])
def test_a_file_that_is_not_a_stored_task_is_not_taken(tmp_path, text, reason):
    store, path = stored(tmp_path)
    path.write_text(text)
    found = store.look(TASK)
    assert found.result is None and found.reason.startswith(reason), found.reason


def test_bytes_that_are_not_text_are_not_taken(tmp_path):
    store, path = stored(tmp_path)
    path.write_bytes(b"\xff\xfe{" + b"\0" * 10)
    assert store.look(TASK).reason == "not a stored task (not UTF-8 text)"


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_corruption_is_always_detected(tmp_path_factory, data):
    """Flip, drop or insert bytes anywhere in a stored file: the store takes back the
    result as written or nothing, never something else, and never raises."""
    store, path = stored(tmp_path_factory.mktemp("corrupt"))
    raw = bytearray(path.read_bytes())
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(raw) - 1))
        how = data.draw(st.sampled_from(["flip", "drop", "insert", "set"]))
        if how == "flip":
            raw[at] ^= 1 << data.draw(st.integers(0, 7))
        elif how == "drop":
            del raw[at]
        elif how == "insert":
            raw.insert(at, data.draw(st.integers(0, 255)))
        else:
            raw[at] = data.draw(st.sampled_from(list(b'0123456789.,:"{}[]e-')))
    path.write_bytes(bytes(raw))
    found = store.look(TASK)
    assert found.result is None or found.result == RESULT
    assert (found.result is None) == (found.reason is not None)


def test_a_write_is_whole_or_absent(tmp_path, monkeypatch):
    target = tmp_path / "repro.json"
    write_atomic(target, "old\n")

    def fail(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError):
        write_atomic(target, "new\n")
    assert target.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == [
        "repro.json"]


def test_the_lock_keeps_a_second_run_off_the_folder(tmp_path):
    store = Store(tmp_path / "tasks", code="abc")
    other = Store(tmp_path / "tasks", code="abc")
    with store.lock():
        with pytest.raises(StoreBusy, match=rf"in use by another run \(process {os.getpid()}\)"):
            with other.lock():
                pass
    with other.lock():  # free again once the first is done
        pass


# ------------------------------------------------------------------------ patton repro


ARGV = ["repro", "fig7", "--quick", "--workers", "1", "--json"]


@pytest.fixture
def small(monkeypatch):
    monkeypatch.setattr("patton.cli.repro.QUICK", SMALL.with_(steps=30))


def first_run(tmp_path, capsys) -> tuple[list[str], dict, list[Path]]:
    argv = [*ARGV, "--out", str(tmp_path)]
    assert main(argv) == 0
    records = json.loads(capsys.readouterr().out)
    return argv, records, sorted((tmp_path / "tasks").glob("*.json"))


def test_resume_runs_again_what_was_edited_and_says_so(tmp_path, capsys, small, fake_run_cost):
    argv, records, files = first_run(tmp_path, capsys)
    calls = len(fake_run_cost)
    rewrite(files[0], lambda d: d["run"]["result"]["parts"]["qk"].update(seconds=1e-9),
            sign=False)
    assert main([*argv, "--resume"]) == 0
    out, err = capsys.readouterr()
    # the edit did not reach a figure (the task that ran again took its own time)
    assert without_wall_times(json.loads(out)) == without_wall_times(records)
    assert (f"resume: {files[0]}: its content does not match its digest (damaged or edited); "
            "running it again") in err
    assert "resume: 4 of 5 task results taken" in err
    assert len(fake_run_cost) > calls  # that one task ran again...
    assert Store(tmp_path / "tasks").look(  # ...and its file is whole again
        CostTask(**{k: v for k, v in json.loads(files[0].read_text())["task"].items()
                    if k != "kind"})).result is not None


def test_a_file_that_is_not_a_stored_task_runs_again(tmp_path, capsys, small, fake_run_cost):
    argv, records, files = first_run(tmp_path, capsys)
    files[1].write_text('{"task": {}, "code": "x", "run": {}}')  # the "run": {}
    assert main([*argv, "--resume"]) == 0
    out, err = capsys.readouterr()
    assert without_wall_times(json.loads(out)) == without_wall_times(records)
    assert f"resume: {files[1]}: not a stored task" in err
    assert "Traceback" not in err


def test_no_figure_from_a_result_whose_checks_failed(tmp_path, capsys, small, fake_run_cost,
                                                     monkeypatch):
    from patton.eval import cost

    measure = cost.measure

    def failing(*args, **kwargs):
        run = measure(*args, **kwargs)
        if kwargs.get("replay"):
            run.d = {**run.d, "violations": 2}
        return run

    monkeypatch.setattr(cost, "measure", failing)
    argv = [*ARGV, "--out", str(tmp_path)]
    assert main(argv) == 1
    out, err = capsys.readouterr()
    assert out == "" and re.search(r"error: cost .+: its checks failed \(2 violations\); no "
                                   r"figure is made from it", err)
    assert not (tmp_path / "repro.json").exists()


def test_a_second_run_on_the_folder_is_refused(tmp_path, capsys, small, fake_run_cost):
    with Store(tmp_path / "tasks").lock():
        assert main([*ARGV, "--out", str(tmp_path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and fake_run_cost == []
    assert f"error: {tmp_path / 'tasks'}: in use by another run (process {os.getpid()})" in err
    assert not (tmp_path / "repro.json").exists()


def test_an_interrupted_pool_stops_its_workers(monkeypatch, sigint_default):
    """^C while workers run: the run stops, and no worker process is left."""
    import multiprocessing

    monkeypatch.setattr(runner, "run", _sleep)
    todo = [CostTask("llama3-8b", r, 10, 4, 8) for r in ("patton", "neupims")]
    main_thread = threading.main_thread().ident
    timer = threading.Timer(1.5, signal.pthread_kill, (main_thread, signal.SIGINT))
    timer.start()
    started = time.perf_counter()
    with pytest.raises(KeyboardInterrupt):
        runner.execute(todo, workers=2)
    timer.cancel()
    assert time.perf_counter() - started < workers.GRACE + 10
    assert multiprocessing.active_children() == []


def _sleep(task, progress=None):
    time.sleep(120)


@pytest.mark.slow
def test_repro_interrupted_keeps_what_finished_and_resumes(tmp_path, sigint_default):
    """A real ``patton repro micro --quick`` interrupted once its first tasks are stored:
    exit 130, one line saying what was kept and how to resume, no traceback, no process
    left; ``--resume`` then takes every stored task and finishes."""
    out = tmp_path / "o"
    cmd = [sys.executable, "-m", "patton.cli", "repro", "micro", "--quick", "--out", str(out),
           "--workers", "2", "--no-progress"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    deadline = time.time() + 300
    while time.time() < deadline and len(list((out / "tasks").glob("*.json"))) < 1:
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGINT)  # as a terminal's ^C: the whole process group
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    lines = [x for x in err.splitlines() if x.startswith("interrupted:")]
    assert len(lines) == 1 and "--resume" in lines[0], err
    with pytest.raises(ProcessLookupError):
        os.killpg(proc.pid, 0)  # nothing of the group is left
    kept = len(list((out / "tasks").glob("*.json")))
    assert kept >= 1 and f"kept {kept} " in lines[0]
    again = subprocess.run([*cmd, "--resume"], capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    assert f"resume: {kept} of " in again.stderr and (out / "repro.json").exists()
