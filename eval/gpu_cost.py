"""What a prefill batch costs on the GPU: the model behind "runtime-induced prefill recomputation".

The paper (§5.3) prices the prefill a KV-cache runtime makes the GPU redo: per serving step, the
cost of the whole prefill workload (the prefill the GPU reference needs plus the recomputation
the runtime's misses cause) minus the cost of the required prefill alone, so that the
nonlinearity of prefill cost in token count is respected (:func:`recompute_cost`). There is no
A100 here, so the cost is a stated model; a table of measured timings can replace it.

A step's prefill is a batch of **chunks** ``(new_tokens, context_tokens)``: the tokens a request
computes in the step, and the tokens of that request already in the KV cache before the chunk
(which its attention reads). Chunks with 0 new tokens are no work and are ignored. Two models
implement :class:`PrefillCost` (``step(chunks) -> Cost``), so callers do not care which one
they hold:

* :class:`AnalyticCost`: a per-operation roofline of the forward pass on a :class:`Gpu` (figures
  in :data:`GPUS`) for a :class:`~patton.runtime.patton.config.ModelSpec`, with the shapes ModelSpec
  does not hold (hidden size, FFN size and kind, vocabulary) in :data:`SHAPES`.
* :class:`MeasuredCost`: measured step timings read from a CSV file (format in
  :meth:`MeasuredCost.read`), interpolated piecewise linearly, never extrapolated.

``python -m patton.eval.gpu_cost`` prints the figures quoted in ``docs/gpu-cost.md``.
"""

from __future__ import annotations

import math
import os
import re
from bisect import bisect_right
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from patton.runtime.models import MODELS, ModelSpec
from patton.sim.textfile import ReadError, content, decimal, read_lines, shown, write_text

__all__ = ["Chunk", "Gpu", "GPUS", "Shape", "SHAPES", "Cost", "PrefillCost", "AnalyticCost",
           "CostTableError", "OutOfTable", "Row", "MeasuredCost", "recompute_cost",
           "attention_pairs", "CsvTable", "csv_table", "total"]

#: ``(new_tokens, context_tokens)`` of one request in one step.
Chunk = tuple[int, int]

BF16 = 2  # bytes per element: weights, activations and the KV cache are bf16


# ------------------------------------------------------------------------------ the device


@dataclass(frozen=True, slots=True)
class Gpu:
    """A GPU's figures and the efficiencies a prefill achieves on it.

    Invariants (checked at construction, ``ValueError`` otherwise): ``peak_flops``,
    ``bandwidth`` and ``tdp_w`` positive; the efficiencies in ``(0, 1]``; the power shares in
    ``[0, 1]``.

    Power model: an operation that takes ``t`` seconds, of which its FLOPs alone would take
    ``a`` and its bytes alone ``b`` (``t = max(a, b)``), draws
    ``tdp_w * (static_share + (1 - static_share) * (compute_share * a/t
    + (1 - compute_share) * b/t))``: static power while it runs, plus the dynamic power of each
    resource scaled by how busy it is. Energy is therefore ``tdp_w * (static_share * t +
    (1 - static_share) * (compute_share * a + (1 - compute_share) * b))``, i.e. static power x
    time plus a fixed energy per FLOP and per byte; a balanced op (``a == b``) draws the TDP.
    """

    name: str
    peak_flops: float  # dense bf16 tensor-core FLOP/s
    bandwidth: float  # peak DRAM bandwidth, bytes/s
    tdp_w: float  # board power limit, W
    compute_eff: float  # fraction of peak_flops a prefill's operations achieve
    bandwidth_eff: float  # fraction of bandwidth they achieve
    static_share: float  # share of tdp_w drawn whatever the load while a step runs
    compute_share: float  # share of the dynamic power that is compute (the rest: memory)

    def __post_init__(self) -> None:
        for f in ("peak_flops", "bandwidth", "tdp_w"):
            if not getattr(self, f) > 0:
                raise ValueError(f"Gpu.{f} must be positive, got {getattr(self, f)!r}")
        for f in ("compute_eff", "bandwidth_eff"):
            if not 0 < getattr(self, f) <= 1:
                raise ValueError(f"Gpu.{f} must be in (0, 1], got {getattr(self, f)!r}")
        for f in ("static_share", "compute_share"):
            if not 0 <= getattr(self, f) <= 1:
                raise ValueError(f"Gpu.{f} must be in [0, 1], got {getattr(self, f)!r}")

    def joules(self, t: float, a: float, m: float) -> float:
        """The energy of an operation that takes ``t`` seconds, of which its FLOPs alone would
        take ``a`` and its bytes alone ``m`` (the power model above)."""
        return self.tdp_w * (self.static_share * t + (1 - self.static_share)
                             * (self.compute_share * a + (1 - self.compute_share) * m))

    @property
    def flops_per_s(self) -> float:
        """The FLOP/s a prefill achieves (peak x efficiency)."""
        return self.peak_flops * self.compute_eff

    @property
    def bytes_per_s(self) -> float:
        """The bytes/s a prefill achieves (peak x efficiency)."""
        return self.bandwidth * self.bandwidth_eff


