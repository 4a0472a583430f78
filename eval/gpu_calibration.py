"""The GPU prefill model calibrated on measured A100 times: Vidur's per-layer profiles.

:class:`~patton.eval.gpu_cost.AnalyticCost` prices a prefill step by a roofline at *chosen*
efficiencies. This module fits six global parameters of a roofline with per-kernel overheads to
measured A100 times (the public Vidur simulator's profiles of Llama-3-8B, 1-32,768 tokens, and
Llama-2-7B, 1-4,096 tokens; ``data/vidur-a100/``, MIT licence) and prices a step with them
(:class:`CalibratedCost`). Per kernel over ``n`` tokens, with FLOPs and bytes counted as
:meth:`AnalyticCost.counts <patton.eval.gpu_cost.AnalyticCost.counts>` counts them:

* a GEMM (QKV, output projection, gate+up or fc1, down or fc2, the LM head):
  ``t_g + max(flops / C(n), bytes / B_g)`` with ``C(n) = C_max * n / (n + n_half)``: a GEMM of
  few rows fills few of the tensor cores' tiles, so reaches less of ``C_max``;
* a streaming (element-wise) kernel (norm, residual add, activation, rotary embedding,
  embedding gather): ``t_s + bytes / B_s``;
* prefill attention, which the data does not hold: ``t_g + max(flops / (peak *``
  :data:`ATTENTION_EFFICIENCY` ``), bytes / B_g)``, FlashAttention-2's FLOPs at a stated share
  of the peak.

The six parameters ``t_g, C_max, n_half, B_g, t_s, B_s`` (:class:`Fit`) are fitted by
:func:`fit` to every operation of every row of both files, in relative error (robust least
squares on the log of model over measured time), so the model extends to other shapes by their
FLOPs and bytes (OPT-6.7B, not measured: its 2-matrix FFN as two GEMMs and a ReLU, its
LayerNorms as the norms, no rotary embedding). They are rates of the measured device
(:data:`MEASURED_ON`, an A100 80 GB SXM); :class:`CalibratedCost` scales them to its device by
the ratio of peaks (the A100 80 GB PCIe: bandwidth x 1935/2039, compute x 1).
Energy follows :class:`~patton.eval.gpu_cost.Gpu`'s power model, uncalibrated (no power was
measured).

:data:`GPU_MODELS` names the two models and :func:`gpu_model` makes one; :func:`report` gives
both models' errors against every measured point. ``python -m patton.eval.gpu_calibration
[--plot PATH]`` prints the fit, the errors and a few steps' costs (``docs/gpu-cost.md``).
"""

from __future__ import annotations

import argparse
import functools
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

import numpy as np
from patton.eval.gpu_cost import (
    BF16,
    GPUS,
    ZERO,
    AnalyticCost,
    Chunk,
    Cost,
    Gpu,
    PrefillCost,
    Shape,
    _chunks,
    _measure,
    csv_table,
    recompute_cost,
    total,
)
from patton.runtime.models import MODELS, ModelSpec
from patton.sim.textfile import ReadError, decimal

__all__ = ["GPU_MODELS", "gpu_model", "CalibratedCost", "Fit", "fit", "report", "Profile",
           "ProfileError", "read", "profiles", "FILES", "SOURCE", "MEASURED_ON",
           "ATTENTION_EFFICIENCY", "OPS", "VIDUR_OPS", "LEARNED_POSITIONS", "Kernel",
           "measured_kernels", "plot", "main"]

#: The GPU prefill models :func:`gpu_model` makes, by name.
GPU_MODELS = ("analytic", "calibrated")

#: The device Vidur measured: an A100 80 GB SXM (its README: "A100 80GB DGX"). NVIDIA A100
#: datasheet: 312 TFLOP/s dense BF16 tensor core (as the PCIe card), 2,039 GB/s HBM2e, 400 W.
#: Only its peaks are used (to scale the fitted rates to another device); the efficiencies and
#: power shares are placeholders (fitted rates are absolute).
MEASURED_ON = Gpu("a100-80gb-sxm", peak_flops=312e12, bandwidth=2039e9, tdp_w=400.0,
                  compute_eff=1.0, bandwidth_eff=1.0, static_share=0.3, compute_share=0.7)

