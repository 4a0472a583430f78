"""Functional coverage without a simulator: the cover model's sampling, the stimulus generator.

The RTL runs are in ``tests/test_rtl_coverage.py``; here the RTL's verdict is written by hand,
so each test says exactly which verdict must (or must not) hit a bin.
"""

from __future__ import annotations

import numpy as np
import pytest
from patton.hw.isa import IMPLEMENTED, REJECTED
from patton.sim.check import Checker, verify
from patton.sim.device import DEVICE
from patton.sim.isa import Command
from patton.sim.protocol import State
from patton.sim.schedule import TimedCommand as T
from patton.sim.timing import PROFILES, TIMING, timing_table
from patton.tb.coverage import CoverageMonitor, applicable, bank_state, dominated
from patton.tb.monitor import PlayResult, RtlRead, RtlViolation
from patton.tb.stimulus import Mix, Stimulus

ACT, PRE, RD, TMOD, RDMAC16 = Command.ACT, Command.PRE, Command.RD, Command.TMOD, Command.RDMAC16
NRRDS = 27  # ACT -> ACT on the channel, 5 cycles
NRRDL = 67  # ACT -> ACT in one bank group, 6 cycles


def _bins(monitor: CoverageMonitor, group: str) -> dict[str, int]:
    return next(g for g in monitor.groups() if g.name == group).bins


def _rule_bin(monitor: CoverageMonitor, group: str, rule: int) -> int:
    return next(n for label, n in _bins(monitor, group).items()
                if label.split()[0] == str(rule))


def test_the_rules_covered_are_those_of_the_implemented_commands():
    rules = applicable(TIMING)
    assert len(rules) == 62 and len(TIMING.rules) == 104
    assert {26, 37, 38} <= set(rules)  # EWMUL16 -> PRE, ACT -> AF16, ACT -> EWMUL16
    assert rules[NRRDS] == "nRRDS" and NRRDL in rules and 62 in rules  # bank-group nCCDL
    refresh = {Command.REFab, Command.REFpb}
    for rule in TIMING.rules:
        if rule.preceding <= refresh or rule.following <= refresh or rule.cycles <= 0:
            assert rule.id not in rules
        if not (rule.preceding & IMPLEMENTED and rule.following & IMPLEMENTED):
            assert rule.id not in rules  # e.g. rules of RDA, WRA, ACT4, PRE4
    for profile in PROFILES:
        assert len(applicable(timing_table(profile))) > 50


def test_rules_dominated_by_a_larger_gap_are_unreachable_for_a_legal_command():
    # WRA16 -> RD: nWTRS (17) under nWTRL (19); WRMAC16 -> RD: 12 under 14; ACT(16) -> ACT16:
    # nRRDL (6) under nRC (89), all on the channel node
    assert dominated(TIMING) == {17: [21], 19: [22], 28: [30, 31], 29: [30, 31]}
    monitor = CoverageMonitor(name="t0")
    legal = {label for (group, label) in monitor.unreachable if group == "timing.legal"}
    assert {int(label.split()[0]) for label in legal} == {17, 19, 28, 29}
    assert "21 nCWL + nBL + nWTRL = 19" in monitor.unreachable[
        "timing.legal", "17 nCWL + nBL + nWTRS = 17"]
    assert monitor.figures()["bins_unreachable"] == 4


@pytest.mark.parametrize("rows, cmd, state", [
    ([-1] * 16, T(0, 0, ACT, 3, 1), "closed"),
    ([1] + [-1] * 15, T(0, 0, ACT, 0, 1), "same"),
    ([2] + [-1] * 15, T(0, 0, RD, 0, 1, 0), "other"),
    ([2] + [-1] * 15, T(0, 0, PRE, 0), "open"),
    ([-1] * 16, T(0, 0, Command.PREA), "closed"),
    ([1] * 16, T(0, 0, Command.MAC16, -1, 1, 0), "same"),
    ([2] * 16, T(0, 0, Command.MAC16, -1, 1, 0), "other"),
    ([1, -1] * 8, T(0, 0, Command.ACT16, -1, 1), "partial"),
    ([1, 2] * 8, T(0, 0, Command.ACT16, -1, 1), "mixed"),
    ([1] * 16, T(0, 0, Command.WRGB, -1, -1, 0), "-"),
    ([-1] * 16, T(0, 0, ACT, 20, 1), ""),  # no such bank: no state bin
])
def test_bank_state(rows, cmd, state):
    assert bank_state(State(DEVICE, np.array(rows)), cmd) == state


