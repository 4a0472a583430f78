"""``docs/gpu-cost.md``'s numbers: the analytic A100 prefill model's figures for Llama-3-8B,
computed from ``patton.eval.gpu_cost`` and ``gpu_calibration`` directly (deterministic and
fast: no record)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from patton.eval import gpu_calibration
from patton.eval.gpu_cost import AnalyticCost, Chunk, _figures
from patton.runtime.models import MODELS

from sources.common import span


def _model() -> AnalyticCost:
    """The analytic model of Llama-3-8B on the A100 80 GB PCIe."""
    return AnalyticCost(MODELS["llama3-8b"])


def _flops(chunks: list[Chunk]) -> int:
    """The FLOPs of one step."""
    flops = _model().step(chunks).flops
    assert flops is not None
    return flops


def _attention_share(tokens: int) -> str:
    """Attention's share of the FLOPs of one chunk of ``tokens`` new tokens, whole per cent."""
    counts = _model().counts([(tokens, 0)])
    return f"{100 * counts['attention'][0] / sum(f for f, _ in counts.values()):.0f} %"


def _mfu() -> str:
    """The achieved share of peak FLOP/s for 2,048 tokens, whole per cent."""
    m = _model()
    cost = m.step([(2048, 0)])
    assert cost.flops is not None
    return f"{100 * cost.flops / cost.seconds / m.gpu.peak_flops:.0f} %"


def _watts(tokens: int) -> float:
    """The mean power of one chunk of ``tokens`` new tokens."""
    cost = _model().step([(tokens, 0)])
    return cost.joules / cost.seconds


def _calibration(first: str, last: str | None) -> str:
    """The lines of ``python -m patton.eval.gpu_calibration``'s output from the one starting
    with ``first`` to the one before ``last`` (None: to the end), fenced."""
    lines = gpu_calibration._figures().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(first))
    end = len(lines) if last is None else next(
        i for i, line in enumerate(lines) if line.startswith(last))
    return "```\n" + "\n".join(lines[start:end]).rstrip("\n") + "\n```"


def _error(*path: str) -> float:
    """A relative error of :func:`gpu_calibration.report`, by its keys."""
    value: object = gpu_calibration.report()
    for key in path:
        assert isinstance(value, dict)
        value = value[key]
    assert isinstance(value, float)
    return value


def _p1(value: float) -> str:
    """A share with one decimal: ``15.9 %``."""
    return f"{100 * value:.1f} %"


def _step(name: str, model: str, chunks: list[Chunk]) -> tuple[float, float]:
    """The seconds and joules of one step under the calibrated or analytic model."""
    cost = gpu_calibration.gpu_model(name, MODELS[model]).step(chunks)
    return cost.seconds, cost.joules


def _mfu_rate(name: str) -> tuple[str, str]:
    """The share of peak FLOP/s (whole per cent) and tokens/s (``13.4 k``) of Llama-3-8B's
    2,048-token step under model ``name`` (FLOPs as AnalyticCost counts them)."""
    seconds, _ = _step(name, "llama3-8b", [(2048, 0)])
    flops = _flops([(2048, 0)])
    return (f"{100 * flops / seconds / _model().gpu.peak_flops:.0f} %",
            f"{2048 / seconds / 1e3:.1f} k")


def _faster(tokens: int) -> float:
    """How much faster (positive) the calibrated Llama-3-8B step of ``tokens`` is."""
    return 1 - _step("calibrated", "llama3-8b", [(tokens, 0)])[0] / _step(
        "analytic", "llama3-8b", [(tokens, 0)])[0]


def _recompute(name: str) -> str:
    """The recompute example (1 of 32 requests misses its 1,024-token context)."""
    cost = gpu_calibration.recompute_cost(
        gpu_calibration.gpu_model(name, MODELS["llama3-8b"]),
        [(1152, 0)] + [(128, 1024)] * 31, [(128, 1024)] * 32)
    return f"{cost.seconds * 1e3:.2f} ms and {cost.joules:.2f} J"


def _param(key: str, fmt: str) -> Callable[[], str]:
    """A fitted parameter of :func:`gpu_calibration.fit`, formatted by ``fmt``."""
    return lambda: format(gpu_calibration.fit().as_dict()[key], fmt)


def _share(key: str, peak: float) -> Callable[[], str]:
    """A fitted rate's share of a peak (the same unit), whole per cent."""
    return lambda: f"{100 * gpu_calibration.fit().as_dict()[key] / peak:.0f} %"


