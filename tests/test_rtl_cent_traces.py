"""A CENT trace on the RTL: every command of a real client's whole transformer block replayed
(EWMUL16, AF16 on the LUT rows and RDAF16 included), every read-out and mat word equal to the
functional model's, no violation on either side, the 32 channels side by side."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import TRACES
from patton.sim import reference

from patton.cli import main

pytestmark = pytest.mark.verilator

TINY = TRACES / "cent" / "cent_tiny_llama_h8_pp_8cpb_seq64.trace"
#: The timed records of ``docs/measured.py``.
TIMED = Path(__file__).resolve().parents[1] / "docs" / "records" / "timed"
#: What a run of the trace replays and finds, whichever machine and however many jobs.
SAME = ("commands", "replays", "reads", "mat_words", "rejections", "violations",
        "model_cycles", "rtl_cycles", "simulated_cycles")


def test_cent_block_runs_on_the_rtl_with_nothing_refused(capsys):
    # --rows 1024: the build the public micro traces use (this trace's rows fit it)
    status = main(["rtl", "run", str(TINY), "--rows", "1024", "--json"])
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert "error" not in report, (report, err[-2000:])  # say why, not KeyError
    expected = reference.read(str(TINY.with_suffix(".aimsim-0f28a07.yaml")), str(TINY))
    assert report["model_cycles"] == expected["memory_system_cycles"] == 40_606
    assert report["replays"] == 32 and report["replayed_commands"] == report["commands"]
    assert report["rejected"] == {} and report["rejections"] == 0
    assert all(not c["not_replayed"] and not c["rejected"]
               for c in report["channels"].values())
    # every RD (1,536: R MEM), RDMAC16 (3,776) and RDAF16 (704) of the 32 channels
    assert report["reads"] == 6_016 and report["read_mismatches"] == 0
    assert report["mat_words"] > 0 and report["mat_mismatches"] == 0
    assert report["violations"] == report["model_violations"] == 0 and report["agree"]
    assert report["ok"] and status == 0
    # each channel's schedule is simulated once, its long idle gaps shortened
    assert 0.9 * 32 * report["rtl_cycles"] < report["simulated_cycles"] < 32 * report["rtl_cycles"]
    assert report["cycles_per_second"] > 0
    # the README's timed runs of this command (docs/sources/readme.py) replayed the same
    for name in ("rtl-cent-tiny", "rtl-cent-tiny-serial"):
        timed = json.loads((TIMED / f"{name}.json").read_text())["output"]
        assert {k: timed[k] for k in SAME} == {k: report[k] for k in SAME}, name
