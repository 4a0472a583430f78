"""The cost of a serving run: PIM attention on the cycle model plus the GPU recomputation.

:func:`measure` serves a conversation file through the step driver
(:class:`~patton.serving.driver.Driver`: the embedded engine, vLLM 0.33's scheduler, with a
PIM runtime attached), whose forward pass builds every step's programs for one layer
(:data:`~patton.serving.forward.PARTS` batching: the decode tokens in one ``append`` call, the
prefill chunks in one write call, a constant bf16 payload, :class:`~patton.serving.kv_data.
Pattern`: timing does not depend on data; then one batched QK^T and one batched SV program of
the decode requests). :class:`Costing` observes the driver and prices each step:

1. every program runs on the cycle model (:class:`~patton.sim.cycle_model.CycleModel`, drained,
   behind the exact cost reuse of :class:`~patton.sim.cost_cache.CostCache`), from the device
   state the previous program left, and its cycles and energy go to its part: Key programs
   are ``k_write``, Value programs and Commit Zone commits ``v_write``, then ``qk`` and
   ``sv``, each issued once per query head of a KV head's group (GQA). The cache is the
   process's, one per front end (:func:`costs`), so a later run in the process reuses what
   earlier ones simulated: models of one attention shape serving one workload issue the same
   programs at other rows (Qwen3-8B after Llama-3-8B, Qwen1.5-7B after OPT-6.7B);
2. the step's prefill chunks are priced on the GPU model (:mod:`.gpu_cost`): the whole
   prefill minus the prefill the GPU reference (vLLM's own cache, :func:`reference`) needs,
   per step (the paper's §5.3 method).

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

``check=True`` verifies every program's schedule (:func:`patton.sim.check.verify_program`) and
the engine/runtime mirror; ``replay=True`` also runs the programs on a
:class:`~patton.sim.executor.FunctionalExecutor` with token-dependent data
(:class:`~patton.serving.kv_data.TokenKV`) and compares every request's scores and outputs with
the NumPy references, bit for bit (:class:`~patton.serving.checks.Checks`). The functional model
executes a few thousand instructions a second, so replay suits short runs of small workloads.

``docs/run-cost.md`` describes the figures and what they cost to compute.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
from patton.eval import gpu_cost
from patton.eval.gpu_calibration import GPU_MODELS, gpu_model
from patton.runtime.models import MODELS, ModelSpec
from patton.serving import capacity as capacity_module
from patton.serving.adapter import attach
from patton.serving.capacity import RUNTIMES, Requirements, capacity, max_context
from patton.serving.checks import Checks
from patton.serving.conversations import Conversation
from patton.serving.driver import Driver
from patton.serving.engine import EmbeddedEngine
from patton.serving.forward import PARTS as BATCHING
from patton.serving.interface import EngineParams, Request, StepOutput
from patton.serving.kv_data import Pattern, TokenKV
from patton.serving.work import Entry, StepWork
from patton.sim.check import verify_program
from patton.sim.cost_cache import CostCache
from patton.sim.cycle_model import FRONTENDS, CycleModel, DeviceState
from patton.sim.device import AF_ROW_BASE, DEVICE, params
from patton.sim.energy import COMPONENTS, STANDBY, energy, standby_scale
from patton.sim.executor import FunctionalExecutor
from patton.sim.extensions import DEFAULT_EXT, EXTENSIONS, ext_field
from patton.sim.program import Program
from patton.sim.timing import DEFAULT_PROFILE, PROFILES, timing_table

__all__ = ["PARTS", "CostKey", "Costing", "PartCost", "Reference", "RunCost", "foreign",
           "measure", "measure_many", "pim_twins", "requirements", "reference"]

#: The parts of PIM attention (the paper's Fig. 7): Key writes, Value writes (and Commit Zone
#: commits), QK^T and SV.
PARTS = ("k_write", "v_write", "qk", "sv")

#: Seconds per memory-system cycle.
CYCLE_SECONDS = float(params()["cycle_ns"]) * 1e-9

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

    def counted(self, standby: str) -> PartCost:
        """The cost with standby energy counted as ``standby`` accounting does (the cost
        holds ``per_channel``'s: :func:`~patton.sim.energy.standby_scale`)."""
        scale = standby_scale(standby, DEVICE.channels)
        if scale == 1.0:
            return self
        k = COMPONENTS.index("standby")
        was = self.components_pj[k]
        split = list(self.components_pj)
        split[k] = was * scale
        return PartCost(self.cycles, self.energy_pj - was + split[k], tuple(split))

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
    timing: str = DEFAULT_PROFILE  # the cycle model's timing profile
    gpu: str = "analytic"  # the GPU prefill model (gpu_calibration.GPU_MODELS)
    standby: str = "per_channel"  # how standby energy is counted (sim.energy.STANDBY)
    device_ext: str = DEFAULT_EXT  # the device's extension set (sim.extensions)

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
            "timing": self.timing, **ext_field(self.device_ext), "gpu": self.gpu,
            "standby": self.standby, "steps": self.steps,
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


def requirements(runtime: str) -> Requirements:
    """Return how ``runtime`` is served (:data:`~patton.serving.capacity.REQUIREMENTS`)."""
    return capacity_module.REQUIREMENTS[runtime]


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


class _Required:
    """The GPU reference's observer: each request's prefix hit at its first scheduling."""

    def __init__(self) -> None:
        self.required: dict[str, int] = {}

    def scheduled(self, work: StepWork) -> None:
        for e in work.entries:
            if e.seq.request_id not in self.required:
                self.required[e.seq.request_id] = e.seq.cached_tokens


def reference(conversations: Iterable[Conversation], model: str | ModelSpec, *, steps: int,
              clients: int, pool: int, max_model_len: int = 2048,
              max_batched_tokens: int = 2048, num_blocks: int | None = None) -> Reference:
    """Run the workload on the GPU reference (engine only) and record each request's hit.

    It runs ``2 * steps + 64`` steps at most (fewer if every conversation is served), so
    that a PIM run of ``steps`` steps, which is never ahead of it by much, finds every one of
    its requests. ``num_blocks`` sizes the nominal memory as for :func:`measure`.

    Raises:
        ValueError: an unknown model or a bad count.
    """
    spec = _model(model)
    _counts(steps, clients, pool, max_model_len, max_batched_tokens, num_blocks)
    cap = capacity("gpu", spec, num_blocks=num_blocks, block_size=REFERENCE_BLOCK_SIZE)
    observer = _Required()
    driver = Driver(EmbeddedEngine, EngineParams(REFERENCE_BLOCK_SIZE, cap.num_blocks, clients,
                                                 max_batched_tokens, max_model_len),
                    conversations, clients=clients, pool=pool, observers=[observer],
                    max_steps=2 * steps + 64)
    driver.run()
    return Reference(observer.required, spec.name, clients, pool, max_model_len,
                     max_batched_tokens, num_blocks, steps, driver.steps)


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

_CACHES: dict[tuple[str, str, str], CostCache] = {}


def costs(frontend: str, timing: str = DEFAULT_PROFILE, ext: str = DEFAULT_EXT) -> CostCache:
    """Return the process's cost cache for ``frontend`` and ``timing`` on extension set
    ``ext`` (made on first use).

    Every unchecked run in the process shares it: a cost is keyed on everything that sets it
    (:mod:`patton.sim.cost_cache`), so reuse across runs is as exact as within one.
    """
    if (frontend, timing, ext) not in _CACHES:
        _CACHES[frontend, timing, ext] = CostCache(
            CycleModel(DEVICE, timing_table(timing, ext), drain=True, frontend=frontend,
                       memo=True),
            capacity=CACHED_COSTS)
    return _CACHES[frontend, timing, ext]


class _Device:
    """The cycle model behind the exact cost reuse; with ``check``, recording and verifying."""

    def __init__(self, frontend: str, timing: str, check: bool, ext: str = DEFAULT_EXT
                 ) -> None:
        self.profile = timing_table(timing, ext)
        self.timing: CycleModel | CostCache = CycleModel(
            DEVICE, self.profile, record=True, drain=True, frontend=frontend) if check \
            else costs(frontend, timing, ext)
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
            for ch, found in verify_program(state, r.schedule or (), DEVICE,
                                            self.profile).items():
                self.violations += len(found)
                self.problems.extend(f"channel {ch}: {v}" for v in found[:3])
            self.checked += 1
        e = energy(r.command_counts, r.bank_state_cycles, r.cycles)
        assert r.state is not None
        return (r.cycles, e.total * 1000.0,
                np.fromiter(e.components.values(), float, len(COMPONENTS)) * 1000.0, r.state)


def _required(chunks: list[Entry], ref: Reference, unreferenced: set[str]
              ) -> list[tuple[int, int]]:
    """Of a step's prefill chunks, the parts the GPU reference computes too (``(new, ctx)``):
    the tokens past its prefix hit, on a request's first computation (tokens recomputed after a
    preemption are never required)."""
    out = []
    for e in chunks:
        seq, n, start = e.seq, e.tokens, e.start
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


#: The part of Fig. 7 each phase of the forward pass's programs counts in.
PART_OF = {"k_write": "k_write", "v_write": "v_write", "commits": "v_write", "qk": "qk",
           "sv": "sv"}


@dataclass
class _Line:
    """One front end and timing profile's share of a run: its device, the state it is in,
    its sums."""

    frontend: str
    timing: str
    device: _Device
    state: DeviceState
    parts: dict[str, PartCost] = field(default_factory=lambda: {n: PartCost() for n in PARTS})
    seconds: float = 0.0  # wall time of its cycle model


@dataclass
class _Pricing:
    """One model's share of a run under one GPU model: the GPU reference it is measured
    against, its recompute."""

    spec: ModelSpec
    ref: Reference
    name: str  # the GPU model's name (gpu_calibration.GPU_MODELS)
    gpu: gpu_cost.PrefillCost
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


class CostKey(NamedTuple):
    """Which view of a run a :class:`RunCost` is: the model priced, the cycle model's front end
    and timing profile, the GPU model, the standby accounting."""

    model: str
    frontend: str
    timing: str = DEFAULT_PROFILE
    gpu: str = "analytic"
    standby: str = "per_channel"


class Costing:
    """Prices every step of a run (see the module docstring); an observer of the driver.

    Several front ends and timing profiles (``lines``) cost the same programs, each from its
    own device state; several models that are :func:`pim_twins` (``pricings``) share the run,
    each priced on the GPU (under every GPU model asked for) against its own reference.

    Args:
        runtime: the runtime's name (errors name it).
        config: the runtime's geometry (its per-layer row band).
        specs: the models priced (PIM twins).
        refs: their GPU references, in order.
        frontends: the cycle model's front ends.
        timings: its timing profiles (every front end under each).
        gpus: the GPU prefill models (:data:`~patton.eval.gpu_calibration.GPU_MODELS`).
        device_ext: the device's extension set (every line's).
        check: verify every program (and the engine/runtime mirror, by the run's checks).
        layers: layers counted (None: the model's).
        on_step: called with each step's index after it.
    """

    def __init__(self, runtime: str, config: Any, specs: list[ModelSpec],
                 refs: list[Reference], frontends: list[str], *, check: bool,
                 timings: tuple[str, ...] = (DEFAULT_PROFILE,),
                 gpus: tuple[str, ...] = ("analytic",), layers: int | None = None,
                 on_step: Callable[[int], None] | None = None,
                 device_ext: str = DEFAULT_EXT) -> None:
        spec = specs[0]
        self.device_ext = device_ext
        self.runtime_name = runtime
        self.layers = spec.layers if layers is None else layers
        self.group = spec.q_heads // spec.kv_heads
        band = config.rows_per_layer
        if not isinstance(band, int) or band < 1:
            raise ValueError(f"runtime {runtime!r} has no per-layer row band "
                             "(config.rows_per_layer): the layers cannot be counted")
        self.band = band
        self.lines = [_Line(f, t, _Device(f, t, check, device_ext), DeviceState.reset(DEVICE))
                      for t in timings for f in frontends]
        self.device = self.lines[0].device  # a checked run has one line
        self.pricings = [_Pricing(s, r, g, gpu_model(g, s)) for s, r in zip(specs, refs)
                         for g in gpus]
        self.counts = dict.fromkeys(("prefill", "decode", "preemptions"), 0)
        self.prompts: dict[str, int] = {}
        self.finished_prompt = 0
        self.finished_cached = 0
        self.on_step = on_step
        self.started = time.perf_counter()
        # wall time: the engine's scheduling (and the clients), then the rest of each step (the
        # forward pass building the programs, the run's checks, the engine's update)
        self.timers = dict.fromkeys(("engine", "programs"), 0.0)
        self._mark = self.started
        self._progs: list[tuple[str, Program, int]] = []

    # ------------------------------------------------------------------ hooks

    def sent(self, request: Request, history: int) -> None:
        """Remember the request's prompt (the hit rate is over finished requests)."""
        self.prompts[request.request_id] = len(request.prompt)

    def scheduled(self, work: StepWork) -> None:
        """Begin the step: its preemptions, an empty chain."""
        now = time.perf_counter()
        self.timers["engine"] += now - self._mark
        self._mark = now
        self.counts["preemptions"] += len(work.schedule.preempted)
        self._progs = []

    def ran(self, work: StepWork, phase: str, prog: Program, result: object) -> None:
        """Add a program of layer 0 to the step's chain (QK^T and SV once per query head)."""
        part = PART_OF[phase]
        row = prog.row
        if ((row >= self.band) & (row < AF_ROW_BASE)).any():
            raise ValueError(f"runtime {self.runtime_name!r}: a {part} program addresses row "
                             f"{int(row[row < AF_ROW_BASE].max())}, outside layer 0's band of "
                             f"{self.band} rows; counting the layers assumes layer l is layer "
                             "0 shifted by l bands")
        self._progs.append((part, prog, self.group if part in ("qk", "sv") else 1))

    def stepped(self, work: StepWork | None, out: StepOutput) -> None:
        """Price the step: its chain on every front end, its prefill on the GPU."""
        assert work is not None
        t = time.perf_counter
        t0 = t()
        self.timers["programs"] += t0 - self._mark
        if self._progs:
            for line in self.lines:
                t1 = t()
                self._cost(self._progs, line)
                line.seconds += t() - t1
        if work.prefill:
            whole = [(e.tokens, e.start) for e in work.prefill]
            total = sum(n for n, _ in whole)
            self.counts["prefill"] += total
            for pr in self.pricings:
                t2 = t()
                required = _required(work.prefill, pr.ref, pr.unreferenced)
                pr.recomputed += total - sum(n for n, _ in required)
                pr.recompute = pr.recompute + gpu_cost.recompute_cost(pr.gpu, whole, required)
                pr.seconds += t() - t2
        self.counts["decode"] += len(work.decode)
        for f in out.finished:
            self.finished_prompt += self.prompts.pop(f.request_id)
            self.finished_cached += f.num_cached_tokens
        self._mark = t()
        if self.on_step is not None:
            self.on_step(work.index)

    # ------------------------------------------------------------------ the cost

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

    # ------------------------------------------------------------------ the figures

    def costs(self, steps: int, checks: Checks | None,
              standbys: tuple[str, ...] = ("per_channel",)) -> dict[CostKey, RunCost]:
        """Return a cost per view (:class:`CostKey`) of a run of ``steps`` steps."""
        wall = time.perf_counter() - self.started
        mismatches = checks.total.mismatches if checks is not None else 0
        out = {}
        for line, pr, standby in itertools.product(self.lines, self.pricings, standbys):
            phases = {"engine": self.timers["engine"], "programs": self.timers["programs"],
                      "cycle_model": line.seconds, "gpu": pr.seconds}
            key = CostKey(pr.spec.name, line.frontend, line.timing, pr.name, standby)
            out[key] = RunCost(
                model=pr.spec.name, runtime=self.runtime_name, frontend=line.frontend,
                steps=steps, parts={n: c.counted(standby) for n, c in line.parts.items()},
                recompute_seconds=pr.recompute.seconds,
                recompute_joules=pr.recompute.joules,
                prefill_tokens=self.counts["prefill"], decode_tokens=self.counts["decode"],
                recomputed_tokens=pr.recomputed, preemptions=self.counts["preemptions"],
                hit_rate=self.finished_cached / self.finished_prompt
                if self.finished_prompt else 0.0,
                checked_programs=line.device.checked, violations=line.device.violations,
                wall_seconds=wall, mismatches=mismatches,
                unreferenced=len(pr.unreferenced),
                seconds_by_phase={k: round(v, 6) for k, v in phases.items()},
                timing=line.timing, gpu=pr.name, standby=standby, device_ext=self.device_ext)
        return out


# ------------------------------------------------------------------------------ measure


def _views(name: str, given: str | Iterable[str], known: Iterable[str]) -> tuple[str, ...]:
    """``given`` (one or several) as a tuple, each one of ``known``, none twice."""
    out = (given,) if isinstance(given, str) else tuple(given)
    known = tuple(known)
    for v in out:
        if v not in known:
            raise ValueError(f"unknown {name} {v!r}; known: {', '.join(known)}")
    if not out or len(set(out)) != len(out):
        raise ValueError(f"a run needs its {name}s once each, got {out}")
    return out


def _run(conversations: Iterable[Conversation], model: str | ModelSpec | list[Any],
         runtime: str, *, steps: int, frontend: str | list[str], clients: int, pool: int,
         max_model_len: int, max_batched_tokens: int,
         ref: Reference | list[Reference] | None, check: bool, num_blocks: int | None,
         layers: int | None = None, replay: bool = False,
         on_step: Callable[[int], None] | None = None,
         observers: Iterable[object] = (), timing: str | Iterable[str] = DEFAULT_PROFILE,
         gpu: str | Iterable[str] = "analytic", standby: str | Iterable[str] = "per_channel",
         token_op: str | None = None, device_ext: str = DEFAULT_EXT) -> dict[CostKey, RunCost]:
    """A measured run: one or several models (PIM twins), front ends, timing profiles, GPU
    models and standby accountings, on one device (extension set ``device_ext``)."""
    specs = [_model(m) for m in ([model] if isinstance(model, (str, ModelSpec)) else model)]
    frontends = [frontend] if isinstance(frontend, str) else list(frontend)
    timings = _views("timing profile", timing, PROFILES)
    gpus = _views("GPU model", gpu, GPU_MODELS)
    standbys = _views("standby accounting", standby, STANDBY)
    _views("device extension set", device_ext, EXTENSIONS)
    _counts(steps, clients, pool, max_model_len, max_batched_tokens, num_blocks)
    if runtime == "gpu":
        raise ValueError("runtime 'gpu' is vLLM's own KV cache: it has no PIM programs to "
                         "cost (it is the reference: use reference())")
    if runtime not in RUNTIMES:
        raise ValueError(f"unknown runtime {runtime!r}; known: {', '.join(RUNTIMES)}")
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
    check = check or replay
    if check and len(specs) * len(frontends) * len(timings) > 1:
        raise ValueError("a checked run costs one model on one front end and timing profile")
    spec = specs[0]
    limit = max_context(runtime, spec)
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
    needs = requirements(runtime)
    attached = attach(runtime, spec, num_blocks=num_blocks, block_size=needs.block_size,
                      fill=False, token_op=token_op, device_ext=device_ext)
    rt = attached.runtime
    assert rt is not None
    cap = attached.capacity
    params = EngineParams(cap.block_size, cap.num_blocks, clients, max_batched_tokens,
                          max_model_len, enable_prefix_caching=needs.prefix_caching)
    costing = Costing(runtime, rt.config, specs, refs, frontends, check=check, timings=timings,
                      gpus=gpus, layers=layers, on_step=on_step, device_ext=device_ext)
    data: Pattern | TokenKV = TokenKV(rt.config, 0) if replay else Pattern(rt.config)
    executor = FunctionalExecutor(DEVICE) if replay else None
    checks = Checks(attached, data, executor, placements=False) if check else None
    driver = Driver(EmbeddedEngine, params, convs, clients=clients, pool=pool,
                    attached=attached,
                    observers=[*([checks] if checks is not None else []), costing, *observers],
                    data=data, executor=executor, batching=BATCHING, max_steps=steps)
    driver.run()
    return costing.costs(driver.steps, checks, standbys)


def measure(conversations: Iterable[Conversation], model: str | ModelSpec, runtime: str, *,
            steps: int, frontend: str = "shared", clients: int, pool: int,
            max_model_len: int = 2048, max_batched_tokens: int = 2048,
            reference: Reference | None = None, check: bool = False,
            on_step: Callable[[int], None] | None = None, num_blocks: int | None = None,
            replay: bool = False, layers: int | None = None,
            observers: Iterable[object] = (), timing: str = DEFAULT_PROFILE,
            gpu: str = "analytic", standby: str = "per_channel",
            token_op: str | None = None, device_ext: str = DEFAULT_EXT) -> RunCost:
    """Serve ``conversations`` for ``steps`` steps with ``runtime`` attached; return the cost.

    ``model`` is a preset of :data:`patton.runtime.models.MODELS`, ``runtime`` a PIM runtime
    of :data:`~patton.serving.capacity.RUNTIMES` (served as :func:`requirements` says: block
    size, prefix caching, context limit). The engine has ``clients`` sequences,
    ``max_batched_tokens`` tokens per step and the runtime's capacity (the 16 GiB device, or
    ``num_blocks`` blocks of KV memory). ``reference`` is the GPU reference of the same
    workload (computed when None). ``on_step(i)`` is called after step ``i``. ``check``
    verifies every program and the engine/runtime mirror; ``replay`` (which implies it) also
    runs them on the functional model and compares attention bit for bit (slow: short runs
    only). ``layers`` counts that many layers instead of the model's; ``observers`` watch the
    run's driver too (after the costing: a ``program`` hook may replace what is costed).
    ``timing`` is the cycle model's timing profile, ``gpu`` the GPU prefill model
    (:data:`~patton.eval.gpu_calibration.GPU_MODELS`), ``standby`` how standby energy is
    counted (:data:`~patton.sim.energy.STANDBY`), ``token_op`` how ``patton-wo-cz`` writes a
    single Value token (``"abk"``, its default, or ``"mem"``), ``device_ext`` the device's
    extension set (:mod:`patton.sim.extensions`: the runtime uses what the device has).

    Raises:
        ValueError: an unknown model, runtime or front end, the ``gpu`` runtime (no PIM), a
            bad count, a context longer than the runtime supports, or a reference of
            another workload.
        ClientError: a step scheduled nothing (too few blocks for one request).
    """
    (cost,) = _run(conversations, _model(model), runtime, steps=steps, frontend=frontend,
                   clients=clients, pool=pool, max_model_len=max_model_len,
                   max_batched_tokens=max_batched_tokens, ref=reference, check=check,
                   num_blocks=num_blocks, layers=layers, replay=replay, on_step=on_step,
                   observers=observers, timing=timing, gpu=gpu, standby=standby,
                   token_op=token_op, device_ext=device_ext).values()
    return cost


def measure_many(conversations: Iterable[Conversation], models: Iterable[str | ModelSpec],
                 runtime: str, *, steps: int, frontends: Iterable[str], clients: int,
                 pool: int, max_model_len: int = 2048, max_batched_tokens: int = 2048,
                 references: Iterable[Reference] | None = None, check: bool = False,
                 on_step: Callable[[int], None] | None = None, num_blocks: int | None = None,
                 replay: bool = False, timings: Iterable[str] = (DEFAULT_PROFILE,),
                 gpus: Iterable[str] = ("analytic",),
                 standbys: Iterable[str] = ("per_channel",),
                 token_op: str | None = None, device_ext: str = DEFAULT_EXT
                 ) -> dict[CostKey, RunCost]:
    """:func:`measure` for every model of ``models`` on every front end of ``frontends`` under
    every timing profile of ``timings``, priced under every GPU model of ``gpus`` and standby
    accounting of ``standbys``, in one run; return the costs keyed by :class:`CostKey`
    (``(model name, front end, timing, gpu, standby)``).

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
    return _run(conversations, list(models), runtime, steps=steps, frontend=list(frontends),
                clients=clients, pool=pool, max_model_len=max_model_len,
                max_batched_tokens=max_batched_tokens,
                ref=None if references is None else list(references), check=check,
                num_blocks=num_blocks, replay=replay, on_step=on_step, timing=tuple(timings),
                gpu=tuple(gpus), standby=tuple(standbys), token_op=token_op,
                device_ext=device_ext)
