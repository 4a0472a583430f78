"""Timing profiles: the public AiM simulator's GDDR6 rules at 0f28a07 (default) and 2eb1ee0.

The 2eb1ee0 table must differ from 0f28a07 in exactly the rules the reference lists (restated
below, independently of the data file), and the cycle model under it must reproduce that
commit: ``all_isr.trace`` in 669 cycles (0f28a07: 689) with the same command counts, and small
traces that exercise each differing rule issue every command at the cycle the rules give
(derived by hand in the comments). ``verify``, the CLI and the RTL timing checker take the
profile too; the Verilator test builds the checker for 2eb1ee0 and compares it with ``verify``.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import operator
import re

import numpy as np
import pytest
from patton import cli
from patton.sim import trace
from patton.sim.check import verify
from patton.sim.cycle_model import CycleModel
from patton.sim.executor import CycleExecutor
from patton.sim.isa import Command, Scope
from patton.sim.random_programs import random_program
from patton.sim.timing import (
    DEFAULT_PROFILE,
    PROFILES,
    SLOTS,
    TIMING,
    TimingTable,
    UnknownProfileError,
    timing_table,
)
from test_check import _oracle

OLD, NEW = "aimsim-0f28a07", "aimsim-2eb1ee0"

# -- the tables -------------------------------------------------------------------------------

C, G, B = Scope.CHANNEL, Scope.BANKGROUP, Scope.BANK
#: The reference's listing (timing-2eb1ee0.md): rules of 2eb1ee0 that 0f28a07 does not have,
#: and the other way round, as (level, preceding, following, expression).
ONLY_2EB1EE0 = {
    (C, "ACT16", "ACT ACT4 ACT16", "nRRDS"),
    (C, "ACT ACT4 ACT16", "ACT", "nRRDS"),
    (G, "RD RDCP MAC", "PRE PRE4", "nRTP"),
    (G, "WR WRCP", "PRE PRE4", "nCWL + nBL + nWR"),
    (C, "PRE", "PRE", "nRP"),
}
ONLY_0F28A07 = {
    (C, "ACT ACT4", "ACT ACT4", "nRRDS"),
    (C, "ACT ACT4 ACT16", "ACT16", "nRC"),
    (C, "ACT16", "ACT ACT4 ACT16", "nRC"),
    (G, "RD RDCP MAC", "PRE4", "nRTP"),
    (G, "WR WRCP", "PRE4", "nCWL + nBL + nWR"),
    (G, "ACT ACT4", "ACT4", "nRC"),
    (G, "ACT4", "ACT ACT4", "nRC"),
    (B, "RD RDCP MAC", "PRE", "nRTP"),
    (B, "WR WRCP", "PRE", "nCWL + nBL + nWR"),
    (B, "ACT", "ACT", "nRC"),
    (B, "PRE", "PRE", "nRP"),
}


def _key(rule) -> tuple:
    def names(commands) -> str:
        return " ".join(sorted(c.name for c in commands))
    return (rule.level, names(rule.preceding), names(rule.following),
            " ".join(rule.expression.split()))


def _norm(entries: set[tuple]) -> set[tuple]:
    return {(lv, " ".join(sorted(p.split())), " ".join(sorted(f.split())), e)
            for lv, p, f, e in entries}


def test_profiles_differ_in_exactly_the_listed_rules():
    old = {_key(r) for r in timing_table(OLD).rules}
    new = {_key(r) for r in timing_table(NEW).rules}
    assert new - old == _norm(ONLY_2EB1EE0)
    assert old - new == _norm(ONLY_0F28A07)
    assert len(timing_table(OLD).rules) == 104 and len(timing_table(NEW).rules) == 104 - 11 + 5
    # Every rule common to both keeps its slot (its id), so ids compare across profiles.
    by_key = {_key(r): r.id for r in timing_table(OLD).rules}
    assert all(by_key[_key(r)] == r.id for r in timing_table(NEW).rules if _key(r) in by_key)
    assert all(0 <= r.id < SLOTS for name in PROFILES for r in timing_table(name).rules)


_OPS = {ast.Add: operator.add, ast.Sub: operator.sub}


def _evaluate(expression: str, params: dict) -> int:
    """Evaluate a ``nX + nY - 3``-style rule expression on the timing parameters."""
    def walk(node):
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](walk(node.left), walk(node.right))
        if isinstance(node, ast.Name):
            return params[node.id]
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        raise ValueError(f"unexpected {ast.dump(node)} in {expression!r}")
    return walk(ast.parse(expression, mode="eval").body)


@pytest.mark.parametrize("name", PROFILES)
def test_every_value_is_its_expression(name):
    t = timing_table(name)
    refresh = {"nRFC", "nRFCpb", "nRREFD"}  # refresh timings: not in timing_params.json
    checked = 0
    for rule in t.rules:
        names = set(re.findall(r"n[A-Za-z]+", rule.expression))
        if names & refresh:
            assert names <= refresh and Command.REFab in rule.preceding | rule.following \
                or Command.REFpb in rule.preceding | rule.following, rule
            continue
        assert _evaluate(rule.expression, t.params) == rule.cycles, rule
        checked += 1
    assert checked >= len(t.rules) - 5


def test_profiles_share_parameters_latencies_and_quiet():
    # tb/ (sessions, monitor, player drain) uses the default table's latencies and quiet time
    # for every profile: that is only right while they agree.
    old, new = timing_table(OLD), timing_table(NEW)
    assert old.params == new.params and old.latency == new.latency
    assert old.quiet == new.quiet


def test_table_names_and_errors():
    assert DEFAULT_PROFILE == OLD and PROFILES == (OLD, NEW)
    assert timing_table() is timing_table(OLD) is TIMING and timing_table(NEW) is timing_table(NEW)
    assert timing_table(NEW).name == NEW and timing_table(NEW) is not TIMING
    custom = TimingTable(list(TIMING.rules), TIMING.params)
    assert timing_table(custom) is custom and custom.name == "custom"
    assert timing_table(NEW).rule(96).level == Scope.CHANNEL and TIMING.rule(96).level == Scope.BANK
    with pytest.raises(KeyError):
        timing_table(NEW).rule(93)  # 2eb1ee0 has no same-bank ACT -> ACT nRC
    with pytest.raises(UnknownProfileError, match="aimsim-0f28a07, aimsim-2eb1ee0"):
        timing_table("aimsim-head")
    with pytest.raises(UnknownProfileError):
        CycleModel(timing="2eb1ee0")
    with pytest.raises(UnknownProfileError):
        verify([], timing="nope")
    with pytest.raises(TypeError):
        timing_table(42)


# -- exactness: the rules that differ, one trace each -------------------------------------------

# Each trace runs on channel 0 from reset, drained (every command issues). Request ``i`` of a
# trace is decoded in cycle ``i`` (one host line per cycle, W GPR lines included) and reaches
# the controller at cycle ``i + 1``, so the first command issues at cycle 1. Conventional
# R/W MEM requests are FR-FCFS: a request whose command is ready goes first, ties oldest first.
# Parameters (cycles): nRCDRD 36, nRCDWR 28, nRCDRDMAC 56, nRAS 54, nRP 32, nRC 89, nRRDS 5,
# nRRDL 6, nRTP 12, nCWL + nBL + nWR = 41; reads return nCL + nBL = 52 after RD, writes retire
# nCWL + nBL = 8 after WR; a drained run ends at the last completion. Each entry:
# trace text, then per profile (schedule as (cycle, command, bank), end cycle).

TRACES = {
    # PRE -> PRE in one channel (slot 96: bank level at 0f28a07, channel level at 2eb1ee0).
    # Banks 0 (BG 0) and 4 (BG 1) opened on row 0, then row 1 of each.
    #   ACT b0 @1; ACT b4 @6 (channel ACT->ACT nRRDS 5); WR b0 @29, WR b4 @34 (ACT + nRCDWR 28).
    #   PRE b0 @70 = WR b0 + 41 (WR->PRE; ACT + nRAS 55 is earlier).
    #   0f28a07: PRE b4 @75 = WR b4 + 41; ACT b0 @102, ACT b4 @107 (PRE + nRP 32);
    #            WR @130, @135 (+28); end 135 + 8 = 143.
    #   2eb1ee0: PRE b4 waits PRE b0 + nRP = 102, where ACT b0 (PRE b0 + 32) is ready too and,
    #            older, goes first: PRE b4 @103; WR b0 @130 (102 + 28); ACT b4 @135 (103 + 32);
    #            WR b4 @163 (135 + 28); end 163 + 8 = 171.
    "pre_to_pre": ("W MEM 0 0 0\nW MEM 0 4 0\nW MEM 0 0 1\nW MEM 0 4 1\nAiM EOC\n", {
        OLD: ([(1, "ACT", 0), (6, "ACT", 4), (29, "WR", 0), (34, "WR", 4), (70, "PRE", 0),
               (75, "PRE", 4), (102, "ACT", 0), (107, "ACT", 4), (130, "WR", 0),
               (135, "WR", 4)], 143),
        NEW: ([(1, "ACT", 0), (6, "ACT", 4), (29, "WR", 0), (34, "WR", 4), (70, "PRE", 0),
               (102, "ACT", 0), (103, "PRE", 4), (130, "WR", 0), (135, "ACT", 4),
               (163, "WR", 4)], 171)}),
    # WR -> PRE in a bank group (slot 66: bank level at 0f28a07, bank-group level at 2eb1ee0).
    # Banks 1 and 0 (both BG 0) written on row 0, then row 1 of bank 1.
    #   ACT b1 @1; ACT b0 @7 (bank-group ACT->ACT nRRDL 6); WR b1 @29, WR b0 @35 (+28).
    #   0f28a07: PRE b1 @70 = WR b1 + 41 (nRAS: 55); ACT b1 @102 (+32; ACT + nRC = 90 is
    #            earlier); WR @130; end 138.
    #   2eb1ee0: PRE b1 also waits WR b0 + 41 = 76; ACT @108; WR @136; end 144.
    "wr_to_pre_in_bankgroup": ("W MEM 0 1 0\nW MEM 0 0 0\nW MEM 0 1 1\nAiM EOC\n", {
        OLD: ([(1, "ACT", 1), (7, "ACT", 0), (29, "WR", 1), (35, "WR", 0), (70, "PRE", 1),
               (102, "ACT", 1), (130, "WR", 1)], 138),
        NEW: ([(1, "ACT", 1), (7, "ACT", 0), (29, "WR", 1), (35, "WR", 0), (76, "PRE", 1),
               (108, "ACT", 1), (136, "WR", 1)], 144)}),
    # RD -> PRE in a bank group (slot 65) and ACT -> ACT in one bank (slot 93, nRC at 0f28a07
    # only). Ten W GPR lines (one decode cycle each) delay the read of bank 0: decoded @11.
    #   ACT b1 @1; ACT b0 @12 (arrival); RD b1 @37, RD b0 @48 (ACT + nRCDRD 36).
    #   0f28a07: PRE b1 @55 = ACT b1 + nRAS 54 (RD b1 + nRTP: 49); ACT b1 @90 = ACT b1 + nRC
    #            89 (PRE + nRP: 87); RD @126; end 126 + 52 = 178.
    #   2eb1ee0: PRE b1 waits RD b0 + nRTP = 60 (bank group); ACT b1 @92 (+32, no nRC);
    #            RD @128; end 180.
    "rd_to_pre_in_bankgroup": ("R MEM 0 1 0\n" + "W GPR 0\n" * 10
                               + "R MEM 0 0 0\nR MEM 0 1 1\nAiM EOC\n", {
        OLD: ([(1, "ACT", 1), (12, "ACT", 0), (37, "RD", 1), (48, "RD", 0), (55, "PRE", 1),
               (90, "ACT", 1), (126, "RD", 1)], 178),
        NEW: ([(1, "ACT", 1), (12, "ACT", 0), (37, "RD", 1), (48, "RD", 0), (60, "PRE", 1),
               (92, "ACT", 1), (128, "RD", 1)], 180)}),
    # ACT -> ACT in one bank (slot 93): row 0, then row 1 of bank 0.
    #   ACT @1, RD @37, PRE @55 (nRAS), then ACT: 0f28a07 @90 (ACT + nRC 89), 2eb1ee0 @87
    #   (PRE + nRP 32); RD +36; end +52.
    "act_to_act_in_bank": ("R MEM 0 0 0\nR MEM 0 0 1\nAiM EOC\n", {
        OLD: ([(1, "ACT", 0), (37, "RD", 0), (55, "PRE", 0), (90, "ACT", 0), (126, "RD", 0)],
              178),
        NEW: ([(1, "ACT", 0), (37, "RD", 0), (55, "PRE", 0), (87, "ACT", 0), (123, "RD", 0)],
              175)}),
    # ACT -> ACT across bank groups (slot 27, rewritten but 5 cycles in both) and within one
    # (bank-group nRRDL 6, the same rule in both): banks 0 (BG 0), 4 and 5 (BG 1).
    #   ACT @1, @6 (+nRRDS 5), @12 (+nRRDL 6); WR +28 each: @29, @34, @40; end 48.
    "act_to_act_across_bankgroups": ("W MEM 0 0 0\nW MEM 0 4 0\nW MEM 0 5 0\nAiM EOC\n", {
        name: ([(1, "ACT", 0), (6, "ACT", 4), (12, "ACT", 5), (29, "WR", 0), (34, "WR", 4),
                (40, "WR", 5)], 48) for name in (OLD, NEW)}),
    # ACT -> ACT16 (slot 30, channel nRC at 0f28a07 only): bank 0 open on row 0, then a MAC_ABK
    # of row 0 needs the other banks: ACT16 (bank 0's row is the same, so no PREA).
    #   ACT @1, RD request in the active buffer.
    #   0f28a07: RD @37; ACT16 @90 (ACT + nRC 89); MAC16 @146 (+nRCDRDMAC 56); MAC16 completes
    #            @147 and EOC, behind it, calls back @148.
    #   2eb1ee0: ACT16 @7 (ACT -> ACT16 nRRDL 6); the RD then waits ACT16 + nRCDRD 36 = 43;
    #            MAC16 @63 (7 + 56); the RD returns @95 (43 + 52), EOC behind it @96.
    "act_to_act16": ("R MEM 0 0 0\nAiM MAC_ABK 1 0x80000000 0\nAiM EOC\n", {
        OLD: ([(1, "ACT", 0), (37, "RD", 0), (90, "ACT16", -1), (146, "MAC16", -1)], 148),
        NEW: ([(1, "ACT", 0), (7, "ACT16", -1), (43, "RD", 0), (63, "MAC16", -1)], 96)}),
    # ACT -> PREA -> ACT16: bank 0 open on row 0, MAC_ABK of row 1.
    #   ACT @1, RD @37, PREA @55 (ACT + nRAS 54; RD + nRTP: 49); ACT16: 0f28a07 @90 (ACT +
    #   nRC 89), 2eb1ee0 @87 (PREA + nRP 32); MAC16 +56; end MAC16 + 2 (as above).
    "act_prea_act16": ("R MEM 0 0 0\nAiM MAC_ABK 1 0x80000000 1\nAiM EOC\n", {
        OLD: ([(1, "ACT", 0), (37, "RD", 0), (55, "PREA", -1), (90, "ACT16", -1),
               (146, "MAC16", -1)], 148),
        NEW: ([(1, "ACT", 0), (37, "RD", 0), (55, "PREA", -1), (87, "ACT16", -1),
               (143, "MAC16", -1)], 145)}),
    # ACT16 -> ACT (slot 31: nRC at 0f28a07, nRRDS at 2eb1ee0) never binds: the bank must be
    # closed first, MAC16 @57 (1 + 56), PRE @69 (MAC16 + nRTP 12), ACT @101 (+nRP) > 1 + 89.
    "act16_to_act": ("AiM MAC_ABK 1 0x80000000 0\nR MEM 0 0 1\nAiM EOC\n", {
        name: ([(1, "ACT16", -1), (57, "MAC16", -1), (69, "PRE", 0), (101, "ACT", 0),
                (137, "RD", 0)], 189) for name in (OLD, NEW)}),
}


def _program(tmp_path, name: str):
    path = tmp_path / f"{name}.trace"
    path.write_text(TRACES[name][0])
    return trace.read(path)


@pytest.mark.parametrize("profile", (OLD, NEW))
@pytest.mark.parametrize("name", sorted(TRACES))
def test_differing_rules_issue_where_the_rules_say(tmp_path, name, profile):
    want, end = TRACES[name][1][profile]
    result = CycleModel(timing=profile, record=True, drain=True).run(_program(tmp_path, name))
    assert [(c.cycle, c.command.name, c.bank) for c in result.schedule] == want
    assert result.cycles == end
    assert verify(result.schedule, timing=profile) == []


def test_schedules_of_one_profile_break_the_other(tmp_path):
    """Where the two schedules differ, one of them breaks the other profile's rules."""
    broken = {OLD: set(), NEW: set()}
    for name in TRACES:
        program = _program(tmp_path, name)
        runs = {p: CycleModel(timing=p, record=True, drain=True).run(program).schedule
                for p in (OLD, NEW)}
        same = [(c.cycle, c.command) for c in runs[OLD]] == \
            [(c.cycle, c.command) for c in runs[NEW]]
        found = {}
        for mine, other in ((OLD, NEW), (NEW, OLD)):
            found[other] = {v.rule for v in verify(runs[mine], timing=other)
                            if v.kind == "timing"}
            broken[other] |= found[other]
        # Identical schedules are legal under both; different ones break at least one way.
        assert same == (not (found[OLD] or found[NEW])), name
    # 0f28a07's schedules are too early for 2eb1ee0 PRE->PRE and bank-group WR/RD->PRE; 2eb1ee0's
    # too early for 0f28a07's nRC rules.
    assert broken[NEW] >= {96, 65, 66}
    assert broken[OLD] >= {30, 93}


