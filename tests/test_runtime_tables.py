"""Kept-up structures equal a rebuild from scratch: attention tables, batch layouts, writes.

* :class:`ValueTable` / :class:`KeyTable` patched from the first changed table position must
  equal tables built from the whole table, after random edits (the greedy SV split resumed
  mid-way is the subtle part) and after random lifecycle sequences on a runtime.
* The vectorised batch layouts (:mod:`patton.runtime.programs.layout`) must equal the per-request
  templates laid out by :func:`reference_templates.batch`, field by field.
* Decode-step writes (:meth:`Runtime.append`, cached :class:`TokenBatch` rewritten in place)
  must give the reference generator's instructions at every step, across block boundaries,
  with the requests in step and staggered; and the same state as :meth:`Runtime.write_many`.
"""

from __future__ import annotations

import numpy as np
import pytest
from patton.runtime.errors import PattonError
from patton.runtime.models import ModelSpec
from patton.runtime.patton.config import Config
from patton.runtime.patton.lifecycle import Runtime
from patton.runtime.patton.metadata import CzPlace, KeyPlace, ValuePlace, WriteMode
from patton.runtime.programs import layout, plans
from patton.runtime.programs.batch import Batch
from patton.runtime.programs.tables import KeyTable, ValueTable
from patton.runtime.reference import templates as tpl
from patton.sim.program import FIELDS, Program
from test_runtime_e2e import _config
from test_runtime_program import _ref_writes, _same


def _random_values(rng: np.random.Generator, n: int) -> list[ValuePlace | CzPlace]:
    out: list[ValuePlace | CzPlace] = []
    for _ in range(n):
        if rng.random() < 0.15:
            out.append(CzPlace(int(rng.integers(0, 2)), int(rng.integers(0, 8))))
        elif out and isinstance(out[-1], ValuePlace) and rng.random() < 0.6:
            last = out[-1]  # mostly runs, as an allocator makes them
            out.append(ValuePlace(last.row0, (last.col + 1) % 8))
        else:
            out.append(ValuePlace(int(rng.integers(0, 2)), int(rng.integers(0, 8))))
    return out


def _value_rows(values: list) -> tuple[list, np.ndarray]:
    tb = ValueTable()
    tb.extend(values)
    return tb.plan.segments, tb.rows[:tb.nruns].copy()


def test_value_table_resumes_split_exactly() -> None:
    rng = np.random.default_rng(7)
    for _ in range(400):
        tb = ValueTable()
        values = _random_values(rng, int(rng.integers(0, 30)))
        tb.extend(values)
        for _ in range(6):
            d = int(rng.integers(0, len(values) + 1))  # positions before d stay
            tail = _random_values(rng, int(rng.integers(0, 8)))
            if rng.random() < 0.5 and d < len(values):  # change one placement only
                tail = tail[:1] + values[d + 1:]
            appended = d == len(values)
            values = values[:d] + tail
            after = values[d] if appended and d < len(values) and rng.random() < 0.7 else None
            first = tb.cut(d, after)
            assert first <= d
            tb.extend(values[first:])
            segments, rows = _value_rows(values)
            assert tb.plan.segments == segments == plans.sv_segments(values)
            assert tb.plan.blocks == len(values) and tb.values == values
            assert np.array_equal(tb.rows[:tb.nruns], rows)


