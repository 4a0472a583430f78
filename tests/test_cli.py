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
    assert main(["aim", "run", "--strict", str(path)]) == 2
    assert f"{path}:1: opsize 65 exceeds the 64 columns per row" in capsys.readouterr().err
    assert main(["aim", "run", str(path)]) == 0  # the public reading: accepted, with a warning
    err = capsys.readouterr().err
    assert err.startswith(f"warning: {path}:1: opsize 65 exceeds the 64 columns per row: ")
    assert main(["aim", "run", "--json", str(path)]) == 0
    got = capsys.readouterr()
    assert got.err == "" and json.loads(got.out)["warnings"] == [err[len("warning: "):].strip()]


def test_console_script_is_installed():
    done = subprocess.run([sys.executable, "-m", "patton.cli", "aim", "--help"],
                          capture_output=True, text=True)
    assert done.returncode == 0 and "check" in done.stdout


@pytest.mark.parametrize("args", [["nope"], ["aim", "nope"], ["aim", "run"]])
def test_usage_errors(args):
    """An unknown command or a missing argument is a usage error (a command without its
    sub-command prints its help instead: tests/test_cli_conventions.py)."""
    with pytest.raises(SystemExit) as usage:
        main(args)
    assert usage.value.code == 2


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


# -- aim run: --readouts, --reference, output paths, the schedule writer ----------------------


def _data_trace(tmp_path, seed: int = 4):
    """A random two-channel trace whose writes all carry data= (read-outs are non-zero)."""
    import numpy as np
    from patton.sim import trace
    from patton.sim.random_programs import random_program

    program = random_program(np.random.default_rng(seed), 40, channels=2, rows=3, data=True,
                             broadcast=False)
    path = tmp_path / "data.trace"
    trace.write(path, program)
    return path


