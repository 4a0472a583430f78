"""What ``patton rtl run/check`` do around the simulator, without it: idle gaps skipped
exactly, row-less column commands given their open row, the row count chosen, RTL violations as
JSON objects, the build message and its log."""

from __future__ import annotations

import numpy as np
import pytest
from patton.hw.isa import ProtocolCode
from patton.sim import native, schedule
from patton.sim.isa import Command
from patton.sim.timing import DEFAULT_PROFILE, TIMING
from patton.tb import builds, toolchain, validate
from patton.tb.monitor import PlayResult, RtlRead, RtlViolation
from patton.tb.player import (
    DRAIN,
    SchedulePlayer,
    idle_skipped,
    open_rows_filled,
    restore,
    skip_idle,
)
from patton.tb.prepare import RowsError
from patton.tb.replays import rtl_objects, rtl_text

from patton.cli import rtl as rtl_cli

GAP = """\
1 0 ACT 2 8 -
60 0 RD 2 8 3
1000000000 0 PRE 2 - -
1000000100 0 ACT 2 9 -
1000000200 0 RD 2 9 1
"""


def test_skip_idle_shortens_long_gaps_to_quiet_and_maps_back():
    cmds = list(schedule.parse(GAP.splitlines()))
    quiet = TIMING.quiet
    played, starts, shifts = skip_idle(cmds, quiet)
    cycles = [c.cycle for c in played]
    assert cycles == [1, 60, 60 + quiet, 160 + quiet, 260 + quiet]
    assert [c.cycle for c in cmds] == [1, 60, 10**9, 10**9 + 100, 10**9 + 200]  # untouched
    assert idle_skipped(cmds, quiet) == shifts[-1] == 10**9 - 60 - quiet
    # the replay's cycles map back to the schedule's: reads, violations, the end
    lat = TIMING.latency[Command.RD]
    data = np.zeros(16, np.uint16)
    result = PlayResult(reads=[RtlRead(60 + lat, Command.RD, data),
                               RtlRead(260 + quiet + lat, Command.RD, data)],
                        violations=[RtlViolation(160 + quiet, Command.ACT, frozenset({3}), 0)],
                        cycles=260 + quiet + DRAIN)
    back = restore(result, starts, shifts)
    assert [r.issued for r in back.reads] == [60, 10**9 + 200]
    assert [v.cycle for v in back.violations] == [10**9 + 100]
    assert back.cycles == 10**9 + 200 + DRAIN


def test_skip_idle_leaves_short_gaps_alone():
    cmds = list(schedule.parse(["1 0 ACT 2 8 -", f"{1 + TIMING.quiet} 0 PRE 2 - -"]))
    played, starts, shifts = skip_idle(cmds, TIMING.quiet)
    assert played is cmds and starts == [0] and shifts == [0]


def test_a_first_command_far_from_reset_is_brought_near():
    cmds = list(schedule.parse(["5000000000 3 TMOD"]))
    played, _, shifts = skip_idle(cmds, TIMING.quiet)
    assert played[0].cycle == TIMING.quiet and shifts[-1] == 5000000000 - TIMING.quiet
    assert played[0].channel == 3 and played[0].command is Command.TMOD


def test_row_less_column_commands_get_the_open_row():
    text = ["1 0 ACT 2 8 -", "40 0 RD 2 - 3", "50 0 WR 2 - 4", "60 0 PREA", "90 0 ACT16 - 5 -",
            "150 0 MAC16 - - 1", "160 0 PREA", "200 0 RD 1 - 0"]
    cmds = list(schedule.parse(text))
    filled = open_rows_filled(cmds)
    assert [c.row for c in filled] == [8, 8, 8, -1, 5, 5, -1, 0]  # a closed bank: row 0
    assert [c.row for c in cmds] == [8, -1, -1, -1, 5, -1, -1, -1]  # the input is unchanged
    named = list(schedule.parse(["1 0 ACT 2 8 -", "40 0 RD 2 8 3"]))
    assert open_rows_filled(named) is named  # nothing to fill: the schedule as it is


