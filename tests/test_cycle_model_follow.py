"""A run that follows another run's checkpoints reports what a full run reports."""

from __future__ import annotations

import numpy as np
import pytest
from patton.runtime.decode_batch import decode_steps, prefilled
from patton.sim import native
from patton.sim.cost_cache import CostCache
from patton.sim.cycle_model import CycleModel, DeviceState
from patton.sim.device import DEVICE
from patton.sim.isa import Cfr, Instruction, Opcode
from patton.sim.native import FRONTENDS
from patton.sim.program import Program
from patton.sim.random_programs import random_program


def _cost(result):
    return result.cycles, result.command_counts, result.bank_state_cycles, result.state


def _state(rng: np.random.Generator) -> DeviceState:
    rows = tuple(tuple(int(r) for r in rng.choice([-1, 0, 1, 2], size=DEVICE.banks))
                 if rng.random() < 0.5 else (-1,) * DEVICE.banks for _ in range(DEVICE.channels))
    modes = tuple(bool(rng.random() < 0.3) for _ in range(DEVICE.channels))
    return DeviceState(rows, modes, (0, 0, 0))


def _decoded(program: Program, state: DeviceState) -> native.Decoded:
    return native.Decoded(program, {c: state.cfr[c] for c in Cfr}, DEVICE.channels)


def _pair(model: CycleModel, program: Program, first: DeviceState, second: DeviceState):
    """Run ``program`` from ``first`` traced, then from ``second`` following: (result, met)."""
    traced = model.run_decoded(program, _decoded(program, first), first, trace=True)
    assert traced.trace is not None
    decoded = _decoded(program, second)
    out = native.run(decoded, DEVICE, model.timing, [[c] for c in range(DEVICE.channels)],
                     second.open_rows, second.reg_mode, record=False, drain=model.drain,
                     frontend=model.frontend, follow=traced.trace)
    return model.run_decoded(program, decoded, second, follow=traced.trace), out.followed


def draw(seed: int) -> tuple[Program, DeviceState, DeviceState]:
    """The random program of ``seed`` (every kind, 1, 4 or 32 channels) and two random start
    states."""
    rng = np.random.default_rng(seed)
    channels = int(rng.choice([1, 4, 32]))
    program = Program.of(random_program(rng, int(rng.integers(30, 160)), channels=channels,
                                        rows=int(rng.integers(1, 4))))
    return program, _state(rng), _state(rng)


def meetings(draws: int = 40) -> int:
    """How many of the first ``draws`` seeds' second runs meet the first (drained every other
    seed, the shared front end); ``docs/cycle-model.md`` quotes it."""
    return sum(_pair(CycleModel(drain=bool(seed % 2)), *draw(seed))[1] for seed in range(draws))


@pytest.mark.parametrize("seed", range(40))
def test_a_followed_run_equals_a_full_run(seed):
    """Random programs of every kind from two random start states, both front ends, drained
    or not: the second run, following the first's trace, reports exactly what it reports run
    in full, whether or not the two runs meet."""
    program, first, second = draw(seed)
    for frontend in FRONTENDS:
        model = CycleModel(drain=bool(seed % 2), frontend=frontend)
        followed, _ = _pair(model, program, first, second)
        assert _cost(followed) == _cost(model.run(program, second))


def test_random_runs_meet():
    """Over the same 40 draws, many second runs meet the first early and stop there (the
    shortcut this is about); if none did, following would only cost time."""
    assert meetings(40) >= 10


@pytest.mark.parametrize("frontend", FRONTENDS)
def test_a_gqa_head_meets_the_head_before(frontend):
    """A decode step's QK^T and SV, run again from the state the first run left (the next
    query head of a GQA group), meet the first run and stop, with the full run's cost."""
    rt, next_id = prefilled(8, 300, stagger=True)
    programs = next(iter(decode_steps(rt, 1, next_id)))
    model = CycleModel(drain=True, frontend=frontend)
    for program in programs[-2:]:  # layer 0's QK^T and SV
        program = program if isinstance(program, Program) else Program.of(program)
        start = DeviceState.reset(DEVICE)
        end = model.run(program, start).state
        followed, met = _pair(model, program, start, end)
        assert met
        assert _cost(followed) == _cost(model.run(program, end))


def test_only_the_traced_program_follows():
    """A trace is followed only by its own program under its own settings; a recording run
    takes none."""
    rng = np.random.default_rng(3)
    program = Program.of(random_program(rng, 40, channels=4))
    other = Program.of(random_program(rng, 40, channels=4))
    state = DeviceState.reset(DEVICE)
    model = CycleModel(drain=True)
    trace = model.run_decoded(program, _decoded(program, state), state, trace=True).trace
    with pytest.raises(ValueError, match="same program and settings"):
        model.run_decoded(other, _decoded(other, state), state, follow=trace)
    with pytest.raises(ValueError, match="same program and settings"):
        CycleModel(drain=False).run_decoded(program, _decoded(program, state), state,
                                            follow=trace)
    with pytest.raises(ValueError, match="records no schedule"):
        CycleModel(record=True).run_decoded(program, _decoded(program, state), state,
                                            trace=True)


def test_the_cost_cache_follows_a_run_it_was_told_repeats():
    """``CostCache.run(..., again=True)`` traces its miss; the program's next miss (another
    start state) follows it, and a full re-simulation of it (``check``) agrees."""
    rt, next_id = prefilled(8, 300, stagger=True)
    qk = next(iter(decode_steps(rt, 1, next_id)))[-2]
    qk = qk if isinstance(qk, Program) else Program.of(qk)
    cache = CostCache(CycleModel(drain=True), check=1.0)
    start = DeviceState.reset(DEVICE)
    first = cache.run(qk, start, again=True)
    second = cache.run(qk, first.state)
    assert (cache.misses, cache.followed, cache.checked) == (2, 1, 1)
    assert _cost(second) == _cost(CycleModel(drain=True).run(qk, first.state))


def test_equal_rows_and_queues_with_other_timing_windows_do_not_meet():
    """Two runs whose controllers hold the same rows and requests at a checkpoint but whose
    timing windows differ (one opened the row itself, later) must not be taken as met: the
    next conflicting write's PRE waits for the later window in one run only."""
    write = [Instruction(Opcode.WR_MEM, channel=0, bank=0, row=row, col=0)
             for row in (0, 1)]
    filler = Instruction(Opcode.WR_CFR, cfr=int(Cfr.AFM), value=0)  # one DMA cycle each
    program = Program.of([write[0]] + [filler] * 45 + [write[1]] + [filler] * 36
                         + [Instruction(Opcode.EOC)])
    closed = DeviceState.reset(DEVICE)
    opened = DeviceState(((0,) + (-1,) * (DEVICE.banks - 1),) + closed.open_rows[1:],
                         closed.reg_mode, closed.cfr)
    model = CycleModel(drain=True)
    for first, second in ((opened, closed), (closed, opened)):
        followed, _ = _pair(model, program, first, second)
        assert _cost(followed) == _cost(model.run(program, second))
    assert model.run(program, closed).cycles != model.run(program, opened).cycles
