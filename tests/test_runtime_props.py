"""Stateful property tests: random lifecycle steps against a plain model of vLLM's block pool.

After every step: no two live granules overlap, pools and Order-2 bitmaps account exactly, no
CZ slot or Order-2 granule leaks (``Runtime.check``), reference counts and the cached set match
the model, shared and cached blocks refuse writes, and a failed call changes nothing.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from patton.runtime.errors import CapacityError, PattonError, ReadOnlyBlock
from patton.runtime.models import ModelSpec
from patton.runtime.patton.config import Config
from patton.runtime.patton.lifecycle import Runtime
from patton.runtime.patton.metadata import WriteMode
from patton.serving.scenario import Scenario, run
from patton.sim import trace

SMALL = ModelSpec("small", layers=1, kv_heads=1, q_heads=1, d_head=64)


class Lifecycle(RuleBasedStateMachine):
    """Drive a tiny runtime (128 blocks, 64 CZ slots) through allocate/write/share/free/evict."""

    def __init__(self) -> None:
        super().__init__()
        self.rt = Runtime(Config(SMALL, layer_rows=5, crs_rows=1))
        self.refs: dict[int, int] = {}  # model: block -> references
        self.filled: dict[int, int] = {}  # model: block -> tokens
        self.tables: dict[int, list[int]] = {}  # model: request -> blocks
        self.next_id = 0
        self.writes = 0

    def _zeros(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        c = self.rt.config
        z = np.zeros((c.n_layers, n, c.heads, c.d_head), dtype=np.uint16)
        return z, z

    @rule(req=st.integers(0, 5))
    def allocate(self, req: int) -> None:
        bid = self.next_id
        before = self.rt.state()
        try:
            self.rt.allocate(req, bid)
        except CapacityError:
            assert self.rt.state() == before
            assert self.rt.alloc.free_blocks_for(req) == 0
            return
        self.next_id += 1
        self.refs[bid] = 1
        self.filled[bid] = 0
        self.tables.setdefault(req, []).append(bid)

    @rule(data=st.data(), n=st.integers(1, 16))
    def write(self, data: st.DataObject, n: int) -> None:
        if not self.filled:
            return
        bid = data.draw(st.sampled_from(sorted(self.filled)))
        start = self.filled[bid]
        before = self.rt.state()
        writable = self.refs[bid] == 1 and start < 16
        if not writable or start + n > 16:
            try:
                self.rt.write(bid, start, *self._zeros(n))
            except PattonError as error:
                assert writable or isinstance(error, ReadOnlyBlock)
                assert self.rt.state() == before
                return
            raise AssertionError(f"write of {n} at {start} into block {bid} was accepted")
        try:
            w = self.rt.write(bid, start, *self._zeros(n))
        except CapacityError:  # the block would become partial and every CZ slot is taken
            assert self.rt.state() == before and self.rt.free_slots() == 0
            assert self.rt.mode is WriteMode.PATTON and start == 0 and n < 16
            return
        self.filled[bid] += n
        self.writes += 1
        assert w.key and (w.value or w.commit)
        commits = self.rt.mode is WriteMode.PATTON and self.filled[bid] == 16 and start > 0
        assert commits == bool(w.commit)

    @rule(data=st.data(), req=st.integers(0, 5))
    def share(self, data: st.DataObject, req: int) -> None:
        full = sorted(b for b, f in self.filled.items() if f == 16)
        if not full:
            return
        bid = data.draw(st.sampled_from(full))
        self.rt.share(req, bid)
        self.refs[bid] += 1
        self.tables.setdefault(req, []).append(bid)

    @rule(data=st.data())
    def free(self, data: st.DataObject) -> None:
        owners = sorted(r for r, t in self.tables.items() if t)
        if not owners:
            return
        req = data.draw(st.sampled_from(owners))
        bid = data.draw(st.sampled_from(self.tables[req]))
        self.rt.free(req, bid)
        table = self.tables[req]
        del table[len(table) - 1 - table[::-1].index(bid)]
        self.refs[bid] -= 1
        if self.refs[bid] == 0 and self.filled[bid] < 16:
            del self.refs[bid], self.filled[bid]

    @rule(req=st.integers(0, 5))
    def finish(self, req: int) -> None:
        if req not in self.tables:
            return
        self.rt.finish(req)
        for bid in reversed(self.tables.pop(req)):
            self.refs[bid] -= 1
            if self.refs[bid] == 0 and self.filled[bid] < 16:
                del self.refs[bid], self.filled[bid]

    @rule(data=st.data())
    def evict(self, data: st.DataObject) -> None:
        if not self.refs:
            return
        bid = data.draw(st.sampled_from(sorted(self.refs)))
        before = self.rt.state()
        if self.refs[bid]:
            try:
                self.rt.evict(bid)
            except PattonError:
                assert self.rt.state() == before
                return
            raise AssertionError(f"evicted block {bid} with references")
        self.rt.evict(bid)
        del self.refs[bid], self.filled[bid]

    @invariant()
    def consistent(self) -> None:
        self.rt.check()
        assert {b: m.ref_cnt for b, m in self.rt.blocks.items()} == self.refs
        assert {b: m.filled for b, m in self.rt.blocks.items()} == self.filled
        assert sorted(self.rt.cached()) == sorted(b for b, r in self.refs.items() if r == 0)
        c, a = self.rt.config, self.rt.alloc
        assert self.rt.free_blocks() == min(a.krs.free * c.n_o1p2, a.vrs.free * c.o2v_width)
        assert a.krs.free == a.krs.capacity - len(a.o2k)
        assert self.rt.free_slots() == 64 - sum(1 for m in self.rt.blocks.values() if m.cz)


TestLifecycle = Lifecycle.TestCase
TestLifecycle.settings = settings(max_examples=60, stateful_step_count=60, deadline=None,
                                  suppress_health_check=[HealthCheck.too_slow])


class NoCzLifecycle(Lifecycle):
    """The same machine on the no-Commit-Zone ablation with whole-VRS O2Vs."""

    def __init__(self) -> None:
        super().__init__()
        self.rt = Runtime(Config(SMALL, layer_rows=5, crs_rows=1, o2v_blocks=64), WriteMode.NO_CZ)

    @invariant()
    def consistent(self) -> None:
        self.rt.check()
        assert {b: m.ref_cnt for b, m in self.rt.blocks.items()} == self.refs
        assert self.rt.free_slots() == 64  # the ablation never takes a slot
        assert self.rt.alloc.vrs.per_set == 1


TestNoCzLifecycle = NoCzLifecycle.TestCase
TestNoCzLifecycle.settings = settings(max_examples=25, stateful_step_count=60, deadline=None,
                                      suppress_health_check=[HealthCheck.too_slow])


class _Invariants:
    """Asserts every invariant of the runtime after every step (an observer of the driver)."""

    def __init__(self) -> None:
        self.runtime = None
        self.steps = 0

    def start(self, driver) -> None:
        self.runtime = driver.attached.runtime

    def stepped(self, work, out) -> None:
        self.runtime.check()
        self.steps += 1


class _Programs:
    """Every program of a run, as trace text."""

    def __init__(self) -> None:
        self.text: list[str] = []

    def ran(self, work, phase, program, result) -> None:
        self.text.append(trace.dumps(program))


def test_scenarios_are_deterministic_per_seed() -> None:
    c = Config(ModelSpec("t", layers=1, kv_heads=2, q_heads=2, d_head=64), layer_rows=5)
    runs = []
    for seed in (11, 11, 12):
        programs = _Programs()
        served = run(c, Scenario(requests=4, steps=60, seed=seed), device=False,
                     observers=[programs])
        runs.append((served.attached.runtime.state(), served.run.as_dict(), programs.text))
    assert runs[0] == runs[1] and runs[0] != runs[2]


def test_long_random_scenario_keeps_invariants() -> None:
    c = Config(ModelSpec("t", layers=1, kv_heads=1, q_heads=1, d_head=64), layer_rows=4)
    check = _Invariants()
    served = run(c, Scenario(requests=6, steps=400, seed=5), device=False, observers=[check])
    assert check.steps == 400  # under pressure: few blocks fit, cached ones are evicted
    assert {"alloc", "cache", "release", "evict"} <= set(served.counts.events)
    assert served.attached.refused > 0 and served.attached.placement_evictions > 0
    assert served.counts.decode_tokens > 400 and served.checks.total.failures == []