#: The devices, by name. Figures of the A100 80 GB PCIe: NVIDIA A100 80GB PCIe product brief
#: PB-10577-001 (312 TFLOP/s dense BF16 tensor core, 1,935 GB/s HBM2e, 300 W max TDP). The
#: efficiencies and power shares are ours (docs/gpu-cost.md says why): large bf16 GEMMs and
#: FlashAttention-2 forward reach roughly 50-75 % of peak on an A100, whole prefills less, so
#: 0.6; streaming kernels reach roughly 80-90 % of peak bandwidth, so 0.8; 30 % of the TDP is
#: drawn whatever the load, and compute is 70 % of the dynamic power.
GPUS: dict[str, Gpu] = {
    "a100-80gb-pcie": Gpu("a100-80gb-pcie", peak_flops=312e12, bandwidth=1935e9, tdp_w=300.0,
                          compute_eff=0.6, bandwidth_eff=0.8, static_share=0.3,
                          compute_share=0.7),
}


# ------------------------------------------------------------------------------ the model


@dataclass(frozen=True, slots=True)
class Shape:
    """The shapes of a model that :class:`~patton.runtime.patton.config.ModelSpec` does not hold.

    Invariants (checked at construction, ``ValueError`` otherwise): every size positive.
    """

    hidden: int  # model (residual) width
    ffn: int  # FFN intermediate size
    vocab: int  # vocabulary (LM head rows)
    gated: bool  # gated FFN (gate and up h->ffn, down ffn->h) or 2-matrix (fc1, fc2)

    def __post_init__(self) -> None:
        for f in ("hidden", "ffn", "vocab"):
            v = getattr(self, f)
            if not isinstance(v, int) or v <= 0:
                raise ValueError(f"Shape.{f} must be a positive integer, got {v!r}")


#: Per :data:`~patton.runtime.patton.config.MODELS` name, from the models' Hugging Face configs
#: (``hidden_size``, ``intermediate_size`` / ``ffn_dim``, ``vocab_size``). Llama-3 and Qwen use a
#: gated SiLU FFN (SwiGLU); OPT a 2-matrix ReLU FFN. Kept here, not in ModelSpec, which states
#: only the attention shape the runtime lays out.
SHAPES: dict[str, Shape] = {
    "llama3-8b": Shape(hidden=4096, ffn=14336, vocab=128256, gated=True),
    "qwen3-8b": Shape(hidden=4096, ffn=12288, vocab=151936, gated=True),
    "opt-6.7b": Shape(hidden=4096, ffn=16384, vocab=50272, gated=False),
    "qwen1.5-7b": Shape(hidden=4096, ffn=11008, vocab=151936, gated=True),
}


# ------------------------------------------------------------------------------ the result


@dataclass(frozen=True, slots=True)
class Cost:
    """What a prefill step (or the difference of two) costs.

    Invariants: ``seconds`` and ``joules`` are finite; ``flops`` and ``bytes`` are what the
    analytic model counted, ``None`` for a measured table (which has none). A :func:`step
    <PrefillCost.step>` result is never negative; a difference (``-``) may be.
    """

    seconds: float
    joules: float
    flops: int | None = 0
    bytes: int | None = 0

    def __add__(self, other: Cost) -> Cost:
        return Cost(self.seconds + other.seconds, self.joules + other.joules,
                    _combine(self.flops, other.flops, 1), _combine(self.bytes, other.bytes, 1))

    def __sub__(self, other: Cost) -> Cost:
        return Cost(self.seconds - other.seconds, self.joules - other.joules,
                    _combine(self.flops, other.flops, -1), _combine(self.bytes, other.bytes, -1))


def _combine(a: int | None, b: int | None, sign: int) -> int | None:
    return None if a is None or b is None else a + sign * b


ZERO = Cost(0.0, 0.0, 0, 0)


def total(costs: Iterable[Cost]) -> Cost:
    """The sum of ``costs``, in order (:data:`ZERO` for none)."""
    out = ZERO
    for c in costs:
        out = out + c
    return out


@runtime_checkable
class PrefillCost(Protocol):
    """A model of what one step's prefill costs on the GPU."""

    def step(self, chunks: Iterable[Chunk]) -> Cost:
        """Return the cost of one step whose prefill is ``chunks`` (0 for no work).

        Raises:
            ValueError: a chunk that is not two non-negative integers (or, for a measured
                table, a step outside it: :class:`OutOfTable`).
        """
        ...


def _chunks(chunks: Iterable[Chunk]) -> list[Chunk]:
    """Return the chunks with work (new tokens > 0), checked."""
    out: list[Chunk] = []
    for chunk in chunks:
        try:
            new, ctx = chunk
        except (TypeError, ValueError):
            raise ValueError(f"a chunk is (new_tokens, context_tokens), got {chunk!r}") from None
        for v in (new, ctx):
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ValueError(f"chunk {chunk!r}: token counts must be non-negative "
                                 f"integers")
        if new:
            out.append((new, ctx))
    return out


def attention_pairs(new: int, context: int) -> int:
    """Return the (query, key) pairs causal attention computes for one chunk.

    Query ``j`` (0-based in the chunk) sits at position ``context + j`` and attends to keys
    ``0 .. context + j``: ``new * context + new * (new + 1) / 2`` pairs in all.
    """
    return new * context + new * (new + 1) // 2


# ------------------------------------------------------------------------------ analytic


class AnalyticCost:
    """The per-operation roofline of one prefill step of ``model`` on ``gpu``.

    The step runs as one batch (as vLLM runs it): every operation is one kernel over all
    ``N = sum(new)`` tokens of the step, and takes ``max(flops / (peak * compute_eff), bytes /
    (bandwidth * bandwidth_eff))``; the step's time is the sum over operations (per op, not per
    layer: a layer's GEMMs are compute-bound and its element-wise ops memory-bound, which a
    per-layer max would hide). Energy follows :class:`Gpu`'s power model. Per layer, with
    ``h`` hidden, ``q = q_heads * d_head``, ``k = kv_heads * d_head``, ``f`` FFN size, bf16:

    * ``qkv``: ``x[N, h] @ W[h, q + 2k]``: ``2 N h (q + 2k)`` FLOPs; weights once, input, output.
    * ``attention``: causal, over each chunk's context plus its new tokens:
      ``4 d_head q_heads P`` FLOPs (``QK^T`` and ``SV``, 2 per multiply-add), ``P`` the sum of
      :func:`attention_pairs`; bytes: Q read, the new K/V read and written to the cache, the
      K/V of every chunk's ``context + new`` keys read once (ideal reuse across the query
      heads of a group and the query tiles: a lower bound), O written. Softmax arithmetic is
      not counted (it is not tensor-core work and is hidden under the GEMMs).
    * ``o_proj``: ``2 N q h``.
    * ``ffn_up``: gated ``2 N h (2f)`` (gate and up fused), else ``2 N h f`` (fc1);
      ``ffn_act``: SiLU x up (reads ``2f``, writes ``f`` per token) or ReLU (reads and writes
      ``f``), memory only; ``ffn_down``: ``2 N f h``.
    * ``norms``: two fused residual-add + norm kernels (each reads and writes ``2h`` per
      token), memory only.

    Once per step: ``embed`` (reads and writes ``h`` per token), ``final_norm`` (reads ``2h``,
    writes ``h`` per token) and ``lm_head`` (``2 B h vocab`` for the last token of each of the
    ``B`` chunks: vLLM computes logits for every scheduled request, and drops the sample of an
    unfinished prefill). Biases (OPT, Qwen1.5 QKV), rotary embeddings and Qwen3's QK norms are
    not counted. Weights are read once per step per layer; nothing is assumed to stay in cache
    between kernels.

    Invariants: :meth:`step` is non-negative, 0 for no chunks, independent of the chunks'
    order, and non-decreasing when a chunk gains new tokens or context or a chunk is added
    (every operation's FLOPs and bytes are: see :func:`recompute_cost`).

    Args:
        model: the attention shape and layer count.
        gpu: the device (default the A100 80 GB PCIe of :data:`GPUS`).
        shape: the other shapes (default :data:`SHAPES` ``[model.name]``).

    Raises:
        ValueError: no shape given and none in :data:`SHAPES` for ``model.name``.
    """

    #: The operations, in the order :meth:`ops` returns them.
    OPS = ("embed", "qkv", "attention", "o_proj", "ffn_up", "ffn_act", "ffn_down", "norms",
           "final_norm", "lm_head")

    def __init__(self, model: ModelSpec, gpu: Gpu | None = None,
                 shape: Shape | None = None) -> None:
        if shape is None:
            try:
                shape = SHAPES[model.name]
            except KeyError:
                raise ValueError(f"no FFN/vocabulary shape for model {model.name!r}: pass "
                                 f"shape= (known: {', '.join(SHAPES)})") from None
        self.model = model
        self.gpu = GPUS["a100-80gb-pcie"] if gpu is None else gpu
        self.shape = shape

    def counts(self, chunks: Iterable[Chunk]) -> dict[str, tuple[int, int]]:
        """Return ``{op: (flops, bytes)}`` of one step, each summed over the layers."""
        work = _chunks(chunks)
        if not work:  # no step: not even the weights are read
            return {op: (0, 0) for op in self.OPS}
        m, s = self.model, self.shape
        n = sum(new for new, _ in work)
        b = len(work)
        keys = sum(new + ctx for new, ctx in work)
        pairs = sum(attention_pairs(new, ctx) for new, ctx in work)
        h, f, v = s.hidden, s.ffn, s.vocab
        q, k = m.q_heads * m.d_head, m.kv_heads * m.d_head

        def gemm(rows: int, inner: int, out: int) -> tuple[int, int]:
            return 2 * rows * inner * out, BF16 * (inner * out + rows * inner + rows * out)

        up = 2 * f if s.gated else f
        layer = {
            "qkv": gemm(n, h, q + 2 * k),
            "attention": (4 * m.d_head * m.q_heads * pairs,
                          BF16 * (n * q + 2 * (2 * k * n) + 2 * k * keys + n * q)),
            "o_proj": gemm(n, q, h),
            "ffn_up": gemm(n, h, up),
            "ffn_act": (0, BF16 * n * (up + f)),
            "ffn_down": gemm(n, f, h),
            "norms": (0, BF16 * 2 * 4 * n * h),
        }
        once = {
            "embed": (0, BF16 * 2 * n * h),
            "final_norm": (0, BF16 * 3 * n * h),
            "lm_head": gemm(b, h, v),
        }
        out: dict[str, tuple[int, int]] = {}
        for op in self.OPS:
            if op in layer:
                fl, by = layer[op]
                out[op] = (fl * m.layers, by * m.layers)
            else:
                out[op] = once[op]
        return out

    def ops(self, chunks: Iterable[Chunk]) -> dict[str, Cost]:
        """Return the cost of each operation of one step (summed over the layers)."""
        g = self.gpu
        out: dict[str, Cost] = {}
        for op, (flops, nbytes) in self.counts(chunks).items():
            # the layers' kernels are identical: the sum of their roofline times is the
            # roofline time of their summed FLOPs and bytes
            a = flops / g.flops_per_s  # compute time
            m = nbytes / g.bytes_per_s  # memory time
            t = max(a, m)
            out[op] = Cost(t, g.joules(t, a, m), flops, nbytes)
        return out

    def step(self, chunks: Iterable[Chunk]) -> Cost:
        """Return the cost of one step whose prefill is ``chunks`` (see the class)."""
        return total(self.ops(chunks).values())


# ------------------------------------------------------------------------------ measured


class CostTableError(ReadError):
    """A malformed measured-cost table; ``str()`` is ``file:line: reason`` (a
    :class:`~patton.sim.textfile.ReadError`: ``file``, ``line``, ``reason``)."""


class OutOfTable(ValueError):
    """A step outside the measured table (it is never extrapolated)."""


@dataclass(frozen=True, slots=True)
class Row:
    """One measured step: ``tokens`` new tokens at ``context_tokens`` context took ``ms`` and
    ``joules``. Invariants: counts non-negative integers, ``ms`` and ``joules`` finite and
    non-negative; ``line`` is its 1-based line in the file (0 when not read from one)."""

    tokens: int
    context_tokens: int
    ms: float
    joules: float
    line: int = 0


_COLUMNS = ("tokens", "context_tokens", "ms", "joules")


class MeasuredCost:
    """Measured prefill step costs, interpolated piecewise linearly and never extrapolated.

    A step is looked up by its total new tokens ``N = sum(new)`` and, when the table has a
    ``context_tokens`` column, its token-weighted mean context ``C = sum(new * context) / N``
    (the cached tokens an average new token's attention reads besides its own chunk). Within a
    context level the cost is linear between the two rows around ``N``; between context levels
    it is linear in ``C`` (bilinear on the grid). A table without the column ignores context:
    it states the cost of ``N`` tokens whatever the context (measure it at the context the
    workload has). A batch of many short chunks is priced as one chunk of ``N`` tokens at
    context ``C``: this overstates the causal attention inside the chunks (their
    ``new^2 / 2`` pairs), which is small beside the linear work at the chunk sizes a serving
    engine schedules (about 7 % of Llama-3-8B's FLOPs for 32 chunks of 128 priced as one of
    4,096); measure batches shaped like the workload's if that matters.

    Invariants (checked by :meth:`read` and the constructor): at least one row; the context
    levels form a full grid (every level has the same token counts); rows are sorted by
    context, then tokens, strictly; ``ms`` and ``joules`` never decrease with tokens (within a
    level) or with context (at a token count), so a step that covers another costs no less
    when both have the same mean context.

    Args:
        rows: the measured steps, in the order above.
        source: the file they came from (for messages).
        has_context: the table has a ``context_tokens`` column (else every row's is 0 and
            context is ignored).
        header_line: the header's line (where "no rows" is reported).

    Raises:
        CostTableError: rows breaking an invariant, at the offending row's line.
    """

    def __init__(self, rows: Sequence[Row], source: str = "<table>", *,
                 has_context: bool = True, header_line: int = 1) -> None:
        self.rows = tuple(rows)
        self.source = source
        self.has_context = has_context
        if not self.rows:
            raise CostTableError(source, header_line, "no rows after the header")
        levels: dict[int, list[Row]] = {}
        prev: Row | None = None
        for r in self.rows:
            if prev is not None:
                if r.context_tokens < prev.context_tokens:
                    raise CostTableError(source, r.line, f"context_tokens {r.context_tokens} "
                                         f"after {prev.context_tokens} (line {prev.line}): "
                                         f"rows must be sorted by context_tokens, then tokens")
                if r.context_tokens == prev.context_tokens:
                    if r.tokens == prev.tokens:
                        raise CostTableError(source, r.line, f"duplicate tokens {r.tokens} "
                                             f"(also line {prev.line})")
                    if r.tokens < prev.tokens:
                        raise CostTableError(source, r.line, f"tokens {r.tokens} after "
                                             f"{prev.tokens} (line {prev.line}): rows must be "
                                             f"sorted by increasing tokens")
                    self._no_decrease(r, prev, "tokens")
            levels.setdefault(r.context_tokens, []).append(r)
            prev = r
        self._contexts = sorted(levels)
        self._levels = [levels[c] for c in self._contexts]
        grid = [r.tokens for r in self._levels[0]]
        for level, below in zip(self._levels[1:], self._levels):
            for i, r in enumerate(level):
                if i >= len(grid) or r.tokens != grid[i]:
                    raise CostTableError(source, r.line, f"tokens {r.tokens} at context_tokens "
                                         f"{r.context_tokens}: every context level must list "
                                         f"the same token counts ({_listing(grid)})")
                self._no_decrease(r, below[i], "context_tokens")
            if len(level) < len(grid):
                last = level[-1]
                raise CostTableError(source, last.line, f"context_tokens {last.context_tokens} "
                                     f"lists {len(level)} token counts, not {len(grid)}: every "
                                     f"level must list {_listing(grid)}")
        self._tokens = grid

    def _no_decrease(self, r: Row, prev: Row, along: str) -> None:
        for f in ("ms", "joules"):
            if getattr(r, f) < getattr(prev, f):
                raise CostTableError(self.source, r.line, f"{f} {getattr(r, f)!r} is below "
                                     f"{getattr(prev, f)!r} (line {prev.line}): a measured "
                                     f"cost must not decrease with {along}")

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> MeasuredCost:
        """Read a measured table from a CSV file.

        Format: UTF-8 text; ``#`` starts a comment (to the end of the line); blank lines are
        skipped. The first line with content is the header: comma-separated column names, in
        any order, ``tokens``, ``ms`` and ``joules`` required, ``context_tokens`` optional
        (absent: context is ignored, see the class). Every other line is one measured step with
        one field per column: ``tokens`` and ``context_tokens`` decimal integers (no sign, no
        leading zero), ``ms`` (milliseconds of the step) and ``joules`` (GPU energy of the
        step) non-negative decimal numbers. Example::

            # Llama-3-8B on an A100 80GB PCIe, one request per step (figures illustrative)
            tokens,context_tokens,ms,joules
            512,0,48.1,13.9
            2048,0,181.0,53.2

        Raises:
            CostTableError: ``file:line: reason``: the file cannot be read or is not UTF-8,
                no header, an unknown, duplicate or missing column, a wrong field count, a
                non-numeric, negative or non-finite field, and any invariant of the class.
        """
        source = os.fspath(path)
        table = csv_table(path, CostTableError, "measured cost table", _header,
                          "tokens,ms,joules with an optional context_tokens column")
        header, header_line = table.header, table.header_line
        rows: list[Row] = []
        for no, values in table.rows:
            try:
                rows.append(Row(decimal(values["tokens"], "tokens"),
                                decimal(values.get("context_tokens", "0"), "context_tokens"),
                                _measure(values["ms"], "ms"), _measure(values["joules"],
                                                                       "joules"), no))
            except ValueError as failure:
                raise CostTableError(source, no, str(failure)) from None
        return cls(rows, source, has_context="context_tokens" in header,
                   header_line=header_line)

    def write(self, path: str | os.PathLike[str]) -> None:
        """Write the table in the format :meth:`read` reads (``repr`` floats: exact).

        Raises:
            CostTableError: the file cannot be written.
        """
        cols = ["tokens", "context_tokens", "ms", "joules"] if self.has_context else \
            ["tokens", "ms", "joules"]
        lines = [",".join(cols)]
        for r in self.rows:
            vals = {"tokens": str(r.tokens), "context_tokens": str(r.context_tokens),
                    "ms": repr(r.ms), "joules": repr(r.joules)}
            lines.append(",".join(vals[c] for c in cols))
        write_text(path, "\n".join(lines) + "\n", CostTableError, "measured cost table")

    @classmethod
    def tabulate(cls, model: PrefillCost, tokens: Sequence[int],
                 contexts: Sequence[int] | None = None) -> MeasuredCost:
        """Return the table of ``model``'s single-chunk steps on the grid ``tokens`` x
        ``contexts`` (``None``: a table without context), e.g. to stand in for a measurement."""
        rows = []
        for c in (0,) if contexts is None else contexts:
            for n in tokens:
                cost = model.step([(n, c)])
                rows.append(Row(n, c, cost.seconds * 1e3, cost.joules))
        return cls(rows, f"<tabulated {type(model).__name__}>", has_context=contexts is not None)

    def step(self, chunks: Iterable[Chunk]) -> Cost:
        """Return the interpolated cost of one step (see the class); 0 for no chunks.

        Raises:
            OutOfTable: ``N`` or ``C`` outside the table's range.
        """
        work = _chunks(chunks)
        n = sum(new for new, _ in work)
        if not n:
            return Cost(0.0, 0.0, None, None)
        i, wt = self._bracket(self._tokens, n, "tokens")
        if self.has_context:
            ctx = sum(new * c for new, c in work) / n
            j, wc = self._bracket(self._contexts, ctx, "mean context_tokens")
        else:
            j, wc = 0, 0.0
        ms = joules = 0.0
        for level, w_level in ((j, 1.0 - wc), (j + 1, wc)):
            if not w_level:
                continue
            rows = self._levels[level]
            for k, w in ((i, 1.0 - wt), (i + 1, wt)):
                if w:
                    ms += w_level * w * rows[k].ms
                    joules += w_level * w * rows[k].joules
        return Cost(ms / 1e3, joules, None, None)

    def _bracket(self, grid: Sequence[int], x: float, what: str) -> tuple[int, float]:
        """Return ``(i, w)``: ``x`` is ``grid[i] + w * (grid[i + 1] - grid[i])``, ``0 <= w < 1``."""
        if not grid[0] <= x <= grid[-1]:
            raise OutOfTable(f"{self.source}: {what} {x:g} outside the measured "
                             f"{grid[0]}..{grid[-1]} (a measured table is not extrapolated)")
        i = bisect_right(grid, x) - 1
        if i == len(grid) - 1:
            return i, 0.0
        return i, (x - grid[i]) / (grid[i + 1] - grid[i])


def _listing(grid: Sequence[int]) -> str:
    return ",".join(map(str, grid)) if len(grid) <= 8 else \
        f"{','.join(map(str, grid[:4]))},...,{grid[-1]}"


@dataclass(frozen=True, slots=True)
class CsvTable:
    """A CSV file's header (its line) and rows (each ``(line, {column: field})``)."""

    header: list[str]
    header_line: int
    rows: list[tuple[int, dict[str, str]]]


def csv_table(path: str | os.PathLike[str], error: type[ReadError], what: str,
              check_header: Callable[[list[str], str, int], list[str]],
              expected: str) -> CsvTable:
    """Read a comma-separated table: UTF-8, ``#`` comments, blank lines skipped, the first line
    with content the header (``check_header(fields, source, line)`` returns it or raises
    ``error``), then one row per line with one field per column.

    Raises:
        error: ``file:line: reason``: the file cannot be read or is not UTF-8, no header
            (``expected`` says what it should hold), a wrong field count.
    """
    source = shown(path)
    header: list[str] | None = None
    header_line = last = 1
    rows: list[tuple[int, dict[str, str]]] = []
    for no, raw in enumerate(read_lines(path, error, what), 1):
        last = no
        try:
            text = content(raw).strip()
        except ValueError as failure:
            raise error(source, no, str(failure)) from None
        if not text:
            continue
        fields = [t.strip() for t in text.split(",")]
        if header is None:
            header, header_line = check_header(fields, source, no), no
            continue
        if len(fields) != len(header):
            raise error(source, no, f"{len(fields)} field(s), the header has {len(header)} "
                                    f"({','.join(header)})")
        rows.append((no, dict(zip(header, fields))))
    if header is None:
        raise error(source, last, f"no header line (expected {expected})")
    return CsvTable(header, header_line, rows)


def _header(fields: list[str], source: str, no: int) -> list[str]:
    seen: set[str] = set()
    for name in fields:
        if name not in _COLUMNS:
            raise CostTableError(source, no, f"unknown column {name!r} (columns: "
                                 f"{', '.join(_COLUMNS)}; is the header line missing?)")
        if name in seen:
            raise CostTableError(source, no, f"duplicate column {name!r}")
        seen.add(name)
    missing = [c for c in ("tokens", "ms", "joules") if c not in seen]
    if missing:
        raise CostTableError(source, no, f"missing column(s) {', '.join(missing)}")
    return fields


_MEASURE = re.compile(r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def _measure(token: str, what: str) -> float:
    """Return a non-negative decimal number (``12``, ``3.5``, ``.5``, ``1e-3``; no sign)."""
    if token[:1] == "-" and _MEASURE.fullmatch(token[1:]):
        raise ValueError(f"{what} {token!r} is negative")
    if not _MEASURE.fullmatch(token):
        raise ValueError(f"{what} {token!r} is not a non-negative decimal number")
    v = float(token)
    if not math.isfinite(v):
        raise ValueError(f"{what} {token!r} is too large")
    return v


# ------------------------------------------------------------------------------ the measure


def recompute_cost(gpu_model: PrefillCost, total_chunks: Iterable[Chunk],
                   required_chunks: Iterable[Chunk]) -> Cost:
    """Return the runtime-induced prefill recomputation of one step (the paper's §5.3 method).

    ``total_chunks`` is the step's whole prefill workload (what the GPU reference needs plus the
    recomputation the runtime's KV-cache misses cause), ``required_chunks`` the prefill the
    reference needs alone; the result is ``step(total) - step(required)``, per step (sum it
    over the steps of a run), so that prefill's nonlinearity in tokens is priced in the step
    where it happens. It is exactly 0 when the two are equal (in any order).

    ``total`` should *cover* ``required``: each required chunk matched to its own total chunk
    that starts no later and ends no earlier (``t_ctx <= r_ctx`` and ``t_ctx + t_new >= r_ctx +
    r_new``; a miss turns cached context into new tokens), the other total chunks extra. For
    :class:`AnalyticCost` the result is then never negative: every operation's FLOPs and bytes
    are sums over chunks of terms that do not decrease under covering (new tokens, keys
    ``context + new``, :func:`attention_pairs`, one logit row per chunk) plus constants, and
    ``max`` and ``+`` of non-decreasing terms do not decrease. A measured table guarantees it
    only for steps of equal mean context (misses lower it).

    Raises:
        ValueError: the difference is negative (``total`` does not cover ``required``, or a
            measured table priced the covering step lower), or a bad chunk.
        OutOfTable: a step outside a measured table.
    """
    total = list(total_chunks)
    required = list(required_chunks)
    diff = gpu_model.step(total) - gpu_model.step(required)
    if diff.seconds < 0 or diff.joules < 0:
        raise ValueError(f"negative recomputation ({diff.seconds * 1e3:.6g} ms, "
                         f"{diff.joules:.6g} J): the total prefill {_brief(total)} does not "
                         f"cost more than the required {_brief(required)}; does it cover it?")
    return diff


def _brief(chunks: list[Chunk]) -> str:
    n = sum(c[0] for c in chunks)
    return f"({len(chunks)} chunk(s), {n} new tokens)"


# ------------------------------------------------------------------------------ figures


def _figures() -> str:
    """Return the figures ``docs/gpu-cost.md`` quotes (Llama-3-8B on the A100 80 GB PCIe)."""
    model = AnalyticCost(MODELS["llama3-8b"])
    cases: list[tuple[str, list[Chunk]]] = [
        ("1 x 512 new, 0 context", [(512, 0)]),
        ("1 x 2048 new, 0 context", [(2048, 0)]),
        ("1 x 8192 new, 0 context", [(8192, 0)]),
        ("32 x 128 new, 1024 context", [(128, 1024)] * 32),
    ]
    g = model.gpu
    out = [(f"{model.model.name} on {g.name}: {g.peak_flops / 1e12:g} TFLOP/s x "
            f"{g.compute_eff}, {g.bandwidth / 1e9:g} GB/s x {g.bandwidth_eff}, {g.tdp_w:g} W "
            f"(static {g.static_share}, compute {g.compute_share} of dynamic)"),
           f"{'step':28} {'ms':>9} {'J':>8} {'TFLOP':>8} {'GB':>7} {'tok/s':>8} {'W':>5}"]
    for label, chunks in cases:
        c = model.step(chunks)
        n = sum(x[0] for x in chunks)
        assert c.flops is not None and c.bytes is not None
        out.append(f"{label:28} {c.seconds * 1e3:9.2f} {c.joules:8.2f} {c.flops / 1e12:8.2f} "
                   f"{c.bytes / 1e9:7.2f} {n / c.seconds:8.0f} {c.joules / c.seconds:5.0f}")
    out.append("")
    out.append(f"per operation, 1 x 2048 new ({'ms':>7} {'TFLOP':>7} {'GB':>6} bound)")
    for op, c in model.ops([(2048, 0)]).items():
        assert c.flops is not None and c.bytes is not None
        bound = "compute" if c.flops / g.flops_per_s >= c.bytes / g.bytes_per_s else "memory"
        out.append(f"  {op:12} {c.seconds * 1e3:20.3f} {c.flops / 1e12:7.3f} "
                   f"{c.bytes / 1e9:6.3f} {bound}")
    rec = recompute_cost(model, [(1152, 0)] + [(128, 1024)] * 31, [(128, 1024)] * 32)
    out.append("")
    out.append(f"recompute, 1 of the 32 requests misses its 1024 context: "
               f"{rec.seconds * 1e3:.2f} ms, {rec.joules:.2f} J")
    return "\n".join(out)


if __name__ == "__main__":
    print(_figures())
