"""Commands refuse what they cannot do before any work starts, naming the option: an output
path that is a file or cannot be written, a fault that could never be injected. Exit status 2,
``error: ...`` on stderr, no traceback, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest
from patton.serving.chat import DEMO_CONVERSATIONS

TRACE = Path(__file__).resolve().parent / "data" / "aim" / "micro_macab_1024_16banks.trace"

from patton.cli import main


@pytest.mark.parametrize("argv", [
    ["hw", "verilog", "--out", "{file}"],
    ["hw", "verilog", "--out", "{file}/sub"],
    ["demo", "--device", "model", "--out", "{file}"],
    ["repro", "micro", "--out", "{file}"],
    ["hw", "prove", "--out", "{file}"],
    ["hw", "prove", "--out", "{file}/sub"],
    ["rtl", "coverage", "--out", "{file}"],
    ["workload", "sharegpt", "--count", "2", "--out", "{file}/x.jsonl"],
    ["rtl", "run", str(TRACE), "--waves", "{file}/w.vcd"],
])
def test_an_output_folder_that_is_a_file_is_refused_first(tmp_path, capsys, argv):
    file = tmp_path / "taken"
    file.write_text("keep me\n")
    code = main([a.format(file=file) for a in argv])
    out, err = capsys.readouterr()
    option = next(a for a in argv if a.startswith("--") and "{file}" in argv[argv.index(a) + 1])
    assert code == 2 and "Traceback" not in err
    assert err.startswith(f"error: {option} {file}") and (
        "exists and is not a folder" in err or "cannot write there" in err)
    assert file.read_text() == "keep me\n" and sorted(tmp_path.iterdir()) == [file]


@pytest.mark.parametrize("argv", [
    ["workload", "sharegpt", "--count", "2", "--out", "{folder}"],
    ["rtl", "run", str(TRACE), "--waves", "{folder}"],
    ["runtime", "scenario", "--steps", "2", "--trace", "{folder}"],
])
def test_an_output_file_that_is_a_folder_is_refused_first(tmp_path, capsys, argv):
    folder = tmp_path / "taken.vcd"
    folder.mkdir()
    code = main([a.format(folder=folder) for a in argv])
    out, err = capsys.readouterr()
    assert code == 2 and "Traceback" not in err
    assert "Is a directory" in err and str(folder) in err
    assert list(folder.iterdir()) == [] and sorted(tmp_path.iterdir()) == [folder]


def test_a_fault_past_the_last_step_is_refused_before_the_run(tmp_path, capsys):
    code = main(["demo", "--device", "model", "--fault", "kv-column", "--fault-step", "99999",
                 "--steps", "3", "--out", str(tmp_path / "o")])
    out, err = capsys.readouterr()
    assert code == 2 and "PASS" not in out and "Traceback" not in err
    assert "error: --fault-step 99999 is past the run's last step (2 with --steps 3): the " \
           "fault would never be injected" in err
    assert not (tmp_path / "o").exists()


def test_a_fault_the_run_never_reaches_is_an_error_and_writes_nothing(tmp_path, capsys):
    """--fault-step inside --steps (or without --steps) that the run ends before: known only
    after the run, an error all the same, and no chat.json or plot left behind."""
    one = tmp_path / "one.jsonl"
    one.write_text(DEMO_CONVERSATIONS.read_text().splitlines()[0] + "\n")
    out = tmp_path / "o"
    code = main(["demo", "--device", "model", "--conversations", str(one), "--fault",
                 "kv-column", "--fault-step", "5000", "--out", str(out)])
    stdout, err = capsys.readouterr()
    assert code == 2 and "PASS" not in stdout and "Traceback" not in err
    assert "error: --fault kv-column was never injected: the run ended after " in err
    assert "before --fault-step 5000; nothing written" in err
    assert list(out.glob("*")) == []
