"""The GPU prefill cost model (:mod:`patton.eval.gpu_cost`): the analytic roofline against
hand-counted FLOPs, its monotonicity, the recomputation measure, and measured tables."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from patton.eval.gpu_cost import (
    GPUS,
    SHAPES,
    AnalyticCost,
    CostTableError,
    Gpu,
    MeasuredCost,
    OutOfTable,
    PrefillCost,
    Row,
    Shape,
    recompute_cost,
)
from patton.runtime.models import MODELS, ModelSpec

LLAMA = AnalyticCost(MODELS["llama3-8b"])
TINY = ModelSpec("tiny", layers=1, kv_heads=1, q_heads=2, d_head=4)
TINY_SHAPE = Shape(hidden=8, ffn=12, vocab=10, gated=True)
LINEAR = ("qkv", "o_proj", "ffn_up", "ffn_down")


def test_every_preset_has_a_shape() -> None:
    assert set(SHAPES) == set(MODELS)
    for name, spec in MODELS.items():
        assert SHAPES[name].hidden == spec.q_heads * spec.d_head  # true of all four presets
        assert AnalyticCost(spec).step([(16, 0)]).seconds > 0
    with pytest.raises(ValueError, match="no FFN/vocabulary shape for model 'tiny'"):
        AnalyticCost(TINY)


def test_hand_counted_flops_one_layer() -> None:
    chunks = [(3, 2), (1, 5)]
    h, q, kv, f, vocab, d = 8, 2 * 4, 1 * 4, 12, 10, 4
    n = 3 + 1
    # attention, query by query: a query at position p attends to keys 0..p
    pairs = sum(p + 1 for p in (2, 3, 4)) + sum(p + 1 for p in (5,))
    assert pairs == 18
    expected = {
        "qkv": 2 * n * h * (q + 2 * kv),
        "attention": 2 * pairs * (2 * d + 2 * d),  # 2 query heads x (QK^T + SV) per pair
        "o_proj": 2 * n * q * h,
        "ffn_up": 2 * n * h * (2 * f),  # gate and up
        "ffn_act": 0, "ffn_down": 2 * n * f * h,
        "norms": 0, "embed": 0, "final_norm": 0,
        "lm_head": 2 * 2 * h * vocab,  # one logit row per chunk
    }
    model = AnalyticCost(TINY, shape=TINY_SHAPE)
    counts = model.counts(chunks)
    assert {op: fl for op, (fl, _) in counts.items()} == expected
    assert model.step(chunks).flops == sum(expected.values()) == 4736
    # attention bytes: Q in, new K/V read and written to the cache, every key's K/V, O out
    keys = (2 + 3) + (5 + 1)
    assert counts["attention"][1] == 2 * (n * q + 2 * 2 * kv * n + 2 * kv * keys + n * q)
    # a 2-matrix FFN (OPT style) has fc1 h->f only
    opt = AnalyticCost(TINY, shape=Shape(hidden=8, ffn=12, vocab=10, gated=False))
    assert opt.counts(chunks)["ffn_up"][0] == 2 * n * h * f


def test_roofline_time_and_energy() -> None:
    gpu = Gpu("toy", peak_flops=1000.0, bandwidth=100.0, tdp_w=10.0, compute_eff=0.5,
              bandwidth_eff=1.0, static_share=0.2, compute_share=0.75)
    model = AnalyticCost(TINY, gpu=gpu, shape=TINY_SHAPE)
    chunks = [(3, 2), (1, 5)]
    seconds = joules = 0.0
    for flops, nbytes in model.counts(chunks).values():
        a, m = flops / 500.0, nbytes / 100.0
        t = max(a, m)
        seconds += t
        joules += 10.0 * (0.2 * t + 0.8 * (0.75 * a + 0.25 * m))
    cost = model.step(chunks)
    assert cost.seconds == pytest.approx(seconds)
    assert cost.joules == pytest.approx(joules)
    assert 0 < cost.joules <= 10.0 * cost.seconds  # never above the TDP


def test_bad_gpu_and_chunks() -> None:
    with pytest.raises(ValueError, match="compute_eff"):
        Gpu("x", 1.0, 1.0, 1.0, compute_eff=0.0, bandwidth_eff=1.0, static_share=0.0,
            compute_share=0.0)
    for bad in [(-1, 0), (1, -2), (1.5, 0), (True, 0), (1,), "ab"]:
        with pytest.raises(ValueError):
            LLAMA.step([bad])  # type: ignore[list-item]


def test_no_work_costs_nothing() -> None:
    zero = LLAMA.step([])
    assert (zero.seconds, zero.joules, zero.flops, zero.bytes) == (0.0, 0.0, 0, 0)
    assert LLAMA.step([(0, 500)]) == zero


def test_monotone_in_new_tokens_and_context() -> None:
    prev = 0.0
    for n in [1, 2, 16, 100, 512, 513, 2048, 8192]:
        s = LLAMA.step([(n, 0)]).seconds
        assert s > prev
        prev = s
    prev = 0.0
    for ctx in [0, 1, 64, 1024, 4096, 32768]:
        c = LLAMA.step([(128, ctx)])
        assert c.seconds > prev
        prev = c.seconds
    # in a batch, and in joules too
    base = LLAMA.step([(128, 1024)] * 8)
    more = LLAMA.step([(128, 1024)] * 7 + [(129, 1024)])
    deeper = LLAMA.step([(128, 1024)] * 7 + [(128, 1025)])
    for c in (more, deeper):
        assert c.seconds > base.seconds and c.joules > base.joules


def test_attention_quadratic_linear_ops_linear() -> None:
    n = 8192
    one, two = LLAMA.counts([(n, 0)]), LLAMA.counts([(2 * n, 0)])
    ratio = two["attention"][0] / one["attention"][0]
    assert ratio == pytest.approx(2 * n * (2 * n + 1) / (n * (n + 1)))
    assert 3.99 < ratio < 4.0
    for op in LINEAR:
        assert two[op][0] == 2 * one[op][0]
    # and a long chunk's attention share of the FLOPs grows
    share = [LLAMA.counts([(k, 0)])["attention"][0] / LLAMA.step([(k, 0)]).flops  # type: ignore
             for k in (512, 8192, 65536)]
    assert share == sorted(share) and share[-1] > 4 * share[0]


def test_order_independent() -> None:
    chunks = [(128, 1024), (7, 0), (300, 33), (1, 4000)]
    assert LLAMA.step(chunks) == LLAMA.step(list(reversed(chunks)))


def test_recompute_zero_for_equal_inputs() -> None:
    chunks = [(128, 1024)] * 32
    for model in (LLAMA, AnalyticCost(MODELS["opt-6.7b"])):
        rec = recompute_cost(model, chunks, list(chunks))
        assert (rec.seconds, rec.joules, rec.flops, rec.bytes) == (0.0, 0.0, 0, 0)
    mixed = [(128, 1024), (7, 0), (300, 33)]
    assert recompute_cost(LLAMA, mixed[::-1], mixed).seconds == 0.0


def _covering(rng: random.Random) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """A required batch and a total batch that covers it (misses turn context into new tokens,
    chunks may grow at the end, extra chunks are recomputation of other requests)."""
    required, total = [], []
    for _ in range(rng.randint(0, 6)):
        new, ctx = rng.randint(0, 600), rng.randint(0, 3000)
        required.append((new, ctx))
        lost = rng.randint(0, ctx)
        total.append((new + lost + rng.randint(0, 50), ctx - lost))
    total += [(rng.randint(0, 2000), rng.randint(0, 2000)) for _ in range(rng.randint(0, 3))]
    rng.shuffle(total)
    return total, required


def test_recompute_never_negative_when_total_covers_required() -> None:
    rng = random.Random(13)
    models = [LLAMA, AnalyticCost(MODELS["opt-6.7b"]), AnalyticCost(MODELS["qwen3-8b"])]
    for _ in range(400):
        total, required = _covering(rng)
        for model in models:
            rec = recompute_cost(model, total, required)
            assert rec.seconds >= 0 and rec.joules >= 0
            assert rec.flops is not None and rec.flops >= 0
            assert rec.bytes is not None and rec.bytes >= 0


def test_recompute_positive_when_total_has_more_tokens() -> None:
    required = [(128, 1024)] * 32
    miss = [(1152, 0)] + [(128, 1024)] * 31  # one request lost its 1024 cached tokens
    rec = recompute_cost(LLAMA, miss, required)
    assert rec.seconds > 0 and rec.joules > 0 and rec.flops and rec.flops > 0
    # nonlinear: the step's difference, not the cost of the recomputed tokens on their own
    assert rec.seconds != pytest.approx(LLAMA.step([(1024, 0)]).seconds, rel=1e-3)
    assert recompute_cost(LLAMA, required + [(1, 0)], required).seconds > 0


def test_recompute_refuses_a_negative_difference() -> None:
    with pytest.raises(ValueError, match="negative recomputation"):
        recompute_cost(LLAMA, [(128, 0)], [(512, 0)])


# ---------------------------------------------------------------------------- measured tables

TABLE = """\
# a measured table (made up for the test)
tokens,context_tokens,ms,joules
512,0,40,10
2048,0,160,40
8192,0,720,170

