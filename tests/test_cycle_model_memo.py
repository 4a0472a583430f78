"""The kernel's memo (:class:`patton.sim.native.Memo`): runs that take stored segments report
exactly what full simulations report."""

from __future__ import annotations

import numpy as np
import pytest
from patton.sim import native
from patton.sim.cost_cache import CostCache
from patton.sim.cycle_model import CycleModel, DeviceState
from patton.sim.device import DEVICE
from patton.sim.isa import Instruction, Opcode, channel_bit
from patton.sim.program import Program
from patton.sim.random_programs import random_program
from patton.sim.timing import PROFILES


def _figures(result):
    return (result.cycles, result.command_counts, result.bank_state_cycles, result.state)


def _state(rng: np.random.Generator) -> DeviceState:
    rows = tuple(tuple(int(r) for r in rng.choice([-1, 0, 1, 2, 3], size=DEVICE.banks))
                 if rng.random() < 0.6 else (-1,) * DEVICE.banks for _ in range(DEVICE.channels))
    modes = tuple(bool(rng.random() < 0.3) for _ in range(DEVICE.channels))
    return DeviceState(rows, modes, (int(rng.integers(0, 2)), int(rng.integers(0, 2)),
                                     int(rng.integers(0, 8))))


def _repeating(rng: np.random.Generator, channels: int) -> list[Instruction]:
    """A random body repeated: its segments come back from other states (rows, windows,
    queues) within one run, which is what the memo must tell apart or reuse."""
    body = random_program(rng, int(rng.integers(10, 60)), channels=channels,
                          rows=int(rng.integers(1, 5)))[:-1]
    reps = int(rng.integers(2, 5))
    return body * reps + [Instruction(Opcode.EOC)]


@pytest.fixture(params=[0, 5], ids=["stride-default", "stride-5"])
def stride(request, monkeypatch):
    """The shared front end's stride points, as configured and dense (points everywhere)."""
    if request.param:
        monkeypatch.setattr(native, "MEMO_STRIDE", request.param)
    return request.param


@pytest.mark.parametrize("seed", range(40))
def test_memo_runs_equal_full_simulation(seed, stride):
    """Random programs of every kind with repeated bodies, on both front ends and both
    timing profiles, drained or not, from several start states (one repeated): every run
    with the memo, the first storing and later ones taking segments, equals a plain run."""
    rng = np.random.default_rng(1000 + seed)
    channels = int(rng.choice([1, 4, 8, 32]))
    program = Program.of(_repeating(rng, channels))
    options = {"timing": PROFILES[seed % len(PROFILES)], "drain": bool(seed % 3),
               "frontend": ("shared", "per_channel")[seed % 2]}
    plain = CycleModel(**options)
    memo = CycleModel(memo=True, **options)
    states = [_state(rng), _state(rng)]
    for state in (states[0], states[1], states[0], None):
        assert _figures(memo.run(program, state)) == _figures(plain.run(program, state))
    assert memo.memo.stats()["unstorable"] == 0


def test_memo_takes_segments_on_repeats():
    """A program run again from the same state is taken from the memo whole; one whose
    body repeats takes its later copies within the first run."""
    rng = np.random.default_rng(3)
    body = random_program(rng, 40, channels=8, rows=3, kinds=("mac_abk", "wr_bias", "rd_mac",
                                                              "wr_gb"))[:-1]
    program = Program.of(body * 6 + [Instruction(Opcode.EOC)])
    memo = native.Memo()
    model = CycleModel(memo=memo)
    first = model.run(program)
    once = memo.stats()
    assert once["hits"] > 0 and once["misses"] > 0  # later copies of the body taken
    again = model.run(program)
    twice = memo.stats()
    assert _figures(again) == _figures(first) == _figures(CycleModel().run(program))
    assert twice["misses"] == once["misses"] and twice["hits"] > once["hits"]
    assert twice["taken_instructions"] - once["taken_instructions"] == len(program)