#: Prefill attention's share of the peak FLOP/s (not in the measured data, so chosen):
#: FlashAttention-2's forward pass reaches 50-73 % of the A100's theoretical maximum (Dao, 2023,
#: "FlashAttention-2: Faster Attention with Better Parallelism and Work Partitioning",
#: abstract); a serving step's chunks are short and causal, where it is at the low end.
ATTENTION_EFFICIENCY = 0.5

#: The presets whose positions are learned embeddings added once to the input (OPT), not
#: rotary embeddings applied in every layer: :class:`CalibratedCost` runs no ``rope`` for them
#: (and, as :class:`~patton.eval.gpu_cost.AnalyticCost`, does not count the position add).
LEARNED_POSITIONS = frozenset({"opt-6.7b"})

#: The measured files (in ``data/vidur-a100/``) and the preset each stands closest to.
FILES = ("llama3-8b-mlp-tp1.csv", "llama2-7b-mlp-tp1.csv")

SOURCE = ("Vidur A100 80GB (SXM) profiles, microsoft/vidur commit 7d47513, "
          "data/profiling/compute/a100/{meta-llama/Meta-Llama-3-8B,meta-llama/Llama-2-7b-hf}/"
          "mlp.csv, tensor-parallel 1, median ms per layer (MIT licence): "
          + ", ".join(FILES))

#: Vidur's operations (its columns ``time_stats.<op>.median``).
VIDUR_OPS = ("emb", "input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj",
             "post_attention_layernorm", "mlp_up_proj", "mlp_act", "mlp_down_proj", "add")

#: Our operations compared with the measurements, and the Vidur operations each one sums:
#: ``norms`` is the two norms and the two residual adds of a layer (Vidur runs them as four
#: kernels; vLLM, and :class:`~patton.eval.gpu_cost.AnalyticCost`, fuse each add into the
#: following norm); ``rope`` is an operation of the calibrated model only.
OPS: dict[str, tuple[str, ...]] = {
    "embed": ("emb",),
    "qkv": ("attn_pre_proj",),
    "rope": ("attn_rope",),
    "o_proj": ("attn_post_proj",),
    "ffn_up": ("mlp_up_proj",),
    "ffn_act": ("mlp_act",),
    "ffn_down": ("mlp_down_proj",),
    "norms": ("input_layernorm", "post_attention_layernorm", "add", "add"),
}

_GEMMS = frozenset({"qkv", "o_proj", "ffn_up", "ffn_down", "lm_head"})

_COLUMNS = tuple(f"time_stats.{op}.median" for op in VIDUR_OPS) + (
    "n_head", "n_kv_head", "n_embd", "n_expanded_embd", "vocab_size", "use_gated_mlp",
    "num_tokens", "num_tensor_parallel_workers")


# ------------------------------------------------------------------------------ the data


class ProfileError(ReadError):
    """A malformed Vidur profile; ``str()`` is ``file:line: reason`` (a
    :class:`~patton.sim.textfile.ReadError`: ``file``, ``line``, ``reason``)."""


@dataclass(frozen=True, slots=True)
class Profile:
    """One measured row: ``tokens`` tokens through one layer of a model of ``spec`` (one layer)
    and ``shape``, and each Vidur operation's median time in seconds.

    Invariants (checked by :func:`read`): ``tokens`` positive; every time positive and finite;
    ``line`` is the row's 1-based line in ``source``.
    """

    tokens: int
    spec: ModelSpec  # the attention shape, ``layers=1``: counts are per layer
    shape: Shape
    seconds: dict[str, float]  # by Vidur operation (VIDUR_OPS)
    source: str
    line: int


