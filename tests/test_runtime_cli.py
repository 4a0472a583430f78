"""``patton runtime scenario``, through the parser group runtime/cli.py registers."""

from __future__ import annotations

import argparse
import json

from patton.runtime.cli import add_parser
from patton.sim import trace
from patton.sim.functional import FunctionalModel
from patton.sim.isa import Opcode


def _run(argv: list[str], capsys) -> tuple[int, str]:
    parser = argparse.ArgumentParser(prog="patton")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    status = args.func(args)
    return status, capsys.readouterr().out


def test_scenario_json(capsys) -> None:
    status, out = _run(["runtime", "scenario", "--model", "llama3-8b", "--requests", "2",
                        "--steps", "18", "--seed", "1", "--json"], capsys)
    report = json.loads(out)
    assert status == 0 and report["ok"] is True
    assert report["placement_mismatches"] == 0 and report["placement_elements_checked"] > 0
    assert report["exact_mismatches_qk"] == report["exact_mismatches_sv"] == 0
    assert 0 < report["max_abs_err_qk"] and 0 < report["max_abs_err_sv"]
    acts, cycles = report["value_write_row_activations"], report["value_write_cycles"]
    assert set(acts) == set(cycles) == {"cz", "no_cz"}
    assert 0 < acts["cz"] < acts["no_cz"]  # the Commit Zone opens fewer rows
    assert cycles["cz"] > 0 and cycles["no_cz"] > 0
    assert report["commits"] >= 1


def test_scenario_text_mha_and_trace_replays(capsys, tmp_path) -> None:
    out_trace = tmp_path / "scenario.trace"
    status, out = _run(["runtime", "scenario", "--model", "opt-6.7b", "--requests", "1",
                        "--steps", "3", "--trace", str(out_trace)], capsys)
    assert status == 0
    assert "max_abs_err_qk" in out and "value_write_cycles" in out and "ch_per_head" in out
    program = trace.read(out_trace)  # validated against the device
    assert program[-1].opcode is Opcode.EOC and len(program) > 100
    readouts = FunctionalModel().run(program)
    assert readouts and all(r.opcode is Opcode.RD_MAC for r in readouts)
