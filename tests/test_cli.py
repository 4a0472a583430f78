"""The ``patton`` command: JSON output, exit codes and error messages."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from patton.cli import main


def test_aim_run_json(traces_dir, reference, capsys):
    assert main(["aim", "run", str(traces_dir / "probe_misc.trace"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    ref = reference["probe_misc"]
    assert out["cycles"] == ref["memory_system_cycles"]
    assert out["command_counts"] == ref["command_counts"]
    assert out["energy_nj"] > 0


def test_aim_run_schedule_then_check(traces_dir, tmp_path, capsys):
    out = tmp_path / "s.sched"
    assert main(["aim", "run", str(traces_dir / "all_isr.trace"), "--schedule", str(out)]) == 0
    lines = out.read_text().splitlines()
    assert len(lines) == 164 and lines[0] == "1 0 ACT 2 8 - src=0"
    capsys.readouterr()
    assert main(["aim", "check", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["violations"] == 0
    bad = tmp_path / "bad.sched"
    bad.write_text("1 0 ACT 2 8 -\n5 0 WR 2 8 0\n")
    assert main(["aim", "check", str(bad)]) == 1
    text = capsys.readouterr().out
    assert f"{bad}:line 2: cycle 5 ch 0 WR: rule 90 (ACT -> WR) needs 28" in text


def test_bad_trace_reports_file_and_line(tmp_path, capsys):
    path = tmp_path / "x.trace"
    path.write_text("AiM EOC\n".replace("AiM EOC", "AiM MAC_ABK 65 0x80000000 0\nAiM EOC"))
    assert main(["aim", "run", str(path)]) == 2
    assert f"{path}:1: opsize 65 exceeds the 64 columns per row" in capsys.readouterr().err


def test_console_script_is_installed():
    done = subprocess.run([sys.executable, "-m", "patton.cli", "aim", "--help"],
                          capture_output=True, text=True)
    assert done.returncode == 0 and "check" in done.stdout


@pytest.mark.parametrize("args", [["aim"], ["nope"]])
def test_usage_errors(args):
    with pytest.raises(SystemExit):
        main(args)


def test_demo_passes_and_writes_its_files(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["demo", "--rows", "2"]) == 0
    out = capsys.readouterr().out
    assert "PASS" in out and "0 timing violations" in out
    assert (tmp_path / "build/demo/gemv.trace").exists()
    assert (tmp_path / "build/demo/gemv.schedule").stat().st_size > 0
