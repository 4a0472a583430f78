"""``patton rtl run`` and ``patton rtl check``: user traces and schedules on the RTL channel.

The commands run in this process, so one Verilator build (cached under build/, a few minutes
the first time) serves every test: ``patton.tb.builds.player`` keeps it per row count.
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
                             kinds=KINDS,
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


def test_run_executes_ewmul_and_af(capsys, traces_dir):
    # probe_misc.trace issues EWMUL16 (and probe_af.trace AF16 on its LUT row, RDAF16): the RTL
    # executes them, bit-exact with the functional model; nothing is refused or left out.
    for name in ("probe_misc", "probe_af"):
        status = main(["rtl", "run", str(traces_dir / f"{name}.trace")])
        out = capsys.readouterr().out
        assert status == 0, out
        assert "expected protocol rejections" not in out and "not replayed" not in out
        status, report = _json(capsys, ["rtl", "run", str(traces_dir / f"{name}.trace")])
        assert status == 0 and report["ok"]
        assert report["rejected"] == {} and report["rejections"] == 0
        assert all(not c["not_replayed"] for c in report["channels"].values())
        assert report["violations"] == report["mismatches"] == 0 and report["reads"] > 0


def test_check_reports_the_rtl_rejections(capsys, tmp_path):
    # ACT4 is a command this RTL version rejects by design: flagged REJECTED, reported as an
    # expected rejection, left out of the model's side.
    sched = tmp_path / "act4.schedule"
    sched.write_text("1 0 ACT4 4 6 -\n40 0 ACT 2 8 -\n80 0 RD 2 8 3\n")
    assert main(["rtl", "check", str(sched)]) == 0
    out = capsys.readouterr().out
    assert "expected protocol rejections" in out and "ACT4 1" in out
    status, report = _json(capsys, ["rtl", "check", str(sched)])
    assert status == 0
    assert report["rejected"] == {"ACT4": 1} and report["rejections_not_flagged"] == 0
    assert report["rtl_violations"] == report["model_violations"] == 0


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
    assert main(["rtl", "check", str(sched), "--rows", "64"]) == 2
    err = capsys.readouterr().err
    assert f"{sched}:2:" in err and "row 70" in err and "--rows 128" in err


def test_check_chooses_its_rows_from_the_schedule(capsys, tmp_path):
    from patton.tb.player import SchedulePlayer

    sched = tmp_path / "far.schedule"
    sched.write_text("10 0 ACT 0 0 -\n80 0 ACT 1 70 -\n")
    from patton.hw.params import ChannelParams

    larger = [r for r in SchedulePlayer.built_rows() if r >= 128]
    current = [r for r in larger if SchedulePlayer.cached(ChannelParams(rows=r))]
    status, report = _json(capsys, ["rtl", "check", str(sched)])
    assert status == 0 and report["ok"] and report["rows_chosen"]
    # a larger build of today's sources, else any larger build, else 128
    assert report["rows"] == (current or larger or [128])[0]
    status, report = _json(capsys, ["rtl", "check", str(sched), "--rows", "1024"])
    assert status == 0 and report["rows"] == 1024 and not report["rows_chosen"]


GAP = """\
1 0 ACT 2 8 -
60 0 RD 2 - 3
1000000000 0 PRE 2 - -
1000000100 0 ACT 2 9 -
1000000200 0 RD 2 9 1
1000000202 0 RD 2 9 2
"""


def test_check_skips_a_billion_idle_cycles(capsys, tmp_path):
    from patton.tb.driver import DRAIN

    sched = tmp_path / "gap.schedule"
    sched.write_text(GAP)
    status = main(["rtl", "check", str(sched), "--json"])
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert status == 0 and report["ok"] and report["agree"], report
    assert report["rtl_cycles"] == 1000000202 + DRAIN
    assert report["idle_cycles_skipped"] > 999_999_000
    # what the simulator ran: the commands' cycles, not the gap (25 minutes when it did)
    assert report["simulated_cycles"] == report["rtl_cycles"] - report["idle_cycles_skipped"]
    assert report["simulated_cycles"] < 10_000
    assert report["reads"] == 3 and report["mismatches"] == 0  # values scored: no writes
    assert "999,999,7" in captured.err and "idle cycles skipped" in captured.err  # progress
    # the same gap, illegal after it: flagged at its own cycle by both checkers
    sched.write_text(GAP.replace("1000000200 0 RD 2 9 1", "1000000101 0 RD 2 9 1"))
    status, report = _json(capsys, ["rtl", "check", str(sched)])
    assert status == 1 and report["agree"]
    assert [(v["cycle"], v["rule_name"]) for v in report["rtl_list"]] == \
        [(1000000101, "nRCDRD")]


def test_check_a_column_command_without_a_row_means_the_open_row(capsys, tmp_path):
    # The reader accepts RD/WR/MAC16 without a row (the open row is meant); the RTL's port
    # always carries one, so the player sends the open row: both checkers find it legal.
    sched = tmp_path / "rowless.schedule"
    sched.write_text("1 0 ACT 2 8 -\n40 0 RD 2 - 3\n90 0 PREA\n130 0 ACT16 - 5 -\n"
                     "190 0 MAC16 - - 1\n")
    status, report = _json(capsys, ["rtl", "check", str(sched)])
    assert status == 0 and report["ok"] and report["agree"], report
    assert report["rtl_violations"] == report["model_violations"] == 0


def test_check_lists_rtl_violations_as_objects(capsys, tmp_path):
    sched = tmp_path / "early.schedule"
    sched.write_text("1 0 ACT 2 8 -\n5 0 WR 2 8 0\n")
    status, report = _json(capsys, ["rtl", "check", str(sched)])
    assert status == 1 and report["agree"]
    expected = [{"cycle": 5, "channel": 0, "command": "WR", "kind": "timing", "rule": 90,
                 "rule_name": "nRCDWR", "commands": "ACT -> WR", "protocol": None}]
    assert report["rtl_list"] == expected and report["channels"]["0"]["rtl_list"] == expected
    assert main(["rtl", "check", str(sched)]) == 1
    out = capsys.readouterr().out
    assert "ch 0: cycle 5 WR: rule 90 nRCDWR (ACT -> WR)" in out
    assert "cycles     schedule 6, RTL 65" in out


def test_run_prints_both_cycle_counts_and_why_they_differ(capsys, traces_dir):
    from patton.tb.driver import DRAIN

    assert main(["rtl", "run", str(traces_dir / "probe_gemv.trace")]) == 0
    out = capsys.readouterr().out
    assert "cycles     model 280, RTL 336" in out
    assert (f"(the RTL count runs {DRAIN} cycles past the schedule's last command, at cycle "
            "276: the drain of the last read's latency") in out


@pytest.mark.parametrize("suffix", [".json", ".npy"])
def test_run_readouts_are_the_rtl_values(capsys, tmp_path, suffix):
    from patton.sim.functional import FunctionalModel
    from patton.tb.prepare import fill_payloads

    program = random_program(np.random.default_rng(4), 40, channels=2, rows=3,
                             kinds=KINDS,
                             broadcast=False)
    path = tmp_path / "values.trace"
    trace.write(path, program)
    filled = list(trace.read(path))
    fill_payloads(filled, 9)
    expected = FunctionalModel().run(filled)
    assert expected and any(r.data.any() for r in expected)
    out = tmp_path / f"r{suffix}"
    status, report = _json(capsys, ["rtl", "run", str(path), "--seed", "9",
                                    "--readouts", str(out)])
    assert status == 0 and report["readouts"] == {"file": str(out), "count": len(expected)}
    if suffix == ".json":
        got = json.loads(out.read_text())
        assert got["source"] == "rtl"
        rows = [(r["index"], r["opcode"], r["channel"], r["data"]) for r in got["readouts"]]
    else:
        a = np.load(out, allow_pickle=False)
        rows = [(int(i), str(o), int(c), d.tolist()) for i, o, c, d in
                zip(a["index"], a["opcode"], a["channel"], a["data"], strict=True)]
    assert rows == [(r.index, r.opcode.value, r.channel, r.data.tolist()) for r in expected]


def test_rtl_output_stays_out_of_the_terminal(tmp_path):
    import subprocess
    import sys

    sched = tmp_path / "s.schedule"
    sched.write_text("1 0 ACT 2 8 -\n40 0 RD 2 8 3\n")
    done = subprocess.run([sys.executable, "-m", "patton.cli", "rtl", "check", str(sched)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    for noise in ("make", "Verilator", "cocotb", "COCOTB"):
        assert noise not in done.stdout and noise not in done.stderr
    assert "result     legal" in done.stdout


def test_bad_schedule_line_is_reported_with_its_line(capsys, tmp_path):
    sched = tmp_path / "bad.schedule"
    sched.write_text("# a comment\n10 0 ACT 0 0 -\n12 0 BOGUS\n")
    assert main(["rtl", "check", str(sched)]) == 2
    assert f"{sched}:3: unknown command 'BOGUS'" in capsys.readouterr().err


#: Report fields that are wall times (differ between runs).
_TIMES = ("build_seconds", "rtl_seconds", "replay_seconds", "cycles_per_second",
          "wall_seconds")


def _untimed(report: dict) -> dict:
    out = {k: v for k, v in report.items() if k not in _TIMES}
    out["channels"] = {c: {k: v for k, v in s.items() if k != "rtl_seconds"}
                       for c, s in report["channels"].items()}
    return out


def test_channels_replay_side_by_side_with_the_same_verdict(capsys, legal_schedule):
    """``--jobs``: the distinct channel schedules of a run or a check replay on simulators
    side by side (scored in a process pool), with the report of one at a time."""
    status, alone = _json(capsys, ["rtl", "check", str(legal_schedule), "--jobs", "1"])
    status_all, together = _json(capsys, ["rtl", "check", str(legal_schedule), "--jobs", "2"])
    assert status == status_all == 0 and alone["replays"] == 2
    assert _untimed(alone) == _untimed(together)
    assert together["simulated_cycles"] > 0 and together["cycles_per_second"] > 0
    trace_path = legal_schedule.with_name("legal.trace")
    status, alone = _json(capsys, ["rtl", "run", str(trace_path), "--jobs", "1"])
    status_all, together = _json(capsys, ["rtl", "run", str(trace_path), "--jobs", "2"])
    assert status == status_all == 0 and together["ok"] and together["replays"] == 2
    assert _untimed(alone) == _untimed(together)