def test_rows_the_rtl_does_not_execute_do_not_open():
    # ACT4 is rejected by the RTL (hw.isa.REJECTED): the RTL's bank 0 stays closed
    cmds = list(schedule.parse(["1 0 ACT4 0 6 -", "40 0 RD 0 - 0"]))
    assert [c.row for c in open_rows_filled(cmds)] == [6, 0]


def test_rows_are_chosen_from_the_schedule(monkeypatch):
    monkeypatch.setattr(builds, "_PLAYERS", {})  # players other tests started in this process
    monkeypatch.setattr(SchedulePlayer, "built_rows", classmethod(lambda cls, waves=None: []))
    assert builds.choose_rows(-1) == 64 and builds.choose_rows(63) == 64
    assert builds.choose_rows(64) == 128 and builds.choose_rows(1000) == 1024
    monkeypatch.setattr(SchedulePlayer, "built_rows",
                        classmethod(lambda cls, waves=None: [64, 1024, 4096]))
    assert builds.choose_rows(10) == 64
    assert builds.choose_rows(70) == 1024  # a larger build is cached: no new build
    assert builds.choose_rows(2000) == 4096
    assert builds.choose_rows(5000) == 8192
    # another profile's build may not exist at that size: a larger one only when it is cached
    assert builds.choose_rows(70, timing="aimsim-2eb1ee0") == 128
    monkeypatch.setattr(SchedulePlayer, "cached",
                        classmethod(lambda cls, params, **k: params.rows == 4096))
    assert builds.choose_rows(70, timing="aimsim-2eb1ee0") == 4096
    assert builds.choose_rows(70) == 4096  # today's build preferred to an older larger one


def test_pending_build_says_what_asking_for_a_player_builds(monkeypatch):
    monkeypatch.setattr(builds, "_PLAYERS", {})
    monkeypatch.setattr(SchedulePlayer, "cached",
                        classmethod(lambda cls, params, **k: params.rows == 64))
    monkeypatch.setattr(SchedulePlayer, "built_rows", classmethod(lambda cls, waves=None: [128]))
    assert builds.pending_build(64) is None  # cached under build/
    assert builds.pending_build(128) == "verilog"  # built from older sources
    assert builds.pending_build(256) == "new"
    monkeypatch.setattr(builds, "_PLAYERS", {(256, None, DEFAULT_PROFILE): "made"})
    assert builds.pending_build(256) is None  # made in this process
    assert builds.pending_build(64, coverage=True) is None
    monkeypatch.setattr(SchedulePlayer, "cached", classmethod(lambda cls, *a, **k: False))
    assert builds.pending_build(64, coverage=True) == "new"


def test_a_schedule_is_prepared_for_the_rtl_port(monkeypatch):
    monkeypatch.setattr(builds, "_PLAYERS", {})
    monkeypatch.setattr(SchedulePlayer, "built_rows", classmethod(lambda cls, waves=None: []))
    text = ["1 0 ACT 2 8 -", "1 0 ACT 3 9 -", "40 0 WR 2 8 3", "40 1 ACT 1 100 -"]
    cmds = list(schedule.parse(text))
    prepared = validate.prepare_schedule(cmds, "s.schedule", rows=None, timing=DEFAULT_PROFILE)
    assert prepared.rows == 128 and prepared.rows_chosen
    # one command per channel and cycle, the first in file order: the second ACT is not sent
    assert [(c.channel, c.cycle, c.bank) for c in prepared.replayable] == [
        (0, 1, 2), (0, 40, 2), (1, 40, 1)]
    assert [v.kind for v in prepared.bus] == ["bus"]
    assert prepared.model_violations == 2  # the bus conflict, and its two rules at one command
    assert not prepared.values  # the WR carries no data=: values are not scored
    with pytest.raises(RowsError, match="s.schedule:4: ACT addresses row 100"):
        validate.prepare_schedule(cmds, "s.schedule", rows=64, timing=DEFAULT_PROFILE)