def test_aim_run_readouts_json_and_npy_equal_the_functional_model(tmp_path, capsys):
    import numpy as np
    from patton.sim import trace
    from patton.sim.functional import FunctionalModel

    path = _data_trace(tmp_path)
    expected = FunctionalModel().run(trace.read(path))
    assert expected and any(r.data.any() for r in expected)
    out_json, out_npy = tmp_path / "r.json", tmp_path / "r.NPY"
    assert main(["aim", "run", str(path), "--readouts", str(out_json)]) == 0
    assert f"readouts   {len(expected)} written to {out_json}" in capsys.readouterr().out
    got = json.loads(out_json.read_text())
    assert got["trace"] == str(path) and got["source"] == "functional model"
    assert [(r["index"], r["opcode"], r["channel"], r["data"]) for r in got["readouts"]] == \
        [(r.index, r.opcode.value, r.channel, r.data.tolist()) for r in expected]
    assert main(["aim", "run", str(path), "--readouts", str(out_npy), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["readouts"] == {"file": str(out_npy), "count": len(expected)}
    array = np.load(out_npy, allow_pickle=False)
    assert array["index"].tolist() == [r.index for r in expected]
    assert array["channel"].tolist() == [r.channel for r in expected]
    assert array["opcode"].tolist() == [r.opcode.value for r in expected]
    assert np.array_equal(array["data"], np.stack([r.data for r in expected]))


@pytest.mark.parametrize("name", ["r.txt", "r", "r.json.gz"])
def test_aim_run_readouts_refuses_other_extensions_before_running(tmp_path, capsys, name,
                                                                   traces_dir):
    target = tmp_path / name
    assert main(["aim", "run", str(traces_dir / "probe_misc.trace"), "--readouts",
                 str(target)]) == 2
    captured = capsys.readouterr()
    assert "name a .json or .npy file" in captured.err and captured.out == ""
    assert not target.exists()


def test_aim_run_output_paths_are_checked_before_the_run(tmp_path, capsys, traces_dir):
    probe = str(traces_dir / "probe_misc.trace")
    for argv, what in ((["--schedule", str(tmp_path)], "cannot write schedule: Is a directory"),
                       (["--schedule", str(tmp_path / "no" / "s.sched")], "no folder"),
                       (["--readouts", str(tmp_path / "no" / "r.json")], "no folder")):
        assert main(["aim", "run", probe, *argv]) == 2
        captured = capsys.readouterr()
        assert what in captured.err and captured.out == ""  # no results printed
        assert main(["aim", "run", probe, *argv, "--json"]) == 2
        assert what in json.loads(capsys.readouterr().out)["error"]
    assert not (tmp_path / "no").exists()


def test_aim_run_reference_equal(traces_dir, capsys):
    ref = traces_dir / "reference.json"
    assert main(["aim", "run", str(traces_dir / "probe_misc.trace"), "--reference",
                 str(ref)]) == 0
    assert "all equal" in capsys.readouterr().out
    assert main(["aim", "run", str(traces_dir / "probe_misc.trace"), "--reference", str(ref),
                 "--json"]) == 0
    got = json.loads(capsys.readouterr().out)["reference"]
    assert got["found"] and got["differences"] == [] and got["key"] == "probe_misc"
    assert got["fields"] == ["bank_state_cycles", "command_counts", "memory_system_cycles",
                             "schedule"]


def test_aim_run_reference_differences_exit_1(traces_dir, reference, tmp_path, capsys):
    entry = json.loads(json.dumps(reference["probe_misc"]))
    entry["memory_system_cycles"] += 3
    entry["command_counts"]["0"]["ACT"] += 1
    entry["schedule"][2][0] += 1
    path = tmp_path / "ref.json"
    path.write_text(json.dumps({"probe_misc": entry}))
    trace_path = str(traces_dir / "probe_misc.trace")
    assert main(["aim", "run", trace_path, "--reference", str(path)]) == 1
    out = capsys.readouterr().out
    assert "3 difference(s)" in out
    assert "  cycles: reference 544, model 541" in out
    assert "  command_counts[0][ACT]: reference 4, model 3" in out
    assert main(["aim", "run", trace_path, "--reference", str(path), "--json"]) == 1
    diffs = json.loads(capsys.readouterr().out)["reference"]["differences"]
    assert diffs[0] == {"field": "cycles", "reference": 544, "model": 541}
    assert {d["field"] for d in diffs} == {"cycles", "command_counts[0][ACT]", "schedule[2]"}


def test_aim_run_reference_without_the_trace_and_bad_files(traces_dir, tmp_path, capsys):
    trace_path = str(traces_dir / "probe_misc.trace")
    other = tmp_path / "other.json"
    other.write_text('{"probe_act": {"memory_system_cycles": 35}}')
    assert main(["aim", "run", trace_path, "--reference", str(other)]) == 0
    assert "has no entry 'probe_misc': nothing compared" in capsys.readouterr().out
    broken = tmp_path / "broken.json"
    broken.write_text('{"probe_misc":\n  {"memory_system_cycles": 5,,}}\n')
    assert main(["aim", "run", trace_path, "--reference", str(broken)]) == 2
    assert f"{broken}:2: not JSON" in capsys.readouterr().err
    odd = tmp_path / "odd.json"
    odd.write_text('{"probe_misc": {"cycles": 5}}')
    assert main(["aim", "run", trace_path, "--reference", str(odd)]) == 2
    assert "fields ['cycles']" in capsys.readouterr().err


def test_schedule_writer_round_trips_grouped_and_payload_runs(tmp_path):
    import numpy as np
    from patton.sim import schedule
    from patton.sim.isa import Command
    from patton.sim.schedule import TimedCommand

    words = np.arange(16, dtype=np.uint16)
    other = words[::-1].copy()
    cmds = [TimedCommand(1, ch, Command.ACT16, -1, 3, -1, source=0) for ch in range(4)]
    cmds += [TimedCommand(9, ch, Command.WRA16, -1, 3, 2, payload=words, mask=0x00FF,
                          cfr=(1, 1, 0), source=1) for ch in (0, 1)]
    cmds += [TimedCommand(9, 2, Command.WRA16, -1, 3, 2, payload=other, source=1),
             TimedCommand(9, 3, Command.WRA16, -1, 3, 2, payload=words.copy(), source=1),
             TimedCommand(12, 0, Command.TMOD), TimedCommand(12, 5, Command.TMOD)]
    text = schedule.dumps(cmds)
    assert text.splitlines()[:2] == ["1 0 ACT16 - 3 - src=0", "1 1 ACT16 - 3 - src=0"]
    data = ":".join(f"{w:04x}" for w in range(16))
    assert text.splitlines()[5] == f"9 1 WRA16 - 3 2 data={data} mask=0x00ff cfr=1,1,0 src=1"
    assert text.splitlines()[-2:] == ["12 0 TMOD", "12 5 TMOD"]
    assert [schedule.format_line(c) for c in cmds] == text.splitlines()
    path = tmp_path / "s.sched"
    schedule.write(path, cmds)
    assert path.read_text() == text
    back = schedule.read(path)
    assert back == cmds


def test_schedule_write_of_a_cycle_model_run_equals_line_by_line(traces_dir):
    from patton.sim import schedule, trace
    from patton.sim.cycle_model import CycleModel

    result = CycleModel(record=True).run(trace.read(traces_dir / "all_isr.trace"))
    lines = schedule.dumps(result.schedule).splitlines()
    assert lines == [schedule.format_line(c) for c in result.schedule]
    assert list(schedule.parse(lines)) == result.schedule


# -- aim check: progress, and the per-channel verify it uses --------------------------------


def test_aim_check_progress_gives_the_same_violations(tmp_path, capsys, monkeypatch):
    import dataclasses

    import numpy as np
    from patton.sim import schedule
    from patton.sim.check import verify
    from patton.sim.check import verify_by_channel as _verify
    from patton.sim.cycle_model import CycleModel
    from patton.sim.random_programs import random_program

    program = random_program(np.random.default_rng(5), 60, channels=3, rows=3,
                             broadcast=False)
    legal = CycleModel(record=True).run(program).schedule
    # move every 7th command two cycles earlier: violations on several channels
    mutated = [dataclasses.replace(c, cycle=max(c.cycle - 2, 0)) if i % 7 == 3 else c
               for i, c in enumerate(legal)]
    path = tmp_path / "m.sched"
    schedule.write(path, sorted(mutated, key=lambda c: c.cycle))
    commands = schedule.read(path)
    expected = verify(commands)
    assert len({v.channel for v in expected}) > 1
    steps: list[int] = []
    assert [str(v) for v in _verify(commands, "aimsim-0f28a07", steps.append)] == \
        [str(v) for v in expected]
    assert sum(steps) == len(commands) and len(steps) == 3
    assert main(["aim", "check", str(path)]) == 1
    plain = capsys.readouterr().out
    assert main(["aim", "check", str(path), "--progress"]) == 1
    assert capsys.readouterr().out == plain
    calls: list[dict] = []
    real = schedule.read

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    import patton.cli.aim

    monkeypatch.setattr(patton.cli.aim.schedule, "read", spy)
    assert main(["aim", "check", str(path), "--progress"]) == 1
    assert callable(calls[-1]["progress"])  # the reading bar is fed
    capsys.readouterr()
    monkeypatch.undo()
    seen: list[tuple[int, int]] = []
    schedule.read(path, progress=lambda done, total: seen.append((done, total)))
    size = path.stat().st_size
    assert seen == [(size, size)]  # one chunk: one call, when it is read


# -- every option of every subcommand has a help text ------------------------------------------


def _parsers(parser, path=("patton",)):
    import argparse

    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, path + (name,))


def test_every_option_of_every_subcommand_has_help():
    import argparse

    from patton.cli import parser

    missing = []
    count = 0
    for path, p in _parsers(parser()):
        for action in p._actions:
            if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            count += 1
            if not action.help or action.help == argparse.SUPPRESS:
                name = "/".join(action.option_strings) or action.dest
                missing.append(f"{' '.join(path)} {name}")
    assert count > 50 and missing == []


@pytest.mark.parametrize("engine", [["--python"], ["--per-cycle"], ["--no-group"]])
def test_aim_run_engines_report_the_same(engine, traces_dir, capsys):
    """The Python reference model (per cycle or not) and the ungrouped kernel agree."""
    path = str(traces_dir / "micro_wrbias_1024_16banks.trace")
    assert main(["aim", "run", path, "--json"]) == 0
    kernel = json.loads(capsys.readouterr().out)
    assert main(["aim", "run", path, "--json", *engine]) == 0
    other = json.loads(capsys.readouterr().out)
    for key in ("cycles", "command_counts", "bank_state_cycles", "energy_nj"):
        assert other[key] == kernel[key]


def test_aim_run_kernel_failure_is_a_clear_error(traces_dir, capsys, monkeypatch):
    from patton.sim import native

    def broken():
        raise native.KernelError("building the cycle kernel failed (cc ...): fatal: no disk")

    monkeypatch.setattr(native, "library", broken)
    path = str(traces_dir / "probe_gemv.trace")
    assert main(["aim", "run", path, "--json"]) == 2
    captured = capsys.readouterr()
    assert "error: building the cycle kernel failed" in captured.err
    assert json.loads(captured.out)["error"].endswith("fatal: no disk")
    assert main(["aim", "run", path, "--python"]) == 0  # the Python model needs no kernel


def test_aim_run_per_channel_frontend_decodes_channels_in_parallel(tmp_path, capsys):
    import numpy as np
    from patton.sim import trace
    from patton.sim.executor import closed
    from patton.sim.isa import Instruction, Opcode, channel_bit

    words = np.arange(16, dtype=np.uint16)
    program = [Instruction(Opcode.WR_SBK, gpr0=0, channel_mask=channel_bit(c), bank=b, row=1,
                           col=0, data=words) for b in range(4) for c in range(32)]
    path = tmp_path / "spread.trace"
    trace.write(path, closed(program))
    cycles = {}
    for frontend in ("shared", "per-channel"):
        assert main(["aim", "run", str(path), "--json", "--frontend", frontend]) == 0
        captured = capsys.readouterr()
        report = json.loads(captured.out)
        # the JSON names the front end as records do (repro.json, patton cost --json)
        assert report["frontend"] == frontend.replace("-", "_") and report["commands"] > 0
        assert captured.err == ""
        cycles[frontend] = report["cycles"]
    # 128 one-channel writes: one decode per cycle for all channels, or per channel
    assert cycles["per-channel"] < cycles["shared"]
    # the records' spelling is accepted too, with a note of the command line's
    assert main(["aim", "run", str(path), "--json", "--frontend", "per_channel"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["cycles"] == cycles["per-channel"]
    assert captured.err == "note: per_channel is spelled per-channel\n"
    with pytest.raises(SystemExit) as usage:
        main(["aim", "run", str(path), "--frontend", "per channel"])
    err = capsys.readouterr().err
    assert usage.value.code == 2 and "invalid choice: 'per channel'" in err
    assert "'shared', 'per-channel'" in err


def test_a_reader_that_goes_away_is_no_traceback(traces_dir):
    """``patton ... | head``: writing to a closed pipe ends the command quietly (141, as
    SIGPIPE would), without a traceback."""
    import os

    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first write
    try:
        done = subprocess.run([sys.executable, "-m", "patton.cli", "aim", "run",
                               str(traces_dir / "probe_gemv.trace")], stdout=write,
                              stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write)
    assert done.returncode == 141, done.stderr
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr
