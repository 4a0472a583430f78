"""Block lifecycle, placement policy, typed errors and the commands one write emits."""

from __future__ import annotations

import numpy as np
import pytest
from patton.runtime.errors import (
    BlockStateError,
    CapacityError,
    DoubleFree,
    DuplicateBlock,
    IdError,
    OffsetError,
    ReadOnlyBlock,
    ShapeError,
    UnknownBlock,
    UnknownRequest,
)
from patton.runtime.models import ModelSpec
from patton.runtime.patton.config import Config
from patton.runtime.patton.lifecycle import Runtime
from patton.runtime.patton.metadata import CzPlace, ValuePlace, WriteMode
from patton.sim import trace
from patton.sim.cycle_model import CycleModel
from patton.sim.isa import Instruction, Opcode

SMALL = ModelSpec("small", layers=1, kv_heads=2, q_heads=2, d_head=64)


def cfg(**kw) -> Config:
    kw.setdefault("layer_rows", 5)  # 1 CRS row, 2 KRS rows (8 O2Ks), 2 VRS rows (8 O2Vs)
    return Config(SMALL, **kw)


def kv(c: Config, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    shape = (c.n_layers, n, c.heads, c.d_head)
    return (rng.integers(0x3000, 0x4000, shape).astype(np.uint16),
            rng.integers(0x3000, 0x4000, shape).astype(np.uint16))


def fill(rt: Runtime, bid: int, n: int) -> None:
    rt.write(bid, rt.blocks[bid].filled, *kv(rt.config, n))


def test_geometry_of_small_config() -> None:
    c = cfg()
    assert (c.ch_per_head, c.v_rows, c.crs_rows, c.krs_count, c.vrs_count) == (4, 1, 1, 2, 2)
    assert Runtime(c).free_blocks() == 8 * 16


def test_first_blocks_spread_over_channels_and_pack_rows() -> None:
    rt = Runtime(cfg())
    for req in range(3):
        rt.allocate(req, req)
    keys = [rt.blocks[b].key for b in range(3)]
    assert [k.p for k in keys] == [0, 1, 2]  # least occupied, round-robin ties
    assert {k.row for k in keys} == {rt.config.krs_base}  # three O2Ks packed in one KRS
    assert len({rt.blocks[b].binding.o2k for b in range(3)}) == 3
    vals = [rt.blocks[b].value for b in range(3)]
    assert [v.col for v in vals] == [0, 16, 32]  # one O2V each, same VRS
    # A request's blocks: Case Ch first, then C; Value columns consecutive.
    for bid in range(3, 9):
        rt.allocate(0, bid)
    mine = [0, 3, 4, 5, 6, 7, 8]
    assert [rt.blocks[b].value.col for b in mine] == list(range(7))
    ps = [rt.blocks[b].key.p for b in mine]
    assert sorted(ps[:4]) == [0, 1, 2, 3]
    assert [rt.blocks[b].key.col for b in mine[:4]] == [0] * 4
    rt.check()


def test_commit_zone_holds_partial_block_until_token_15() -> None:
    rt = Runtime(cfg())
    rt.allocate(0, 7)
    assert rt.free_slots() == 64 and rt.blocks[7].cz is None  # no slot until partial
    for t in range(15):
        w = rt.write(7, t, *kv(rt.config, 1, t))
        assert not w.commit and w.value
        assert all(i.opcode is Opcode.WR_MEM and i.mask == 1 << t for i in w.value)
        # one CRS row per channel: every Value write of the token hits the same row
        assert {i.row for i in w.value} == {rt.blocks[7].cz.row}
        assert isinstance(rt.placements(7)[1], CzPlace) and rt.free_slots() == 63
    w = rt.write(7, 15, *kv(rt.config, 1, 15))
    assert w.commit and not w.value
    assert all(i.mask is None and i.opcode is Opcode.WR_MEM for i in w.commit)
    assert isinstance(rt.placements(7)[1], ValuePlace)
    assert rt.free_slots() == 64 and rt.blocks[7].full and rt.blocks[7].slot is None
    rt.check()


def test_whole_block_prefill_skips_the_commit_zone() -> None:
    rt = Runtime(cfg())
    rt.allocate(0, 1)
    w = rt.write(1, 0, *kv(rt.config, 16))
    assert not w.commit and rt.free_slots() == 64
    c = rt.config
    assert len(w.value) == c.heads * c.ch_per_head * c.v_rows * 16  # one burst per bank-row
    assert len(w.key) == 16 * c.heads * c.bursts
    rt.check()


def test_no_cz_single_token_writes() -> None:
    c = cfg()
    abk, mem = Runtime(c, WriteMode.NO_CZ), Runtime(c, WriteMode.NO_CZ, token_op="mem")
    for rt in (abk, mem):
        rt.allocate(0, 0)
        assert rt.free_slots() == 64 and isinstance(rt.placements(0)[1], ValuePlace)
    w = abk.write(0, 0, *kv(c, 1))
    assert [i.opcode for i in w.value] == [Opcode.WR_ABK] * (c.heads * c.ch_per_head * c.v_rows)
    assert all(i.mask == 1 for i in w.value)
    w = mem.write(0, 0, *kv(c, 1))
    assert len(w.value) == c.heads * c.ch_per_head * c.v_rows * 16
    with pytest.raises(ValueError):
        Runtime(c, WriteMode.NO_CZ, token_op="dma")


def test_programs_round_trip_through_traces() -> None:
    rt = Runtime(cfg())
    rt.allocate(0, 0)
    rt.allocate(0, 1)
    fill(rt, 0, 16)
    prog = rt.write(1, 0, *kv(rt.config, 3)).all
    q = np.full((2, 64), 0x3F80, dtype=np.uint16)
    prog += rt.qk(0, 0, q)[0] + rt.sv(0, 0, np.full((2, 19), 0x3D00, np.uint16))[0]
    prog.append(Instruction(Opcode.EOC))
    back = list(trace.parse(trace.dumps(prog).splitlines()))
    assert len(back) == len(prog) and all(a.same(b) for a, b in zip(prog, back))


def test_share_free_cache_evict() -> None:
    rt = Runtime(cfg())
    rt.allocate(0, 0)
    fill(rt, 0, 16)
    rt.allocate(0, 1)
    fill(rt, 1, 5)
    with pytest.raises(BlockStateError):
        rt.share(1, 1)  # partial blocks stay private
    rt.share(1, 0)
    assert rt.blocks[0].ref_cnt == 2 and rt.table(1) == [0]
    rt.finish(0)  # block 0 still used by request 1, block 1 (partial) released
    assert 1 not in rt.blocks and rt.free_slots() == 64
    with pytest.raises(BlockStateError):
        rt.evict(0)
    rt.free(1, 0)
    assert rt.cached() == [0]  # full, zero references: still mapped
    rt.share(2, 0)  # a cache hit revives it
    assert rt.blocks[0].ref_cnt == 1
    rt.free(2, 0)
    o2k = rt.blocks[0].binding.o2k
    rt.evict(0)
    assert o2k not in rt.alloc.o2k and rt.free_blocks() == 8 * 16  # last O1 returned the O2
    rt.allocate(3, 0)  # the id can be reused
    rt.check()


def test_misuse_raises_typed_errors_and_changes_nothing() -> None:
    rt = Runtime(cfg())
    rt.allocate(0, 0)
    fill(rt, 0, 16)
    rt.allocate(0, 1)
    fill(rt, 1, 3)
    rt.share(1, 0)
    before = rt.state()
    k, v = kv(rt.config, 1)
    cases = [
        (UnknownBlock, lambda: rt.write(9, 0, k, v)),
        (UnknownBlock, lambda: rt.evict(9)),
        (UnknownBlock, lambda: rt.share(1, 9)),
        (IdError, lambda: rt.allocate(0, -1)),
        (UnknownRequest, lambda: rt.free(5, 0)),
        (UnknownRequest, lambda: rt.finish(5)),
        (DuplicateBlock, lambda: rt.allocate(2, 1)),
        (ReadOnlyBlock, lambda: rt.write(0, 15, k, v)),  # shared (and full)
        (OffsetError, lambda: rt.write(1, 5, k, v)),  # not appending
        (OffsetError, lambda: rt.write(1, 3, *kv(rt.config, 14))),  # beyond offset 15
        (ShapeError, lambda: rt.write(1, 3, k[:, :, :1], v[:, :, :1])),  # wrong shape
        (OffsetError, lambda: rt.write_many([(1, 3, k, v), (1, 3, k, v)])),
        (DoubleFree, lambda: rt.free(1, 1)),
        (BlockStateError, lambda: rt.evict(1)),
    ]
    for error, call in cases:
        with pytest.raises(error):
            call()
        assert rt.state() == before, error
    rt.free(1, 0)
    with pytest.raises(DoubleFree):
        rt.free(1, 0)
    rt.finish(1)
    rt.finish(0)
    rt.evict(0)
    assert not rt.blocks and rt.free_blocks() == 8 * 16
    rt.check()


def test_cached_block_is_read_only() -> None:
    rt = Runtime(cfg())
    rt.allocate(0, 0)
    fill(rt, 0, 16)
    rt.finish(0)
    before = rt.state()
    with pytest.raises(ReadOnlyBlock):
        rt.write(0, 0, *kv(rt.config, 1))
    assert rt.state() == before


def test_exhaustion_is_atomic_and_capacity_is_exact() -> None:
    rt = Runtime(cfg())
    bid = 0
    for req in range(8):  # eight requests take the eight O2K/O2V pairs
        rt.allocate(req, bid)
        bid += 1
        assert rt.free_blocks() == (7 - req) * 16
    assert rt.alloc.free_blocks_for(0) == 15
    before = rt.state()
    with pytest.raises(CapacityError):
        rt.allocate(8, 100)
    assert rt.state() == before and 100 not in rt.blocks
    for _ in range(15):  # request 0 still fills its own O2s
        rt.allocate(0, bid)
        bid += 1
    with pytest.raises(CapacityError):
        rt.allocate(0, bid)
    assert rt.free_tokens() == 0
    rt.check()


def test_cz_exhaustion() -> None:
    rt = Runtime(cfg(n_o1p2=64, layer_rows=9))  # 64 slots, larger O2s
    for bid in range(65):
        rt.allocate(bid % 2, bid)  # binding takes no slot
    assert rt.free_slots() == 64
    rt.write_many([(b, 0, *kv(rt.config, 1)) for b in range(64)])
    assert rt.free_slots() == 0
    before = rt.state()
    with pytest.raises(CapacityError, match="CZ slot"):
        rt.write(64, 0, *kv(rt.config, 1))
    with pytest.raises(CapacityError, match="CZ slot"):  # a batch fails as a whole
        rt.write_many([(0, 1, *kv(rt.config, 15)), (64, 0, *kv(rt.config, 1))])
    assert rt.state() == before
    rt.write(64, 0, *kv(rt.config, 16))  # a whole block needs no slot
    fill(rt, 0, 15)  # committing frees a slot
    rt.allocate(0, 65)
    rt.write(65, 0, *kv(rt.config, 3))
    assert rt.free_slots() == 0
    rt.check()


def test_cz_writes_of_a_batch_share_row_activations() -> None:
    c = cfg()
    rt = Runtime(c)
    nz = Runtime(c, WriteMode.NO_CZ)
    for r in (rt, nz):
        for req in range(4):
            r.allocate(req, req)
    items = [(b, 0, *kv(c, 1, b)) for b in range(4)]
    cz = rt.write_many(items).value
    direct = nz.write_many(items).value
    model = CycleModel()
    eoc = [Instruction(Opcode.EOC)]

    def activations(prog: list[Instruction]) -> int:
        counts = model.run(prog + eoc).command_counts
        return sum(v.get("ACT", 0) + 16 * v.get("ACT16", 0) for v in counts.values())

    channels = c.heads * c.ch_per_head
    assert activations(cz) == channels * 16  # one CRS row per bank for all four requests
    assert activations(direct) == 4 * channels * c.v_rows * 16
    # the slots of the four requests are in one CRS row, the writes sorted by it
    assert len({rt.blocks[b].cz.row for b in range(4)}) == 1


def test_sv_continues_across_adjacent_o2vs_and_splits_foreign_ones() -> None:
    rt = Runtime(cfg())
    for bid in range(20):  # O2V 0 (columns 0..15) and the adjacent O2V 1 (16..19)
        rt.allocate(0, bid)
        fill(rt, bid, 16)
    rt.allocate(0, 20)
    fill(rt, 20, 3)  # partial block: in the Commit Zone
    probs = np.full((2, 20 * 16 + 3), 0x3C00, dtype=np.uint16)
    prog, plan = rt.sv(0, 0, probs)
    assert [len(s.runs) for s in plan.segments] == [1, 1]
    assert plan.segments[0].runs[0].count == 20 and plan.segments[1].cz is not None
    macs = [i for i in prog if i.opcode is Opcode.MAC_ABK]
    c = rt.config
    assert [m.opsize for m in macs] == [20] * c.v_rows + [1] * c.v_rows
    # Another request sharing the first 4 blocks, then its own block at the same columns of
    # another O2V: two runs whose GB columns overlap -> two segments.
    for bid in range(4):
        rt.share(1, bid)
    rt.allocate(1, 30)
    fill(rt, 30, 16)
    _, plan = rt.sv(1, 0, np.full((2, 5 * 16), 0x3C00, dtype=np.uint16))
    assert [r.count for s in plan.segments for r in s.runs] == [4, 1]
    qk, qplan = rt.qk(0, 0, np.full((2, 64), 0x3C00, dtype=np.uint16))
    # Case Ch: O1Ks at one (row, col) in the four channels share one bias/MAC/read-out triple
    assert len(qplan.reads) == -(-21 // c.ch_per_head)
    assert sum(1 for i in qk if i.opcode is Opcode.WR_GB) == c.heads


def test_ablation_variants_share_the_interface() -> None:
    import dataclasses

    from patton.runtime.errors import ConfigError
    from patton.runtime.patton.variants import VARIANTS, variant

    c = cfg(layer_rows=9)
    whole = variant("patton-no-o2v").runtime(c)
    for req in range(2):
        whole.allocate(req, req)
    rows = [whole.blocks[b].value.row0 for b in range(2)]
    assert rows[0] != rows[1]  # each request owns a whole VRS
    assert whole.blocks[0].value.col == whole.blocks[1].value.col == 0
    assert variant("patton-wo-cz").runtime(c).mode is WriteMode.NO_CZ
    assert variant("patton").runtime(c).config.o2v_width == 16
    assert list(VARIANTS) == ["patton", "patton-wo-cz", "patton-no-o2v"]
    mem = dataclasses.replace(variant("patton-wo-cz"), token_op="mem").runtime(c)
    assert mem.mode is WriteMode.NO_CZ and mem.token_op == "mem"
    with pytest.raises(ConfigError, match="known: patton, patton-wo-cz"):
        variant("no_o1k")
    with pytest.raises(ConfigError, match="token_op"):
        dataclasses.replace(variant("patton-wo-cz"), token_op="abc")
