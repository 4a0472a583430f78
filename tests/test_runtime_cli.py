"""``patton runtime scenario``, through the parser group patton/cli/runtime.py registers."""

from __future__ import annotations

import argparse
import json

from patton.sim import trace
from patton.sim.functional import FunctionalModel
from patton.sim.isa import Opcode

from patton.cli.runtime import add_parser


def _run(argv: list[str], capsys) -> tuple[int, str]:
    parser = argparse.ArgumentParser(prog="patton")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    status = args.func(args)
    return status, capsys.readouterr().out


def test_scenario_json(capsys) -> None:
    status, out = _run(["runtime", "scenario", "--model", "llama3-8b", "--requests", "2",
                        "--steps", "30", "--seed", "1", "--json"], capsys)
    report = json.loads(out)
    assert status == 0 and report["ok"] is True and report["failures"] == []
    assert report["placement_mismatches"] == 0 and report["placement_elements_checked"] > 0
    assert report["mismatches"] == report["violations"] == 0
    assert report["attention_checks"] > 0 and report["single_token_value_writes"] > 0
    assert report["served"]["steps"] == 30 and report["events"]["alloc"] > 0
    assert 0 < report["max_abs_err_qk"] and 0 < report["max_abs_err_sv"]
    acts, cycles = report["value_write_row_activations"], report["value_write_cycles"]
    assert set(acts) == set(cycles) == {"cz", "no_cz"}
    assert 0 < acts["cz"] < acts["no_cz"]  # the Commit Zone opens fewer rows
    assert cycles["cz"] > 0 and cycles["no_cz"] > 0
    assert report["commits"] >= 1


def test_scenario_text_mha_and_trace_replays(capsys, tmp_path) -> None:
    out_trace = tmp_path / "scenario.trace"
    status, out = _run(["runtime", "scenario", "--model", "opt-6.7b", "--requests", "1",
                        "--steps", "6", "--trace", str(out_trace)], capsys)
    assert status == 0
    assert "{" not in out  # a labelled table, not Python dicts
    assert out.startswith("scenario   opt-6.7b, 1 client(s), 6 scheduler step(s), seed 0")
    assert "PATTON (Commit Zone)" in out and "no CZ, WR_ABK" in out
    assert "no CZ, W MEM" not in out and "--mem-baseline adds per-bank W MEM" in out
    assert f"trace      {out_trace}" in out
    program = trace.read(out_trace)  # validated against the device
    assert program[-1].opcode is Opcode.EOC and len(program) > 100
    readouts = FunctionalModel().run(program)
    assert readouts and all(r.opcode is Opcode.RD_MAC for r in readouts)


def test_scenario_table_names_both_baselines(capsys) -> None:
    status, out = _run(["runtime", "scenario", "--requests", "1", "--steps", "3",
                        "--mem-baseline"], capsys)
    assert status == 0
    lines = out.splitlines()
    header = next(line for line in lines if line.startswith("Value writes"))
    assert header.split("  ")[0] == "Value writes"
    assert [h.strip() for h in header[20:].split("  ") if h.strip()] == \
        ["PATTON (Commit Zone)", "no CZ, WR_ABK", "no CZ, W MEM"]
    row = next(line for line in lines if line.startswith("row activations")).split()
    assert len(row) == 5 and all(x.replace(",", "").isdigit() for x in row[2:])
    status, out = _run(["runtime", "scenario", "--requests", "1", "--steps", "3",
                        "--mem-baseline", "--json"], capsys)
    report = json.loads(out)
    assert report["baselines"] == {"cz": "PATTON (Commit Zone)", "no_cz": "no CZ, WR_ABK",
                                   "no_cz_mem": "no CZ, W MEM"}
    assert [int(x.replace(",", "")) for x in row[2:]] == \
        [report["value_write_row_activations"][k] for k in ("cz", "no_cz", "no_cz_mem")]


def test_scenario_progress_bar_counts_the_steps(capsys) -> None:
    from patton.cli.runtime import _Bar

    bar = _Bar("PATTON", 2)
    bar.stepped(None, None)
    assert bar.bar.total == 2 and bar.bar.n == 1 and bar.bar.delay == 2.0
    bar.bar.close()
    status, out = _run(["runtime", "scenario", "--requests", "1", "--steps", "2",
                        "--progress", "--json"], capsys)
    assert status == 0 and json.loads(out)["ok"]


def test_scenario_trace_path_is_checked_first(capsys, tmp_path) -> None:
    from patton.cli import main

    assert main(["runtime", "scenario", "--trace", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert "cannot write trace: Is a directory" in captured.err and captured.out == ""
