"""The translated baselines: placements read back, attention bit-exact, allocator properties.

Each baseline runs random lifecycles on a small device (8 channels) with the functional model
executing every program it emits; the checks are those PATTON's placements get: every token
read back where the metadata says, QK^T and SV bit-exact against the datapath references, the
runtime's invariants after every call, and each policy's own rule (NeuPIMs' home channel,
AttAcc's partitions and reservation, BlockPIM's least-filled channel, PIMphony's Token-Centric
Partitioning) plus: room promised is room given, a refused allocation changes nothing.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from patton.runtime.baselines import BASELINES, Geometry, baseline
from patton.runtime.baselines.geometry import UNIT
from patton.runtime.baselines.programs import Reads
from patton.runtime.errors import BlockStateError, CapacityError, ConfigError, DoubleFree
from patton.runtime.interface import KvRuntime
from patton.runtime.models import ModelSpec
from patton.runtime.reference.attention import qk_exact
from patton.runtime.reference.baselines import sv_exact
from patton.sim import datapath as dp
from patton.sim.check import verify
from patton.sim.device import DEVICE
from patton.sim.executor import CycleExecutor, FunctionalExecutor
from patton.sim.isa import Opcode
from patton.sim.program import OP_ID

DEV = DEVICE.with_(channels=8, rows=256)
GQA = ModelSpec("tiny-gqa", layers=2, kv_heads=2, q_heads=4, d_head=128)  # P = 4
MHA = ModelSpec("tiny-mha", layers=2, kv_heads=8, q_heads=8, d_head=128)  # P = 1
NAMES = list(BASELINES)


def geometry(name: str, model: ModelSpec = GQA) -> Geometry:
    """Two layers; MHA's 8 heads get 128 rows a layer (a NeuPIMs request needs a Value page
    per head in its one channel), GQA's 2 heads 64."""
    rows = 64 if model.kv_heads <= 2 else 128
    return Geometry(model, DEV, block_size=baseline(name).block_size, layers=2,
                    layer_rows=rows)


class Harness:
    """A baseline runtime, the functional model running its programs, and the KV it holds."""

    def __init__(self, name: str, model: ModelSpec = GQA, seed: int = 0) -> None:
        self.g = geometry(name, model)
        self.rt = baseline(name).runtime(self.g)
        self.ex = FunctionalExecutor(DEV)
        self.rng = np.random.default_rng(seed)
        self.kv: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # block -> (keys, values)
        self.next_block = 1
        self.programs = 0

    def _kv(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        shape = (self.g.n_layers, n, self.g.heads, self.g.d_head)
        return (dp.to_bf16(self.rng.standard_normal(shape)),
                dp.to_bf16(self.rng.standard_normal(shape)))

    def run(self, prog) -> object:
        self.programs += 1
        return self.ex.run(prog)

    def prefill(self, request: int, tokens: int) -> list[int]:
        """Allocate and write ``tokens`` tokens for a new ``request``; return its blocks."""
        t = self.g.block_size
        ids, items = [], []
        for j in range(-(-tokens // t)):
            b = self.next_block
            self.next_block += 1
            self.rt.allocate(request, b)
            n = min(t, tokens - j * t)
            k, v = self._kv(n)
            self.kv[b] = (k, v)
            ids.append(b)
            items.append((b, 0, k, v))
        wp = self.rt.write_program(items)
        self.run(wp.key)
        self.run(wp.value)
        return ids

    def decode(self, requests: list[int]) -> None:
        """One decode token for each of ``requests`` (a new block when the last is full)."""
        blocks = []
        for r in requests:
            last = self.rt.table(r)[-1]
            if self.rt.blocks[last].full:
                last = self.next_block
                self.next_block += 1
                self.rt.allocate(r, last)
                e = np.zeros((self.g.n_layers, 0, self.g.heads, self.g.d_head), np.uint16)
                self.kv[last] = (e, e)
            blocks.append(last)
        k, v = self._kv(len(blocks))
        wp = self.rt.append(blocks, k.transpose(1, 0, 2, 3), v.transpose(1, 0, 2, 3))
        self.run(wp.key)
        self.run(wp.value)
        for i, b in enumerate(blocks):
            ok, ov = self.kv[b]
            self.kv[b] = (np.concatenate([ok, k[:, i:i + 1]], axis=1),
                          np.concatenate([ov, v[:, i:i + 1]], axis=1))

    # ------------------------------------------------------------------ checks

    def check_placements(self) -> int:
        """Every written token's Key and Value read back from the mats where the metadata
        says; return the elements checked."""
        g = self.g
        e = g.bursts
        rows: dict[tuple[int, int, int], np.ndarray] = {}

        def peek(c: int, bank: int, row: int) -> np.ndarray:
            got = rows.get((c, bank, row))
            if got is None:
                got = rows[(c, bank, row)] = self.ex.model.peek(c, bank, row)
            return got

        n = 0
        for b, meta in self.rt.blocks.items():
            keys, values = self.kv[b]
            assert keys.shape[1] == meta.filled
            for o in range(meta.filled):
                u, lane = divmod(o, UNIT)
                for layer in range(g.n_layers):
                    for h in range(g.heads):
                        c, slot = meta.place.key[h, u].tolist()
                        rel, col0 = g.key_slot(slot)
                        row = peek(c, lane, g.row(layer, rel))
                        np.testing.assert_array_equal(row[col0:col0 + e].reshape(-1),
                                                      keys[layer, o, h])
                        c, slot = meta.place.value[h, u].tolist()
                        row0, col = g.value_slot(slot)
                        got = np.array([peek(c, bank, g.row(layer, row0 + i))[col, lane]
                                        for i in range(g.v_rows) for bank in range(UNIT)])
                        np.testing.assert_array_equal(got, values[layer, o, h])
                        n += 2 * g.d_head
        return n

    def check_attention(self, requests: list[int], layer: int) -> None:
        """QK^T and SV of ``requests`` bit-exact against the references; programs verified."""
        g, rt = self.g, self.rt
        q = dp.to_bf16(self.rng.standard_normal((len(requests), g.heads, g.d_head)))
        prog, plans = rt.qk_step(requests, layer, q)
        assert not verify(CycleExecutor(DEV).run(prog).schedule, DEV)
        per = plans.split(self.run(prog).readouts)
        width = max(len(rt.table(r)) for r in requests) * g.block_size
        buf = rt.sv_buffer(requests, layer, width)
        seqs = []
        for i, r in enumerate(requests):
            idx = rt.token_index(r)
            keys = np.concatenate([self.kv[b][0][layer] for b in rt.table(r)])
            values = np.concatenate([self.kv[b][1][layer] for b in rt.table(r)])
            scores = plans[i].decode(per[i], g)
            for h in range(g.heads):
                np.testing.assert_array_equal(scores[h, idx], qk_exact(keys[:, h], q[i, h]))
            buf[i][:, idx] = dp.to_bf16(self.rng.random((g.heads, len(idx))))
            seqs.append((idx, values))
        prog, plans = rt.sv_step(requests, layer, buf)
        assert not verify(CycleExecutor(DEV).run(prog).schedule, DEV)
        per = plans.split(self.run(prog).readouts)
        for i, r in enumerate(requests):
            idx, values = seqs[i]
            out = plans[i].decode(per[i], g)
            for h in range(g.heads):
                table = np.zeros((len(rt.table(r)) * g.block_size, g.d_head), np.uint16)
                table[idx] = values[:, h]
                np.testing.assert_array_equal(out[h], sv_exact(plans[i], h, table, buf[i, h]))


# ------------------------------------------------------------------------- interface


@pytest.mark.parametrize("name", NAMES)
def test_is_a_kv_runtime(name: str) -> None:
    assert isinstance(baseline(name).runtime(geometry(name)), KvRuntime)


def test_unknown_baseline_and_wrong_block_size() -> None:
    with pytest.raises(ConfigError, match="unknown baseline 'x'"):
        baseline("x")
    with pytest.raises(ConfigError, match="128-token blocks"):
        baseline("blockpim").runtime(geometry("neupims"))
    with pytest.raises(ConfigError, match="multiple of 16"):
        Geometry(GQA, DEV, block_size=24)


# ------------------------------------------------------------------------- end to end


@pytest.mark.parametrize("model", [GQA, MHA], ids=["gqa", "mha"])
@pytest.mark.parametrize("name", NAMES)
def test_prefill_decode_attention_bit_exact(name: str, model: ModelSpec) -> None:
    """Prefills of several lengths, decode steps across block boundaries, then attention in
    both layers: placements read back, scores and outputs bit-exact, programs verified."""
    h = Harness(name, model)
    t = h.g.block_size
    # MHA: two requests (a PIMphony MHA chunk takes half a channel), fewer tokens (time)
    lengths = (t + 5, 2 * t - 1, 3) if model is GQA else (t + 1, 5)
    reqs = list(range(len(lengths)))
    for r, n in zip(reqs, lengths):
        h.prefill(r, n)
    for _ in range(3):
        h.decode(reqs)
    h.rt.check()
    assert h.check_placements() > 0
    for layer in range(h.g.n_layers):
        h.check_attention(reqs, layer)
    # all three programs kinds are real AiM programs that the cycle model times
    assert h.programs >= 12


def test_pimphony_keeps_each_request_in_step_over_its_channels() -> None:
    """PIMphony's stripes put a request's units at the same addresses on its group's P
    channels: the aligned schedule starts each request on all of them at one step, so one
    ``MAC_ABK`` serves the group (and both heads) per step, ceil(units / P) per request. Run
    back to back, the channels drift apart by a unit after every request whose units P does
    not divide, and the steps need a ``MAC_ABK`` per address. Both are bit-exact."""
    h = Harness("pimphony")
    units = (5, 3, 6)
    for r, u in enumerate(units):
        h.prefill(r, u * h.g.block_size)
    reqs = list(range(len(units)))
    q = dp.to_bf16(h.rng.standard_normal((len(reqs), h.g.heads, h.g.d_head)))
    mac = OP_ID[Opcode.MAC_ABK]
    counts = {}
    for aligned in (True, False):
        h.rt.policy.aligned = aligned
        prog, _ = h.rt.qk_step(reqs, 0, q)
        counts[aligned] = int((prog.op == mac).sum())
        h.check_attention(reqs, 0)
    per = h.rt.policy.per
    assert counts[True] == sum(-(-u // per) for u in units) == 5
    assert counts[False] > counts[True]


@pytest.mark.parametrize("name", NAMES)
def test_bad_calls_leave_the_runtime_unchanged(name: str) -> None:
    h = Harness(name)
    (b,) = h.prefill(0, 3)
    before = copy.deepcopy((h.rt.blocks, h.rt.requests, vars(h.rt.policy)))
    with pytest.raises(BlockStateError, match="start there"):
        h.rt.write_program([(b, 0, *h._kv(2))])
    with pytest.raises(BlockStateError, match="overflow"):
        h.rt.write_program([(b, 3, *h._kv(h.g.block_size))])
    h.prefill(1, 2)
    with pytest.raises(DoubleFree):
        h.rt.free(1, b)  # request 0's block
    h.rt.finish(1)
    after = (h.rt.blocks, h.rt.requests, vars(h.rt.policy))
    assert after[0].keys() == before[0].keys() and after[1] == before[1]
    assert after[0][b].filled == 3 and after[2] == before[2]


@pytest.mark.parametrize("name", ["neupims", "attacc", "pimphony"])
def test_no_prefix_caching_refuses_share_and_keeps_nothing(name: str) -> None:
    h = Harness(name)
    t = h.g.block_size
    (b,) = h.prefill(0, t)
    with pytest.raises(BlockStateError, match="no prefix caching"):
        h.rt.share(1, b)
    h.rt.finish(0)
    assert not h.rt.blocks and not h.rt.requests
    h.rt.check()


def test_blockpim_shares_and_caches_full_blocks() -> None:
    h = Harness("blockpim")
    t = h.g.block_size
    a, b = h.prefill(0, t + 3)
    h.rt.share(1, a)
    assert h.rt.blocks[a].ref_cnt == 2
    h.rt.finish(0)
    assert a in h.rt.blocks and b not in h.rt.blocks  # partial b released, full a kept
    h.rt.finish(1)
    assert h.rt.blocks[a].ref_cnt == 0  # cached
    h.rt.check()
    h.rt.evict(a)
    assert not h.rt.blocks
    h.rt.check()


# ------------------------------------------------------------------------- policies


def _policy_rule(name: str, h: Harness, request: int, before: object) -> None:
    """Assert ``name``'s own placement rule for ``request``'s newest block."""
    rt, g = h.rt, h.g
    place = rt.blocks[rt.table(request)[-1]].place
    pol = rt.policy
    if name == "neupims":
        chans = {rt.blocks[b].place.key[0, 0, 0] for b in rt.table(request)}
        assert len(chans) == 1, "a NeuPIMs request left its home channel"
        if len(rt.table(request)) == 1:  # the home was the least-loaded channel that fitted
            load, fits = before
            c = int(place.key[0, 0, 0])
            assert all(load[c] <= load[o] for o in range(g.channels) if fits[o])
    elif name == "attacc":
        per = g.channels // g.heads
        for hd in range(g.heads):
            assert (place.key[hd, :, 0] // per == hd).all()
        assert len(rt.table(request)) * g.block_size <= pol.max_blocks * g.block_size
    elif name == "blockpim":
        used = list(before)
        for hd in range(g.heads):
            c = int(place.key[hd, 0, 0])
            room = [pol.keys.spans - used[o] > 0 for o in range(g.channels)]
            assert all(used[c] <= used[o] for o in range(g.channels) if room[o]), \
                f"head {hd} went to channel {c} with {used[c]} blocks, not the least filled"
            used[c] += 1
    elif name == "pimphony":
        per = g.channels // g.heads
        pos = len(rt.table(request)) - 1
        j = pos * g.units + np.arange(g.units)
        for hd in range(g.heads):
            assert (place.key[hd, :, 0] == hd * per + (j % pol.chunk) % per).all()


def _snapshot(name: str, h: Harness) -> object:
    pol = h.rt.policy
    if name == "neupims":
        return (list(pol.load), [pol._fits(c) for c in range(h.g.channels)])
    if name == "blockpim":
        return [pol.keys.used(c) for c in range(h.g.channels)]
    return None


OPS = st.lists(st.tuples(st.sampled_from(["new", "decode", "finish", "share", "evict"]),
                         st.integers(1, 60), st.integers(0, 7)), min_size=1, max_size=25)


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS)
def test_allocator_properties(name: str, ops: list[tuple[str, int, int]]) -> None:
    """Random lifecycles (40 per baseline, derandomized, up to 25 calls each): invariants after
    every call, each policy's rule on every new block, room promised is room given, a refused
    allocation changes nothing."""
    h = Harness(name)
    rt, g = h.rt, h.g
    live: list[int] = []
    next_req = 0
    for op, n, pick in ops:
        if op == "new":
            r = next_req
            next_req += 1
            blocks = -(-n // g.block_size)
            room = rt.free_blocks()
            for j in range(blocks):
                snap = _snapshot(name, h)
                state = copy.deepcopy((vars(rt.policy), sorted(rt.blocks)))
                b = h.next_block
                h.next_block += 1
                try:
                    rt.allocate(r, b)
                except CapacityError:  # past the promised room only; nothing changed
                    assert j >= room, f"room {room} promised, block {j} refused"
                    assert (vars(rt.policy), sorted(rt.blocks)) == state
                    break
                k, v = h._kv(min(g.block_size, n - j * g.block_size))
                h.kv[b] = (k, v)
                _policy_rule(name, h, r, snap)
                wp = rt.write_program([(b, 0, k, v)])
                h.run(wp.key)
                h.run(wp.value)
            if r in rt.requests:
                live.append(r)
        elif op == "decode" and live:
            reqs = live[:1 + pick % len(live)]
            if all(rt.free_blocks_for(r) >= 1 or not rt.blocks[rt.table(r)[-1]].full
                   for r in reqs):
                h.decode(reqs)
        elif op == "finish" and live:
            rt.finish(live.pop(pick % len(live)))
        elif op == "share" and live and rt.policy.prefix_caching:
            full = [b for b, m in rt.blocks.items() if m.full]
            if full:
                r = next_req
                next_req += 1
                rt.share(r, full[pick % len(full)])
                live.append(r)
        elif op == "evict":
            cached = [b for b, m in rt.blocks.items() if m.ref_cnt == 0]
            if cached:
                rt.evict(cached[pick % len(cached)])
        rt.check()
    h.check_placements()
    attend = [r for r in live if rt.table(r)]
    if attend:
        h.check_attention(attend[:3], 1)


def test_plan_reads_made_from_columns_equal_their_tuples():
    """A plan's read-outs arrive as columns and become tuples when first looked at."""
    reads = Reads()
    reads.put([np.array([0, 1]), np.array([5, 6]), np.array([7, 8])])
    assert len(reads) == 2  # counted without making the tuples
    reads.put([np.array([2]), np.array([9]), np.array([3])])
    assert len(reads) == 3
    assert list(reads) == [(0, 5, 7), (1, 6, 8), (2, 9, 3)] and reads[2] == (2, 9, 3)
    assert reads == [(0, 5, 7), (1, 6, 8), (2, 9, 3)] and reads != [(0, 5, 7)]
    assert all(type(x) is int for x in reads[0])


@pytest.mark.parametrize("seed", range(6))
def test_token_key_writes_are_key_writes_of_one_token_each(seed):
    """A decode step's Key writes built at once equal the chunk-by-chunk builder's program,
    field for field and payload for payload."""
    from patton.runtime.baselines import programs

    rng = np.random.default_rng(seed)
    g = Geometry(ModelSpec("m", layers=2, kv_heads=4, q_heads=8, d_head=128), block_size=16)
    n = int(rng.integers(1, 9))
    places = np.stack([rng.integers(0, 32, size=(g.heads, 3)),
                       rng.integers(0, g.slots, size=(g.heads, 3))], axis=-1)  # 3 units a block
    blocks = [places.copy() for _ in range(n)]
    offsets = rng.integers(0, 48, size=n)
    keys = rng.integers(0, 1 << 16, size=(n, 2, g.heads, 128), dtype=np.uint16)
    whole = programs.key_writes(g, 2, [(b, int(o), keys[i][:, None])
                                       for i, (b, o) in enumerate(zip(blocks, offsets))])
    units = np.stack([b[:, o // UNIT] for b, o in zip(blocks, offsets)])
    fast = programs.token_key_writes(g, units, offsets, keys)
    from patton.sim.program import FIELDS, HOST_FIELDS

    for name in ("op", *FIELDS, *HOST_FIELDS, "start", "size", "data"):
        assert np.array_equal(getattr(whole, name), getattr(fast, name)), name


def test_plans_deal_their_read_outs_and_segments_when_first_looked_at():
    """A batch's plans get their read-outs (and SV segments) from the program's arrays only
    when asked; what they get is what decoding needs (bit-exact attention, above)."""
    rt = baseline("blockpim").runtime(Geometry(ModelSpec("m", layers=1, kv_heads=2,
                                                          q_heads=2, d_head=128),
                                                block_size=128))
    for r in range(3):
        rt.allocate(r, r)
        kv = np.zeros((1, 40 + 10 * r, 2, 128), np.uint16)
        rt.write_many([(r, 0, kv, kv)], emit=False)
    _, plans = rt.sv_step([0, 1, 2], 0, rt.sv_buffer([0, 1, 2], 0, 128))
    assert plans[0].segments._fill is not None and plans[2].reads._source is not None
    assert len(plans[1].segments) > 0  # one plan looked at: every plan's are filled
    assert all(p.segments._fill is None for p in plans)
    total = sum(len(p.reads) for p in plans)
    assert total == len(plans.order) and all(p.reads._source is None for p in plans)
