"""Schedule checker: legal schedules pass, mutated ones list exactly the broken rules."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from patton.sim import schedule, trace
from patton.sim.check import verify
from patton.sim.cycle_model import CycleModel
from patton.sim.device import DEVICE
from patton.sim.isa import COMMAND_SCOPE, Command, Scope
from patton.sim.random_programs import random_program
from patton.sim.timing import LEVELS, TIMING


@pytest.fixture(scope="module")
def gemv(traces_dir):
    return CycleModel(record=True).run(trace.read(traces_dir / "probe_gemv.trace")).schedule


def _moved(sched, index, cycle):
    out = list(sched)
    out[index] = dataclasses.replace(out[index], cycle=cycle)
    return out


def test_mac16_too_soon_after_act16(gemv):
    i = next(i for i, c in enumerate(gemv) if c.command == Command.MAC16)
    act = max(c.cycle for c in gemv[:i] if c.command == Command.ACT16)
    found = verify(_moved(gemv, i, act + 55))
    assert [(v.kind, v.rule, v.preceding, v.required, v.actual) for v in found] == \
        [("timing", 36, Command.ACT16, 56, 55)]


def test_back_to_back_mac16_breaks_column_rules(gemv):
    i = [i for i, c in enumerate(gemv) if c.command == Command.MAC16][1]
    found = verify(_moved(gemv, i, gemv[i - 1].cycle + 1))
    assert {v.rule for v in found} == {2, 4, 5}
    assert all(v.required == 2 and v.actual == 1 for v in found)


def test_same_cycle_is_a_bus_conflict(gemv):
    i = [i for i, c in enumerate(gemv) if c.command == Command.WRGB][1]
    kinds = {v.kind for v in verify(_moved(gemv, i, gemv[i - 1].cycle))}
    assert "bus" in kinds


def test_dropped_act16_and_dropped_tmod_are_protocol_errors(gemv):
    first_act = next(i for i, c in enumerate(gemv) if c.command == Command.ACT16)
    found = verify(gemv[:first_act] + gemv[first_act + 1:])
    assert any(v.kind == "protocol" and v.command == Command.MAC16 for v in found)
    first_tmod = next(i for i, c in enumerate(gemv) if c.command == Command.TMOD)
    found = verify(gemv[first_tmod + 1:])
    assert any(v.kind == "protocol" and "normal mode" in v.detail for v in found)


def _oracle(sched, timing=TIMING):
    """Every rule of ``timing`` broken by a pair (last issue of P at a node, later F there)."""
    out = set()
    per_group = DEVICE.banks_per_group
    ordered = sorted(sched, key=lambda c: c.cycle)
    for j, f in enumerate(ordered):
        for i in range(j - 1, -1, -1):
            p = ordered[i]
            if p.channel != f.channel:
                continue
            for rule in timing.rules:
                if rule.cycles < 0 or p.command not in rule.preceding \
                        or f.command not in rule.following:
                    continue
                banked = [c.bank >= 0 and COMMAND_SCOPE[c.command] != Scope.CHANNEL
                          for c in (p, f)]
                if rule.level == Scope.BANKGROUP and not (
                        all(banked) and p.bank // per_group == f.bank // per_group):
                    continue
                if rule.level == Scope.BANK and not (all(banked) and p.bank == f.bank):
                    continue
                later = [c for c in ordered[i + 1:j] if c.channel == p.channel
                         and c.command == p.command and (rule.level == Scope.CHANNEL
                                                          or c.bank == p.bank or (
                             rule.level == Scope.BANKGROUP
                             and c.bank // per_group == p.bank // per_group))]
                if later:
                    continue
                if f.cycle - p.cycle < rule.cycles:
                    out.add((f.cycle, f.channel, f.command, rule.id))
    return out


@pytest.mark.parametrize("seed", range(12))
def test_random_mutations_match_a_pairwise_oracle(seed):
    rng = np.random.default_rng(100 + seed)
    sched = CycleModel(record=True).run(random_program(rng, 12, channels=2, rows=2)).schedule
    assert _oracle(sched) == set()
    for _ in range(8):
        i = int(rng.integers(len(sched)))
        if rng.random() < 0.8:
            mutated = _moved(sched, i, max(0, sched[i].cycle - int(rng.integers(1, 40))))
        else:
            mutated = sched[:i] + sched[i + 1:]
        found = {(v.cycle, v.channel, v.command, v.rule) for v in verify(mutated)
                 if v.kind == "timing"}
        assert found == _oracle(mutated)


def test_all_levels_have_rules():
    assert all(any(TIMING.before[level][c] for c in Command) for level in LEVELS)


BAD = [
    ("12 0", "expected 'cycle channel command"),
    ("12 0 FOO", "unknown command"),
    ("x 0 ACT 0 0 -", "not a number"),
    ("12 0 ACT - 0 -", "needs a bank"),
    ("12 0 MAC16 3 0 0", "bank must be '-'"),
    ("12 0 ACT 16 0 -", "bank 16 out of range"),
    ("12 0 ACT 1 16384 -", "row 16384 out of range"),
    ("12 0 RD 1 0 64", "column 64 out of range"),
    ("12 32 PREA", "channel 32 out of range"),
    ("12 0 EOC", "not a bus command"),
]


@pytest.mark.parametrize("line,reason", BAD)
def test_bad_schedule_line(line, reason):
    with pytest.raises(schedule.ScheduleError) as err:
        list(schedule.parse(["# ok", "1 0 TMOD", line], source="s.sched"))
    assert str(err.value).startswith("s.sched:3: ") and reason in str(err.value)


def test_schedule_text_round_trip(gemv, tmp_path):
    path = tmp_path / "g.sched"
    schedule.write(path, gemv)
    again = schedule.read(path)
    key = [(c.cycle, c.channel, c.command, c.bank, c.row, c.col) for c in gemv]
    assert [(c.cycle, c.channel, c.command, c.bank, c.row, c.col) for c in again] == key
    assert verify(again) == []


def test_broadcast_mac_needs_its_partner_bank_open(tmp_path):
    # The public controller opens only the MAC_SBK's own bank, also under BROADCAST = 1,
    # where bank 1 supplies the vector: the checker must call that out.
    path = tmp_path / "partner.trace"
    path.write_text("W CFR 0 1\nAiM MAC_SBK 1 1 0 0\nAiM RD_MAC 0 1\nAiM EOC\n")
    sched = CycleModel(record=True).run(trace.read(path)).schedule
    found = verify(sched)
    assert [(v.kind, v.command) for v in found] == [("protocol", Command.MAC)]
    assert "partner bank 1" in found[0].detail and "closed" in found[0].detail
    # With bank 1 open on the row (a MAC_ABK opens all banks first) the MAC is legal.
    path.write_text("W CFR 0 1\nAiM MAC_ABK 1 1 0\nAiM MAC_SBK 1 1 0 0\nAiM RD_MAC 0 1\n"
                    "AiM EOC\n")
    assert verify(CycleModel(record=True).run(trace.read(path)).schedule) == []
    # Under BROADCAST = 0 the partner does not matter.
    path.write_text("AiM MAC_SBK 1 1 0 0\nAiM RD_MAC 0 1\nAiM EOC\n")
    assert verify(CycleModel(record=True).run(trace.read(path)).schedule) == []


def test_verify_program_checks_every_channel_from_the_start_state():
    """A second program, legal only from the state the first left, is clean by channel; the
    same commands from reset, or moved too early, are not."""
    from patton.sim.check import verify_from, verify_program
    from patton.sim.cycle_model import DeviceState

    rng = np.random.default_rng(11)
    model = CycleModel(record=True, drain=True)
    first = model.run(random_program(rng, 40, channels=3, rows=3, broadcast=False))
    second = model.run(random_program(rng, 40, channels=3, rows=3, broadcast=False),
                       first.state)
    found = verify_program(first.state, second.schedule)
    assert sorted(found) == sorted({c.channel for c in second.schedule})
    assert all(v == [] for v in found.values())
    # from reset, the rows the first program left open are missing
    assert any(verify_program(DeviceState.reset(), second.schedule).values())
    early = [dataclasses.replace(c, cycle=max(c.cycle - 2, 0)) if i % 5 == 2 else c
             for i, c in enumerate(second.schedule)]
    moved = verify_program(first.state, early)
    assert any(moved.values())
    for ch, violations in moved.items():
        assert violations == verify_from(first.state, ch, [c for c in early if c.channel == ch])
