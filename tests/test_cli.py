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
    assert f"{bad}:2: cycle 5 ch 0 WR: rule 90 nRCDWR (ACT -> WR): needs 28, got 4" in text


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


def test_demo_on_the_models_prints_steps_and_writes_its_files(tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--device", "model", "--steps", "6", "--out", str(out),
                 "--json"]) == 0
    got = capsys.readouterr()
    figures = json.loads(got.out)
    for key in ("steps", "requests", "mismatches", "violations", "placement_mismatches",
                "commits", "cycles"):
        assert key in figures
    assert figures["steps"] == 6 and figures["failures"] == []
    assert figures["mismatches"] == figures["violations"] == 0
    assert figures["cycles"] == sum(figures["cycles_by_phase"].values()) > 0
    assert " 5    4" in got.err and "verdict      PASS" in got.err  # the table, on stderr
    assert (out / "cycles.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((out / "chat.json").read_text())["per_step"][0]["step"] == 0


def test_demo_with_a_fault_fails_and_names_it(tmp_path, capsys):
    assert main(["demo", "--device", "model", "--steps", "14", "--fault", "commit-row",
                 "--fault-step", "0", "--out", str(tmp_path), "--json"]) == 1
    figures = json.loads(capsys.readouterr().out)
    assert figures["fault"].startswith("step ") and figures["failures"]
    assert "commit of block" in figures["failures"][0]


@pytest.mark.parametrize("argv, message", [
    (["--seed", "-1"], "value '-1' is negative (expected a decimal integer >= 0)"),
    (["--steps", "x"], "value 'x' is not a decimal number"),
    (["--device", "fpga"], "invalid choice"),
])
def test_demo_refuses_bad_options(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        main(["demo", *argv])
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_demo_reports_bad_files_without_a_traceback(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "messages": [[1, 2]]}\n')
    assert main(["demo", "--device", "model", "--conversations", str(bad), "--json"]) == 2
    got = capsys.readouterr()
    error = json.loads(got.out)
    assert error["file"] == str(bad) and error["line"] == 1 and "error:" in got.err
    assert main(["demo", "--device", "model", "--conversations", str(tmp_path)]) == 2
    assert "error:" in capsys.readouterr().err
    (tmp_path / "file").write_text("")
    assert main(["demo", "--device", "model", "--out", str(tmp_path / "file")]) == 2
    assert "not a folder" in capsys.readouterr().err
    assert main(["demo", "--device", "model", "--waves", "3"]) == 2
    assert "--waves needs --device rtl" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["runtime", "scenario", "--seed", "-1"], "value '-1' is negative"),
    (["runtime", "scenario", "--layers", "0"], "must be >= 1, got 0"),
    (["runtime", "scenario", "--requests", "100000"], "must be 1..64, got 100000"),
    (["runtime", "scenario", "--steps", "010"], "has a leading zero"),
    (["rtl", "run", "x.trace", "--seed", "-1"], "value '-1' is negative"),
    (["rtl", "check", "x.sched", "--rows", "0x10"], "is not a decimal number"),
    (["rtl", "check", "x.sched", "--rows", "20000"], "must be 1..16384, got 20000"),
    (["hw", "verilog", "--rows", "0"], "must be >= 1, got 0"),
])
def test_integer_options_are_checked_by_the_parser(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_scenario_layers_beyond_the_model_exit_2(capsys):
    assert main(["runtime", "scenario", "--layers", "33"]) == 2
    assert "llama3-8b has 32 layers" in capsys.readouterr().err


def test_reader_errors_come_out_as_json_too(tmp_path, capsys):
    bad = tmp_path / "bad.trace"
    bad.write_bytes(b"\xff\xfe garbage\n")
    assert main(["aim", "run", str(bad), "--json"]) == 2
    got = capsys.readouterr()
    assert json.loads(got.out) == {"error": "not UTF-8 text", "file": str(bad), "line": 1}
    assert f"{bad}:1: not UTF-8 text" in got.err
