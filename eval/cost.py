"""The cost of a serving run: PIM attention on the cycle model plus the GPU recomputation.

:func:`measure` serves a conversation file through the embedded engine (vLLM 0.33's scheduler,
:mod:`.engine`) with a PIM runtime attached (:func:`.runtimes.attach`), as
:class:`~patton.serving.chat.Chat` does, but for cost only. Per scheduler step:

1. ``engine.schedule()``: the block events go to the runtime (metadata only);
2. the step's **KV writes** of one layer: every decode token in one ``append`` call, every
   prefill chunk as ``write_many`` items (the payload is a constant bf16 pattern: timing does
   not depend on data); Key programs are ``k_write``, Value programs and Commit Zone commits
   ``v_write``;
3. **attention** of the step's decode requests in that layer: one batched QK^T and one
   batched SV program, each issued once per query head of a KV head's group (GQA);
4. every program runs on the cycle model (:class:`~patton.sim.cycle_model.CycleModel`, drained,
   behind the exact cost reuse of :class:`~patton.sim.cost_cache.CostCache`), from the device
   state the previous program left, and its cycles and energy go to its part. The cache is
   the process's, one per front end (:func:`costs`), so a later run in the process reuses
   what earlier ones simulated: models of one attention shape serving one workload issue
   the same programs at other rows (Qwen3-8B after Llama-3-8B, Qwen1.5-7B after OPT-6.7B);
5. the step's prefill chunks are priced on the GPU model (:mod:`.gpu_cost`): the whole
   prefill minus the prefill the GPU reference (vLLM's own cache, :func:`reference`) needs,
   per step (the paper's §5.3 method);
6. ``engine.update()``.

**One layer simulated, every layer counted, exactly.** The runtime is laid out for one layer
with the real per-layer row budget ``R`` (layer ``l`` of the model is layer 0 shifted by
``l * R`` rows, and the allocator is shared by all layers). A forward pass runs layer by
layer: layer ``l``'s writes, QK^T and SV start from the state layer ``l - 1`` left, whose open
rows all lie in another layer's band. The cycle model uses rows only through per-bank equality
with the rows a program asks for (:mod:`patton.sim.cost_cache`), so layer ``l`` costs what
layer 0's programs cost from that state with every open row of layer 0's band renamed to one
row outside it (:func:`foreign`). The loop runs layer 0's chain from ``foreign(state)``; when
the chain leaves a state whose ``foreign`` image is the one it started from, every further
layer repeats it exactly and the chain's cost is multiplied by the layers left; otherwise the
chain is run again from the new state (up to ``layers`` times). The query heads of a GQA group
are handled the same way: a QK^T (SV) call that leaves the state it started from is repeated
at the same cost. Both are exact, not estimates (``tests/test_run_cost.py`` compares them with a
2-4-layer runtime driven layer by layer, every query head issued).

``check=True`` verifies every program's schedule (:func:`patton.sim.check.verify_from`) and the
engine/runtime mirror; ``replay=True`` also runs the programs on a
:class:`~patton.sim.executor.FunctionalExecutor` with token-dependent data
(:class:`~patton.serving.chat.TokenKV`) and compares every request's scores and outputs
with the NumPy references, bit for bit (:mod:`.checks` for PATTON,
:mod:`patton.runtime.reference.baselines` for a baseline). The functional model executes a
few thousand instructions a second, so replay suits short runs of small workloads.

``docs/run-cost.md`` describes the figures and what they cost to compute.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from patton.runtime.reference.baselines import sv_exact as baseline_sv
from patton.runtime.models import MODELS, ModelSpec
from patton.runtime.interface import split_readouts
from patton.runtime.patton.lifecycle import Runtime
from patton.sim.check import verify_from
from patton.sim.cost_cache import CostCache
from patton.sim.cycle_model import FRONTENDS, CycleModel, DeviceState
from patton.sim.device import AF_ROW_BASE, DEVICE, params
from patton.sim.energy import COMPONENTS, energy
from patton.sim.executor import FunctionalExecutor, closed
from patton.sim.program import Program
from patton.eval import gpu_cost
from patton.serving import checks, runtimes
from patton.serving.clients import ClientError, Clients
from patton.serving.conversations import Conversation
from patton.serving.engine import EmbeddedEngine, Sequence
from patton.serving.vllm_engine import VllmParams

__all__ = ["PARTS", "PartCost", "Reference", "RunCost", "foreign", "measure", "measure_many",
           "pim_twins", "profile", "reference"]

#: The parts of PIM attention (the paper's Fig. 7): Key writes, Value writes (and Commit Zone
#: commits), QK^T and SV.
PARTS = ("k_write", "v_write", "qk", "sv")

#: Seconds per memory-system cycle.
CYCLE_SECONDS = float(params()["cycle_ns"]) * 1e-9

#: The bf16 word of every Key, Value and query element of a cost-only run (1.0).
PATTERN = 0x3F80

#: The GPU reference's block size (vLLM's default).
REFERENCE_BLOCK_SIZE = 16


# ------------------------------------------------------------------------------ records


@dataclass
class PartCost:
    """One part's cost summed over a run's steps, all layers and all query heads.

    Invariant: ``components_pj`` splits ``energy_pj`` by :data:`~patton.sim.energy.COMPONENTS`
    (activations, reads, writes, MACs, I/O, controller, global buffer, standby): its sum
    equals ``energy_pj`` up to float rounding.
    """

    cycles: int = 0
    energy_pj: float = 0.0
    components_pj: tuple[float, ...] = (0.0,) * len(COMPONENTS)

    @property
    def seconds(self) -> float:
        """The part's device time."""
        return self.cycles * CYCLE_SECONDS

    @property
    def joules(self) -> float:
        """The part's energy."""
        return self.energy_pj * 1e-12

    def as_dict(self) -> dict[str, float | int]:
        """Return the cost as plain JSON data (with seconds and joules)."""
        return {"cycles": self.cycles, "energy_pj": self.energy_pj, "seconds": self.seconds,
                "joules": self.joules,
                "energy_components_joules": {name: float(v) * 1e-12 for name, v in
                                             zip(COMPONENTS, self.components_pj)}}


@dataclass
class RunCost:
    """What a serving run cost (see the module docstring).

    Invariants: ``parts`` has the keys :data:`PARTS`; ``recompute_*`` is the GPU prefill
    caused by the runtime (whole minus required, per step); ``violations == 0`` for a correct
    runtime; ``checked_programs == 0`` unless the run was checked.
    """

    model: str
    runtime: str
    frontend: str
    steps: int  # scheduler steps run
    parts: dict[str, PartCost]  # keys PARTS
    recompute_seconds: float  # GPU prefill recomputation caused by the runtime
    recompute_joules: float
    prefill_tokens: int  # tokens of prefill chunks (recomputation included)
    decode_tokens: int  # decode tokens (requests attended on the PIM)
    recomputed_tokens: int  # prefill tokens the GPU reference did not need (priced above)
    preemptions: int
    hit_rate: float  # cached / prompt tokens of the finished requests (first admission)
    checked_programs: int  # programs verified (check=True), 0 otherwise
    violations: int  # verify violations found (must be 0)
    wall_seconds: float
    mismatches: int = 0  # check=True: attention results differing from the reference
    unreferenced: int = 0  # requests the GPU reference never admitted (nothing required)
    seconds_by_phase: dict[str, float] = field(default_factory=dict)  # wall time split

    @property
    def pim_seconds(self) -> float:
        """Device time of every part (the programs run one after the other)."""
        return sum(p.cycles for p in self.parts.values()) * CYCLE_SECONDS

    @property
    def pim_joules(self) -> float:
        """Device energy of every part."""
        return sum(p.energy_pj for p in self.parts.values()) * 1e-12

    @property
    def latency_seconds(self) -> float:
        """PIM attention time plus the GPU recomputation."""
        return self.pim_seconds + self.recompute_seconds

    @property
    def energy_joules(self) -> float:
        """PIM attention energy plus the GPU recomputation's."""
        return self.pim_joules + self.recompute_joules

    def as_dict(self) -> dict[str, Any]:
        """Return the figures as plain JSON data."""
        out: dict[str, Any] = {
            "model": self.model, "runtime": self.runtime, "frontend": self.frontend,
            "steps": self.steps,
            "parts": {name: self.parts[name].as_dict() for name in PARTS},
            "pim_seconds": self.pim_seconds, "pim_joules": self.pim_joules,
            "recompute_seconds": self.recompute_seconds,
            "recompute_joules": self.recompute_joules,
            "latency_seconds": self.latency_seconds, "energy_joules": self.energy_joules}
        for name in ("prefill_tokens", "decode_tokens", "recomputed_tokens", "preemptions",
                     "hit_rate", "checked_programs", "violations", "mismatches",
                     "unreferenced", "wall_seconds"):
            out[name] = getattr(self, name)
        out["seconds_by_phase"] = dict(self.seconds_by_phase)
        return out


@dataclass(frozen=True)
class Reference:
    """What the GPU reference (vLLM's own cache, the ``gpu`` variant) needs.

    ``required[request id]`` is the prefix hit the request's first admission found there
    (``num_cached_tokens``): the GPU reference prefills the prompt from that position on.
    The other fields are the workload parameters it was run with (:func:`measure` requires
    the same) and the steps it ran (``2 * steps + 64`` at most, so that it admits every
    request a slower run reaches within ``steps``).
    """

    required: dict[str, int]
    model: str
    clients: int
    pool: int
    max_model_len: int
    max_batched_tokens: int
    num_blocks: int | None
    steps: int  # steps asked for
    steps_run: int  # steps the reference ran

    def workload(self) -> tuple:
        """The parameters a run must share with this reference."""
        return (self.model, self.clients, self.pool, self.max_model_len,
                self.max_batched_tokens, self.num_blocks)


def profile(runtime: str) -> runtimes.Profile:
    """Return how ``runtime`` is served (:data:`.runtimes.PROFILES`)."""
    return runtimes.PROFILES[runtime]


# ------------------------------------------------------------------------------ arguments


def _model(model: str | ModelSpec) -> ModelSpec:
    if isinstance(model, ModelSpec):
        return model
    if model not in MODELS:
        raise ValueError(f"unknown model {model!r}; known: {', '.join(MODELS)}")
    return MODELS[model]


def _counts(steps: int, clients: int, pool: int, max_model_len: int,
            max_batched_tokens: int, num_blocks: int | None) -> None:
    for name, v in (("steps", steps), ("clients", clients), ("pool", pool),
                    ("max_model_len", max_model_len),
                    ("max_batched_tokens", max_batched_tokens)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise ValueError(f"{name} must be an int, got {v!r}")  # noqa: TRY004 (API)
        if v < (0 if name == "steps" else 1):
            raise ValueError(f"{name} must be >= {0 if name == 'steps' else 1}, got {v}")
    if pool % clients:
        raise ValueError(f"pool must be a positive multiple of clients ({clients}), got {pool}")
    if max_model_len < 2:
        raise ValueError(f"max_model_len must be >= 2, got {max_model_len}")
    if num_blocks is not None and (isinstance(num_blocks, bool) or not isinstance(num_blocks, int)
                                   or num_blocks < 2):
        raise ValueError(f"num_blocks must be None or an int >= 2, got {num_blocks!r}")


# ------------------------------------------------------------------------------ reference


def reference(conversations: Iterable[Conversation], model: str, *, steps: int, clients: int,
              pool: int, max_model_len: int = 2048, max_batched_tokens: int = 2048,
              num_blocks: int | None = None) -> Reference:
    """Run the workload on the GPU reference (engine only) and record each request's hit.

    It runs ``2 * steps + 64`` steps at most (fewer if every conversation is served), so
    that a PIM run of ``steps`` steps, which is never ahead of it by much, finds every one of
    its requests. ``num_blocks`` sizes the nominal memory as for :func:`measure`.

    Raises:
        ValueError: an unknown model or a bad count.
    """
    spec = _model(model)
    _counts(steps, clients, pool, max_model_len, max_batched_tokens, num_blocks)
    convs = list(conversations)
    cap = runtimes.capacity("gpu", spec, num_blocks=num_blocks,
                            block_size=REFERENCE_BLOCK_SIZE)
    engine = EmbeddedEngine(VllmParams(REFERENCE_BLOCK_SIZE, cap.num_blocks, clients,
                                       max_batched_tokens, max_model_len))
    model_ = Clients(convs, clients=clients, pool=pool, max_model_len=max_model_len)
    required: dict[str, int] = {}
    limit = 2 * steps + 64
    done = 0
    while done < limit:
        for request, _ in model_.send():
            engine.add(request)
        if model_.in_flight == 0:
            break
        batch = engine.schedule()
        if not batch.scheduled:
            raise ClientError(f"reference step {done} scheduled nothing with "
                              f"{model_.in_flight} request(s) in flight")
        for seq, _ in batch.scheduled:
            if seq.request_id not in required:
                required[seq.request_id] = seq.cached_tokens
        out = engine.update(batch)
        model_.finish(f.request_id for f in out.finished)
        done += 1
    return Reference(required, spec.name, clients, pool, max_model_len, max_batched_tokens,
                     num_blocks, steps, done)


# ------------------------------------------------------------------------------ the device


def foreign(state: DeviceState, rows: int) -> DeviceState:
    """Return ``state`` with every open row of the band ``0 .. rows - 1`` renamed to ``rows``.

    That is the state layer 0's programs see when the previous layer's (at ``rows`` rows
    further, or another band) left its rows open: a bank open on a row of another layer's
    band needs the same PRE and ACT whichever row it is (module docstring).
    """
    out = tuple(tuple(rows if 0 <= r < rows else r for r in bank) for bank in state.open_rows)
    if out == state.open_rows:
        return state
    return DeviceState(out, state.reg_mode, state.cfr)


#: Costs kept per cache: more than one 12,000-step run's distinct programs (about 6 a step),
#: so that a run that repeats an earlier one's programs finds them all (a least-recently-used
#: cache smaller than a repeated sequence would drop each cost just before it is wanted).
CACHED_COSTS = 1 << 18

_CACHES: dict[str, CostCache] = {}


def costs(frontend: str) -> CostCache:
    """Return the process's cost cache for ``frontend`` (made on first use).

    Every unchecked run in the process shares it: a cost is keyed on everything that sets it
    (:mod:`patton.sim.cost_cache`), so reuse across runs is as exact as within one.
    """
    if frontend not in _CACHES:
        _CACHES[frontend] = CostCache(CycleModel(DEVICE, drain=True, frontend=frontend,
                                                 memo=True),
                                      capacity=CACHED_COSTS)
    return _CACHES[frontend]


class _Device:
    """The cycle model behind the exact cost reuse; with ``check``, recording and verifying."""

    def __init__(self, frontend: str, check: bool) -> None:
        self.timing: CycleModel | CostCache = CycleModel(
            DEVICE, record=True, drain=True, frontend=frontend) if check else costs(frontend)
        self.check = check
        self.checked = 0
        self.violations = 0
        self.problems: list[str] = []
        self.runs = 0

    def run(self, program: Program, state: DeviceState
            ) -> tuple[int, float, np.ndarray, DeviceState]:
        """Return the program's cycles, energy (pJ), energy by component (pJ, in
        :data:`~patton.sim.energy.COMPONENTS` order) and end state, from ``state``."""
        self.runs += 1
        if isinstance(self.timing, CostCache):  # unchecked: the cost alone
            c = self.timing.cost(program, state)
            return c.cycles, c.energy_pj, np.array(c.components_pj), c.state
        r = self.timing.run(program, state)
        if self.check:
            per: dict[int, list] = {}
            for cmd in r.schedule or ():
                per.setdefault(cmd.channel, []).append(cmd)
            for ch, cmds in per.items():
                found = verify_from(state, ch, cmds, DEVICE)
                self.violations += len(found)
                self.problems.extend(f"channel {ch}: {v}" for v in found[:3])
            self.checked += 1
        e = energy(r.command_counts, r.bank_state_cycles, r.cycles)
        assert r.state is not None
        return (r.cycles, e.total * 1000.0,
                np.fromiter(e.components.values(), float, len(COMPONENTS)) * 1000.0, r.state)


# ------------------------------------------------------------------------------ one step


@dataclass
class _Work:
    """One step's device work, runtime-independent (the engine's decisions)."""

    decode: list[tuple[Sequence, int, int]] = field(default_factory=list)  # seq, rid, block
    pieces: list[tuple[Sequence, int, int, int, int]] = field(default_factory=list)
    # (seq, block, offset, position, tokens) of the prefill chunks, block by block
    chunks: list[tuple[Sequence, int, int]] = field(default_factory=list)  # (seq, new, ctx)
    whole: list[tuple[int, int]] = field(default_factory=list)  # prefill chunks (new, ctx)
    width: int = 0  # the SV buffer width (max decode table length x block size)


def _work(batch: Any, engine: EmbeddedEngine, attached: runtimes.Attached) -> _Work:
    """Split a step's schedule into decode tokens, prefill pieces and GPU chunks."""
    bs = engine.params.block_size
    tables = engine.kv.tables
    w = _Work()
    widest = 0
    for (seq, n), start in zip(batch.scheduled, batch.starts):
        table = tables[seq.request_id]
        prompt = len(seq.tokens) - seq.num_output
        if n == 1 and start >= prompt:
            w.decode.append((seq, attached.ids[seq.request_id], table[start // bs]))
            widest = max(widest, len(table))
            continue
        pos = start
        while pos < start + n:
            end = min(start + n, (pos // bs + 1) * bs)
            w.pieces.append((seq, table[pos // bs], pos % bs, pos, end - pos))
            pos = end
        w.chunks.append((seq, n, start))
        w.whole.append((n, start))
    w.width = widest * bs
    return w


def _required(chunks: list[tuple[Sequence, int, int]], ref: Reference,
              unreferenced: set[str]) -> list[tuple[int, int]]:
    """Of a step's prefill chunks, the parts the GPU reference computes too (``(new, ctx)``):
    the tokens past its prefix hit, on a request's first computation (tokens recomputed after a
    preemption are never required)."""
    out = []
    for seq, n, start in chunks:
        if seq.num_preemptions:
            continue
        hit = ref.required.get(seq.request_id)
        if hit is None:
            unreferenced.add(seq.request_id)
            hit = start
        lo = max(start, hit)
        if start + n > lo:
            out.append((start + n - lo, lo))
    return out


def _split(w: Any) -> list[tuple[str, Program]]:
    """The programs of a write call (``Writes`` or ``WriteProgram``) by part, non-empty."""
    out = []
    for part, prog in (("k_write", w.key), ("v_write", w.value), ("v_write", w.commit)):
        if not isinstance(prog, Program):
            prog = Program.of(list(prog))
        if len(prog):
            out.append((part, closed(prog)))
    return out


@dataclass
class _Line:
    """One front end's share of a run: its device, the state it is in, its sums."""

    frontend: str
    device: _Device
    state: DeviceState
    parts: dict[str, PartCost] = field(default_factory=lambda: {n: PartCost() for n in PARTS})
    seconds: float = 0.0  # wall time of its cycle model


@dataclass
class _Pricing:
    """One model's share of a run: the GPU reference it is measured against, its recompute."""

    spec: ModelSpec
    ref: Reference
    gpu: gpu_cost.AnalyticCost
    recompute: gpu_cost.Cost = gpu_cost.ZERO
    recomputed: int = 0  # prefill tokens its reference did not need
    unreferenced: set[str] = field(default_factory=set)
    seconds: float = 0.0  # wall time of its GPU model


def pim_twins(a: ModelSpec, b: ModelSpec) -> bool:
    """True if ``a`` and ``b`` have one attention shape (layers, KV and query heads, head
    size): a PIM runtime lays them out alike and the engine serves them alike (their KV takes
    the same bytes), so one run gives both every PIM figure; only the GPU's pricing differs
    (OPT-6.7B and Qwen1.5-7B)."""
    return (a.layers, a.kv_heads, a.q_heads, a.d_head) == \
        (b.layers, b.kv_heads, b.q_heads, b.d_head)


class _Meter:
    """One measured run: the engine, the runtime, the device per front end, the sums.

    Several front ends (``lines``) cost the same programs, each from its own device state;
    several models that are :func:`pim_twins` (``pricings``) share the run, each priced on the
    GPU against its own reference.
    """

    def __init__(self, conversations: list[Conversation], specs: list[ModelSpec],
                 runtime: str, *, steps: int, frontends: list[str], clients: int, pool: int,
                 max_model_len: int, max_batched_tokens: int, refs: list[Reference],
                 check: bool, num_blocks: int | None, layers: int | None = None,
                 replay: bool = False) -> None:
        prof = profile(runtime)
        spec = specs[0]
        self.spec = spec
        self.runtime_name = runtime
        self.steps = steps
        self.check = check
        self.attached = runtimes.attach(runtime, spec, num_blocks=num_blocks,
                                        block_size=prof.block_size, fill=False)
        rt = self.attached.runtime
        assert rt is not None
        self.rt = rt
        cap = self.attached.capacity
        self.engine = EmbeddedEngine(
            VllmParams(cap.block_size, cap.num_blocks, clients, max_batched_tokens,
                       max_model_len, enable_prefix_caching=prof.prefix_caching),
            observer=self.attached.observe, placement=self.attached.placement)
        self.clients = Clients(conversations, clients=clients, pool=pool,
                               max_model_len=max_model_len)
        cfg = rt.config
        self.cfg = cfg
        self.layers = spec.layers if layers is None else layers
        self.group = spec.q_heads // spec.kv_heads
        band = getattr(cfg, "rows_per_layer", None)
        if not isinstance(band, int) or band < 1:
            raise ValueError(f"runtime {runtime!r} has no per-layer row band "
                             "(config.rows_per_layer): the layers cannot be counted")
        self.band = band
        self.lines = [_Line(f, _Device(f, check), DeviceState.reset(DEVICE)) for f in frontends]
        self.device = self.lines[0].device  # a checked run has one line
        self.pricings = [_Pricing(s, r, gpu_cost.AnalyticCost(s)) for s, r in zip(specs, refs)]
        self.counts = dict.fromkeys(("prefill", "decode", "preemptions"), 0)
        self.prompts: dict[str, int] = {}
        self.finished_prompt = 0
        self.finished_cached = 0
        self.timers = dict.fromkeys(("engine", "programs", "checks"), 0.0)
        self._arrays: dict[tuple, np.ndarray] = {}
        self.mismatches = 0
        self.patton = isinstance(rt, Runtime)
        self.functional = FunctionalExecutor(DEVICE) if replay else None
        self.data = None
        self.scratch = checks.Report()
        if replay:
            from patton.serving.chat import TokenKV

            self.data = TokenKV(cfg, 0)

    # ------------------------------------------------------------------ data

    def _pattern(self, shape: tuple[int, ...]) -> np.ndarray:
        a = self._arrays.get(shape)
        if a is None:
            a = self._arrays[shape] = np.full(shape, PATTERN, np.uint16)
        return a

    def _kv(self, seq: Sequence, position: int, n: int) -> tuple[np.ndarray, np.ndarray]:
        """``(layers, n, heads, D)`` Keys and Values of ``seq``'s tokens from ``position``."""
        c = self.cfg
        if self.data is None:
            a = self._pattern((c.n_layers, n, c.heads, c.d_head))
            return a, a
        hashes = self.data.hashes(seq.request_id, seq.tokens, position + n)[position:]
        return self.data.kv(hashes)

    # ------------------------------------------------------------------ the loop

    def run(self, on_step: Callable[[int], None] | None) -> dict[tuple[str, str], RunCost]:
        """Serve the workload; return a cost per (model, front end)."""
        started = time.perf_counter()
        index = 0
        t = time.perf_counter
        while index < self.steps:
            t0 = t()
            for request, _ in self.clients.send():
                self.prompts[request.request_id] = len(request.prompt)
                self.engine.add(request)
            if self.clients.in_flight == 0:
                break
            batch = self.engine.schedule()
            if not batch.scheduled:
                raise ClientError(f"step {index} scheduled nothing with "
                                  f"{self.clients.in_flight} request(s) in flight (too few "
                                  "blocks for one request?)")
            self.counts["preemptions"] += len(batch.preempted)
            work = _work(batch, self.engine, self.attached)
            t1 = t()
            self.timers["engine"] += t1 - t0
            self._step(work)
            t2 = t()
            out = self.engine.update(batch)
            for f in out.finished:
                self.finished_prompt += self.prompts.pop(f.request_id)
                self.finished_cached += f.num_cached_tokens
            self.clients.finish(f.request_id for f in out.finished)
            if self.check:
                for problem in runtimes.mirror_errors(self.engine.kv.pool, self.attached):
                    self.device.problems.append(f"step {index}: {problem}")
                    self.mismatches += 1
            self.timers["engine"] += t() - t2
            index += 1
            if on_step is not None:
                on_step(index - 1)
        wall = time.perf_counter() - started
        out = {}
        for line in self.lines:
            for pr in self.pricings:
                phases = {"engine": self.timers["engine"], "programs": self.timers["programs"],
                          "cycle_model": line.seconds, "gpu": pr.seconds,
                          "checks": self.timers["checks"]}
                out[pr.spec.name, line.frontend] = RunCost(
                    model=pr.spec.name, runtime=self.runtime_name, frontend=line.frontend,
                    steps=index, parts=line.parts, recompute_seconds=pr.recompute.seconds,
                    recompute_joules=pr.recompute.joules,
                    prefill_tokens=self.counts["prefill"], decode_tokens=self.counts["decode"],
                    recomputed_tokens=pr.recomputed, preemptions=self.counts["preemptions"],
                    hit_rate=self.finished_cached / self.finished_prompt
                    if self.finished_prompt else 0.0,
                    checked_programs=line.device.checked, violations=line.device.violations,
                    wall_seconds=wall, mismatches=self.mismatches,
                    unreferenced=len(pr.unreferenced),
                    seconds_by_phase={k: round(v, 6) for k, v in phases.items()})
        return out

    def _step(self, work: _Work) -> None:
        t = time.perf_counter
        t0 = t()
        progs = self._programs(work)
        self.timers["programs"] += t() - t0
        if progs:
            for line in self.lines:
                t1 = t()
                self._cost(progs, line)
                line.seconds += t() - t1
        if work.whole:
            whole = sum(n for n, _ in work.whole)
            self.counts["prefill"] += whole
            for pr in self.pricings:
                t2 = t()
                required = _required(work.chunks, pr.ref, pr.unreferenced)
                pr.recomputed += whole - sum(n for n, _ in required)
                pr.recompute = pr.recompute + gpu_cost.recompute_cost(pr.gpu, work.whole,
                                                                      required)
                pr.seconds += t() - t2
        self.counts["decode"] += len(work.decode)

    def _programs(self, work: _Work) -> list[tuple[str, Program, int]]:
        """Write the step's KV and build layer 0's attention: ``(part, program, repeats)``."""
        rt = self.rt
        c = self.cfg
        progs: list[tuple[str, Program, int]] = []
        if work.decode:
            blocks = [b for _, _, b in work.decode]
            if self.data is None:
                kv = self._pattern((len(blocks), c.n_layers, c.heads, c.d_head))
                keys = values = kv
            else:
                pairs = [self._kv(seq, len(seq.tokens) - 1, 1) for seq, _, _ in work.decode]
                keys = np.stack([k[:, 0] for k, _ in pairs])
                values = np.stack([v[:, 0] for _, v in pairs])
            progs += [(p, prog, 1) for p, prog in _split(rt.append(blocks, keys, values))]
        if work.pieces:
            items = []
            for seq, block, offset, position, n in work.pieces:
                k, v = self._kv(seq, position, n)
                items.append((block, offset, k, v))
            write_program = getattr(rt, "write_program", None)
            w = write_program(items) if write_program is not None else \
                rt.write_many(items, emit=True)
            progs += [(p, prog, 1) for p, prog in _split(w)]
        if self.functional is not None:
            for _, prog, _ in progs:
                self.functional.run(prog)
        if work.decode:
            rids = [rid for _, rid, _ in work.decode]
            if self.data is None:
                queries = self._pattern((len(rids), c.heads, c.d_head))
            else:
                queries = np.stack([self.data.query(self.data.hashes(
                    seq.request_id, seq.tokens, len(seq.tokens))[-1])[0]
                    for seq, _, _ in work.decode])
            qk, qk_plans = rt.qk_step(rids, 0, queries)
            qk = closed(qk)
            buf = rt.sv_buffer(rids, 0, work.width)
            if self.functional is not None:
                self._check_qk(work, qk, qk_plans, queries, buf)
            sv, sv_plans = rt.sv_step(rids, 0, buf)
            sv = closed(sv)
            if self.functional is not None:
                self._check_sv(work, sv, sv_plans, buf)
            progs += [("qk", qk, self.group), ("sv", sv, self.group)]
        for part, prog, _ in progs:
            row = prog.row
            if ((row >= self.band) & (row < AF_ROW_BASE)).any():
                raise ValueError(f"runtime {self.runtime_name!r}: a {part} program addresses "
                                 f"row {int(row[row < AF_ROW_BASE].max())}, outside layer 0's "
                                 f"band of {self.band} rows; counting the layers assumes layer "
                                 "l is layer 0 shifted by l bands")
        return progs

    # ------------------------------------------------------------------ cost

    def _chain(self, progs: list[tuple[str, Program, int]], state: DeviceState,
               device: _Device) -> tuple[dict[str, list], DeviceState]:
        """Run one layer's programs from ``state``: cost by part, end state."""
        run = device.run
        costs = {name: [0, 0.0, 0.0] for name in PARTS}
        for part, prog, repeats in progs:
            acc = costs[part]
            done = 0
            while done < repeats:
                cycles, pj, split, end = run(prog, state)
                if end == state:  # a fixpoint: every call left costs the same
                    acc[0] += cycles * (repeats - done)
                    acc[1] += pj * (repeats - done)
                    acc[2] = acc[2] + split * (repeats - done)
                    break
                acc[0] += cycles
                acc[1] += pj
                acc[2] = acc[2] + split
                state = end
                done += 1
        return costs, state

    def _cost(self, progs: list[tuple[str, Program, int]], line: _Line) -> None:
        """Run the step's chain for every layer on ``line`` (exactly: see the module
        docstring)."""
        state = line.state
        done = 0
        while done < self.layers:
            start = foreign(state, self.band)
            costs, end = self._chain(progs, start, line.device)
            same = foreign(end, self.band) == start
            times = self.layers - done if same else 1
            for name, (cycles, pj, split) in costs.items():
                part = line.parts[name]
                part.cycles += cycles * times
                part.energy_pj += pj * times
                part.components_pj = tuple(np.add(part.components_pj, split * times).tolist())
            state = end
            done += times
        line.state = state

    # ------------------------------------------------------------------ checks

    def _check_qk(self, work: _Work, qk: Program, plans: list, queries: np.ndarray,
                  buf: np.ndarray) -> None:
        t0 = time.perf_counter()
        assert self.functional is not None and self.data is not None
        c = self.cfg
        readouts = self.functional.run(qk).readouts
        try:
            per = split_readouts(plans, readouts, c)
        except ValueError as e:
            self.mismatches += 1
            self.device.problems.append(f"QK^T: {e}")
            return
        for i, ((seq, rid, _), plan) in enumerate(zip(work.decode, plans)):
            scores = plan.decode(per[i], c)
            index = self.rt.token_index(rid)
            scores = scores[:, index]
            keys, _ = self._kv(seq, 0, len(seq.tokens))
            bad = checks.check_scores(keys[0], queries[i], scores, self.scratch)
            if bad:
                self.mismatches += bad
                self.device.problems.append(f"{seq.request_id}: {bad} QK^T score(s) differ")
            buf[i][:, index] = checks.softmax(scores, c.d_head)
        self.timers["checks"] += time.perf_counter() - t0

    def _check_sv(self, work: _Work, sv: Program, plans: list, buf: np.ndarray) -> None:
        t0 = time.perf_counter()
        assert self.functional is not None
        c = self.cfg
        readouts = self.functional.run(sv).readouts
        try:
            per = split_readouts(plans, readouts, c)
        except ValueError as e:
            self.mismatches += 1
            self.device.problems.append(f"SV: {e}")
            return
        for i, ((seq, rid, _), plan) in enumerate(zip(work.decode, plans)):
            outs = plan.decode(per[i], c)
            index = self.rt.token_index(rid)
            _, values = self._kv(seq, 0, len(seq.tokens))
            blocks = len(self.rt.table(rid))
            if self.patton:
                bad = checks.check_outputs(values[0], buf[i][:, index], outs, plan, index,
                                           blocks, c.block_size, self.scratch)
            else:  # a baseline's plan: its own reduction order
                bad = 0
                for h in range(c.heads):
                    table = np.zeros((blocks * c.block_size, c.d_head), np.uint16)
                    table[index] = values[0][:, h]
                    bad += int((outs[h] != baseline_sv(plan, h, table, buf[i][h])).sum())
            if bad:
                self.mismatches += bad
                self.device.problems.append(f"{seq.request_id}: {bad} SV output(s) differ")
        self.timers["checks"] += time.perf_counter() - t0


# ------------------------------------------------------------------------------ measure


def _prepare(conversations: Iterable[Conversation], model: str | ModelSpec | list[Any],
             runtime: str, *, steps: int, frontend: str | list[str], clients: int, pool: int,
             max_model_len: int, max_batched_tokens: int,
             ref: Reference | list[Reference] | None, check: bool, num_blocks: int | None,
             layers: int | None = None, replay: bool = False) -> _Meter:
    """The meter of a run: one or several models (PIM twins), one or several front ends."""
    specs = [_model(m) for m in ([model] if isinstance(model, (str, ModelSpec)) else model)]
    frontends = [frontend] if isinstance(frontend, str) else list(frontend)
    _counts(steps, clients, pool, max_model_len, max_batched_tokens, num_blocks)
    if runtime == "gpu":
        raise ValueError("runtime 'gpu' is vLLM's own KV cache: it has no PIM programs to "
                         "cost (it is the reference: use reference())")
    if runtime not in runtimes.VARIANTS:
        raise ValueError(f"unknown runtime {runtime!r}; known: {', '.join(runtimes.VARIANTS)}")
    if not specs or not frontends:
        raise ValueError("a run needs at least one model and one front end")
    for f in frontends:
        if f not in FRONTENDS:
            raise ValueError(f"unknown front end {f!r}; known: {', '.join(FRONTENDS)}")
    if len(set(frontends)) != len(frontends) or len({s.name for s in specs}) != len(specs):
        raise ValueError("a model or front end named twice in one run")
    for s in specs[1:]:
        if not pim_twins(specs[0], s):
            raise ValueError(f"{s.name} and {specs[0].name} have different attention shapes: "
                             "one run serves only models that are PIM twins")
    if (check or replay) and len(specs) * len(frontends) > 1:
        raise ValueError("a checked run costs one model on one front end")
    spec = specs[0]
    limit = runtimes.max_context(runtime, spec)
    if limit is not None and max_model_len > limit:
        raise ValueError(f"runtime {runtime!r} holds at most {limit} tokens of {spec.name} "
                         f"context; max_model_len is {max_model_len}")
    convs = list(conversations)
    given = [ref] if isinstance(ref, Reference) else list(ref) if ref is not None else None
    if given is not None and len(given) != len(specs):
        raise ValueError(f"{len(given)} references for {len(specs)} models")
    refs = []
    for k, s in enumerate(specs):
        if given is None:
            refs.append(reference(convs, s, steps=steps, clients=clients, pool=pool,
                                  max_model_len=max_model_len,
                                  max_batched_tokens=max_batched_tokens, num_blocks=num_blocks))
            continue
        want = (s.name, clients, pool, max_model_len, max_batched_tokens, num_blocks)
        if given[k].workload() != want:
            raise ValueError(f"the reference was run with (model, clients, pool, "
                             f"max_model_len, max_batched_tokens, num_blocks) = "
                             f"{given[k].workload()}, this run is {want}")
        refs.append(given[k])
    return _Meter(convs, specs, runtime, steps=steps, frontends=frontends, clients=clients,
                  pool=pool, max_model_len=max_model_len,
                  max_batched_tokens=max_batched_tokens, refs=refs, check=check or replay,
                  num_blocks=num_blocks, layers=layers, replay=replay)


def measure(conversations: Iterable[Conversation], model: str, runtime: str, *, steps: int,
            frontend: str = "shared", clients: int, pool: int, max_model_len: int = 2048,
            max_batched_tokens: int = 2048, reference: Reference | None = None,
            check: bool = False, on_step: Callable[[int], None] | None = None,
            num_blocks: int | None = None, replay: bool = False) -> RunCost:
    """Serve ``conversations`` for ``steps`` steps with ``runtime`` attached; return the cost.

    ``model`` is a preset of :data:`patton.runtime.patton.config.MODELS`, ``runtime`` a PIM variant of
    :data:`.runtimes.VARIANTS` (served as :func:`profile` says: block size, prefix caching,
    context limit). The engine has ``clients`` sequences, ``max_batched_tokens`` tokens per
    step and the runtime's capacity (the 16 GiB device, or ``num_blocks`` blocks of KV memory).
    ``reference`` is the GPU reference of the same workload (computed when None).
    ``on_step(i)`` is called after step ``i``. ``check`` verifies every program and the
    engine/runtime mirror; ``replay`` (which implies it) also runs them on the functional
    model and compares attention bit for bit (slow: short runs only).

    Raises:
        ValueError: an unknown model, runtime or front end, the ``gpu`` variant (no PIM), a
            bad count, a context longer than the runtime supports, or a reference of
            another workload.
        ClientError: a step scheduled nothing (too few blocks for one request).
    """
    spec = _model(model)
    (cost,) = measure_many(conversations, [spec], runtime, steps=steps, frontends=[frontend],
                           clients=clients, pool=pool, max_model_len=max_model_len,
                           max_batched_tokens=max_batched_tokens,
                           references=None if reference is None else [reference],
                           check=check, on_step=on_step, num_blocks=num_blocks,
                           replay=replay).values()
    return cost


def measure_many(conversations: Iterable[Conversation], models: Iterable[str | ModelSpec],
                 runtime: str, *, steps: int, frontends: Iterable[str], clients: int,
                 pool: int, max_model_len: int = 2048, max_batched_tokens: int = 2048,
                 references: Iterable[Reference] | None = None, check: bool = False,
                 on_step: Callable[[int], None] | None = None, num_blocks: int | None = None,
                 replay: bool = False) -> dict[tuple[str, str], RunCost]:
    """:func:`measure` for every model of ``models`` on every front end of ``frontends`` in
    one run; return the costs keyed ``(model name, front end)``.

    The engine and the runtime run once: the front ends cost the same programs, each from its
    own device state, and the models must be :func:`pim_twins` (the same PIM layout and
    engine), each priced on the GPU against its own reference (``references``, in the order
    of ``models``; computed when None). Every cost equals what :func:`measure` gives for its
    model and front end alone (``tests/test_run_cost.py``). A checked run is one model on one
    front end.

    Raises:
        ValueError: as :func:`measure`, models of different attention shapes, a model or
            front end named twice, or a checked run of several.
        ClientError: a step scheduled nothing.
    """
    meter = _prepare(conversations, list(models), runtime, steps=steps,
                     frontend=list(frontends), clients=clients, pool=pool,
                     max_model_len=max_model_len, max_batched_tokens=max_batched_tokens,
                     ref=None if references is None else list(references), check=check,
                     num_blocks=num_blocks, replay=replay)
    return meter.run(on_step)


# ------------------------------------------------------------------------------ entry point


def _main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m patton.eval.cost",
                                description="The cost of a serving run (docs/run-cost.md).")
    p.add_argument("--model", default="llama3-8b", choices=list(MODELS))
    p.add_argument("--runtime", default="patton")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--clients", type=int, default=32)
    p.add_argument("--pool", type=int, default=64)
    p.add_argument("--conversations", default=None,
                   help="a conversation file (default: the first 300 ShareGPT conversations)")
    p.add_argument("--frontend", default="shared", choices=list(FRONTENDS))
    p.add_argument("--max-model-len", type=int, default=2048)
    p.add_argument("--max-batched-tokens", type=int, default=2048)
    p.add_argument("--num-blocks", type=int, default=None)
    p.add_argument("--check", action="store_true", help="verify every program")
    p.add_argument("--replay", action="store_true",
                   help="also replay on the functional model, attention bit-exact (slow)")
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    from patton.serving import conversations as cv

    t0 = time.perf_counter()
    convs = cv.read(a.conversations) if a.conversations else cv.from_sharegpt(count=300)
    t1 = time.perf_counter()
    try:
        ref = reference(convs, a.model, steps=a.steps, clients=a.clients, pool=a.pool,
                        max_model_len=a.max_model_len,
                        max_batched_tokens=a.max_batched_tokens, num_blocks=a.num_blocks)
        t2 = time.perf_counter()
        rc = measure(convs, a.model, a.runtime, steps=a.steps, frontend=a.frontend,
                     clients=a.clients, pool=a.pool, max_model_len=a.max_model_len,
                     max_batched_tokens=a.max_batched_tokens, reference=ref, check=a.check,
                     num_blocks=a.num_blocks, replay=a.replay)
    except (ValueError, ClientError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if a.json:
        import json

        print(json.dumps(rc.as_dict(), indent=1))
        return 0
    print(f"{rc.model} {rc.runtime} ({rc.frontend} front end): {rc.steps} steps, "
          f"{rc.decode_tokens} decode tokens, {rc.prefill_tokens} prefill tokens "
          f"({rc.recomputed_tokens} recomputed), {rc.preemptions} preemptions, "
          f"hit rate {rc.hit_rate:.4f}")
    for name in PARTS:
        part = rc.parts[name]
        print(f"  {name:8s} {part.cycles:>14d} cycles  {part.seconds * 1e3:10.3f} ms  "
              f"{part.joules * 1e3:10.3f} mJ")
    print(f"  PIM      {rc.pim_seconds * 1e3:10.3f} ms  {rc.pim_joules * 1e3:10.3f} mJ; GPU "
          f"recompute {rc.recompute_seconds * 1e3:.3f} ms  {rc.recompute_joules * 1e3:.3f} mJ")
    print(f"  total    {rc.latency_seconds * 1e3:10.3f} ms  {rc.energy_joules * 1e3:10.3f} mJ")
    if a.check or a.replay:
        print(f"  checked {rc.checked_programs} programs: {rc.violations} violations, "
              f"{rc.mismatches} mismatches")
    phases = ", ".join(f"{k} {v:.2f} s" for k, v in rc.seconds_by_phase.items())
    print(f"wall: conversations {t1 - t0:.2f} s, reference {t2 - t1:.2f} s, measure "
          f"{rc.wall_seconds:.2f} s = {rc.wall_seconds / max(rc.steps, 1) * 1e3:.1f} ms/step "
          f"({phases})")
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