def test_value_table_publishes_last_block_exactly() -> None:
    """A CZ block at the end replaced by an O1V: the in-place commit path or cut/extend."""
    rng = np.random.default_rng(5)
    applied = 0
    for _ in range(600):
        values = _random_values(rng, int(rng.integers(1, 30)))
        values.append(CzPlace(0, int(rng.integers(0, 8))))
        tb = ValueTable()
        tb.extend(values)
        prev = values[-2] if len(values) > 1 else None
        if isinstance(prev, ValuePlace) and rng.random() < 0.7:  # the run's next column
            new = ValuePlace(prev.row0, prev.col + 1)
        elif rng.random() < 0.2:
            new = CzPlace(1, int(rng.integers(0, 8)))
        else:
            new = ValuePlace(int(rng.integers(0, 2)), int(rng.integers(0, 9)))
        old_plan = tb.plan
        old_segments = list(old_plan.segments)
        values[-1] = new
        if tb.publish_last(new):
            applied += 1
        else:
            tb.extend(values[tb.cut(len(values) - 1):])
        segments, rows = _value_rows(values)
        assert tb.plan.segments == segments and tb.values == values
        assert np.array_equal(tb.rows[:tb.nruns], rows)
        assert tb.rfirst == [r.first for s in segments for r in s.runs]
        assert old_plan.segments == old_segments  # a plan handed out never changes
        assert tb.plan is not old_plan
    assert applied > 100


def test_value_table_appends_cz_block_exactly() -> None:
    """A CZ block appended in place (a decode step's boundary) equals a fresh split."""
    rng = np.random.default_rng(6)
    for _ in range(300):
        values = _random_values(rng, int(rng.integers(0, 30)))
        tb = ValueTable()
        tb.extend(values)
        for _ in range(3):
            old_plan, old_segments = tb.plan, list(tb.plan.segments)
            cz = CzPlace(int(rng.integers(0, 2)), int(rng.integers(0, 8)))
            values.append(cz)
            assert tb.append_cz(cz)
            segments, rows = _value_rows(values)
            assert tb.plan.segments == segments and tb.values == values
            assert np.array_equal(tb.rows[:tb.nruns], rows)
            assert tb.rfirst == [r.first for s in segments for r in s.runs]
            assert old_plan.segments == old_segments and tb.plan is not old_plan
    tb = ValueTable()
    tb.extend(_random_values(rng, 10))
    tb.cut(5)  # a split left open: not an append at the end
    assert not tb.append_cz(CzPlace(0, 0))


def test_key_table_appends_and_rebuilds() -> None:
    rng = np.random.default_rng(8)
    by_p = (1, 2, 4, 8)
    for _ in range(200):
        keys: list[KeyPlace] = []
        tb = KeyTable(by_p)
        for _ in range(5):
            d = int(rng.integers(0, len(keys) + 1))
            seen = {(k.p, k.row, k.col) for k in keys[:d]}
            new = []
            for _ in range(int(rng.integers(0, 10))):
                k = KeyPlace(int(rng.integers(0, 4)), int(rng.integers(0, 3)),
                             int(rng.integers(0, 4)) * 8)
                if (k.p, k.row, k.col) not in seen:
                    seen.add((k.p, k.row, k.col))
                    new.append(k)
            keys = keys[:d] + new
            first = tb.cut(d if rng.random() < 0.5 else len(keys[:d]))
            tb.extend(keys[first:])
            fresh = KeyTable(by_p)
            fresh.extend(keys)
            assert (tb.plan.reads, tb.plan.blocks) == (fresh.plan.reads, fresh.plan.blocks)
            assert np.array_equal(tb.groups[:tb.ngroups], fresh.groups[:fresh.ngroups])


def _same_batch(got: Batch, want: Batch) -> None:
    for f in ("op",) + FIELDS + ("start", "size"):
        assert np.array_equal(getattr(got.prog, f), getattr(want.prog, f)), f
    assert len(got.prog.data) == len(want.prog.data)
    assert got.shape == want.shape and np.array_equal(got.tiles, want.tiles)