def read(path: str | os.PathLike[str]) -> list[Profile]:
    """Read one Vidur profile (``mlp.csv``, rows of one tensor-parallel worker).

    Format: UTF-8 CSV; the first line is the header, which must hold (in any order, among
    others) ``time_stats.<op>.median`` for every op of :data:`VIDUR_OPS`, ``n_head``,
    ``n_kv_head``, ``n_embd``, ``n_expanded_embd``, ``vocab_size``, ``use_gated_mlp``,
    ``num_tokens`` and ``num_tensor_parallel_workers``. Every other line is one measurement,
    one field per column: times in milliseconds (positive decimal numbers), sizes decimal
    integers, ``use_gated_mlp`` ``True`` or ``False``, ``num_tensor_parallel_workers`` 1.

    Raises:
        ProfileError: ``file:line: reason``: the file cannot be read or is not UTF-8, no header
            or a missing column, a wrong field count, a field that is not of its kind, a time
            that is 0, a shape the model cannot have (``n_embd`` not a multiple of ``n_head``,
            ``n_head`` not of ``n_kv_head``), more than one tensor-parallel worker, no rows.
    """
    source = os.fspath(path)

    def check_header(fields: list[str], source: str, no: int) -> list[str]:
        missing = [c for c in _COLUMNS if c not in fields]
        if missing:
            raise ProfileError(source, no, f"missing column(s) {', '.join(missing)} (is the "
                                           f"header line missing?)")
        return fields

    table = csv_table(path, ProfileError, "Vidur profile", check_header,
                      "Vidur's mlp.csv columns")
    out: list[Profile] = []
    for no, values in table.rows:
        try:
            out.append(_profile(values, source, no))
        except ValueError as failure:
            raise ProfileError(source, no, str(failure)) from None
    if not out:
        raise ProfileError(source, table.header_line, "no rows after the header")
    return out