512,1024,50,12   # a comment after the fields
2048,1024,180,45
8192,1024,760,180
"""


def _write(tmp_path: Path, text: str, name: str = "t.csv") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_measured_round_trip(tmp_path: Path) -> None:
    path = _write(tmp_path, TABLE)
    table = MeasuredCost.read(path)
    assert [(r.tokens, r.context_tokens, r.ms, r.joules, r.line) for r in table.rows] == [
        (512, 0, 40.0, 10.0, 3), (2048, 0, 160.0, 40.0, 4), (8192, 0, 720.0, 170.0, 5),
        (512, 1024, 50.0, 12.0, 7), (2048, 1024, 180.0, 45.0, 8),
        (8192, 1024, 760.0, 180.0, 9)]
    again = tmp_path / "again.csv"
    table.write(again)
    back = MeasuredCost.read(again)
    key = [(r.tokens, r.context_tokens, r.ms, r.joules) for r in table.rows]
    assert [(r.tokens, r.context_tokens, r.ms, r.joules) for r in back.rows] == key
    # at the rows, the table gives the rows
    cost = table.step([(2048, 1024)])
    assert (cost.seconds, cost.joules, cost.flops, cost.bytes) == (0.180, 45.0, None, None)
    assert table.step([(512, 0)]).seconds == 0.040
    assert table.step([]).seconds == 0.0


def test_measured_interpolates(tmp_path: Path) -> None:
    table = MeasuredCost.read(_write(tmp_path, TABLE))
    mid = table.step([(1280, 0)])  # halfway between 512 and 2048 tokens
    assert mid.seconds == pytest.approx(0.100) and mid.joules == pytest.approx(25.0)
    assert table.step([(5120, 0)]).seconds == pytest.approx(0.440)
    # halfway in context too: bilinear
    assert table.step([(1280, 512)]).seconds == pytest.approx((0.100 + 0.115) / 2)
    # a batch: N = 1280 tokens at mean context (640 * 1024 + 640 * 0) / 1280 = 512
    assert table.step([(640, 1024), (640, 0)]).seconds == pytest.approx((0.100 + 0.115) / 2)
    # without a context column, context is ignored
    flat = MeasuredCost.read(_write(tmp_path, "tokens,ms,joules\n100,1,2\n300,3,6\n", "f.csv"))
    assert flat.step([(100, 5000), (100, 0)]).joules == pytest.approx(4.0)


def test_measured_refuses_extrapolation(tmp_path: Path) -> None:
    table = MeasuredCost.read(_write(tmp_path, TABLE))
    for chunks, what in [([(8193, 0)], "tokens 8193"), ([(511, 0)], "tokens 511"),
                         ([(600, 2000)], "mean context_tokens 2000")]:
        with pytest.raises(OutOfTable, match=f"{what} outside the measured") as e:
            table.step(chunks)
        assert "not extrapolated" in str(e.value) and str(tmp_path / "t.csv") in str(e.value)
    assert issubclass(OutOfTable, ValueError)


BAD = [
    ("", 1, "no header line"),
    ("# only a comment\n", 1, "no header line"),
    ("tokens,ms,joules\n", 1, "no rows after the header"),
    ("tokens,ms\n1,2\n", 1, "missing column(s) joules"),
    ("tokens,ms,joules,watts\n", 1, "unknown column 'watts'"),
    ("512,1,2\n", 1, "unknown column '512'"),
    ("tokens,ms,ms,joules\n", 1, "duplicate column 'ms'"),
    ("tokens,ms,joules\n512,1\n", 2, "2 field(s), the header has 3"),
    ("tokens,ms,joules\n512,fast,2\n", 2, "ms 'fast' is not a non-negative decimal number"),
    ("tokens,ms,joules\n512,nan,2\n", 2, "ms 'nan' is not"),
    ("tokens,ms,joules\n512,1,-2\n", 2, "joules '-2' is negative"),
    ("tokens,ms,joules\n-512,1,2\n", 2, "tokens '-512' is negative"),
    ("tokens,ms,joules\n51.2,1,2\n", 2, "tokens '51.2' is not a decimal number"),
    ("tokens,ms,joules\n512,1,2\n256,2,3\n", 3, "tokens 256 after 512 (line 2)"),
    ("tokens,ms,joules\n# c\n512,1,2\n512,2,3\n", 4, "duplicate tokens 512 (also line 3)"),
    ("tokens,ms,joules\n512,2,2\n1024,1,3\n", 3, "ms 1.0 is below 2.0 (line 2)"),
    ("tokens,context_tokens,ms,joules\n1,9,1,1\n1,0,1,1\n", 3, "context_tokens 0 after 9"),
    ("tokens,context_tokens,ms,joules\n1,0,1,1\n2,0,2,2\n1,5,3,3\n3,5,4,4\n", 5,
     "tokens 3 at context_tokens 5: every context level must list the same token counts"),
    ("tokens,context_tokens,ms,joules\n1,0,1,1\n2,0,2,2\n1,5,3,3\n", 4,
     "context_tokens 5 lists 1 token counts, not 2"),
    ("tokens,context_tokens,ms,joules\n1,0,5,1\n1,5,3,3\n", 3,
     "ms 3.0 is below 5.0 (line 2): a measured cost must not decrease with context_tokens"),
    ("tokens,ms,joules\n512,1,2\n\xe9\n", 3, "non-ASCII character"),
]


@pytest.mark.parametrize("text,line,reason", BAD, ids=[b[2][:30] for b in BAD])
def test_measured_bad_input(tmp_path: Path, text: str, line: int, reason: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(CostTableError) as e:
        MeasuredCost.read(path)
    assert str(e.value).startswith(f"{path}:{line}: ")
    assert reason in str(e.value)
    assert (e.value.file, e.value.line) == (str(path), line)
    assert isinstance(e.value, ValueError)


def test_measured_unreadable_file(tmp_path: Path) -> None:
    path = tmp_path / "absent.csv"
    with pytest.raises(CostTableError, match="cannot read measured cost table"):
        MeasuredCost.read(path)
    (tmp_path / "bin.csv").write_bytes(b"tokens,ms,joules\n\xff\xfe\n")
    with pytest.raises(CostTableError, match=r"bin.csv:2: not UTF-8 text"):
        MeasuredCost.read(tmp_path / "bin.csv")


# ---------------------------------------------------------------------------- one interface


def _recomputed_ms(model: PrefillCost) -> float:
    """What a caller does, whichever model it holds."""
    return recompute_cost(model, [(2048, 0)], [(512, 0)]).seconds * 1e3


def test_measured_and_analytic_are_interchangeable(tmp_path: Path) -> None:
    tokens = [512, 1024, 2048, 4096]
    table = MeasuredCost.tabulate(LLAMA, tokens, contexts=[0, 1024])
    path = tmp_path / "tab.csv"
    table.write(path)
    measured = MeasuredCost.read(path)
    assert isinstance(LLAMA, PrefillCost) and isinstance(measured, PrefillCost)
    assert _recomputed_ms(measured) == pytest.approx(_recomputed_ms(LLAMA))
    for n in tokens:
        for ctx in (0, 1024):
            a, m = LLAMA.step([(n, ctx)]), measured.step([(n, ctx)])
            assert m.seconds == pytest.approx(a.seconds) and m.joules == pytest.approx(a.joules)
    # between the rows the table is a chord of the convex analytic curve: never below it
    assert measured.step([(3000, 0)]).seconds >= LLAMA.step([(3000, 0)]).seconds
    assert Row(1, 0, 1.0, 1.0).line == 0


def test_a100_figures() -> None:
    gpu = GPUS["a100-80gb-pcie"]
    assert (gpu.peak_flops, gpu.bandwidth, gpu.tdp_w) == (312e12, 1935e9, 300.0)
    assert LLAMA.gpu is gpu