def _check_tables(rt: Runtime) -> None:
    """Every live request's kept-up tables and batches equal ones built from scratch."""
    c = rt.config
    reqs = sorted(rt.requests)
    for r in reqs:
        keys = [rt.blocks[b].key for b in rt.table(r)]
        values = [rt.placements(b)[1] for b in rt.table(r)]
        kt, vt = rt.attention.keys(r), rt.attention.values(r)
        tp, qplan = tpl.qk_template(c, 0, keys)
        assert (kt.plan.reads, kt.plan.blocks) == (qplan.reads, qplan.blocks)
        segments, rows = _value_rows(values)
        assert vt.plan.segments == segments and vt.values == values
        assert np.array_equal(vt.rows[:vt.nruns], rows)
    if not reqs:
        return
    width = max(len(rt.table(r)) for r in reqs) * c.block_size + c.block_size
    for layer in range(c.n_layers):
        # the runtime's own batch (patched from its last one when few tables grew)
        _same_batch(rt.attention.batch(reqs, layer, "qk", c.device.gb_columns * c.device.lanes)[0],
                    layout.qk_batch(c, layer, [rt.attention.keys(r) for r in reqs]))
        qk = [tpl.qk_template(c, layer, [rt.blocks[b].key for b in rt.table(r)])[0]
              for r in reqs]
        _same_batch(layout.qk_batch(c, layer, [rt.attention.keys(r) for r in reqs]),
                    tpl.batch(c, qk, c.device.gb_columns * c.device.lanes))
        sv = [tpl.sv_template(c, layer, [rt.placements(b)[1] for b in rt.table(r)])[0]
              for r in reqs]
        _same_batch(layout.sv_batch(c, layer, [rt.attention.values(r) for r in reqs], width),
                    tpl.batch(c, sv, width))
        _same_batch(rt.attention.batch(reqs, layer, "sv", width)[0],  # (patched from its last one)
                    layout.sv_batch(c, layer, [rt.attention.values(r) for r in reqs], width))


@pytest.mark.parametrize("name", ["gqa-d64", "two-layers", "no-o2v"])
def test_tables_follow_random_lifecycles(name: str) -> None:
    c = _config(name)
    rng = np.random.default_rng(11)
    rt = Runtime(c)
    next_id = 0
    for step in range(400):
        live = sorted(rt.requests)
        op = rng.random()
        try:
            if op < 0.3 or not live:
                req = int(rng.integers(0, 4))
                rt.allocate(req, next_id)
                next_id += 1
            elif op < 0.65:  # write 1..n tokens into a writable block
                table = rt.table(live[int(rng.integers(0, len(live)))])
                if not table:
                    continue
                bid = table[int(rng.integers(0, len(table)))]
                meta = rt.blocks[bid]
                n = int(rng.integers(1, c.block_size - meta.filled + 1)) \
                    if rng.random() < 0.3 and not meta.full else 1
                shape = (c.n_layers, n, c.heads, c.d_head)
                rt.write(bid, meta.filled, np.zeros(shape, np.uint16),
                         np.ones(shape, np.uint16))
            elif op < 0.75:
                req = live[int(rng.integers(0, len(live)))]
                full = [b for b, m in rt.blocks.items() if m.full and b not in rt.table(req)]
                if full:  # (a table holds a block once: its O1K cannot be read twice)
                    rt.share(req, full[int(rng.integers(0, len(full)))])
            elif op < 0.88:  # free any table entry (not just the last)
                req = live[int(rng.integers(0, len(live)))]
                table = rt.table(req)
                if table:
                    rt.free(req, table[int(rng.integers(0, len(table)))])
            elif op < 0.94:
                rt.finish(live[int(rng.integers(0, len(live)))])
            else:
                cached = rt.cached()
                if cached:
                    rt.evict(cached[int(rng.integers(0, len(cached)))])
        except PattonError:
            pass
        if step % 3 == 0:
            _check_tables(rt)
    _check_tables(rt)


