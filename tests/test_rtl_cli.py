"""``patton rtl run`` and ``patton rtl check``: user traces and schedules on the RTL channel.

The commands run in this process, so one Verilator build (cached under build/, a few minutes
the first time) serves every test: ``patton.tb.cli.player`` keeps it per row count.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from patton.sim import schedule, trace
from patton.sim.check import verify
from patton.sim.random_programs import KINDS, random_program

from patton.cli import main

pytestmark = pytest.mark.verilator


def _json(capsys, argv: list[str]) -> tuple[int, dict]:
    status = main(argv + ["--json"])
    return status, json.loads(capsys.readouterr().out)


@pytest.fixture(scope="module")
def legal_schedule(tmp_path_factory) -> Path:
    """A legal two-channel schedule from ``patton aim run --schedule``."""
    folder = tmp_path_factory.mktemp("rtl_cli")
    program = random_program(np.random.default_rng(3), 30, channels=2, rows=3,
                             kinds=tuple(k for k in KINDS if k not in ("ewmul", "af", "rd_af")),
                             broadcast=False)
    trace.write(folder / "legal.trace", program)
    out = folder / "legal.schedule"
    assert main(["aim", "run", str(folder / "legal.trace"), "--schedule", str(out)]) == 0
    return out


def test_run_public_gemv_is_bit_exact(capsys, traces_dir):
    status, report = _json(capsys, ["rtl", "run", str(traces_dir / "probe_gemv.trace")])
    assert status == 0 and report["ok"]
    assert report["commands"] == 20 and report["replays"] == 1
    assert report["reads"] == 1 and report["mismatches"] == 0
    assert report["violations"] == report["model_violations"] == 0
    assert report["cycles"] > report["model_cycles"] > 0  # the player drains read latency
    assert report["payloads_filled"] == 2  # WR_GB and WR_BIAS carry no data= in the trace


def test_run_all_isr_with_broadcast_is_bit_exact(capsys, traces_dir):
    # all_isr.trace sets CFR BROADCAST = 1 around a MAC_ABK and a MAC_SBK: the RTL takes
    # those vectors from the partner bank, as the functional model does.
    status, report = _json(capsys, ["rtl", "run", str(traces_dir / "all_isr.trace")])
    assert status == 0 and report["ok"], report
    assert report["reads"] > 0 and report["mismatches"] == 0
    assert report["violations"] == report["model_violations"] == 0 and report["agree"]
    assert report["rejections_not_flagged"] == 0


def test_broadcast_mac_with_its_partner_closed_is_flagged_by_both(capsys, tmp_path):
    # The public controller never opens a MAC_SBK's partner bank under BROADCAST = 1; the RTL
    # refuses that MAC (protocol PARTNER) and verify lists it: the run fails, both agree.
    path = tmp_path / "partner.trace"
    path.write_text("W CFR 0 1\nAiM MAC_SBK 1 1 0 0\nAiM RD_MAC 0 1\nAiM EOC\n")
    status, report = _json(capsys, ["rtl", "run", str(path)])
    assert status == 1 and not report["ok"]
    assert report["violations"] == report["model_violations"] == 1 and report["agree"]
    assert report["reads"] == 1 and report["mismatches"] == 0  # the RD_MAC of an untouched acc


def test_run_reports_the_rtl_rejections(capsys, traces_dir):
    status = main(["rtl", "run", str(traces_dir / "probe_misc.trace")])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "expected protocol rejections" in out and "EWMUL16 4" in out
    status, report = _json(capsys, ["rtl", "run", str(traces_dir / "probe_misc.trace")])
    assert status == 0
    assert report["rejected"] == {"EWMUL16": 4} and report["rejections_not_flagged"] == 0
    assert report["violations"] == report["mismatches"] == 0


def test_run_groups_identical_channels(capsys, traces_dir):
    status, report = _json(capsys, ["rtl", "run", str(traces_dir / "probe_2ch.trace")])
    assert status == 0
    assert report["replays"] == 1 and sorted(report["channels"]) == ["0", "1"]
    assert report["channels"]["0"]["channels"] == [0, 1]


def test_run_random_trace(capsys, tmp_path):
    program = random_program(np.random.default_rng(8), 50, channels=2, rows=3,
                             broadcast=False)  # every kind; payloads left to the command
    path = tmp_path / "random.trace"
    trace.write(path, program)
    status, report = _json(capsys, ["rtl", "run", str(path), "--seed", "5"])
    assert status == 0, report
    assert report["payloads_filled"] > 0 and report["reads"] > 0
    assert report["mismatches"] == 0 and report["violations"] == 0
    assert report["rejections_not_flagged"] == 0 and report["agree"]


def test_run_writes_waves(capsys, traces_dir, tmp_path):
    gemv = str(traces_dir / "probe_gemv.trace")
    status, report = _json(capsys, ["rtl", "run", gemv, "--waves", str(tmp_path / "g.vcd")])
    assert status == 0 and report["waves"] == [str(tmp_path / "g.vcd")]
    text = (tmp_path / "g.vcd").read_text()
    assert text.startswith("$version") and "violations" in text
    assert main(["rtl", "run", gemv, "--waves", str(tmp_path / "g.txt")]) == 2
    assert "name a .vcd or .fst file" in capsys.readouterr().err


def test_check_legal_schedule(capsys, legal_schedule):
    status, report = _json(capsys, ["rtl", "check", str(legal_schedule)])
    assert status == 0
    assert report["agree"] and report["rtl_violations"] == report["model_violations"] == 0
    assert report["replayed_commands"] == report["commands"]


def test_check_mutated_schedule(capsys, legal_schedule, tmp_path):
    legal = schedule.read(legal_schedule)
    rng = np.random.default_rng(2)
    while True:  # a command moved earlier: a timing violation, no bus or protocol error
        i = int(rng.integers(1, len(legal)))
        moved = dataclasses.replace(legal[i], cycle=legal[i].cycle - int(rng.integers(1, 9)))
        mutated = sorted(legal[:i] + [moved] + legal[i + 1:], key=lambda c: c.cycle)
        found = verify(mutated)
        if found and all(v.kind == "timing" for v in found):
            break
    path = tmp_path / "mutated.schedule"
    schedule.write(path, mutated)
    status, report = _json(capsys, ["rtl", "check", str(path)])
    assert status == 1
    assert report["agree"] and report["rtl_violations"] == report["model_violations"] > 0


def test_check_reports_bus_conflicts(capsys, legal_schedule, tmp_path):
    lines = legal_schedule.read_text().splitlines()
    cycle, channel = lines[3].split()[:2]
    path = tmp_path / "bus.schedule"
    path.write_text("\n".join(lines[:4] + [f"{cycle} {channel} TMOD"] + lines[4:]) + "\n")
    status, report = _json(capsys, ["rtl", "check", str(path)])
    assert status == 1 and report["bus_conflicts"] == 1
    assert report["replayed_commands"] == report["commands"] - 1


def test_rows_too_small_is_a_clear_error(capsys, tmp_path):
    path = tmp_path / "far.trace"
    path.write_text("AiM MAC_ABK 1 0x80000000 0\nAiM MAC_ABK 1 0x80000000 100\nAiM EOC\n")
    assert main(["rtl", "run", str(path), "--rows", "64"]) == 2
    err = capsys.readouterr().err
    assert f"{path}:2:" in err and "row 100" in err and "--rows 128" in err
    sched = tmp_path / "far.schedule"
    sched.write_text("10 0 ACT 0 0 -\n80 0 ACT 1 70 -\n")
    assert main(["rtl", "check", str(sched)]) == 2
    err = capsys.readouterr().err
    assert f"{sched}:2:" in err and "row 70" in err


def test_bad_schedule_line_is_reported_with_its_line(capsys, tmp_path):
    sched = tmp_path / "bad.schedule"
    sched.write_text("# a comment\n10 0 ACT 0 0 -\n12 0 BOGUS\n")
    assert main(["rtl", "check", str(sched)]) == 2
    assert f"{sched}:3: unknown command 'BOGUS'" in capsys.readouterr().err