def test_built_rows_reads_the_build_folders(tmp_path, monkeypatch):
    import patton.tb.player as player_module

    monkeypatch.setattr(player_module, "BUILD_ROOT", tmp_path)
    probe = SchedulePlayer(build=False)
    import hashlib

    flags = hashlib.sha256(" ".join(probe._args()).encode()).hexdigest()[:6]
    for rows, name, binary in ((256, f"patton_player-{flags}-aaaaaaaaaaaa", True),
                               (512, f"patton_player-{flags}-bbbbbbbbbbbb", False),
                               (2048, f"patton_player-{flags}-vcd-cccccccccccc", True)):
        folder = tmp_path / "verilator" / name
        (folder / "src").mkdir(parents=True)
        (folder / "src" / "patton_channel.v").write_text(
            f"// Organisation: 16 banks in 4 groups, {rows} rows, 64 columns\n")
        if binary:
            (folder / "patton_player").write_text("")
    assert SchedulePlayer.built_rows() == [256]  # 512 has no simulator; 2048 is a VCD build
    assert SchedulePlayer.built_rows(waves="vcd") == [2048]


def test_rtl_violations_are_objects_naming_the_rule():
    v = RtlViolation(5, Command.WR, frozenset({90}), 0)
    assert rtl_objects(v, 3) == [{"cycle": 5, "channel": 3, "command": "WR", "kind": "timing",
                                  "rule": 90, "rule_name": "nRCDWR", "commands": "ACT -> WR",
                                  "protocol": None}]
    assert rtl_text(v) == "cycle 5 WR: rule 90 nRCDWR (ACT -> WR)"
    p = RtlViolation(9, Command.RD, frozenset(), ProtocolCode.WRONG_ROW.value)
    assert rtl_objects(p, 0)[0]["protocol"] == "WRONG_ROW"
    assert rtl_text(p) == "cycle 9 RD: protocol WRONG_ROW"


def test_the_build_says_what_it_does_and_keeps_its_output_in_a_log(monkeypatch, capfd):
    calls = []

    def fake_player(rows, waves, timing, ext="aim"):
        import os

        os.write(1, b"make: Entering directory\n")  # what make prints, on file descriptor 1
        os.write(2, b"%Warning: verilator\n")
        calls.append(rows)
        return "player"

    monkeypatch.setattr(builds, "player", fake_player)
    monkeypatch.setattr(builds, "_PLAYERS", {})  # as in a fresh process: no player made yet
    monkeypatch.setattr(SchedulePlayer, "cached", classmethod(lambda cls, *a, **k: False))
    monkeypatch.setattr(SchedulePlayer, "built_rows", classmethod(lambda cls, waves=None: []))
    # no real build to time
    monkeypatch.setattr(toolchain, "record_build_seconds", lambda kind, seconds: None)
    out = rtl_cli._Output("check", verbose=False)
    assert rtl_cli._player(128, None, "aimsim-0f28a07", out) == "player" and calls == [128]
    captured = capfd.readouterr()
    assert captured.out == ""
    assert captured.err == (f"building the RTL channel (rows 128) under {native.BUILD_ROOT}: "
                            f"a Verilator build, {toolchain.estimate('channel')}, "
                            f"log: {out.log}\n")
    assert out.log.read_text() == "make: Entering directory\n%Warning: verilator\n"
    loud = rtl_cli._Output("check", verbose=True)
    rtl_cli._player(128, None, "aimsim-0f28a07", loud)
    captured = capfd.readouterr()
    assert "make: Entering directory" in captured.err and captured.out == ""


def test_a_failed_build_names_its_log(monkeypatch, capsys, tmp_path):
    def broken(rows, waves, timing, ext="aim"):
        raise RuntimeError("make exited with 2")

    monkeypatch.setattr(builds, "player", broken)
    monkeypatch.setattr(SchedulePlayer, "cached", classmethod(lambda cls, *a, **k: True))
    path = tmp_path / "s.schedule"
    path.write_text("1 0 ACT 2 8 -\n")
    from patton.cli import main

    assert main(["rtl", "check", str(path)]) == 2
    err = capsys.readouterr().err
    assert "error: building the RTL channel failed (RuntimeError: make exited with 2); log: " \
        in err and "rtl-check-" in err and "Traceback" not in err