def _profile(values: dict[str, str], source: str, no: int) -> Profile:
    """Return one row's :class:`Profile` (``ValueError`` naming the bad field)."""
    n = {c: decimal(values[c], c) for c in ("n_head", "n_kv_head", "n_embd",
                                             "n_expanded_embd", "vocab_size", "num_tokens",
                                             "num_tensor_parallel_workers")}
    for c, v in n.items():
        if v <= 0:
            raise ValueError(f"{c} {v} is not positive")
    if n["num_tensor_parallel_workers"] != 1:
        raise ValueError(f"num_tensor_parallel_workers {n['num_tensor_parallel_workers']}: "
                         f"only one worker's times are per-layer costs of the whole model")
    if n["n_embd"] % n["n_head"]:
        raise ValueError(f"n_embd {n['n_embd']} is not a multiple of n_head {n['n_head']}")
    gated = values["use_gated_mlp"]
    if gated not in ("True", "False"):
        raise ValueError(f"use_gated_mlp {gated!r} is not True or False")
    seconds = {}
    for op in VIDUR_OPS:
        c = f"time_stats.{op}.median"
        ms = _measure(values[c], c)
        if ms == 0:
            raise ValueError(f"{c} is 0: a measured time must be positive")
        seconds[op] = ms * 1e-3
    spec = ModelSpec(f"{os.path.basename(source)}:{no}", layers=1, kv_heads=n["n_kv_head"],
                     q_heads=n["n_head"], d_head=n["n_embd"] // n["n_head"])
    shape = Shape(hidden=n["n_embd"], ffn=n["n_expanded_embd"], vocab=n["vocab_size"],
                  gated=gated == "True")
    return Profile(n["num_tokens"], spec, shape, seconds, source, no)


@functools.lru_cache(maxsize=1)
def profiles() -> tuple[Profile, ...]:
    """Every measured row of both files of :data:`FILES`, in file order (duplicate token counts,
    repeated measurements, are kept)."""
    out: list[Profile] = []
    for name in FILES:
        with resources.as_file(resources.files("patton.eval") / "data" / "vidur-a100" /
                               name) as path:
            out += read(path)
    return tuple(out)


# ------------------------------------------------------------------------------ kernels

#: A kernel: kind (``"gemm"``, ``"stream"`` or ``"attention"``), FLOPs, bytes, and the rows
#: (tokens) a GEMM's efficiency depends on.
Kernel = tuple[str, int, int, int]


def measured_kernels(p: Profile) -> dict[str, list[Kernel]]:
    """Return, per operation of :data:`OPS`, the kernels of one measured row (one layer, and
    the embedding), counted by :meth:`AnalyticCost.counts
    <patton.eval.gpu_cost.AnalyticCost.counts>` of the row's shape with one layer (so its
    counts are per layer), except two the analytic model does not count that way:

    * ``norms``: the four kernels Vidur timed, not the two fused ones AnalyticCost counts:
      two RMSNorms (each reads and writes ``h`` per token) and two residual adds (each reads
      ``2h`` and writes ``h``);
    * ``rope``: the rotary embedding, in place on Q and K (reads and writes ``q + k`` per
      token); AnalyticCost leaves it out.
    """
    n, h = p.tokens, p.shape.hidden
    counts = AnalyticCost(p.spec, shape=p.shape).counts([(n, 0)])
    q, k = p.spec.q_heads * p.spec.d_head, p.spec.kv_heads * p.spec.d_head
    out: dict[str, list[Kernel]] = {}
    for op in OPS:
        if op == "norms":
            out[op] = [("stream", 0, BF16 * 2 * n * h, n)] * 2 + \
                [("stream", 0, BF16 * 3 * n * h, n)] * 2
        elif op == "rope":
            out[op] = [("stream", 0, BF16 * 2 * n * (q + k), n)]
        else:
            flops, nbytes = counts[op]
            out[op] = [("gemm" if op in _GEMMS else "stream", flops, nbytes, n)]
    return out


# ------------------------------------------------------------------------------ the fit


@dataclass(frozen=True, slots=True)
class Fit:
    """The fitted parameters, rates of the measured device (:data:`MEASURED_ON`).

    Invariants: every value positive and finite.
    """

    gemm_overhead: float  # t_g, s: a GEMM's (and the attention kernel's) fixed time
    gemm_flops: float  # C_max, FLOP/s: a GEMM's throughput over many rows
    gemm_half_rows: float  # n_half: the rows at which a GEMM reaches half of C_max
    gemm_bandwidth: float  # B_g, bytes/s: a GEMM's (and attention's) memory rate
    stream_overhead: float  # t_s, s: a streaming kernel's fixed time
    stream_bandwidth: float  # B_s, bytes/s: a streaming kernel's memory rate

    def times(self, kernel: Kernel, gpu: Gpu = MEASURED_ON) -> tuple[float, float, float]:
        """Return ``(t, a, m)`` of one kernel on ``gpu``: its time, and the times its FLOPs
        and its bytes alone keep the tensor cores and the memory busy (``t >= max(a, m)``).
        Rates scale from :data:`MEASURED_ON` to ``gpu`` by the ratio of their peaks."""
        kind, flops, nbytes, rows = kernel
        fs, bs = gpu.peak_flops / MEASURED_ON.peak_flops, gpu.bandwidth / MEASURED_ON.bandwidth
        if kind == "stream":
            return self.stream(nbytes, bs)
        if kind == "gemm":
            t, a, m = self.gemm(flops, nbytes, rows, fs, bs)
            return float(t), a, m
        a = flops / (gpu.peak_flops * ATTENTION_EFFICIENCY)
        m = nbytes / (self.gemm_bandwidth * bs)
        return self.gemm_overhead + max(a, m), a, m

    def gemm(self, flops: Any, nbytes: Any, rows: Any, fs: float = 1.0,
             bs: float = 1.0) -> tuple[Any, Any, Any]:
        """``(t, a, m)`` of GEMMs (numbers or NumPy arrays alike), their rates scaled by
        ``fs`` (compute) and ``bs`` (bandwidth) from the measured card's."""
        # flops / C(rows); flops is 2 rows inner out, so this grows with rows
        a = flops * (rows + self.gemm_half_rows) / (self.gemm_flops * fs * rows)
        m = nbytes / (self.gemm_bandwidth * bs)
        return self.gemm_overhead + np.maximum(a, m), a, m

    def stream(self, nbytes: Any, bs: float = 1.0) -> tuple[Any, float, Any]:
        """``(t, 0, m)`` of streaming kernels (numbers or NumPy arrays alike)."""
        m = nbytes / (self.stream_bandwidth * bs)
        return self.stream_overhead + m, 0.0, m

    def as_dict(self) -> dict[str, float]:
        """Return the parameters as plain JSON data (us, TFLOP/s, rows, TB/s)."""
        return {"gemm_overhead_us": round(self.gemm_overhead * 1e6, 3),
                "gemm_tflop_s": round(self.gemm_flops / 1e12, 2),
                "gemm_half_rows": round(self.gemm_half_rows, 1),
                "gemm_bandwidth_tb_s": round(self.gemm_bandwidth / 1e12, 4),
                "stream_overhead_us": round(self.stream_overhead * 1e6, 3),
                "stream_bandwidth_tb_s": round(self.stream_bandwidth / 1e12, 4)}


_WIDTH = 4  # the most kernels one compared operation has (norms)


@dataclass(frozen=True, slots=True)
class _Points:
    """Every compared (operation, row) point, as arrays for a vectorised fit: ``[point,
    kernel]`` kind (1 GEMM, 0 stream), FLOPs, bytes, rows, present; measured seconds; op."""

    gemm: np.ndarray
    flops: np.ndarray
    nbytes: np.ndarray
    rows: np.ndarray
    present: np.ndarray
    seconds: np.ndarray
    ops: tuple[str, ...]
    profiles: tuple[int, ...]  # the index of each point's row in profiles()


@functools.lru_cache(maxsize=1)
def _points() -> _Points:
    rows = profiles()
    size = len(rows) * len(OPS)
    gemm, flops, nbytes = (np.zeros((size, _WIDTH)) for _ in range(3))
    tokens, present = np.ones((size, _WIDTH)), np.zeros((size, _WIDTH))
    seconds, ops, index = np.zeros(size), [], []
    i = 0
    for r, p in enumerate(rows):
        for op, kernels in measured_kernels(p).items():
            for j, (kind, f, b, n) in enumerate(kernels):
                gemm[i, j], flops[i, j], nbytes[i, j] = kind == "gemm", f, b
                tokens[i, j], present[i, j] = n, 1
            seconds[i] = sum(p.seconds[v] for v in OPS[op])
            ops.append(op)
            index.append(r)
            i += 1
    return _Points(gemm, flops, nbytes, tokens, present, seconds, tuple(ops), tuple(index))


def _model(f: Fit, pts: _Points) -> np.ndarray:
    """The calibrated model's seconds at every point (:meth:`Fit.gemm` and
    :meth:`Fit.stream` on the points' arrays)."""
    g = f.gemm(pts.flops, pts.nbytes, pts.rows)[0]
    s = f.stream(pts.nbytes)[0]
    return (np.where(pts.gemm == 1, g, s) * pts.present).sum(axis=1)


def _analytic(pts: _Points, gpu: Gpu) -> np.ndarray:
    """The analytic roofline's seconds at every point: the same kernels at ``gpu``'s chosen
    efficiencies, no overhead (as :meth:`AnalyticCost.ops
    <patton.eval.gpu_cost.AnalyticCost.ops>` prices one)."""
    t = np.maximum(pts.flops / gpu.flops_per_s, pts.nbytes / gpu.bytes_per_s)
    return (t * pts.present).sum(axis=1)


#: The fit's start (the order of :class:`Fit`'s fields) and its robust loss's scale: log
#: residuals beyond about 0.1 (10 %) count linearly, not squared, so the one kernel far off
#: its byte count (the embedding gather, about a third of the streaming rate) does not pull
#: the streaming bandwidth of every other kernel down.
_START = (5e-6, 250e12, 64.0, 1.5e12, 3e-6, 1e12)
_LOSS_SCALE = 0.1
#: The significant figures each fitted parameter keeps (:func:`fit`).
_FIGURES = 8


@functools.lru_cache(maxsize=1)
def fit() -> Fit:
    """Return the parameters that best fit every point (every operation of :data:`OPS`, every
    row of both files): robust least squares (``scipy.optimize.least_squares``, soft-L1 loss
    at scale 0.1) on ``log(model / measured)``, parameters fitted as logs (so positive), from
    a fixed start: deterministic. Computed once per process.

    Each parameter is kept to :data:`_FIGURES` significant figures: the solver's last digits
    depend on the machine's LAPACK build (1e-11 relative between two machines with the same
    NumPy and SciPy), far below what the data determine, and rounding them makes every record
    priced by the fit the same on every machine."""
    from scipy.optimize import least_squares

    pts = _points()
    log_measured = np.log(pts.seconds)

    def residuals(x: np.ndarray) -> np.ndarray:
        return np.log(_model(Fit(*np.exp(x)), pts)) - log_measured

    x = least_squares(residuals, np.log(_START), loss="soft_l1", f_scale=_LOSS_SCALE).x
    return Fit(*(float(f"{v:.{_FIGURES}g}") for v in np.exp(x)))


# ------------------------------------------------------------------------------ the model


class CalibratedCost:
    """One prefill step of ``model`` on ``gpu``, priced by the fitted kernels (see the module).

    The step runs as one batch (as vLLM runs it) of ``N = sum(new)`` tokens, with the
    operations and counts of :class:`~patton.eval.gpu_cost.AnalyticCost` (per layer ``qkv``,
    ``attention``, ``o_proj``, ``ffn_up``, ``ffn_act``, ``ffn_down``, ``norms`` as two fused
    residual-add + norm kernels; once ``embed``, ``final_norm``, ``lm_head`` over the ``B``
    chunks' last tokens) plus, for a model with rotary embeddings, ``rope`` per layer (in
    place on Q and K: reads and writes ``q + k`` per token). Each kernel is timed by
    :meth:`Fit.times`: GEMMs (and ``lm_head``, ``B`` rows) as GEMMs, ``attention`` as
    attention, the rest as streaming kernels. A step's time is the sum over the kernels
    (``layers`` of each per-layer kernel). Energy is
    :class:`~patton.eval.gpu_cost.Gpu`'s power model with each kernel's time ``t`` and busy
    times ``a`` and ``m``: ``tdp_w * (static_share * t + (1 - static_share) * (compute_share *
    a + (1 - compute_share) * m))`` (an overhead draws static power only).

    Invariants (as AnalyticCost's, which :func:`~patton.eval.gpu_cost.recompute_cost` relies
    on): :meth:`step` is non-negative, 0 for no chunks, independent of the chunks' order, and
    non-decreasing when a chunk gains new tokens or context or a chunk is added: every
    kernel's FLOPs, bytes and rows are, and its ``t``, ``a`` and ``m`` do not decrease in them
    (a GEMM's ``a`` is ``2 inner out (rows + n_half) / C_max``).

    Args:
        model: the attention shape and layer count.
        gpu: the device (default the A100 80 GB PCIe of :data:`~patton.eval.gpu_cost.GPUS`):
            its peaks scale the fitted rates, its power figures price the energy; its
            efficiencies are not used.
        shape: the other shapes (default :data:`~patton.eval.gpu_cost.SHAPES`
            ``[model.name]``).
        rotary: the model applies rotary position embeddings in every layer (default: unless
            ``model.name`` is in :data:`LEARNED_POSITIONS`); without them ``rope`` costs 0.

    Raises:
        ValueError: no shape given and none in SHAPES for ``model.name``.
    """

    #: The operations, in the order :meth:`ops` returns them.
    OPS = ("embed", "qkv", "rope", "attention", "o_proj", "ffn_up", "ffn_act", "ffn_down",
           "norms", "final_norm", "lm_head")

    def __init__(self, model: ModelSpec, gpu: Gpu | None = None,
                 shape: Shape | None = None, rotary: bool | None = None) -> None:
        self.analytic = AnalyticCost(model, gpu, shape)  # the counts (it checks the shape)
        self.model = model
        self.rotary = model.name not in LEARNED_POSITIONS if rotary is None else rotary
        self.gpu = self.analytic.gpu
        self.shape = self.analytic.shape
        self.fit = fit()

    def kernels(self, chunks: Iterable[Chunk]) -> dict[str, tuple[Kernel, int]]:
        """Return ``{op: (kernel, times)}`` of one step: one kernel's FLOPs and bytes, and how
        many times the step runs it (``layers``, ``2 x layers`` for ``norms``, or 1); ``{}``
        for no chunks, no ``rope`` without rotary embeddings."""
        work = _chunks(chunks)
        if not work:
            return {}
        m, layers = self.model, self.model.layers
        n, b = sum(new for new, _ in work), len(work)
        counts = self.analytic.counts(work)
        q, k = m.q_heads * m.d_head, m.kv_heads * m.d_head
        out: dict[str, tuple[Kernel, int]] = {}
        for op in self.OPS:
            if op == "rope":
                if self.rotary:
                    out[op] = (("stream", 0, BF16 * 2 * n * (q + k), n), layers)
                continue
            flops, nbytes = counts[op]
            times = 1 if op in ("embed", "final_norm", "lm_head") else \
                2 * layers if op == "norms" else layers
            kind = "gemm" if op in _GEMMS else "attention" if op == "attention" else "stream"
            rows = b if op == "lm_head" else n
            out[op] = ((kind, flops // times, nbytes // times, rows), times)
        return out

    def ops(self, chunks: Iterable[Chunk]) -> dict[str, Cost]:
        """Return the cost of each operation of :attr:`OPS` in one step (summed over the
        layers; 0 for an operation that does not run)."""
        g = self.gpu
        out: dict[str, Cost] = dict.fromkeys(self.OPS, ZERO)
        for op, (kernel, times) in self.kernels(chunks).items():
            t, a, mem = self.fit.times(kernel, g)
            out[op] = Cost(t * times, g.joules(t, a, mem) * times, kernel[1] * times,
                           kernel[2] * times)
        return out

    def step(self, chunks: Iterable[Chunk]) -> Cost:
        """Return the cost of one step whose prefill is ``chunks`` (see the class)."""
        return total(self.ops(chunks).values())


def gpu_model(name: str, model: ModelSpec) -> PrefillCost:
    """Return the GPU prefill model ``name`` (one of :data:`GPU_MODELS`) of ``model`` on the
    A100 80 GB PCIe: ``"analytic"`` :class:`~patton.eval.gpu_cost.AnalyticCost`,
    ``"calibrated"`` :class:`CalibratedCost`.

    Raises:
        ValueError: an unknown name (the message lists the known ones), or a model without a
            shape in :data:`~patton.eval.gpu_cost.SHAPES`.
    """
    if name == "analytic":
        return AnalyticCost(model)
    if name == "calibrated":
        return CalibratedCost(model)
    raise ValueError(f"unknown GPU model {name!r} (known: {', '.join(GPU_MODELS)})")


# ------------------------------------------------------------------------------ errors


def _errors(model: np.ndarray, measured: np.ndarray) -> dict[str, float]:
    e = np.abs(model - measured) / measured
    return {"max_rel_error": round(float(e.max()), 4),
            "mean_rel_error": round(float(e.mean()), 4)}


@functools.lru_cache(maxsize=1)
def report() -> dict[str, Any]:
    """Return both models against every measured point, as plain JSON data.

    A point is one operation of :data:`OPS` in one row of both files; its relative error is
    ``|model - measured| / measured``. The calibrated model is :func:`fit` on the measured
    device; the analytic one is the roofline at the A100 80 GB PCIe's chosen efficiencies on
    the same kernels (AnalyticCost itself leaves ``rope`` out and fuses ``norms``). Keys:
    ``source``, ``model``, ``params`` (:meth:`Fit.as_dict`), ``attention_efficiency`` (chosen,
    not fitted), ``points``, ``max_rel_error``, ``mean_rel_error``, ``per_op`` (``{op:
    {max_rel_error, mean_rel_error, points}}``), ``analytic`` (its ``max_rel_error``,
    ``mean_rel_error`` and ``per_op``), and ``layer``: the same errors of each row's sum over
    the per-layer operations (a layer without attention and embedding), for both models.
    """
    pts = _points()
    cal = _model(fit(), pts)
    ana = _analytic(pts, GPUS["a100-80gb-pcie"])
    ops = np.array(pts.ops)
    per_op: dict[str, dict[str, Any]] = {}
    per_op_analytic: dict[str, dict[str, Any]] = {}
    for op in OPS:
        at = ops == op
        per_op[op] = {**_errors(cal[at], pts.seconds[at]), "points": int(at.sum())}
        per_op_analytic[op] = _errors(ana[at], pts.seconds[at])
    layer = ops != "embed"
    index = np.array(pts.profiles)[layer]
    rows = len(profiles())

    def per_row(values: np.ndarray) -> np.ndarray:
        return np.bincount(index, weights=values[layer], minlength=rows)

    measured = per_row(pts.seconds)
    return {"source": SOURCE, "model": "calibrated", "params": fit().as_dict(),
            "attention_efficiency": ATTENTION_EFFICIENCY, "points": len(pts.ops),
            **_errors(cal, pts.seconds), "per_op": per_op,
            "analytic": {**_errors(ana, pts.seconds), "per_op": per_op_analytic},
            "layer": {"points": rows, **_errors(per_row(cal), measured),
                      "analytic": _errors(per_row(ana), measured)}}


# ------------------------------------------------------------------------------ figures

#: The steps ``python -m patton.eval.gpu_calibration`` prices: (preset, label, chunks).
CASES: tuple[tuple[str, str, list[Chunk]], ...] = (
    ("llama3-8b", "1 x 512 new", [(512, 0)]),
    ("llama3-8b", "1 x 2048 new", [(2048, 0)]),
    ("llama3-8b", "32 x 128 new, 1024 context", [(128, 1024)] * 32),
    ("opt-6.7b", "1 x 2048 new", [(2048, 0)]),
)


def _figures() -> str:
    """Return the fit, the error table and a few steps' costs under both models."""
    r = report()
    out = [f"source: {r['source']}", "", "fitted parameters (A100 80GB SXM, as measured):"]
    out += [f"  {k:22} {v}" for k, v in r["params"].items()]
    out.append(f"  {'attention_efficiency':22} {r['attention_efficiency']} (chosen, not "
               f"fitted)")
    out += ["", "relative error |model - measured| / measured, mean / max",
            f"{'op':10} {'points':>6} {'calibrated':>17} {'analytic':>17}"]

    def line(label: str, n: int, c: dict[str, Any], a: dict[str, Any]) -> str:
        return (f"{label:10} {n:6} {100 * c['mean_rel_error']:7.1f} % "
                f"{100 * c['max_rel_error']:6.1f} % {100 * a['mean_rel_error']:7.1f} % "
                f"{100 * a['max_rel_error']:6.1f} %")

    for op, c in r["per_op"].items():
        out.append(line(op, c["points"], c, r["analytic"]["per_op"][op]))
    out.append(line("all", r["points"], r, r["analytic"]))
    out.append(line("layer", r["layer"]["points"], r["layer"], r["layer"]["analytic"]))
    out += ["", "steps on the A100 80GB PCIe",
            f"{'step':40} {'calibrated ms':>13} {'J':>7} {'analytic ms':>12} {'J':>7}"]
    for name, label, chunks in CASES:
        c = gpu_model("calibrated", MODELS[name]).step(chunks)
        a = gpu_model("analytic", MODELS[name]).step(chunks)
        out.append(f"{name + ', ' + label:40} {c.seconds * 1e3:13.2f} {c.joules:7.2f} "
                   f"{a.seconds * 1e3:12.2f} {a.joules:7.2f}")
    total, required = [(1152, 0)] + [(128, 1024)] * 31, [(128, 1024)] * 32
    c, a = (recompute_cost(gpu_model(m, MODELS["llama3-8b"]), total, required)
            for m in ("calibrated", "analytic"))
    out.append(f"{'llama3-8b, recompute (1 of 32 misses)':40} {c.seconds * 1e3:13.2f} "
               f"{c.joules:7.2f} {a.seconds * 1e3:12.2f} {a.joules:7.2f}")
    return "\n".join(out)


def plot(path: str | os.PathLike[str]) -> None:
    """Draw measured and modelled time per operation over tokens (log-log), both files, to
    ``path`` (any format matplotlib writes)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = _points()
    cal, ana = _model(fit(), pts), _analytic(pts, GPUS["a100-80gb-pcie"])
    rows = profiles()
    tokens = np.array([rows[i].tokens for i in pts.profiles])
    source = np.array([os.path.basename(rows[i].source) for i in pts.profiles])
    fig, axes = plt.subplots(2, 4, figsize=(16, 8), sharex=True)
    for ax, op in zip(axes.flat, OPS):
        for name, colour in zip(FILES, ("C0", "C1")):
            at = (np.array(pts.ops) == op) & (source == name)
            order = np.argsort(tokens[at])
            t, label = tokens[at][order], name.split("-mlp")[0]
            ax.plot(t, pts.seconds[at][order] * 1e3, ".", color=colour, ms=3,
                    label=f"{label} measured")
            ax.plot(t, cal[at][order] * 1e3, "-", color=colour, label=f"{label} calibrated")
            ax.plot(t, ana[at][order] * 1e3, ":", color=colour, label=f"{label} analytic")
        parts = " + ".join(OPS[op]) if op != "norms" else "2 layernorms + 2 adds"
        ax.set(xscale="log", yscale="log", title=f"{op} (Vidur: {parts})")
        ax.title.set_fontsize(9)
        ax.grid(True, which="major", alpha=0.3)
    for ax in axes[1]:
        ax.set_xlabel("tokens")
    for ax in axes[:, 0]:
        ax.set_ylabel("ms per layer (embed: per model)")
    axes.flat[0].legend(fontsize=7)
    fig.suptitle("A100 80GB: Vidur's measured times vs the calibrated and analytic models")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m patton.eval.gpu_calibration [--plot PATH]``: print :func:`_figures`."""
    parser = argparse.ArgumentParser(prog="python -m patton.eval.gpu_calibration",
                                     description="The GPU prefill model calibrated on "
                                                 "Vidur's A100 profiles: fit, errors, steps.")
    parser.add_argument("--plot", metavar="PATH",
                        help="also draw measured vs modelled time per operation to PATH")
    args = parser.parse_args(argv)
    print(_figures())
    if args.plot:
        plot(args.plot)
        print(f"\nplot: {args.plot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