def test_a_boundary_counts_only_when_the_rtl_meets_it():
    monitor = CoverageMonitor(name="t1")
    schedule = [T(0, 0, ACT, 0, 1), T(5, 0, ACT, 4, 1)]  # other bank groups: nRRDS binds
    monitor.sample(schedule, PlayResult())
    assert _rule_bin(monitor, "timing.boundary", NRRDS) == 1
    assert _rule_bin(monitor, "timing.legal", NRRDS) == 1  # nothing else flagged
    assert _rule_bin(monitor, "timing.violation", NRRDS) == 0
    # the same gap, but the RTL flagged the rule: no boundary hit (and no violation: not short)
    monitor.sample(schedule, PlayResult(violations=[RtlViolation(5, ACT, frozenset({NRRDS}),
                                                                 0)]))
    assert _rule_bin(monitor, "timing.boundary", NRRDS) == 1


def test_a_violation_counts_only_when_the_rtl_flags_it():
    monitor = CoverageMonitor(name="t2")
    schedule = [T(0, 0, ACT, 0, 1), T(4, 0, ACT, 4, 1)]
    monitor.sample(schedule, PlayResult())  # the RTL missed it: not covered
    assert _rule_bin(monitor, "timing.violation", NRRDS) == 0
    found = monitor.sample(schedule, PlayResult(
        violations=[RtlViolation(4, ACT, frozenset({NRRDS}), 0)]))
    assert _rule_bin(monitor, "timing.violation", NRRDS) == 1
    # the models' verdict comes back for the scoreboard
    assert [(v.kind, v.rule) for v in found] == [("timing", NRRDS)]


def test_a_refused_command_is_no_boundary_and_its_error_is_sampled():
    monitor = CoverageMonitor(name="t3")
    # bank 1 is in bank 0's group: nRRDL (6) binds; ACT at +6 meets it, but bank 1 being
    # open on another row the RTL refuses it (BANK_OPEN = 4)
    schedule = [T(0, 0, ACT, 1, 2), T(100, 0, ACT, 0, 1), T(106, 0, ACT, 1, 1)]
    monitor.sample(schedule, PlayResult(violations=[RtlViolation(106, ACT, frozenset(), 4)]))
    assert _rule_bin(monitor, "timing.boundary", NRRDL) == 0
    assert _bins(monitor, "protocol.error")["BANK_OPEN"] == 1
    assert _bins(monitor, "command.state")["ACT other normal"] == 1
    assert _bins(monitor, "command.state")["ACT closed normal"] == 2


def test_rejected_commands_and_read_collisions_are_sampled():
    monitor = CoverageMonitor(name="t4")
    words = np.zeros(16, np.uint16)
    schedule = [T(0, 0, Command.REFab)]
    monitor.sample(schedule, PlayResult(
        violations=[RtlViolation(0, Command.REFab, frozenset(), 1)],
        reads=[RtlRead(60, RD, words), RtlRead(60, RDMAC16, words), RtlRead(70, RD, words),
               RtlRead(80, RD, words), RtlRead(80, Command.RDAF16, words),
               RtlRead(90, Command.RDAF16, words)]))
    assert _bins(monitor, "command.rejected")["REFab"] == 1
    assert _bins(monitor, "protocol.error")["REJECTED"] == 1
    assert _bins(monitor, "reads.return") == {"RD": 1, "RDMAC16": 0, "RDAF16": 1,
                                              "RD+RDMAC16": 1, "RD+RDAF16": 1}