def test_all_isr_under_both_profiles(traces_dir, reference):
    program = trace.read(traces_dir / "all_isr.trace")
    old = CycleModel(record=True).run(program)
    new = CycleModel(timing=NEW, record=True).run(program)
    expected = reference["all_isr"]
    assert old.cycles == expected["memory_system_cycles"] == 689
    assert new.cycles == 669
    counts = {int(ch): c for ch, c in expected["command_counts"].items()}
    assert old.command_counts == new.command_counts == counts
    # Where the 20 cycles go: on channel 31, an ACT @13 (a W MEM), the WRMAC16 @81, then the
    # TMOD that lets instruction 23's ACT16 issue in normal mode goes where that ACT16 would be
    # ready: at 0f28a07 ACT + nRC = 102 (slot 30), at 2eb1ee0 the next cycle, 82. ACT16 follows
    # nMODCH 32 later, and the rest of the trace 20 cycles earlier.
    def tmod_act16(result):
        ch31 = [(c.cycle, c.command) for c in result.schedule if c.channel == 31]
        first = next(i for i, (_, cmd) in enumerate(ch31) if cmd == Command.ACT16)
        return ch31[0], ch31[first - 2:first + 1]
    assert tmod_act16(old) == ((13, Command.ACT), [(81, Command.WRMAC16), (102, Command.TMOD),
                                                   (134, Command.ACT16)])
    assert tmod_act16(new) == ((13, Command.ACT), [(81, Command.WRMAC16), (82, Command.TMOD),
                                                   (114, Command.ACT16)])
    timing_only = [v for v in verify(new.schedule, timing=NEW) if v.kind == "timing"]
    assert timing_only == [] and [v for v in verify(old.schedule) if v.kind == "timing"] == []