def test_memo_tells_states_apart_by_their_timing_windows():
    """The same segment after two prefixes that leave the same rows open but different timing
    windows (a write just before the barrier, or long before it): the memo must not give the
    second the first's cost."""
    ch = channel_bit(0)
    segment = [Instruction(Opcode.WR_BIAS, gpr0=0, channel_mask=ch),
               Instruction(Opcode.MAC_ABK, opsize=8, channel_mask=ch, row=1),
               Instruction(Opcode.RD_MAC, gpr0=0, channel_mask=ch)]
    open_row = [Instruction(Opcode.MAC_ABK, opsize=1, channel_mask=ch, row=1),
                Instruction(Opcode.RD_MAC, gpr0=0, channel_mask=ch)]
    recent = open_row + [Instruction(Opcode.WR_GB, opsize=64, gpr0=0, channel_mask=ch),
                         Instruction(Opcode.RD_MAC, gpr0=0, channel_mask=ch)]
    settled = open_row + [Instruction(Opcode.WR_GB, opsize=64, gpr0=0, channel_mask=ch)] + \
        [Instruction(Opcode.MAC_ABK, opsize=64, channel_mask=channel_bit(1), row=5)] * 6 + \
        [Instruction(Opcode.RD_MAC, gpr0=0, channel_mask=ch | channel_bit(1))]
    memo = CycleModel(memo=True)
    for prefix in (recent, settled, recent):
        program = prefix + segment + [Instruction(Opcode.EOC)]
        assert _figures(memo.run(program)) == _figures(CycleModel().run(program))


def test_memo_on_long_runs_without_barriers(stride):
    """One-channel writes with no blocking instruction: the shared front end's stride points
    cut them into segments, which repeat across channels and runs."""
    program = [Instruction(Opcode.WR_MEM, channel=c, bank=b, row=c % 3, col=j)
               for c in range(32) for b in range(16) for j in range(2)] + \
        [Instruction(Opcode.EOC)]
    for frontend in ("shared", "per_channel"):
        plain = CycleModel(drain=True, frontend=frontend)
        memo = CycleModel(drain=True, frontend=frontend, memo=True)
        for _ in range(2):
            assert _figures(memo.run(program)) == _figures(plain.run(program))
        if frontend == "shared":
            assert memo.memo.stats()["hits"] > 0


def test_a_small_budget_starts_over_and_stays_exact():
    rng = np.random.default_rng(11)
    program = Program.of(_repeating(rng, 8))
    memo = native.Memo(budget=4096)
    model = CycleModel(memo=memo)
    for _ in range(3):
        assert _figures(model.run(program)) == _figures(CycleModel().run(program))
    assert memo.stats()["clears"] > 0 and memo.stats()["bytes"] <= 4096


def test_memo_is_left_alone_by_recording_runs_and_kept_to_one_setting():
    memo = native.Memo()
    program = random_program(np.random.default_rng(2), 30, channels=4)
    CycleModel(memo=memo, record=True).run(program)
    assert memo.stats()["hits"] + memo.stats()["misses"] == 0
    CycleModel(memo=memo).run(program)
    assert memo.stats()["misses"] > 0
    with pytest.raises(ValueError, match="one setting"):
        CycleModel(memo=memo, frontend="per_channel").run(program)
    memo.clear()
    assert memo.stats()["entries"] == 0 and memo.stats()["clears"] == 1
    with pytest.raises(ValueError, match="budget"):
        native.Memo(budget=0)
    with pytest.raises(ValueError, match="memo is True, False or a Memo"):
        CycleModel(memo="yes")  # type: ignore[arg-type]


@pytest.mark.parametrize("frontend", ["shared", "per_channel"])
def test_cost_cache_with_a_memo_checks_every_cost(frontend):
    """CostCache(check=1) re-simulates every cost without the memo and compares: serving-like
    repeated programs from changing states never differ."""
    rng = np.random.default_rng(5)
    cache = CostCache(CycleModel(drain=True, frontend=frontend, memo=True), check=1.0)
    state = None
    programs = [Program.of(_repeating(rng, 32)) for _ in range(3)]
    for step in range(9):
        out = cache.cost(programs[step % 3], state)
        state = out.state
    assert cache.checked == 9


@pytest.mark.parametrize("seed", range(30))
def test_memo_resumes_conventional_traffic_mid_flight(seed, monkeypatch):
    """Two programs that share a prefix of conventional reads and writes and then part: the
    second takes the prefix from the memo and resumes from its stored state with requests in
    every buffer (their arrival order decides FR-FCFS among ready ones)."""
    monkeypatch.setattr(native, "MEMO_STRIDE", int(np.random.default_rng(seed).integers(2, 6)))
    rng = np.random.default_rng(seed)
    kinds = ("wr_mem", "rd_mem", "wr_sbk", "rd_sbk")
    prefix = random_program(rng, 30, channels=2, rows=4, kinds=kinds)[:-1]
    tails = [random_program(rng, 20, channels=2, rows=4, kinds=kinds) for _ in range(2)]
    state = _state(rng)
    memo = CycleModel(drain=True, memo=True)
    for tail in tails:
        program = prefix + tail
        assert _figures(memo.run(program, state)) == \
            _figures(CycleModel(drain=True).run(program, state))