def _decode(c: Config, offsets: list[int], steps: int, use_append: bool,
            device_ext: str = "aim", mode: WriteMode = WriteMode.PATTON,
            token_op: str = "abk") -> Runtime:
    """Decode ``steps`` tokens into requests that start ``offsets[r]`` tokens into a block.

    Every step's programs are compared with the reference generator; a copy of the previous
    step's is kept and compared again after the next step rewrote the cached buffers. On
    ``aim+wr16`` the single-token CZ writes are ``WR_ABK_OPEN`` (the prefills of ``offsets``
    stay ``W MEM``), and so are the no-CZ ones of ``token_op="abk"``, sorted by row.
    """
    rt = Runtime(c, mode, token_op=token_op, device_ext=device_ext)
    rng = np.random.default_rng(len(offsets) * 100 + steps)
    bid = 0
    for r, off in enumerate(offsets):
        rt.allocate(r, bid)
        if off:
            z = np.full((c.n_layers, off, c.heads, c.d_head), r + 1, np.uint16)
            rt.write(bid, 0, z, z)
        bid += 1
    kept: tuple[list, list] | None = None
    for _ in range(steps):
        ids = []
        for r in range(len(offsets)):
            last = rt.blocks[rt.table(r)[-1]]
            if last.full:
                rt.allocate(r, bid)
                ids.append(bid)
                bid += 1
            else:
                ids.append(last.block_id)
        shape = (len(ids), c.n_layers, c.heads, c.d_head)
        keys = rng.integers(0, 1 << 16, shape, dtype=np.uint16)
        values = rng.integers(0, 1 << 16, shape, dtype=np.uint16)
        items = [(b, rt.blocks[b].filled, keys[i][:, None], values[i][:, None])
                 for i, b in enumerate(ids)]
        shadows = {b: None if rt.blocks[b].shadow is None else rt.blocks[b].shadow.copy()
                   for b in ids}
        if use_append:
            w = rt.append(ids, keys, values)
        else:
            w = rt.write_program(items)
        want = _ref_writes(rt, items, shadows)
        got = [w.key, w.value, w.commit]
        copies = [p.copy() for p in got]
        _same(Program.to_instructions(w.all), want)
        if kept is not None:  # a copy outlives the next step
            _same([i for p in kept[0] for i in p.to_instructions()], kept[1])
        kept = (copies, want)
        rt.check()
        if use_append:  # the tables patched at commits and boundaries equal fresh ones
            _check_tables(rt)
    return rt


@pytest.mark.parametrize("device_ext", ["aim", "aim+wr16"])
@pytest.mark.parametrize("name", ["gqa-d64", "two-layers", "gqa-d128-p4"])
def test_decode_writes_match_reference(name: str, device_ext: str) -> None:
    c = _config(name)
    many = [[2] * 6 + [9, 14]] if name != "gqa-d128-p4" else []  # (4 O2Ks: too few)
    for offsets in [[0, 0, 0], [0, 5, 11, 15], [3]] + many:
        a = _decode(c, offsets, 40, use_append=True, device_ext=device_ext)
        b = _decode(c, offsets, 40, use_append=False, device_ext=device_ext)
        assert a.state() == b.state()


@pytest.mark.parametrize("token_op", ["abk", "mem"])
@pytest.mark.parametrize("device_ext", ["aim", "aim+wr16"])
def test_no_cz_decode_writes_match_reference(device_ext: str, token_op: str) -> None:
    """Without the Commit Zone ``append`` takes the general path: both paths equal the
    reference, ``WR_ABK_OPEN`` by row on ``aim+wr16`` with ``token_op="abk"``."""
    c = _config("two-layers")
    for offsets in [[0, 0, 0], [0, 5, 11, 15], [2] * 6 + [9, 14]]:
        a = _decode(c, offsets, 40, True, device_ext, WriteMode.NO_CZ, token_op)
        b = _decode(c, offsets, 40, False, device_ext, WriteMode.NO_CZ, token_op)
        assert a.state() == b.state()