def test_executor_takes_the_profile(traces_dir):
    program = trace.read(traces_dir / "all_isr.trace")
    assert CycleExecutor().timing is TIMING
    ex = CycleExecutor(timing=NEW)
    assert ex.timing is timing_table(NEW)
    # Drained, so the executor's cycles may exceed the simulator's; still fewer than 0f28a07's.
    assert ex.run(program).cycles < CycleExecutor().run(program).cycles


@pytest.mark.parametrize("seed", range(4))
def test_random_mutations_match_the_pairwise_oracle_under_2eb1ee0(seed):
    rng = np.random.default_rng(500 + seed)
    sched = CycleModel(timing=NEW, record=True).run(
        random_program(rng, 12, channels=2, rows=2)).schedule
    t = timing_table(NEW)
    assert _oracle(sched, t) == set()
    for _ in range(8):
        i = int(rng.integers(len(sched)))
        mutated = list(sched)
        mutated[i] = dataclasses.replace(sched[i], cycle=max(0, sched[i].cycle
                                                             - int(rng.integers(1, 40))))
        found = {(v.cycle, v.channel, v.command, v.rule) for v in verify(mutated, timing=NEW)
                 if v.kind == "timing"}
        assert found == _oracle(mutated, t)


# -- command line -------------------------------------------------------------------------------


