"""Functional coverage on the device extension set ``aim+wr16`` (and unchanged on ``aim``).

On ``aim`` the cover model and the seeded stimulus are what they were before extensions existed
(the digests below were taken from commit 0b99de1). Under ``aim+wr16`` WR16 is an implemented
command (its bank states, the rules it joins, rule 104), a write of every bank's column, and
the groups ``ext.boundary`` / ``ext.violation`` have one bin per timing pair it takes part in;
``patton rtl coverage --device-ext aim+wr16`` closes them all on the RTL.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
from patton.hw.isa import IMPLEMENTED, REJECTED
from patton.sim.check import Checker, verify
from patton.sim.isa import Command
from patton.sim.schedule import TimedCommand as T
from patton.sim.timing import TIMING, timing_table
from patton.tb.coverage import (
    COUNTED,
    EXTENSION_GROUPS,
    CoverageMonitor,
    applicable,
    dominated,
    extension_pairs,
)
from patton.tb.monitor import PlayResult, RtlViolation
from patton.tb.stimulus import Mix, Stimulus

from patton.cli import main

EXT = "aim+wr16"
TABLE = timing_table(None, EXT)
WR16_PRE = 104


def _digest(stimulus: Stimulus, segments: int = 3) -> str:
    h = hashlib.sha256()
    for _ in range(segments):
        for c in stimulus.segment(400):
            h.update(repr((c.cycle, c.command.name, c.bank, c.row, c.col, c.mask,
                           c.cfr)).encode())
            if c.payload is not None:
                h.update(c.payload.tobytes())
    return h.hexdigest()


def test_the_default_seeded_stimulus_is_unchanged():
    # aimed at a monitor's holes (seed 1, as ``patton rtl coverage``), and plain (seed 5)
    assert _digest(Stimulus(1, monitor=CoverageMonitor(name="d1"))) == (
        "b3e471e045382d684af61f83e225978b202645cc1b6b78a624d59fc061044055")
    assert _digest(Stimulus(5)) == (
        "7a5f033b993c91b99a2e6618d36105b8c4905074e0c2c956899ff63c487ba436")
    assert _digest(Stimulus(5, timing=timing_table(None, "aim"))) == _digest(Stimulus(5))


def test_the_default_cover_model_is_unchanged():
    monitor = CoverageMonitor(name="d2")
    assert monitor.counted == COUNTED and monitor.pairs == [] and extension_pairs(TIMING) == []
    figures = monitor.figures()
    assert (figures["rules_total"], figures["bins_total"], figures["bins_unreachable"]) == (
        62, 328, 4)
    assert [g.name for g in monitor.groups()] == list(COUNTED)


def test_the_extension_cover_model_has_wr16_and_its_pairs():
    monitor = CoverageMonitor(timing=TABLE, name="e1")
    assert monitor.counted == COUNTED + EXTENSION_GROUPS
    assert set(applicable(TABLE)) == set(applicable(TIMING)) | {WR16_PRE}
    assert dominated(TABLE) == dominated(TIMING)
    pairs = extension_pairs(TABLE)
    assert pairs == monitor.pairs and len(pairs) == 50
    assert all(Command.WR16 in (p, f) for _, p, f in pairs)
    assert {(r, p, f) for r, p, f in pairs if r == WR16_PRE} == {
        (WR16_PRE, Command.WR16, Command.PREA), (WR16_PRE, Command.WR16, Command.PRE)}
    groups = {g.name: g for g in monitor.groups()}
    states = [b for b in groups["command.state"].bins if b.startswith("WR16 ")]
    assert len(states) == 10  # closed/same/other/partial/mixed x normal/register
    assert len(groups["command.rejected"].bins) == len(REJECTED)
    assert len(groups["ext.boundary"].bins) == len(groups["ext.violation"].bins) == 50
    assert "104 WR16 -> PREA = 41" in groups["ext.violation"].bins
    figures = monitor.figures()
    # rule 104 in the three timing groups, WR16's ten states, the two pair groups
    assert figures["bins_total"] == 328 + 3 + 10 + 2 * 50
    assert figures["bins_unreachable"] == 4


def test_an_extension_pair_is_hit_only_by_that_pair():
    monitor = CoverageMonitor(timing=TABLE, name="e2")
    words = np.zeros(16, np.uint16)
    schedule = [T(0, 0, Command.ACT16, -1, 1), T(28, 0, Command.WR16, -1, 1, 0, payload=words),
                T(68, 0, Command.PREA)]  # one cycle short of rule 104
    found = monitor.sample(schedule, PlayResult(violations=[
        RtlViolation(68, Command.PREA, frozenset({WR16_PRE}), 0)]))
    assert [(v.cycle, v.rule) for v in found] == [(68, WR16_PRE)]
    groups = {g.name: g.bins for g in monitor.groups()}
    assert groups["ext.violation"]["104 WR16 -> PREA = 41"] == 1
    assert groups["ext.boundary"]["42 ACT16 -> WR16 = 28"] == 1  # WR16 exactly nRCDWR after
    assert sum(groups["ext.violation"].values()) == 1
    assert groups["command.state"]["WR16 same normal"] == 1


def test_the_extension_stimulus_draws_wr16_and_stays_legal():
    stimulus = Stimulus(3, timing=TABLE, mix=Mix.legal())
    segments = [stimulus.segment(600) for _ in range(3)]
    checker, found = Checker(timing=TABLE), []
    for segment in segments:
        checker.forget()
        for cmd in segment:
            found += checker.step(cmd)
    assert not found
    kinds = {c.command for s in segments for c in s}
    assert kinds == IMPLEMENTED | {Command.WR16}
    # WR16 leaves its row open: some column command follows one without an activation
    flat = [c for s in segments for c in s]
    after = [b.command for a, b in zip(flat, flat[1:]) if a.command is Command.WR16]
    assert set(after) - {Command.ACT16, Command.PREA, Command.TMOD}
    mutated = Stimulus(3, timing=TABLE).segment(2000)
    assert {v.kind for v in verify([c for c in mutated if c.command not in REJECTED],
                                   timing=TABLE)} == {"timing", "protocol"}


@pytest.mark.verilator
def test_rtl_coverage_closes_with_the_extension(capsys, tmp_path):
    status = main(["rtl", "coverage", "--device-ext", EXT, "--commands", "0", "--out",
                   str(tmp_path), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert status == 0 and report["closed"] and report["agree"], report["holes"]
    assert report["device_ext"] == EXT and report["rules_total"] == 63
    assert report["rules_boundary_hit"] == report["rules_violation_hit"] == 63
    assert report["groups"]["ext.boundary"] == {"bins": 50, "hit": 50, "unreachable": 0}
    assert report["groups"]["ext.violation"] == {"bins": 50, "hit": 50, "unreachable": 0}
    assert report["groups"]["command.state"]["hit"] == 114
    assert report["disagreements"] == report["read_mismatches"] == report["mat_mismatches"] == 0
    text = (tmp_path / "coverage.md").read_text()
    assert "device extension set aim+wr16" in text and "`104 WR16 -> PREA = 41`" in text
    assert json.loads((tmp_path / "coverage.json").read_text())["device_ext"] == EXT
