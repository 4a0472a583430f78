"""The GPU prefill model calibrated on Vidur's A100 profiles (:mod:`patton.eval.gpu_calibration`):
the strict reader, the fit's error against every measured point, the calibrated model's
invariants, the name registry and the report."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from patton.eval import gpu_calibration as cal
from patton.eval.gpu_cost import AnalyticCost, PrefillCost, recompute_cost
from patton.runtime.models import MODELS
from test_gpu_cost import _covering

LLAMA = cal.CalibratedCost(MODELS["llama3-8b"])
OPT = cal.CalibratedCost(MODELS["opt-6.7b"])
DATA = Path(cal.__file__).parent / "data" / "vidur-a100"


# ---------------------------------------------------------------------------- the data


def test_both_files_are_read_whole() -> None:
    rows = cal.profiles()
    assert len(rows) == 456 + 261  # every row, repeated measurements kept
    llama3 = [r for r in rows if r.shape.ffn == 14336]
    llama2 = [r for r in rows if r.shape.ffn == 11008]
    assert len(llama3) == 456 and len(llama2) == 261
    assert {r.tokens for r in llama3} >= {1, 32768} and max(r.tokens for r in llama2) == 4096
    assert {(r.spec.kv_heads, r.spec.layers) for r in llama3} == {(8, 1)}
    assert {(r.spec.kv_heads, r.spec.d_head) for r in llama2} == {(32, 128)}
    first = rows[0]  # the first data line of llama3-8b-mlp-tp1.csv, ms -> s
    assert (first.tokens, first.line) == (32768, 2)
    assert first.seconds["mlp_up_proj"] == pytest.approx(33.094e-3)


def _bad(tmp_path: Path, line: int, column: str, value: str) -> Path:
    """A copy of the Llama-2 profile with ``column`` of data line ``line`` set to ``value``."""
    lines = (DATA / cal.FILES[1]).read_text().splitlines()
    header = lines[0].split(",")
    fields = lines[line - 1].split(",")
    fields[header.index(column)] = value
    lines[line - 1] = ",".join(fields)
    path = tmp_path / "bad.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("line,column,value,reason", [
    (5, "time_stats.attn_pre_proj.median", "-1.5",
     "time_stats.attn_pre_proj.median '-1.5' is negative"),
    (7, "time_stats.add.median", "fast", "time_stats.add.median 'fast' is not a non-negative"),
    (9, "time_stats.emb.median", "0", "time_stats.emb.median is 0"),
    (3, "num_tokens", "12.5", "num_tokens '12.5' is not a decimal number"),
    (4, "use_gated_mlp", "yes", "use_gated_mlp 'yes' is not True or False"),
    (6, "num_tensor_parallel_workers", "2", "num_tensor_parallel_workers 2"),
    (8, "n_head", "24", "n_embd 4096 is not a multiple of n_head 24"),
    (10, "n_kv_head", "5", "not a multiple of kv_heads 5"),
])
def test_the_reader_refuses_a_bad_row_naming_file_and_line(tmp_path: Path, line: int,
                                                           column: str, value: str,
                                                           reason: str) -> None:
    path = _bad(tmp_path, line, column, value)
    with pytest.raises(cal.ProfileError) as e:
        cal.read(path)
    assert str(e.value).startswith(f"{path}:{line}: "), str(e.value)
    assert reason in str(e.value)
    assert (e.value.file, e.value.line) == (str(path), line)


def test_the_reader_refuses_bad_files(tmp_path: Path) -> None:
    lines = (DATA / cal.FILES[0]).read_text().splitlines()
    short = tmp_path / "short.csv"
    short.write_text("\n".join([lines[0], lines[1], "1,2,3"]) + "\n")
    with pytest.raises(cal.ProfileError, match=r"short\.csv:3: 3 field\(s\), the header has 18"):
        cal.read(short)
    headless = tmp_path / "headless.csv"
    headless.write_text("\n".join(lines[1:3]) + "\n")
    with pytest.raises(cal.ProfileError, match=r"headless\.csv:1: missing column\(s\) "
                                               r"time_stats\.emb\.median"):
        cal.read(headless)
    empty = tmp_path / "empty.csv"
    empty.write_text(lines[0] + "\n")
    with pytest.raises(cal.ProfileError, match=r"empty\.csv:1: no rows after the header"):
        cal.read(empty)
    with pytest.raises(cal.ProfileError, match="cannot read Vidur profile"):
        cal.read(tmp_path / "absent.csv")


# ---------------------------------------------------------------------------- the fit


def test_the_fit_is_close_to_every_measured_point() -> None:
    r = cal.report()
    assert r["points"] == 8 * (456 + 261)
    # measured (python -m patton.eval.gpu_calibration): mean 15.9 %, max 76.5 %; the
    # embedding gather (once per model) and the norms are the far ones
    assert r["mean_rel_error"] < 0.17 and r["max_rel_error"] < 0.80
    for op in ("qkv", "o_proj", "ffn_up", "ffn_down"):  # the GEMMs: 4.4-6.6 %, max <= 38 %
        assert r["per_op"][op]["mean_rel_error"] < 0.075, op
        assert r["per_op"][op]["max_rel_error"] < 0.40, op
    assert r["per_op"]["ffn_act"]["mean_rel_error"] < 0.075
    assert r["per_op"]["rope"]["mean_rel_error"] < 0.11
    # a layer's sum (what a step is made of): 3.5 % mean, 25.1 % max
    assert r["layer"]["mean_rel_error"] < 0.045 and r["layer"]["max_rel_error"] < 0.28
    # calibration moved the model closer than the chosen efficiencies (32.6 %; layer 12.1 %)
    assert r["analytic"]["mean_rel_error"] > 1.8 * r["mean_rel_error"]
    assert r["layer"]["analytic"]["mean_rel_error"] > 3 * r["layer"]["mean_rel_error"]
    # physically plausible rates on the SXM card: below its peaks, above half of them
    p = cal.fit()
    assert 156e12 < p.gemm_flops < 312e12
    assert 1.0e12 < p.gemm_bandwidth < 2.039e12 and 0.5e12 < p.stream_bandwidth < 2.039e12
    assert 1e-6 < p.stream_overhead < p.gemm_overhead < 20e-6 and 1 < p.gemm_half_rows < 512
    assert cal.fit() is p  # fitted once per process


def test_report_keys_and_plain_json() -> None:
    r = cal.report()
    assert json.loads(json.dumps(r)) == r
    assert r["model"] == "calibrated" and "7d47513" in r["source"]
    assert all(name in r["source"] for name in cal.FILES)
    for key in ("params", "points", "max_rel_error", "mean_rel_error", "per_op", "analytic"):
        assert key in r, key
    assert set(r["per_op"]) == set(cal.OPS)
    for e in r["per_op"].values():
        assert set(e) == {"max_rel_error", "mean_rel_error", "points"}
        assert 0 <= e["mean_rel_error"] <= e["max_rel_error"] and e["points"] == 456 + 261
    assert {"max_rel_error", "mean_rel_error"} <= set(r["analytic"])
    assert set(r["params"]) == {"gemm_overhead_us", "gemm_tflop_s", "gemm_half_rows",
                                "gemm_bandwidth_tb_s", "stream_overhead_us",
                                "stream_bandwidth_tb_s"}


# ---------------------------------------------------------------------------- the model


def test_no_work_costs_nothing() -> None:
    zero = LLAMA.step([])
    assert (zero.seconds, zero.joules, zero.flops, zero.bytes) == (0.0, 0.0, 0, 0)
    assert LLAMA.step([(0, 500)]) == zero


def test_monotone_in_new_tokens_context_and_chunks() -> None:
    for model in (LLAMA, OPT):
        prev = 0.0
        for n in [1, 2, 16, 59, 60, 100, 512, 513, 2048, 8192]:
            s = model.step([(n, 0)]).seconds
            assert s > prev, n
            prev = s
        prev = 0.0
        for ctx in [0, 1, 64, 1024, 4096, 32768]:
            s = model.step([(128, ctx)]).seconds
            assert s > prev, ctx
            prev = s
        base = model.step([(128, 1024)] * 8)
        for grown in ([(128, 1024)] * 7 + [(129, 1024)], [(128, 1024)] * 7 + [(128, 1025)],
                      [(128, 1024)] * 8 + [(1, 0)]):
            c = model.step(grown)
            assert c.seconds > base.seconds and c.joules > base.joules


def test_order_independent() -> None:
    chunks = [(128, 1024), (7, 0), (300, 33), (1, 4000)]
    assert LLAMA.step(chunks) == LLAMA.step(chunks[::-1])


def test_recompute_never_negative_when_total_covers_required() -> None:
    rng = random.Random(7)
    for _ in range(200):
        total, required = _covering(rng)
        for model in (LLAMA, OPT):
            rec = recompute_cost(model, total, required)
            assert rec.seconds >= 0 and rec.joules >= 0


def test_counts_are_the_analytic_ones_plus_rope() -> None:
    chunks = [(2048, 0), (128, 1024)]
    ana = AnalyticCost(MODELS["llama3-8b"]).counts(chunks)
    ops = LLAMA.ops(chunks)
    assert list(ops) == list(cal.CalibratedCost.OPS)
    for op, (flops, nbytes) in ana.items():
        assert (ops[op].flops, ops[op].bytes) == (flops, nbytes), op
    assert ops["rope"].bytes == 2 * 2 * 2176 * (4096 + 1024) * 32 and ops["rope"].flops == 0
    assert ops["rope"].seconds > 0
    # OPT's positions are learned embeddings: no rotary kernel; its FFN is fc1, ReLU, fc2
    opt = OPT.ops(chunks)
    assert opt["rope"].seconds == 0 and opt["rope"].bytes == 0
    assert opt["ffn_up"].flops == 2 * 2176 * 4096 * 16384 * 32


def test_pcie_is_priced_below_the_measured_sxm_bandwidth() -> None:
    # a memory-bound step (one token) is slower on the PCIe card than on the measured SXM one
    sxm = cal.CalibratedCost(MODELS["llama3-8b"], gpu=cal.MEASURED_ON)
    one, big = [(1, 0)], [(8192, 0)]
    assert LLAMA.step(one).seconds > 1.03 * sxm.step(one).seconds
    assert LLAMA.step(big).seconds == pytest.approx(sxm.step(big).seconds, rel=0.02)


def test_names() -> None:
    assert cal.GPU_MODELS == ("analytic", "calibrated")
    for name, kind in zip(cal.GPU_MODELS, (AnalyticCost, cal.CalibratedCost)):
        m = cal.gpu_model(name, MODELS["opt-6.7b"])
        assert isinstance(m, kind) and isinstance(m, PrefillCost)
    with pytest.raises(ValueError, match=r"unknown GPU model 'nope' \(known: analytic, "
                                         r"calibrated\)"):
        cal.gpu_model("nope", MODELS["llama3-8b"])