def test_cli_run_and_check_name_the_profile(capsys, traces_dir, tmp_path):
    assert cli.main(["aim", "run", str(traces_dir / "all_isr.trace"), "--json",
                     "--timing", NEW]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["timing"] == NEW and report["cycles"] == 669
    assert cli.main(["aim", "run", str(traces_dir / "all_isr.trace"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["timing"] == OLD and report["cycles"] == 689
    # The default profile's schedule of the PRE -> PRE trace: legal there, and at 2eb1ee0 its
    # PRE b4 @75 comes 5 cycles after PRE b0 @70 (slot 96 wants 32).
    path = tmp_path / "pre.trace"
    path.write_text(TRACES["pre_to_pre"][0])
    out = tmp_path / "pre.schedule"
    assert cli.main(["aim", "run", str(path), "--schedule", str(out)]) == 0
    assert "timing     aimsim-0f28a07" in capsys.readouterr().out
    assert cli.main(["aim", "check", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["timing"] == OLD and report["violations"] == 0
    assert cli.main(["aim", "check", str(out), "--json", "--timing", NEW]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["timing"] == NEW
    assert [(v["cycle"], v["rule"], v["required"], v["actual"]) for v in report["list"]] == \
        [(75, 96, 32, 5)]


@pytest.mark.parametrize("argv", (["aim", "run", "x.trace"], ["aim", "check", "x.schedule"],
                                  ["rtl", "run", "x.trace"], ["rtl", "check", "x.schedule"]))
def test_cli_unknown_profile_is_a_usage_error(capsys, argv):
    with pytest.raises(SystemExit) as stop:
        cli.main(argv + ["--timing", "aimsim-head"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "aimsim-head" in err and OLD in err and NEW in err and "Traceback" not in err


# -- the RTL timing checker -------------------------------------------------------------------


def test_rtl_checker_rules_follow_the_profile():
    from patton.hw.timing_checker import checked_rules

    old, new = checked_rules(OLD), checked_rules(NEW)
    assert checked_rules() == old
    assert (96, Command.PRE, 32) in new[C][Command.PRE]
    assert (96, Command.PRE, 32) in old[B][Command.PRE]
    assert (66, Command.WR, 41) in new[G][Command.PRE]
    assert not any(rule == 93 for rule, _, _ in new[B].get(Command.ACT, ()))


def test_rtl_checker_flags_what_verify_flags_under_2eb1ee0():
    """Amaranth simulation of the checker built for each profile on one hand schedule."""
    from amaranth.sim import Simulator
    from patton.hw.isa import Opcode
    from patton.hw.params import ChannelParams
    from patton.hw.timing_checker import TimingChecker
    from patton.sim.schedule import TimedCommand

    # PRE b0 @0, PRE b4 @5: channel PRE->PRE nRP (slot 96) at 2eb1ee0 only. WR b1 @10, PRE b0
    # @20: 2eb1ee0 breaks bank-group WR->PRE 41 (slot 66) and channel PRE->PRE (15 after b4);
    # 0f28a07 only its bank-level PRE->PRE (20 after b0's). ACT b2 @30, @40: bank nRC 89 (slot
    # 93) at 0f28a07 only (nRRDL 6, nRRDS 5 are met). PRE b3 @60: 40 after the last PRE, 50
    # after the WR in its bank group: legal in both.
    issues = [(0, Command.PRE, 0), (5, Command.PRE, 4), (10, Command.WR, 1),
              (20, Command.PRE, 0), (30, Command.ACT, 2), (40, Command.ACT, 2),
              (60, Command.PRE, 3)]
    sched = [TimedCommand(t, 0, c, b, 0 if c != Command.PRE else -1) for t, c, b in issues]

    def flags(profile: str) -> set[tuple[int, int]]:
        dut = TimingChecker(ChannelParams(rows=4), profile)
        at = {t: (c, b) for t, c, b in issues}
        got: set[tuple[int, int]] = set()

        async def bench(ctx):
            for t in range(issues[-1][0] + 2):
                command, bank = at.get(t, (None, 0))
                ctx.set(dut.valid, command is not None)
                ctx.set(dut.command, Opcode[command.name] if command else Opcode.ACT)
                ctx.set(dut.bank, bank)
                mask = ctx.get(dut.rules)
                got.update((t, i) for i in range(mask.bit_length()) if mask >> i & 1)
                await ctx.tick()

        sim = Simulator(dut)
        sim.add_clock(1e-9)
        sim.add_testbench(bench)
        sim.run()
        return got

    flagged = {profile: flags(profile) for profile in (OLD, NEW)}
    for profile, got in flagged.items():
        assert got == {(v.cycle, v.rule) for v in verify(sched, timing=profile)
                       if v.kind == "timing"}, profile
    assert flagged == {OLD: {(20, 96), (40, 93)}, NEW: {(5, 96), (20, 96), (20, 66)}}


# -- the RTL under Verilator ------------------------------------------------------------------

#: Slots whose rule differs between the profiles.
DIFFERING = frozenset({27, 30, 31, 65, 66, 68, 69, 91, 92, 93, 96})


@pytest.mark.verilator
def test_rtl_checker_built_for_2eb1ee0_agrees_with_verify_on_mutated_schedules():
    """The player built for 2eb1ee0 flags exactly ``verify(timing=2eb1ee0)``'s violations."""
    from patton.hw.params import ChannelParams
    from patton.tb.player import SchedulePlayer
    from patton.tb.scoreboard import score
    from test_rtl_player import RTL_KINDS

    player = SchedulePlayer(ChannelParams(rows=64), timing=NEW)
    assert player.timing is timing_table(NEW)
    # Its own build: the checker's Verilog differs from the default profile's.
    default = SchedulePlayer(ChannelParams(rows=64))
    assert default.build_dir != player.build_dir
    assert (default.build_dir / "src" / "patton_channel.v").read_bytes() != \
        (player.build_dir / "src" / "patton_channel.v").read_bytes()
    rng = np.random.default_rng(15)
    program = random_program(rng, 40, channels=1, rows=3, data=True, kinds=RTL_KINDS,
                             broadcast=False)
    legal = [c for c in CycleModel(timing=NEW, record=True).run(program).schedule
             if c.channel == 0]
    assert score(legal, player.play(legal, "legal-2eb1ee0"), timing=NEW).rtl_violations == 0
    taken = differing = tries = 0
    while taken < 8:
        tries += 1
        assert tries < 5000, "too few mutants on the differing rules"
        i = int(rng.integers(1, len(legal)))
        moved = legal[i].cycle - int(rng.integers(1, 41))
        mutated = sorted(legal[:i] + [dataclasses.replace(legal[i], cycle=moved)]
                         + legal[i + 1:], key=lambda c: c.cycle)
        cycles = [c.cycle for c in mutated]
        if len(set(cycles)) != len(cycles) or moved < 1:
            continue  # one command per cycle on the player's port
        found = verify(mutated, timing=NEW)
        if any(v.kind == "protocol" for v in found):
            continue  # the RTL refuses such commands; their state then differs by design
        rules = {v.rule for v in found if v.kind == "timing"}
        if not rules & DIFFERING and taken >= 4:
            continue  # keep most mutants on the rules that differ
        taken += 1
        verdict = score(mutated, player.play(mutated, f"mutant-2eb1ee0-{taken}"),
                        values=False, timing=NEW)
        assert verdict.agree, (legal[i], verdict.rtl_timing ^ verdict.model_timing)
        old = {(v.cycle, v.rule) for v in verify(mutated) if v.kind == "timing"}
        differing += old != verdict.rtl_timing  # the 0f28a07 checker would disagree here
    assert differing >= 3
