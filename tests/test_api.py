"""The public Python API: each package's exports, and the runtime's typed refusal of data it
cannot take (dtype, shape, layer), leaving its state unchanged."""

from __future__ import annotations

import importlib
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest
from patton.runtime import (
    Config,
    DtypeError,
    LayerError,
    ModelSpec,
    OffsetError,
    PattonError,
    Runtime,
    ShapeError,
    UnknownRequest,
)
from patton.sim import datapath as dp

PACKAGES = ("patton.sim", "patton.runtime", "patton.hw", "patton.tb")


@pytest.mark.parametrize("name", PACKAGES)
def test_every_export_resolves_to_its_module(name):
    package = importlib.import_module(name)
    assert package.__all__ and len(set(package.__all__)) == len(package.__all__)
    for export in package.__all__:
        value = getattr(package, export)
        module = getattr(value, "__module__", None)
        if module is not None:  # classes and functions: defined in the package
            assert module.startswith(name + "."), (export, module)
        assert export in dir(package)
    with pytest.raises(AttributeError, match="no attribute 'nonexistent'"):
        package.nonexistent  # noqa: B018


def test_the_readme_names_import():
    from patton.hw import Channel, ChannelParams, emit_verilog  # noqa: F401
    from patton.runtime import Config, ModelSpec, Runtime  # noqa: F401
    from patton.sim import (  # noqa: F401
        DEVICE,
        CycleExecutor,
        FunctionalExecutor,
        Program,
        ScheduleError,
        TraceError,
        schedule,
        trace,
    )
    from patton.tb import RtlExecutor  # noqa: F401

    assert trace.TraceError is TraceError and schedule.ScheduleError is ScheduleError
    assert FunctionalExecutor(DEVICE).run(Program.of([])).readouts == []


def test_importing_the_packages_loads_nothing_heavy():
    code = ("import sys, patton.sim, patton.runtime, patton.hw, patton.tb; "
            "print(sorted(m for m in ('numpy', 'amaranth', 'cocotb', 'ml_dtypes') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


# ------------------------------------------------------------------ runtime input checks

TWO = ModelSpec("two-layers", layers=2, kv_heads=2, q_heads=2, d_head=64)


def _runtime() -> Runtime:
    rt = Runtime(Config(TWO, layer_rows=5))
    rt.allocate(0, 0)
    rt.allocate(0, 1)
    rt.allocate(1, 2)
    rng = np.random.default_rng(0)
    c = rt.config
    k, v = (rng.integers(0x3000, 0x4000, (c.n_layers, 5, c.heads, c.d_head))
            .astype(np.uint16) for _ in range(2))
    rt.write(0, 0, k, v)
    rt.write(2, 0, k[:, :2], v[:, :2])
    return rt


def _refused(rt: Runtime, error: type[PattonError], call, match: str) -> None:
    before = rt.state()
    with pytest.raises(error, match=match):
        call()
    assert rt.state() == before


def test_writes_accept_uint16_and_bfloat16_alike():
    a, b = _runtime(), _runtime()
    c = a.config
    values = np.linspace(-2, 2, c.n_layers * 3 * c.heads * c.d_head).reshape(
        c.n_layers, 3, c.heads, c.d_head)
    bits = dp.to_bf16(values)
    as_bf16 = bits.view(ml_dtypes.bfloat16)
    got = a.write(1, 0, as_bf16, as_bf16).all
    want = b.write(1, 0, bits, bits).all
    assert len(got) == len(want) and all(x.same(y) for x, y in zip(got, want))
    assert a.state() == b.state()
    one = np.ones((1, c.n_layers, c.heads, c.d_head), dtype=ml_dtypes.bfloat16)
    a.append([1], one, one)
    b.append([1], one.view(np.uint16), one.view(np.uint16))
    assert a.state() == b.state()
    assert np.all(a.blocks[1].shadow[:, 3] == 0x3F80)  # 1.0 as bfloat16, not 0x0001


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.int16, np.uint32,
                                   np.float16, bool])
def test_writes_refuse_other_dtypes(dtype):
    rt = _runtime()
    c = rt.config
    data = np.ones((c.n_layers, 1, c.heads, c.d_head), dtype=dtype)
    ok = np.zeros_like(data, dtype=np.uint16)
    match = f"has dtype {np.dtype(dtype)}: give bfloat16 bit patterns"
    _refused(rt, DtypeError, lambda: rt.write(1, 0, data, ok), match)
    _refused(rt, DtypeError, lambda: rt.write(1, 0, ok, data), match)
    _refused(rt, DtypeError, lambda: rt.write_many([(1, 0, ok, ok), (2, 2, data, data)]), match)
    _refused(rt, DtypeError, lambda: rt.write_program([(1, 0, data, data)]), match)
    _refused(rt, DtypeError, lambda: rt.write_many([(1, 0, data, data)], emit=False), match)
    step = data[:, 0][None]
    _refused(rt, DtypeError, lambda: rt.append([1], step, step), match)


def test_writes_refuse_non_arrays_and_bad_items():
    rt = _runtime()
    c = rt.config
    ok = np.zeros((c.n_layers, 1, c.heads, c.d_head), dtype=np.uint16)
    _refused(rt, DtypeError, lambda: rt.write(1, 0, ok.tolist(), ok), "not list")
    _refused(rt, ShapeError, lambda: rt.write_many([(1, 0, ok)]),
             r"must be \(block_id, start, keys, values\)")
    _refused(rt, OffsetError, lambda: rt.write(1, 0.0, ok, ok), "is not an integer")


def test_write_shapes_must_match():
    rt = _runtime()
    c = rt.config
    shape = (c.n_layers, 2, c.heads, c.d_head)
    ok = np.zeros(shape, dtype=np.uint16)
    for bad in (ok[:1], ok[:, :, :1], ok[..., :16], ok[:, :0], ok[0]):
        _refused(rt, ShapeError, lambda bad=bad: rt.write(1, 0, bad, bad),
                 "must have shape|write at least one token")
    _refused(rt, ShapeError, lambda: rt.write(1, 0, ok, ok[:, :1]), "must have shape")
    row = np.zeros((1, c.n_layers, c.heads, c.d_head), dtype=np.uint16)
    three = np.zeros((3, c.n_layers, c.heads, c.d_head), dtype=np.uint16)
    # append: one row per block, exactly
    _refused(rt, ShapeError, lambda: rt.append([1], three, three),
             r"keys must have shape \(blocks, layers, heads, d_head\) = \(1, 2, 2, 64\), "
             r"got \(3, 2, 2, 64\)")
    _refused(rt, ShapeError, lambda: rt.append([1, 2], row, row), r"= \(2, 2, 2, 64\)")
    _refused(rt, ShapeError, lambda: rt.append([1], row, row[:, :, :1]), "values must have")


@pytest.mark.parametrize("layer", [2, 99, -1, True, 1.0, "0", None])
def test_attention_layers_are_validated(layer):
    rt = _runtime()
    c = rt.config
    q = np.zeros((c.heads, c.d_head), dtype=np.uint16)
    p = np.zeros((c.heads, rt.seq_len(0)), dtype=np.uint16)
    width = 2 * c.block_size
    probs = np.zeros((1, c.heads, width), dtype=np.uint16)
    match = "outside 0..1" if isinstance(layer, int) and not isinstance(layer, bool) \
        else "is not an integer"
    _refused(rt, LayerError, lambda: rt.qk(0, layer, q), match)
    _refused(rt, LayerError, lambda: rt.qk_step([0], layer, q[None]), match)
    _refused(rt, LayerError, lambda: rt.sv(0, layer, p), match)
    _refused(rt, LayerError, lambda: rt.sv_step([0], layer, probs), match)
    _refused(rt, LayerError, lambda: rt.sv_buffer([0], layer, width), match)


def test_attention_data_is_validated():
    rt = _runtime()
    c = rt.config
    q = np.zeros((c.heads, c.d_head), dtype=np.uint16)
    n = rt.seq_len(0)
    p = np.zeros((c.heads, n), dtype=np.uint16)
    _refused(rt, DtypeError, lambda: rt.qk(0, 0, q.astype(np.float32)), "dtype float32")
    _refused(rt, DtypeError, lambda: rt.qk(0, 0, q.tolist()), "not list")
    _refused(rt, ShapeError, lambda: rt.qk(0, 0, q[:1]), r"query must have shape")
    _refused(rt, ShapeError, lambda: rt.qk(0, 0, q[:, :32]), r"query must have shape")
    _refused(rt, ShapeError, lambda: rt.qk_step([0, 1], 0, q[None]), r"queries must have")
    _refused(rt, DtypeError, lambda: rt.sv(0, 0, p.astype(np.float64)), "dtype float64")
    _refused(rt, ShapeError, lambda: rt.sv(0, 0, p[:, :1]),  # broadcast before: refused now
             rf"probs must have shape \(heads, seq_len\) = \(2, {n}\)")
    _refused(rt, ShapeError, lambda: rt.sv(0, 0, np.zeros((c.heads, n + 1), np.uint16)),
             "probs must have shape")
    width = 2 * c.block_size
    _refused(rt, ShapeError, lambda: rt.sv_step([0], 0, np.zeros((1, c.heads, width + 1),
                                                                  np.uint16)),
             "not a multiple of the block size")
    _refused(rt, ShapeError, lambda: rt.sv_step([0], 0, np.zeros((1, c.heads, 16), np.uint16)),
             "width 16 below the 32")
    _refused(rt, ShapeError, lambda: rt.sv_step([0, 1], 0, np.zeros((1, c.heads, width),
                                                                     np.uint16)),
             "probs must have shape")
    _refused(rt, ShapeError, lambda: rt.sv_buffer([0], 0, width - 1), "below")
    _refused(rt, UnknownRequest, lambda: rt.qk_step([0, 7], 0, np.zeros((2, c.heads, c.d_head),
                                                                         np.uint16)),
             "request 7 is not live")
    # bfloat16 queries and scores are the same bits as uint16 ones
    prog, _ = rt.qk(0, 1, q.view(ml_dtypes.bfloat16))
    want, _ = rt.qk(0, 1, q)
    assert all(a.same(b) for a, b in zip(prog, want)) and len(prog) == len(want)
    prog, _ = rt.sv(0, 1, p.view(ml_dtypes.bfloat16))
    want, _ = rt.sv(0, 1, p)
    assert all(a.same(b) for a, b in zip(prog, want)) and len(prog) == len(want)


def test_layer_one_is_accepted_and_differs_from_layer_zero():
    rt = _runtime()
    c = rt.config
    q = np.zeros((c.heads, c.d_head), dtype=np.uint16)
    rows = [{i.row for i in rt.qk(0, layer, q)[0] if i.row is not None} for layer in (0, 1)]
    assert rows[0] and rows[1] and not rows[0] & rows[1]
    assert max(rows[1]) < c.device.rows
