"""Cost reuse: equal keys give exactly the costs a full simulation gives."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest
from patton.runtime.decode_batch import decode_steps, prefilled
from patton.sim import native
from patton.sim.cost_cache import PARTS_PER_COST, CostCache, CostMismatch
from patton.sim.cycle_model import FRONTENDS, CycleModel, DeviceState
from patton.sim.device import AF_ROW_BASE, DEVICE
from patton.sim.energy import energy
from patton.sim.isa import Cfr, Instruction, Opcode, channel_bit
from patton.sim.program import Program
from patton.sim.random_programs import random_program


def _cost(result):
    return (result.cycles, result.command_counts, result.bank_state_cycles, result.state,
            energy(result.command_counts, result.bank_state_cycles, result.cycles))


def _renamed(program, mapping):
    return [dataclasses.replace(ins, row=mapping[ins.row]) if ins.row is not None else ins
            for ins in program]


@pytest.mark.parametrize("seed", range(12))
def test_rows_renamed_alike_reuse_the_cost(seed):
    """A program whose rows are renamed one-to-one costs what the original costs: the cache
    reuses it, and the reused cost (end state mapped to the new rows) equals a full run."""
    rng = np.random.default_rng(seed)
    program = random_program(rng, 50, channels=4, rows=4)
    rows = sorted({ins.row for ins in program if ins.row is not None})
    mapping = dict(zip(rows, rng.choice(1 << 14, size=len(rows), replace=False).tolist()))
    cache = CostCache()
    first = cache.run(program)
    again = cache.run(_renamed(program, mapping))
    assert (cache.hits, cache.misses) == (1, 1)
    assert _cost(first)[:3] == _cost(again)[:3]
    assert _cost(again) == _cost(CycleModel().run(_renamed(program, mapping)))


def test_another_pattern_of_equal_rows_is_another_key():
    program = random_program(np.random.default_rng(3), 50, channels=4, rows=4)
    rows = sorted({ins.row for ins in program if ins.row is not None})
    merged = {r: rows[0] for r in rows}  # every row the same: other row hits and misses
    cache = CostCache()
    cache.run(program)
    cache.run(_renamed(program, merged))
    assert cache.misses == 2 and cache.hits == 0


def test_start_state_is_part_of_the_key():
    program = random_program(np.random.default_rng(5), 30, channels=4, rows=2)
    row = next(ins.row for ins in program if ins.row is not None)
    opened = DeviceState.reset()
    opened = DeviceState(((row,) * 16,) * 32, opened.reg_mode, opened.cfr)
    cache = CostCache()
    reset, warm = cache.run(program), cache.run(program, opened)
    assert cache.misses == 2
    assert _cost(warm) == _cost(CycleModel().run(program, opened))
    assert _cost(reset) == _cost(CycleModel().run(program))



@pytest.mark.parametrize("path", ["run", "cost"])
def test_a_bank_the_program_leaves_alone_keeps_its_own_start_row(path):
    """Two start states that differ only in rows no instruction asks for share a key; the
    reused end state gives each bank the row it started with (the key's OTHER), open, as a
    full run does: not closed, not the first start's row."""
    program = random_program(np.random.default_rng(7), 40, channels=4, rows=3)
    used = {ins.row for ins in program if ins.row is not None}
    reset = DeviceState.reset()

    def start(base: int) -> DeviceState:
        rows = tuple(tuple(-1 if c < 4 else base + 16 * c + b for b in range(16))
                     for c in range(32))
        assert not used & {r for ch in rows for r in ch}
        return DeviceState(rows, reset.reg_mode, reset.cfr)

    cache = CostCache()
    first, second = start(5000), start(9000)
    getattr(cache, path)(program, first)
    reused = getattr(cache, path)(program, second)
    assert (cache.hits, cache.misses) == (1, 1)
    full = CycleModel().run(program, second).state
    assert reused.state == full
    assert [reused.state.open_rows[c] for c in range(4, 32)] == [second.open_rows[c]
                                                                for c in range(4, 32)]

@pytest.mark.parametrize("rows", ["none", "above 0"])
@pytest.mark.parametrize("path", ["run", "cost"])
def test_untouched_banks_closed_on_row_0_or_above_every_program_row(path, rows):
    """The start rows a key names OTHER at the edges: row 0 (a row like any other), a row
    above every row of the program, a closed bank (stays closed); for a program that names no
    row at all too (no AF either: an AF's row is its LUT row). The reused end state equals a
    full run's."""
    program = [ins for ins in random_program(np.random.default_rng(11), 60, channels=4, rows=3)
               if ins.opcode is not Opcode.AF]
    if rows == "none":
        program = [ins for ins in program if ins.row is None]
    else:
        program = [ins if ins.row is None else dataclasses.replace(ins, row=ins.row + 10)
                   for ins in program]
    top = max([ins.row for ins in program if ins.row is not None], default=0)

    def start(high: int) -> DeviceState:
        pattern = (-1, 0, top + high, top + high + 1)
        rows = tuple(tuple(-1 if c < 4 else pattern[b % 4] for b in range(16))
                     for c in range(32))
        return DeviceState(rows, DeviceState.reset().reg_mode, DeviceState.reset().cfr)

    cache = CostCache()
    getattr(cache, path)(program, start(100))
    second = start(700)
    reused = getattr(cache, path)(program, second)
    assert (cache.hits, cache.misses) == (1, 1)
    assert reused.state == CycleModel().run(program, second).state
    assert reused.state.open_rows[9] == second.open_rows[9] == (-1, 0, top + 700,
                                                               top + 701) * 4


def test_serving_steps_reuse_costs_and_sampled_steps_resimulate_equal():
    """Every layer's programs are placed alike at other rows: after the first layer of a step
    they are reused. Random steps, re-simulated in full from the same state, give identical
    cycles, command counts, bank-state cycles, end states and energy; and the cache's own check
    re-simulates every hit."""
    cache = CostCache(check=1.0)
    full = CycleModel()
    state = DeviceState.reset()
    sampled = set(np.random.default_rng(1).choice(20, size=6, replace=False).tolist())
    compared = 0
    rt, next_id = prefilled(8, 40, layers=4)
    for index, step in enumerate(decode_steps(rt, 20, next_id)):
        for program in step:
            cost = cache.run(program, state)
            if index in sampled:
                assert _cost(cost) == _cost(full.run(program, state))
                compared += 1
            state = cost.state
    assert compared == 6 * 9
    assert cache.checked == cache.hits
    assert cache.hits >= 20 * 6  # layers 1..3 of QK^T and SV in every step
    assert cache.misses < cache.hits


@pytest.mark.parametrize("path", ["run", "cost"])
def test_the_check_catches_a_wrong_cost_and_names_it(path):
    """The message gives the cached and the full simulation's cycles (and energy in pJ)."""
    program = random_program(np.random.default_rng(2), 30, channels=2, rows=3)
    cache = CostCache(check=1.0)
    first = getattr(cache, path)(program)
    key = next(iter(cache._costs))
    cache._costs[key] = dataclasses.replace(cache._costs[key],
                                            cycles=cache._costs[key].cycles + 1)
    full = CycleModel().run(program)
    n, size = full.cycles, f"(program of {len(program)} instructions)"
    said = f"cached cost {n + 1} cycles, full simulation {n} {size}"
    if path == "cost":
        e = energy(full.command_counts, full.bank_state_cycles, full.cycles)
        said = (f"cached cost {n + 1} cycles, {first.energy_pj} pJ; full simulation {n} cycles, "
                f"{e.total * 1000.0} pJ {size}")
    with pytest.raises(CostMismatch) as error:
        getattr(cache, path)(program)
    assert str(error.value) == said


def test_bad_arguments():
    with pytest.raises(ValueError, match="keeps no schedules"):
        CostCache(CycleModel(record=True))
    with pytest.raises(ValueError, match="share of hits"):
        CostCache(check=1.5)


def test_capacity_drops_the_least_recent():
    cache = CostCache(capacity=2)
    programs = [random_program(np.random.default_rng(s), 10, channels=2, rows=2)
                for s in range(3)]
    for p in programs:
        cache.run(p)
    cache.run(programs[0])  # dropped: simulated again
    assert cache.misses == 4 and len(cache._costs) == 2


def test_interned_parts_stay_bounded_and_costs_stay_exact():
    """Dropped costs leave their interned parts behind; the table starts over past
    ``PARTS_PER_COST`` per cost of capacity, and every cost, old or new, is still exact."""
    cache, model = CostCache(capacity=2, check=1.0), CycleModel()
    programs = [random_program(np.random.default_rng(s), 12, channels=4, rows=3)
                for s in range(40)]
    peak = 0
    for p in programs + programs[-2:]:  # the last two again: hits, checked in full
        assert cache.run(p).cycles == model.run(p).cycles
        peak = max(peak, len(cache._parts))
    one_cost = 3 * DEVICE.channels + 4  # at most one store's new parts: 3 per channel, 4 more
    assert cache.checked == 2 and peak <= PARTS_PER_COST * 2 + one_cost


def test_one_program_run_under_other_cfrs_is_decoded_again():
    """The cache decodes a program once for the runs that follow one another, but only under
    the same CFRs: an AF's row is the LUT row of the AF mode, a row hit under one mode and a
    conflict under another."""
    program = Program.of([Instruction(Opcode.AF, channel_mask=channel_bit(0)),
                          Instruction(Opcode.EOC)])
    rows = ((AF_ROW_BASE + 1,) * DEVICE.banks,) + ((-1,) * DEVICE.banks,) * (DEVICE.channels - 1)
    reset = DeviceState.reset()
    cache = CostCache()
    costs = []
    for afm in (1, 0, 1):
        cfr = list(reset.cfr)
        cfr[Cfr.AFM] = afm
        state = DeviceState(rows, reset.reg_mode, tuple(cfr))
        cost = cache.run(program, state)
        assert _cost(cost) == _cost(CycleModel().run(program, state))
        costs.append(cost.cycles)
    assert costs[0] < costs[1] and costs[2] == costs[0]  # the hit is faster than the conflict


def _same_cost(cost, full) -> None:
    """A :class:`Cost` equals a full run's cycles, energy (pJ) by component, and end state."""
    e = energy(full.command_counts, full.bank_state_cycles, full.cycles)
    assert (cost.cycles, cost.state) == (full.cycles, full.state)
    assert cost.energy_pj == pytest.approx(e.total * 1000.0, rel=1e-12)
    assert cost.components_pj == pytest.approx(tuple(v * 1000.0 for v in e.components.values()),
                                               rel=1e-12)


@pytest.mark.parametrize("check", [0.0, 1.0])
def test_cost_is_a_full_runs_cost_simulated_or_reused(check):
    """``cost`` (no counts kept) from a miss and from a hit, every counter as it should be:
    with ``check=1`` every cost is simulated again in full and compared, with 0 none is."""
    program = random_program(np.random.default_rng(4), 40, channels=4, rows=3)
    rows = sorted({ins.row for ins in program if ins.row is not None})
    renamed = _renamed(program, {r: 900 + 7 * i for i, r in enumerate(rows)})
    cache = CostCache(check=check)
    _same_cost(cache.cost(program), CycleModel().run(program))
    _same_cost(cache.cost(renamed), CycleModel().run(renamed))
    _same_cost(cache.cost(program), CycleModel().run(program))
    assert (cache.hits, cache.misses, cache.checked) == (2, 1, 3 if check else 0)
    assert cache.followed == 0


def test_the_arguments_refused_say_why():
    with pytest.raises(ValueError) as error:
        CostCache(CycleModel(record=True))
    assert str(error.value) == "a cost cache keeps no schedules: use CycleModel(record=False)"
    with pytest.raises(ValueError) as error:
        CostCache(check=-0.5)
    assert str(error.value) == "check is a share of hits in [0, 1], not -0.5"
    cache = CostCache()
    assert (cache.capacity, cache.check, cache.hits, cache.misses, cache.checked,
            cache.followed) == (4096, 0.0, 0, 0, 0, 0)


@pytest.mark.parametrize("path", ["run", "cost"])
def test_the_least_recently_used_cost_is_dropped(path):
    cache = CostCache(capacity=2)
    p = [random_program(np.random.default_rng(s), 10, channels=2, rows=2) for s in range(3)]
    use = getattr(cache, path)
    use(p[0])
    use(p[1])
    use(p[0])  # a hit: p[0] is now the most recent
    use(p[2])  # drops p[1]
    assert (cache.hits, cache.misses) == (1, 3)
    use(p[0])
    assert (cache.hits, cache.misses) == (2, 3)
    use(p[1])
    assert (cache.hits, cache.misses) == (2, 4)


def test_a_miss_run_again_follows_the_trace_of_the_last_one():
    """``again=True`` traces a miss; the same program from another start state (another key)
    follows that trace, and costs what a full run costs."""
    program = random_program(np.random.default_rng(8), 40, channels=4, rows=3)
    row = next(ins.row for ins in program if ins.row is not None)
    reset = DeviceState.reset()
    other = DeviceState(((row,) * 16,) * 32, reset.reg_mode, reset.cfr)
    cache = CostCache(check=1.0)
    cache.run(program, again=True)
    assert cache.followed == 0
    followed = cache.run(program, other)
    assert (cache.misses, cache.followed, cache.checked) == (2, 1, 1)
    assert _cost(followed) == _cost(CycleModel().run(program, other))
    plain = CostCache()
    plain.run(program)  # not traced: nothing to follow
    plain.run(program, other)
    assert plain.followed == 0


@pytest.mark.parametrize("model", [dict(memo=True), dict(native=False)],
                         ids=["memo", "python"])
def test_misses_on_a_memo_or_python_model_cost_what_a_full_run_costs(model):
    """A model with a memo (segments reused across programs; every miss checked under
    ``check=1``) and the Python model (no decode, no trace) behind the cache."""
    programs = [random_program(np.random.default_rng(s), 30, channels=4, rows=3)
                for s in (20, 21)]
    cache = CostCache(CycleModel(**model), check=1.0)
    for program in programs + programs[:1]:
        assert _cost(cache.run(program)) == _cost(CycleModel().run(program))
    checked = 2 + 1 if "memo" in model else 1  # misses partly from the memo; the hit
    assert (cache.hits, cache.misses, cache.checked, cache.followed) == (1, 2, checked, 0)


@pytest.mark.parametrize("given, seed", [(dict(seed=3), 3), ({}, 0)],
                         ids=["seed 3", "default seed 0"])
def test_a_share_of_the_hits_is_checked_as_the_seeded_draw_says(given, seed):
    program = random_program(np.random.default_rng(6), 20, channels=2, rows=2)
    cache = CostCache(check=0.5, **given)
    for _ in range(41):
        cache.cost(program)
    draws = np.random.default_rng(seed).random(41)  # one draw per call: the miss, then 40 hits
    assert cache.checked == int((draws < 0.5).sum())
    assert 0 < cache.checked < 41


def _program(seed: int, length: int = 20) -> Program:
    return Program.of(random_program(np.random.default_rng(seed), length, channels=2, rows=2))


def _open_on(row: int) -> DeviceState:
    """The reset state with every bank open on ``row``."""
    reset = DeviceState.reset()
    return DeviceState(((row,) * DEVICE.banks,) * DEVICE.channels, reset.reg_mode, reset.cfr)


def test_costs_and_the_records_kept_are_frozen_and_slotted():
    """A returned :class:`Cost`, a stored cost and the rows a key names: frozen, no
    ``__dict__`` (a cache keeps 10^5 stored costs)."""
    program = _program(12)
    cache = CostCache()
    cost = cache.cost(program)
    (stored,) = cache._costs.values()
    rows = cache._key(program, DeviceState.reset())[1]
    for record in (cost, stored, rows):
        assert not hasattr(record, "__dict__")
        name = dataclasses.fields(record)[0].name
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(record, name, getattr(record, name))


def test_a_cost_stored_by_run_or_by_cost_serves_its_own_kind_only():
    """``run`` keeps counts and no energy, ``cost`` the energy and no counts: a program one of
    them stored is a miss for the other, simulated in full and exact."""
    program = _program(13)
    full = CycleModel().run(program)
    cache = CostCache()
    assert _cost(cache.run(program)) == _cost(full)
    _same_cost(cache.cost(program), full)
    assert (cache.hits, cache.misses) == (0, 2)
    _same_cost(cache.cost(program), full)
    assert (cache.hits, cache.misses) == (1, 2)
    assert _cost(cache.run(program)) == _cost(full)
    assert (cache.hits, cache.misses) == (1, 3)


def test_a_program_is_decoded_once_for_the_runs_that_follow_one_another(monkeypatch):
    """Misses of one :class:`Program` from other start states under the same CFRs decode it
    once; other CFRs decode it again, and so does going back."""
    decoded = []
    real = native.decode
    monkeypatch.setattr(native, "decode", lambda *args: decoded.append(args) or real(*args))
    program = _program(14)
    row = next(ins.row for ins in program.to_instructions() if ins.row is not None)
    reset = DeviceState.reset()
    cfr = list(reset.cfr)
    cfr[Cfr.AFM] = 1 - cfr[Cfr.AFM]
    other = DeviceState(reset.open_rows, reset.reg_mode, tuple(cfr))
    cache = CostCache()
    for state, path, times in [(reset, "run", 1), (_open_on(row), "run", 1),
                               (_open_on(row + 1000), "cost", 1), (other, "run", 2),
                               (reset, "cost", 3)]:
        cost = getattr(cache, path)(program, state)
        assert cost.state == CycleModel().run(program, state).state
        assert len(decoded) == times
    assert (cache.hits, cache.misses) == (0, 5)


def _calls(path: str) -> tuple[CycleModel, list[tuple[str, Program, DeviceState, bool]]]:
    """A model and calls (method, program, start state, ``again``) on which each call that may
    be checked takes one draw: every call of ``cost``; a hit of ``run``; on a memo, a miss
    too; a miss that follows a trace."""
    p, q = _program(30), _program(31)
    reset = DeviceState.reset()
    if path == "followed":  # traced once (no draw), then followed from two other states
        row = next(ins.row for ins in p.to_instructions() if ins.row is not None)
        starts = [_open_on(row), _open_on(row), _open_on(row + 1000), reset]
        return CycleModel(), [("run", p, reset, True)] + [("run", p, s, False) for s in starts]
    model = CycleModel(memo=True) if path == "memo" else CycleModel()
    method = "cost" if path == "cost" else "run"
    return model, [(method, x, reset, False) for x in (p, p, q, q, p, q)]


@pytest.mark.parametrize("path, draws, counts", [
    ("cost", 6, (4, 2, 0)), ("run", 4, (4, 2, 0)), ("memo", 6, (4, 2, 0)),
    ("followed", 4, (2, 3, 2)),
])
def test_a_call_is_checked_when_its_seeded_draw_is_below_the_share(path, draws, counts):
    """Each call that may be checked takes the next draw of the seeded generator and is
    checked when the draw is below ``check``: not when it equals it. Every draw in turn as
    the share (hits, misses, followed as ``counts``)."""
    drawn = np.random.default_rng(9).random(draws)
    for share in drawn.tolist():
        model, calls = _calls(path)
        cache = CostCache(model, check=share, seed=9)
        for method, program, state, again in calls:
            if method == "run":
                cache.run(program, state, again=again)
            else:
                cache.cost(program, state)
        assert (cache.hits, cache.misses, cache.followed) == counts
        assert cache.checked == int((drawn < share).sum())


def _one_cycle_more(model: CycleModel, method: str, monkeypatch) -> None:
    """Make ``model``'s ``run_decoded`` or ``cost_decoded`` (a miss; not a full run) report one
    cycle more than it simulated."""
    real = getattr(model, method)

    def wrong(*args, **kwargs):
        out = real(*args, **kwargs)
        if method == "cost_decoded":
            return (out[0] + 1, *out[1:])
        out.cycles += 1
        return out

    monkeypatch.setattr(model, method, wrong)


@pytest.mark.parametrize("path, what", [
    ("memo", "cost taken partly from the memo"), ("followed", "followed run's cost"),
    ("cost", "cost taken partly from the memo"),
])
def test_the_check_catches_a_wrong_miss_and_names_it(path, what, monkeypatch):
    """A miss taken partly from the memo or from a trace is checked too: the message says
    which, with its cycles and the full simulation's (and the energy in pJ for ``cost``)."""
    program = _program(15, 30)
    row = next(ins.row for ins in program.to_instructions() if ins.row is not None)
    state = _open_on(row) if path == "followed" else DeviceState.reset()
    cache = CostCache(CycleModel(memo=path != "followed"), check=1.0)
    if path == "followed":
        cache.run(program, again=True)  # the trace to follow, right
    _one_cycle_more(cache.model, "cost_decoded" if path == "cost" else "run_decoded",
                    monkeypatch)
    full = CycleModel().run(program, state)
    n, size = full.cycles, f"(program of {len(program)} instructions)"
    said = re.escape(f"{what} {n + 1} cycles, full simulation {n} {size}")
    if path == "cost":
        e = energy(full.command_counts, full.bank_state_cycles, full.cycles)
        said = (re.escape(f"{what} {n + 1} cycles, ") + r"[\d.e+]+"
                + re.escape(f" pJ; full simulation {n} cycles, {e.total * 1000.0} pJ {size}"))
    with pytest.raises(CostMismatch, match=f"^{said}$"):
        getattr(cache, "cost" if path == "cost" else "run")(program, state)
    assert (cache.checked, cache.followed) == (1, int(path == "followed"))


@pytest.mark.parametrize("path", ["run", "cost"])
def test_a_bank_left_on_a_row_no_instruction_asks_for_is_not_stored(path, monkeypatch):
    """An end state with a bank open on a row neither the program nor the start gives it (a
    model bug) cannot be named by the key: the store refuses it, saying so."""
    program = _program(16)
    model = CycleModel()
    method = "cost_decoded" if path == "cost" else "run_decoded"
    real = getattr(model, method)
    stray = 123457  # no row of the program; the start (reset) has every bank closed

    def strayed(end: DeviceState) -> DeviceState:
        rows = (end.open_rows[0][:-1] + (stray,),) + end.open_rows[1:]
        return DeviceState(rows, end.reg_mode, end.cfr)

    def wrong(*args, **kwargs):
        out = real(*args, **kwargs)
        if method == "cost_decoded":
            return (*out[:3], strayed(out[3]))
        out.state = strayed(out.state)
        return out

    monkeypatch.setattr(model, method, wrong)
    cache = CostCache(model)
    with pytest.raises(CostMismatch) as error:
        getattr(cache, path)(program)
    assert str(error.value) == "a bank opened a row no instruction of the program asks for"
    assert cache.misses == 1 and not cache._costs


def test_the_parts_table_starts_over_only_once_past_its_bound():
    """A store that finds the table at its bound (``PARTS_PER_COST`` per cost of capacity)
    keeps it; the next, finding it past, starts it over; the costs stay exact."""
    cache = CostCache(capacity=2)
    bound = PARTS_PER_COST * 2
    filler = {("filler", i): ("filler", i) for i in range(bound)}  # parts no cost has
    cache._parts.update(filler)
    p, q = _program(17), _program(18)
    cache.run(p)
    assert filler.keys() <= cache._parts.keys() and len(cache._parts) > bound
    cache.cost(q)
    assert not filler.keys() & cache._parts.keys()
    assert 0 < len(cache._parts) <= bound
    assert _cost(cache.run(p)) == _cost(CycleModel().run(p))
    _same_cost(cache.cost(q), CycleModel().run(q))
    assert (cache.hits, cache.misses) == (2, 2)


def test_front_ends_and_drain_settings_key_apart():
    """The same program and start state keys differently under each front end and drain
    setting, and alike in two caches of one setting; each costs what its model says."""
    program = _program(19)
    reset = DeviceState.reset()
    settings = [dict(frontend=f, drain=d) for f in FRONTENDS for d in (False, True)]
    keys = [CostCache(CycleModel(**s))._key(program, reset)[0] for s in settings]
    assert len(set(keys)) == len(settings) == 4
    assert CostCache(CycleModel(**settings[-1]))._key(program, reset)[0] == keys[-1]
    for s in settings:
        assert _cost(CostCache(CycleModel(**s)).run(program)) == \
            _cost(CycleModel(**s).run(program))