def test_ewmul_bg_and_af_lut_rows_are_sampled():
    from patton.hw.isa import ProtocolCode
    from patton.sim.device import AF_ROW_BASE as LUT

    monitor = CoverageMonitor(name="t6")
    words = np.ones(16, np.uint16)
    schedule = [T(0, 0, Command.ACT16, -1, LUT + 3), T(100, 0, Command.AF16, -1, LUT + 3),
                T(110, 0, Command.EWMUL16, -1, LUT + 3, 5, cfr=(0, 0, 0)),
                T(120, 0, Command.EWMUL16, -1, LUT + 3, 6),
                T(200, 0, Command.WR, 2, LUT + 3, 7, payload=words),
                T(210, 0, Command.AF16, -1, LUT + 3), T(220, 0, Command.AF16, -1, 7)]
    code = ProtocolCode.WRONG_ROW.value
    monitor.sample(schedule, PlayResult(violations=[RtlViolation(220, Command.AF16,
                                                                 frozenset(), code)]))
    assert _bins(monitor, "ewmul.bg") == {"EWMUL_BG=0": 1, "EWMUL_BG=1": 1}
    af = _bins(monitor, "af.lut")
    assert af["LUT row 3"] == 2 and af["written LUT row"] == 1  # the refused AF16 counts not
    assert sum(af.values()) == 3 and monitor.written == {3}
    assert _bins(monitor, "command.state")["AF16 same normal"] == 2


def test_figures_and_holes():
    monitor = CoverageMonitor(name="t5")
    figures = monitor.figures()
    assert figures["rules_total"] == 62 and figures["rules_boundary_hit"] == 0
    groups = monitor.groups()
    assert figures["bins_total"] == sum(len(g.bins) for g in groups) > 3 * 62
    assert figures["rules_dominated"] == figures["bins_unreachable"] == 4  # no 1-cycle gap
    assert not monitor.closed() and set(monitor.holes()) == {
        "timing.boundary", "timing.legal", "timing.violation", "command.state", "command.rejected",
        "protocol.error", "mac.cross", "ewmul.bg", "af.lut", "reads.return"}
    assert len(monitor.holes()["command.rejected"]) == len(REJECTED)


def _carried(segments: list[list[T]]) -> list:
    """Every violation of consecutive segments on one channel (state carried, history not)."""
    checker, found = Checker(), []
    for segment in segments:
        checker.forget()
        for cmd in segment:
            found += checker.step(cmd)
    return found


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_legal_stimulus_is_legal(seed):
    stimulus = Stimulus(seed, mix=Mix.legal())
    segments = [stimulus.segment(600) for _ in range(3)]
    assert not _carried(segments)
    assert not verify(segments[0])  # from reset, ``verify`` itself agrees
    kinds = {c.command for s in segments for c in s}
    assert kinds == IMPLEMENTED  # every implemented command, and nothing else
    for s in segments:
        assert all(b.cycle > a.cycle for a, b in zip(s, s[1:]))


def test_the_mutated_stimulus_breaks_rules_on_purpose_and_is_seeded():
    first = Stimulus(7).segment(2000)
    assert [(c.cycle, c.command, c.bank, c.row) for c in first] == [
        (c.cycle, c.command, c.bank, c.row) for c in Stimulus(7).segment(2000)]
    found = verify([c for c in first if c.command not in REJECTED])
    kinds = {v.kind for v in found}
    assert kinds == {"timing", "protocol"}
    short_by_one = sum(v.kind == "timing" and v.actual == v.required - 1 for v in found)
    assert short_by_one > 50
    assert any(c.command in REJECTED for c in first)


@pytest.mark.parametrize("bad", [dict(protocol=1.5), dict(protocol=0.6, rejected=0.6),
                                 dict(boundary=0.5, violation=0.5, slack=0.5),
                                 dict(targeted=-0.1)])
def test_mix_refuses_bad_shares(bad):
    with pytest.raises(ValueError, match="Mix"):
        Mix(**bad)


def test_stimulus_refuses_bad_rows():
    with pytest.raises(ValueError, match="rows = 0"):
        Stimulus(rows=0)
