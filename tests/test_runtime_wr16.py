"""The Commit Zone's single-token Value writes on a device with the extension ``wr16``.

On ``aim+wr16`` (:mod:`patton.sim.extensions`) a single-token CZ Value write is one
``WR_ABK_OPEN`` per (head, channel, Value row) instead of one ``W MEM`` per bank as well: it
must store exactly what the ``W MEM`` bursts store, cost one ACT16 per CRS row and channel for
a batch, stay ``W MEM`` for multi-token writes and commits, and never appear on ``aim``.
Without the Commit Zone (``token_op="abk"``) a single-token Value write's ``WR_ABK`` s become
``WR_ABK_OPEN`` s, a write call's sorted by row: they store what the ``WR_ABK`` s store and
open each Value row once per channel for the requests that share its VRS. The field-by-field
equality of both write paths with the reference is in ``tests/test_runtime_program.py`` and
``tests/test_runtime_tables.py``.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from patton.runtime.models import ModelSpec
from patton.runtime.patton.config import Config
from patton.runtime.patton.lifecycle import Runtime
from patton.runtime.patton.metadata import CzPlace, WriteMode
from patton.runtime.patton.variants import VARIANTS
from patton.runtime.reference import programs as ref
from patton.serving.adapter import attach, executor_ext
from patton.serving.scenario import Scenario, run
from patton.sim.cycle_model import CycleModel, DeviceState
from patton.sim.device import DEVICE
from patton.sim.executor import CycleExecutor, FunctionalExecutor, closed
from patton.sim.extensions import NotOnDeviceError, UnknownExtensionError
from patton.sim.isa import Opcode, channel_bit
from patton.sim.program import Program
from patton.sim.timing import timing_table

WR16 = "aim+wr16"
#: 2 KV heads of d_head 64 on 32 channels: P = 4, Rv = 1, 64 CZ slots per CRS row.
CFG = Config(ModelSpec("gqa64", 2, 2, 8, 64), DEVICE.with_(channels=32), layer_rows=6)
#: 2 layers, 2 KV heads of d_head 128 on 8 channels: P = 4, Rv = 2, 4 O2Vs per VRS.
CFG2 = Config(ModelSpec("gqa128", 2, 2, 8, 128), DEVICE.with_(channels=8), layer_rows=12)


def _ops(program) -> Counter:
    return Counter(i.opcode for i in program.to_instructions())


def _decode(rt: Runtime, offsets: list[int], steps: int, seed: int = 0) -> list:
    """Requests ``r`` prefilled with ``offsets[r]`` tokens (one multi-token write each), then
    ``steps`` decode steps through :meth:`Runtime.append`; return every program, in order."""
    c = rt.config
    rng = np.random.default_rng(seed)
    programs = []
    shape = (c.n_layers, 0, c.heads, c.d_head)
    for r, n in enumerate(offsets):
        rt.allocate(r, r)
        if n:
            kv = rng.integers(0, 1 << 16, shape[:1] + (n,) + shape[2:], dtype=np.uint16)
            programs.append(rt.write_program([(r, 0, kv, kv)]).copy())
    bid = len(offsets)
    for _ in range(steps):
        ids = []
        for r in range(len(offsets)):
            last = rt.blocks[rt.table(r)[-1]]
            if last.full:
                rt.allocate(r, bid)
                last = rt.blocks[bid]
                bid += 1
            ids.append(last.block_id)
        kv = rng.integers(0, 1 << 16, (len(ids), c.n_layers, c.heads, c.d_head),
                          dtype=np.uint16)
        programs.append(rt.append(ids, kv, kv).copy())
    return programs


def test_a_decode_step_is_one_wr_abk_open_per_head_channel_and_row() -> None:
    c = CFG
    per = c.heads * c.ch_per_head * c.v_rows  # WR_ABK_OPEN per token and layer
    for ext, op, n in (("aim", Opcode.WR_MEM, per * c.device.banks), (WR16, Opcode.WR_ABK_OPEN,
                                                                      per)):
        rt = Runtime(c, device_ext=ext)
        assert rt.device_ext == ext and rt.writer.cz_op == ("wr16" if ext == WR16 else "mem")
        # in step (1..3) then staggered (offsets 0..6 and 3..9): uniform and per-item masks
        for offsets in ([0] * 5, [0, 3]):
            rt = Runtime(c, device_ext=ext)
            steps = _decode(rt, offsets, 7)
            last = steps[-1]
            assert _ops(last.value) == {op: len(offsets) * c.n_layers * n}
            assert len(last.commit) == 0 and _ops(last.key) == {Opcode.WR_MEM: len(
                offsets) * c.n_layers * c.heads * c.bursts}
            batches = list(rt.writer._tokens.values())  # the fast path's kept programs
            assert batches and {b.op for b in batches} == {rt.writer.cz_op}


def test_wr16_stores_what_w_mem_stores() -> None:
    """The same decode (prefills left partial, steps in step and staggered, commits) on aim and
    on aim+wr16 leaves the same words in every mat, and only the CZ token writes differ."""
    mats = {}
    offsets = [0, 3, 9, 15, 5]
    for ext in ("aim", WR16):
        rt = Runtime(CFG, device_ext=ext)
        ex = FunctionalExecutor(CFG.device)
        counts: Counter = Counter()
        for w in _decode(rt, offsets, 20, seed=7):
            ex.run(w.all)
            counts.update({f"value {k.name}": n for k, n in _ops(w.value).items()})
            counts.update({f"commit {k.name}": n for k, n in _ops(w.commit).items()})
        peek = ex.readers()[0][1]
        mats[ext] = np.stack([peek(ch, b, r) for ch in range(CFG.device.channels)
                              for b in range(CFG.device.banks)
                              for r in range(CFG.n_layers * CFG.rows_per_layer)])
        rt.check()
        if ext == WR16:
            assert counts["value WR_ABK_OPEN"] > 0 and counts["commit WR_ABK_OPEN"] == 0
            assert counts["value WR_MEM"] > 0  # the multi-token prefills into CZ slots
        else:
            assert counts["value WR_ABK_OPEN"] == 0
    assert mats["aim"].any()
    assert np.array_equal(mats["aim"], mats[WR16])


def test_a_batch_opens_each_crs_row_once_per_channel() -> None:
    c = CFG
    rt = Runtime(c, device_ext=WR16)
    steps = _decode(rt, [0] * 8, 3)
    value = steps[-1].value  # 8 requests' tokens at offset 2: their slots share a CRS row
    rows = {cz.row for cz in (rt.blocks[b].cz for b in range(8))}
    assert len(rows) == 1
    model = CycleModel(c.device, timing_table(None, WR16), record=False, drain=True)
    res = model.run(closed(value), DeviceState.reset(c.device))
    used = [ch for ch in range(c.device.channels) if res.command_counts.get(ch)]
    assert len(used) == c.heads * c.ch_per_head
    for ch in used:  # per channel and layer: one ACT16, then a WR16 per piece and Value row
        counts = res.command_counts[ch]
        assert counts.get("ACT16") == c.n_layers and not counts.get("ACT")
        assert counts.get("WR16") == 8 * c.n_layers * c.v_rows and not counts.get("WRA16")
    with pytest.raises(NotOnDeviceError, match="WR_ABK_OPEN"):
        CycleModel(c.device, record=False).run(closed(value))
    with pytest.raises(NotOnDeviceError):
        CycleExecutor(c.device).run(value)


def test_multi_token_cz_writes_and_commits_stay_w_mem() -> None:
    c = CFG
    rt = Runtime(c, device_ext=WR16)
    for r in range(3):
        rt.allocate(r, r)
    z = np.zeros((c.n_layers, 1, c.heads, c.d_head), np.uint16)
    rt.write(2, 0, np.repeat(z, 15, axis=1), np.repeat(z, 15, axis=1))
    w = rt.write_program([(0, 0, z, z), (1, 0, np.repeat(z, 3, axis=1),
                                         np.repeat(z, 3, axis=1)), (2, 15, z, z)])
    per = c.heads * c.ch_per_head * c.v_rows
    assert _ops(w.value) == {Opcode.WR_ABK_OPEN: c.n_layers * per,
                             Opcode.WR_MEM: c.n_layers * per * c.device.banks}
    assert _ops(w.commit) == {Opcode.WR_MEM: c.n_layers * per * c.device.banks}
    # grouped by (layer, CRS row, slot) as the W MEM writes are: layer 0's pieces first
    layer0 = c.row(0, rt.blocks[0].cz.row)
    rows = [i.row for i in w.value.to_instructions()]
    assert rows[:len(rows) // 2] == [layer0] * (len(rows) // 2)


def test_the_reference_token_write_puts_dimension_b_in_bank_b() -> None:
    c = CFG
    cz = CzPlace(1, 5)
    values = np.arange(c.heads * c.d_head, dtype=np.uint16).reshape(1, c.heads, c.d_head)
    got = ref.cz_token_writes(c, 1, cz, 9, values)
    assert len(got) == c.heads * c.ch_per_head * c.v_rows
    k = 0
    for g in range(c.heads):
        for p in range(c.ch_per_head):
            for i in range(c.v_rows):
                ins = got[k]
                k += 1
                first = p * c.d_head // c.ch_per_head + 16 * i
                assert ins.opcode is Opcode.WR_ABK_OPEN and ins.mask == 1 << 9
                assert (ins.row, ins.col, ins.gpr0) == (c.row(1, 1), 5 + i, 0)
                assert ins.channel_mask == channel_bit(c.channel(g, p))
                assert ins.data.tolist() == values[0, g, first:first + 16].tolist()


def test_unknown_extension_sets_are_refused() -> None:
    with pytest.raises(UnknownExtensionError, match="aim, aim\\+wr16"):
        Runtime(CFG, device_ext="aim+wr32")
    with pytest.raises(UnknownExtensionError):
        VARIANTS["patton"].runtime(CFG, "wr16")
    spec = ModelSpec("gqa64", 1, 2, 8, 64)
    with pytest.raises(UnknownExtensionError):
        attach("blockpim", spec, device_ext="x")
    assert attach("patton", spec, device_ext=WR16).runtime.writer.cz_op == "wr16"
    assert attach("patton-wo-cz", spec, device_ext=WR16).runtime.writer.cz_op == "mem"
    assert attach("patton-wo-cz", spec, device_ext=WR16).runtime.writer.o1v_op == "wr16"
    assert attach("patton-wo-cz", spec).runtime.writer.o1v_op == "abk"
    assert attach("patton", spec, device_ext=WR16).runtime.writer.o1v_op == "abk"  # unused
    assert VARIANTS["patton"].runtime(CFG).device_ext == "aim"


def test_a_scenario_on_wr16_passes_every_check() -> None:
    c = Config(ModelSpec("gqa64", 1, 2, 8, 64), DEVICE.with_(channels=32), layer_rows=6)
    ex = CycleExecutor(c.device, timing_table(None, WR16))
    assert executor_ext(ex) == WR16 and executor_ext(None) == executor_ext(
        FunctionalExecutor(c.device)) == "aim"
    served = run(c, Scenario(requests=3, steps=30, seed=3), executor=ex)
    assert served.attached.runtime.device_ext == WR16
    total = served.checks.total
    assert served.ok and total.failures == [] and total.violations == 0
    assert total.commits > 0 and total.placement_checked > 1000
    assert served.phases.figures["append v_write"]["cycles"] > 0
    bad, checked, _ = served.checks.sweep()
    assert checked > 1000 and bad == 0
    wo_cz = run(c, Scenario(requests=3, steps=30, seed=3), VARIANTS["patton-wo-cz"],
                executor=CycleExecutor(c.device, timing_table(None, WR16)))
    assert wo_cz.attached.runtime.writer.o1v_op == "wr16"  # WR_ABK_OPEN, then reads of its rows
    assert wo_cz.ok and wo_cz.checks.total.failures == [] and wo_cz.checks.total.violations == 0
    bad, checked, _ = wo_cz.checks.sweep()
    assert checked > 1000 and bad == 0
    with pytest.raises(ValueError, match="executor's device is 'aim'"):
        run(c, Scenario(requests=1, steps=1), executor=CycleExecutor(c.device),
            device_ext=WR16)


def test_the_value_write_benchmark_adds_the_extension_only_when_asked() -> None:
    from patton.eval.micro.value_writes import measure

    c = Config(ModelSpec("gqa64", 1, 2, 8, 64), DEVICE.with_(channels=32), layer_rows=6)
    plain = measure(c, 4, 6, 0, "aimsim-0f28a07")
    assert list(plain) == ["cz", "no_cz_abk", "no_cz_mem", "no_cz_abk_over_cz",
                           "no_cz_mem_over_cz"]
    assert "instructions" not in plain["cz"]
    both = measure(c, 4, 6, 0, "aimsim-0f28a07", device_exts=("aim", WR16))
    for name in ("cz", "no_cz_abk", "no_cz_mem"):  # the aim paths are the same
        assert {k: v for k, v in both[name].items() if k in plain[name]
                and k != "wall_seconds"} == {k: v for k, v in plain[name].items()
                                             if k != "wall_seconds"}
    assert [k for k in both if k not in plain] == [
        "cz_wr16", "no_cz_wr16", "cz_wr16_over_cz", "no_cz_wr16_over_cz",
        "no_cz_abk_over_cz_wr16", "no_cz_mem_over_cz_wr16", "no_cz_wr16_over_cz_wr16"]
    cz, cz16 = both["cz"], both["cz_wr16"]
    assert cz16["writes"] == cz["writes"] and cz16["commits"] == cz["commits"]
    assert cz16["activations"] == cz["activations"]  # the same rows, opened all at once
    assert cz16["instructions"] < cz["instructions"] and cz16["cycles"] < cz["cycles"]
    # one ACT16 per step and channel of the 2 heads x 4 channels (every slot in one CRS row)
    assert cz16["act16"] == 6 * c.heads * c.ch_per_head and cz["act16"] == 0
    assert both["cz_wr16_over_cz"]["cycles"] == cz16["cycles"] / cz["cycles"]
    assert "no_cz_abk_over_cz_wr16" in both
    abk, abk16 = both["no_cz_abk"], both["no_cz_wr16"]
    assert abk16["writes"] == abk["writes"] and abk16["instructions"] == abk["instructions"]
    assert abk16["act16"] < abk["act16"] == abk["instructions"]  # WRA16: an ACT16 each
    assert abk16["activations"] == 16 * abk16["act16"] and abk16["cycles"] < abk["cycles"]
    assert both["no_cz_wr16_over_cz"]["cycles"] == abk16["cycles"] / cz["cycles"]
    assert both["no_cz_wr16_over_cz_wr16"]["cycles"] == abk16["cycles"] / cz16["cycles"]


def _no_cz(ext: str, token_op: str = "abk", c: Config = CFG2) -> Runtime:
    return Runtime(c, WriteMode.NO_CZ, token_op=token_op, device_ext=ext)


def test_no_cz_token_writes_are_wr_abk_by_row() -> None:
    """Without the Commit Zone a step's ``WR_ABK`` s become ``WR_ABK_OPEN`` s, the same fields,
    stably sorted by row (layer 0's rows first), in step and staggered, new blocks included."""
    c = CFG2
    per = c.heads * c.ch_per_head * c.v_rows
    for offsets in ([0] * 8, [0, 3, 9, 15, 5, 14]):
        aim = _decode(_no_cz("aim"), offsets, 20)
        wr16 = _decode(_no_cz(WR16), offsets, 20)
        for a, b in zip(aim[-20:], wr16[-20:]):
            assert _ops(a.value) == {Opcode.WR_ABK: len(offsets) * c.n_layers * per}
            assert _ops(b.value) == {Opcode.WR_ABK_OPEN: len(offsets) * c.n_layers * per}
            want = sorted(a.value.to_instructions(), key=lambda ins: ins.row)
            got = b.value.to_instructions()
            for x, y in zip(got, want):
                assert x.opcode is Opcode.WR_ABK_OPEN
                y.opcode = Opcode.WR_ABK_OPEN
                assert x.same(y), (x, y)
            rows = [ins.row for ins in got]
            assert rows == sorted(rows) and len(set(rows)) < len(rows) // c.n_layers
            assert _ops(a.key) == _ops(b.key) and len(a.commit) == len(b.commit) == 0
            assert Program.to_instructions(a.key) == Program.to_instructions(b.key)


def test_no_cz_wr16_stores_what_wr_abk_stores() -> None:
    offsets = [0, 3, 9, 15, 5]
    mats = {}
    for ext in ("aim", WR16):
        rt = _no_cz(ext)
        ex = FunctionalExecutor(CFG2.device)
        for w in _decode(rt, offsets, 20, seed=7):
            ex.run(w.all)
        peek = ex.readers()[0][1]
        mats[ext] = np.stack([peek(ch, b, r) for ch in range(CFG2.device.channels)
                              for b in range(CFG2.device.banks)
                              for r in range(CFG2.n_layers * CFG2.rows_per_layer)])
        rt.check()
    assert mats["aim"].any()
    assert np.array_equal(mats["aim"], mats[WR16])


def test_a_no_cz_batch_opens_each_value_row_once_per_channel() -> None:
    c = CFG2
    rt = _no_cz(WR16)
    value = _decode(rt, [0] * 8, 3)[-1].value  # 8 requests, 4 per VRS
    model = CycleModel(c.device, timing_table(None, WR16), record=False, drain=True)
    res = model.run(closed(value), DeviceState.reset(c.device))
    bit = {channel_bit(ch): ch for ch in range(c.device.channels)}
    rows: dict[int, set] = {}
    writes: Counter = Counter()
    for ins in value.to_instructions():
        rows.setdefault(bit[ins.channel_mask], set()).add(ins.row)
        writes[bit[ins.channel_mask]] += 1
    assert len(rows) == c.heads * c.ch_per_head
    for ch, opened in rows.items():
        counts = res.command_counts[ch]
        assert writes[ch] == 4 * len(opened)  # 4 requests per Value row
        assert counts.get("ACT16") == len(opened) and not counts.get("ACT")
        assert counts.get("WR16") == writes[ch] and not counts.get("WRA16")
    with pytest.raises(NotOnDeviceError, match="WR_ABK_OPEN"):
        CycleModel(c.device, record=False).run(closed(value))


def test_no_cz_mem_and_multi_token_writes_are_as_on_aim() -> None:
    """``token_op="mem"`` programs are AiM's on ``wr16``; a write call's multi-token writes
    stay ``W MEM`` and come first, its single-token ``WR_ABK_OPEN`` s after them, by row."""
    for offsets in ([0] * 4, [0, 3, 9, 15]):
        a = _decode(_no_cz("aim", "mem"), offsets, 20)
        b = _decode(_no_cz(WR16, "mem"), offsets, 20)
        assert [Program.to_instructions(p.all) for p in a] == \
            [Program.to_instructions(p.all) for p in b]
    c = CFG2
    rt = _no_cz(WR16)
    for r in range(4):
        rt.allocate(r, r)
    z = np.ones((c.n_layers, 1, c.heads, c.d_head), np.uint16)
    three = np.repeat(z, 3, axis=1)
    w = rt.write_program([(0, 0, z, z), (1, 0, three, three), (2, 0, z, z),
                          (3, 0, np.repeat(z, 16, axis=1), np.repeat(z, 16, axis=1))])
    per = c.heads * c.ch_per_head * c.v_rows
    ops = [i.opcode for i in w.value.to_instructions()]
    mem = 2 * c.n_layers * per * c.device.banks
    assert ops == [Opcode.WR_MEM] * mem + [Opcode.WR_ABK_OPEN] * (2 * c.n_layers * per)
    rows = [i.row for i in w.value.to_instructions()[mem:]]
    assert rows == sorted(rows)