def test_append_reports_like_write() -> None:
    c = Config(ModelSpec("t", 1, 2, 2, 64), layer_rows=5)
    rt = Runtime(c)
    rt.allocate(0, 0)
    rt.allocate(0, 1)
    ok = np.zeros((1, c.n_layers, c.heads, c.d_head), np.uint16)
    z16 = np.zeros((c.n_layers, 16, c.heads, c.d_head), np.uint16)
    rt.write(0, 0, z16, z16)
    rt.share(1, 0)  # block 0 is full and shared
    cases = [([7], ok), ([0], ok), ([1, 1], np.concatenate([ok, ok])), ([1], ok[:, :, :1])]
    for ids, data in cases:
        before = rt.state()
        with pytest.raises(PattonError) as got:
            rt.append(ids, data, data)
        items = [(b, rt.blocks[b].filled if b in rt.blocks else 0, data[i][:, None],
                  data[i][:, None]) for i, b in enumerate(ids)]
        with pytest.raises(PattonError) as want:
            rt.write_many(items)
        assert type(got.value) is type(want.value)
        assert rt.state() == before
    rt.append([1], ok, ok)
    assert rt.blocks[1].filled == 1 and rt.placements(1)[1] == rt.blocks[1].cz


def test_no_cz_append_falls_back() -> None:
    c = Config(ModelSpec("t", 1, 2, 2, 64), layer_rows=5)
    a, b = Runtime(c, WriteMode.NO_CZ), Runtime(c, WriteMode.NO_CZ)
    for rt in (a, b):
        rt.allocate(0, 0)
    kv = np.arange(c.heads * c.d_head, dtype=np.uint16).reshape(1, 1, c.heads, c.d_head)
    got = a.append([0], kv, kv).all.to_instructions()
    _same(got, b.write_many([(0, 0, kv[0][:, None], kv[0][:, None])]).all)


@pytest.mark.parametrize("name", ["gqa-d64", "two-layers"])
def test_layouts_patched_for_few_changed_requests(name: str, monkeypatch) -> None:
    """Staggered decode: each step's QK^T and SV layouts patched from the last equal rebuilds.

    Eight requests at every other fill level bind and commit a block or two per step, so
    :mod:`patton.runtime.programs.layout_patch` applies (a table edited once at its end); steps that
    change the data width or more requests are laid out anew. Both kinds must occur.
    """
    from patton.runtime.programs import layout_patch

    used = {"qk": 0, "sv": 0, "refused": 0}
    qk_patch, sv_patch = layout_patch.qk_patch, layout_patch.sv_patch

    def count(kind, fn):
        def wrapped(*args):
            out = fn(*args)
            used[kind if out is not None else "refused"] += 1
            return out
        return wrapped

    monkeypatch.setattr(layout_patch, "qk_patch", count("qk", qk_patch))
    monkeypatch.setattr(layout_patch, "sv_patch", count("sv", sv_patch))
    c = _config(name)
    rt = Runtime(c)
    rng = np.random.default_rng(9)
    reqs = list(range(8))
    bid = 0
    for r in reqs:  # request r starts 2 r tokens into its first block
        rt.allocate(r, bid)
        if r:
            z = np.full((c.n_layers, 2 * r, c.heads, c.d_head), r, np.uint16)
            rt.write(bid, 0, z, z)
        bid += 1
    for _ in range(40):
        ids = []
        for r in reqs:
            last = rt.blocks[rt.table(r)[-1]]
            if last.full:
                rt.allocate(r, bid)
                last = rt.blocks[bid]
                bid += 1
            ids.append(last.block_id)
        shape = (len(ids), c.n_layers, c.heads, c.d_head)
        rt.append(ids, rng.integers(0, 1 << 16, shape, dtype=np.uint16),
                  rng.integers(0, 1 << 16, shape, dtype=np.uint16))
        width = max(len(rt.table(r)) for r in reqs) * c.block_size
        gb = c.device.gb_columns * c.device.lanes
        for layer in range(c.n_layers):
            _same_batch(rt.attention.batch(reqs, layer, "qk", gb)[0],
                        layout.qk_batch(c, layer, [rt.attention.keys(r) for r in reqs]))
            _same_batch(rt.attention.batch(reqs, layer, "sv", width)[0],
                        layout.sv_batch(c, layer, [rt.attention.values(r) for r in reqs], width))
    assert used["qk"] > 10 and used["sv"] > 10 and used["refused"] > 0, used