def _rates() -> str:
    """The analytic model's tokens/s over the single-chunk steps of ``_figures()``, in k."""
    rates = [t / _model().step([(t, 0)]).seconds / 1e3 for t in (512, 2048, 8192)]
    return f"{min(rates):.0f}–{max(rates):.1f} k"


def _gemm_means() -> str:
    """The calibrated model's range of mean errors over the four GEMMs, whole per cent."""
    means = [_error("per_op", op, "mean_rel_error")
             for op in ("qkv", "o_proj", "ffn_up", "ffn_down")]
    return span([100 * m for m in means], lambda v: f"{v:.0f} %")


#: Number name -> how it is made.
NUMBERS: dict[str, Callable[[], str]] = {
    "gpu-cost.tflop_2048": lambda: f"{_flops([(2048, 0)]) / 1e12:.1f} TFLOP",
    "gpu-cost.mfu_2048": _mfu,
    "gpu-cost.attention_share_8192": lambda: _attention_share(8192),
    "gpu-cost.attention_share_512": lambda: _attention_share(512),
    "gpu-cost.batch_as_one_chunk": lambda: (
        f"{100 * (_flops([(4096, 0)]) / _flops([(128, 0)] * 32) - 1):.0f} %"),
    "gpu-cost.prefill_watts": lambda: f"{round(_watts(2048), -1):.0f} W",
    # calibration: python -m patton.eval.gpu_calibration
    "gpu-cost.cal.norms_mean": lambda: _p1(_error("per_op", "norms", "mean_rel_error")),
    "gpu-cost.cal.all": lambda: (f"{_p1(_error('analytic', 'mean_rel_error'))} to "
                                 f"{_p1(_error('mean_rel_error'))}"),
    "gpu-cost.cal.layer_mean": lambda: (
        f"{_p1(_error('layer', 'analytic', 'mean_rel_error'))} to "
        f"{_p1(_error('layer', 'mean_rel_error'))}"),
    "gpu-cost.cal.layer_max": lambda: (
        f"{_p1(_error('layer', 'analytic', 'max_rel_error'))} to "
        f"{_p1(_error('layer', 'max_rel_error'))}"),
    "gpu-cost.cal.mfu": lambda: "{} MFU and {} tokens/s".format(*_mfu_rate("calibrated")),
    "gpu-cost.ana.mfu": lambda: " and ".join(_mfu_rate("analytic")),
    "gpu-cost.cal.faster_2048": lambda: f"{100 * _faster(2048):.0f} %",
    "gpu-cost.cal.slower_512": lambda: f"{-100 * _faster(512):.1f} %",
    "gpu-cost.cal.t_g": _param("gemm_overhead_us", ".2f"),
    "gpu-cost.cal.c_max": _param("gemm_tflop_s", ".2f"),
    "gpu-cost.cal.c_max_share": _share("gemm_tflop_s", 312),
    "gpu-cost.cal.n_half": _param("gemm_half_rows", ".1f"),
    "gpu-cost.cal.b_g": _param("gemm_bandwidth_tb_s", ".3f"),
    "gpu-cost.cal.b_g_share": _share("gemm_bandwidth_tb_s", 2.039),
    "gpu-cost.cal.t_s": _param("stream_overhead_us", ".2f"),
    "gpu-cost.cal.b_s": _param("stream_bandwidth_tb_s", ".3f"),
    "gpu-cost.cal.b_s_share": _share("stream_bandwidth_tb_s", 2.039),
    "gpu-cost.cal.points": lambda: f"{gpu_calibration.report()['points']:,}",
    "gpu-cost.cal.rows": lambda: str(gpu_calibration.report()["layer"]["points"]),
    "gpu-cost.cal.gemm_means": _gemm_means,
    "gpu-cost.ana.rates": _rates,
    "gpu-cost.cal.recompute": lambda: _recompute("calibrated"),
    "gpu-cost.ana.recompute": lambda: _recompute("analytic"),
}


#: Block name -> how it is made (a fenced block, fences included).
BLOCKS: dict[str, Callable[[], str]] = {
    "gpu-cost.figures": lambda: "```\n" + _figures() + "\n```",
    "gpu-cost.calibration.fit": lambda: _calibration("fitted parameters", "steps on"),
    "gpu-cost.calibration.steps": lambda: _calibration("steps on", None),
}


# ------------------------------------------------ the fit's remarks, from the data and the fit
def _calibrated_2048() -> tuple[dict, float]:
    """The calibrated model's operations and step time, one chunk of 2,048 on Llama-3-8B."""
    cost = gpu_calibration.CalibratedCost(MODELS["llama3-8b"])
    return cost.ops([(2048, 0)]), cost.step([(2048, 0)]).seconds


def _points_errors() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every compared point's operation, measured and calibrated seconds."""
    pts = gpu_calibration._points()
    return np.array(pts.ops), pts.seconds, gpu_calibration._model(gpu_calibration.fit(), pts)


def _mean_over_50us() -> str:
    """The mean relative error on points of at least 50 us, every operation but ``embed``."""
    ops, measured, model = _points_errors()
    at = (measured >= 50e-6) & (ops != "embed")
    return f"{100 * np.mean(np.abs(model[at] - measured[at]) / measured[at]):.1f} %"


def _first_row(op: str, tokens: int) -> tuple[float, float]:
    """Measured and calibrated microseconds of ``op`` at ``tokens`` in the first file."""
    ops, measured, model = _points_errors()
    rows = gpu_calibration.profiles()
    i = next(i for i, (o, r) in enumerate(zip(ops, gpu_calibration._points().profiles))
             if o == op and rows[r].tokens == tokens)
    return measured[i] * 1e6, model[i] * 1e6


def _least_squares_plain() -> tuple[float, str]:
    """Without the robust loss: the streaming bandwidth (TB/s) and the other streaming
    operations' mean error (model over measured, less one), low-high."""
    from scipy.optimize import least_squares

    pts = gpu_calibration._points()
    log_measured = np.log(pts.seconds)
    x = least_squares(lambda x: np.log(gpu_calibration._model(
        gpu_calibration.Fit(*np.exp(x)), pts)) - log_measured,
        np.log(gpu_calibration._START)).x
    fit = gpu_calibration.Fit(*np.exp(x))
    model, ops = gpu_calibration._model(fit, pts), np.array(pts.ops)
    slow = [float(np.mean(model[ops == op] / pts.seconds[ops == op] - 1))
            for op in ("rope", "ffn_act", "norms")]
    return fit.stream_bandwidth / 1e12, span([100 * s for s in slow], lambda v: f"{v:.0f}")


def _norm_per_byte() -> str:
    """How many times slower per byte Vidur's norm kernels are than its adds (median over the
    rows whose add takes at least 20 us; a norm moves ``2h``, an add ``3h`` per token)."""
    ratios = [(p.seconds["input_layernorm"] / 2) / (p.seconds["add"] / 3)
              for p in gpu_calibration.profiles() if p.seconds["add"] >= 20e-6]
    return f"{np.median(ratios):.1f}"


NUMBERS.update({
    "gpu-cost.cal.norms_2048": lambda: (
        f"{_calibrated_2048()[0]['norms'].seconds * 1e6 / MODELS['llama3-8b'].layers:.0f} us"),
    "gpu-cost.cal.norms_2048_measured": lambda: f"{_first_row('norms', 2048)[0]:.1f} us",
    "gpu-cost.cal.plain_b_s": lambda: f"{_least_squares_plain()[0]:.2f}",
    "gpu-cost.cal.robust_b_s": lambda: f"{gpu_calibration.fit().stream_bandwidth / 1e12:.2f}",
    "gpu-cost.cal.plain_slow": lambda: f"{_least_squares_plain()[1]} %",
    "gpu-cost.cal.act_2_measured": lambda: f"{_first_row('ffn_act', 2)[0]:.0f} us",
    "gpu-cost.cal.act_2_model": lambda: f"{_first_row('ffn_act', 2)[1]:.1f} us",
    "gpu-cost.cal.norm_per_byte": _norm_per_byte,
    "gpu-cost.cal.mean_over_50us": _mean_over_50us,
    "gpu-cost.cal.layer_mean_after": lambda: _p1(_error("layer", "mean_rel_error")),
    "gpu-cost.cal.embed_fast": lambda: "{:.0f}".format(float(np.mean(
        [m / c for o, m, c in zip(*_points_errors()) if o == "embed"]))),
    "gpu-cost.cal.embed_share": lambda: "{:.2f} %".format(
        100 * _calibrated_2048()[0]["embed"].seconds / _calibrated_2048()[1]),
})
