"""Which tasks make each figure, at which scale (``patton repro``'s configurations).

:class:`Scale` holds every size a run depends on; :data:`FULL` is the paper's (more than
10,000 scheduler steps per configuration, the four models), :data:`QUICK` the pipeline check
(a few hundred steps, two models, every program verified). :func:`tasks` lists a figure's
tasks; equal tasks of two figures are one (Fig. 8's PATTON and BlockPIM runs on the shared
front end are Fig. 7's).

Fig. 9's loads (``docs/evaluation.md``, "Decisions"): **normal** is the paper's Llama-3-8B
setting (32 clients, pool 64, the whole 16 GiB device); **pressure** is pool 96, the load at
which the GPU reference first loses hits on our workload (``docs/serving.md``, Fig. 9);
two extra records, not the paper's figure: **light** is pool 32, where every runtime keeps the
same hits (the shape of the paper's "normal": all configurations equal), and **overload** is
pool 512, where the live context passes the paper's "more than 250,000 live context tokens"
(and every runtime's hits are gone).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from patton.eval.paper import BASELINES, MODELS, SETTINGS
from patton.eval.tasks import (
    CONVERSATIONS,
    CostTask,
    FragmentationTask,
    HitTask,
    Task,
    ValueWriteTask,
)

__all__ = [
    "FIG8_RUNTIMES",
    "FIG9_RUNTIMES",
    "FIGURES",
    "FRONTENDS",
    "FULL",
    "LOADS",
    "QUICK",
    "Scale",
    "max_model_len",
    "tasks",
]

#: The figures ``patton repro`` makes, in order (``all`` is every one).
FIGURES = ("fig7", "fig8", "fig9", "micro")

#: Fig. 8's runtimes: PATTON, the Commit Zone ablation and BlockPIM (§5.4).
FIG8_RUNTIMES = ("patton", "patton-wo-cz", "blockpim")
#: Fig. 8's cycle-model front ends: the public simulator's shared decoder and one per channel.
FRONTENDS = ("shared", "per_channel")
#: Fig. 9's runtimes (§5.4): vLLM's own GPU cache, PATTON, PATTON without O2V.
FIG9_RUNTIMES = ("gpu", "patton", "patton-no-o2v")


@dataclass(frozen=True, slots=True)
class Scale:
    """The sizes of one ``patton repro`` run.

    Invariants: every count is positive; ``loads`` maps each Fig. 9 load to its pool (a
    multiple of ``fig9_clients``); ``fig7_frontend`` is one of :data:`FRONTENDS` (the paper's
    figure is on ``shared``, the public simulator's decoder).
    """

    steps: int  # scheduler steps of every cost configuration (Fig. 7, 8)
    models: tuple[str, ...]  # Fig. 7's models
    fig8_models: tuple[str, ...]  # Fig. 8's models (geometric means over them)
    check: bool  # verify every program a runtime emits (run_cost's check)
    conversations: int  # ShareGPT conversations the serving runs draw from
    loads: tuple[tuple[str, int], ...]  # Fig. 9: (load, pool) at 32 clients
    fig9_steps: int = 12_000  # scheduler steps of every Fig. 9 run (the engine alone: fast)
    fig9_clients: int = 32
    fig9_max_model_len: int = 8192  # PATTON has no hardware context limit (§5.1)
    value_write_steps: int = 32  # micro: decode steps of the Value-write benchmark
    value_write_requests: int = 32  # micro: its batch (the paper's concurrency)
    fig7_frontend: str = "shared"  # Fig. 7's cycle-model front end (one of FRONTENDS)

    def with_(self, **changes: object) -> Scale:
        """Return a copy with ``changes`` (``dataclasses.replace``)."""
        return dataclasses.replace(self, **changes)


#: Fig. 9's loads, (name, pool), at 32 clients on the 16 GiB device.
LOADS = (("normal", 64), ("pressure", 96), ("light", 32), ("overload", 512))

#: The paper's scale: > 10,000 steps per configuration, all four models.
FULL = Scale(steps=12_000, models=MODELS, fig8_models=MODELS, check=False,
             conversations=CONVERSATIONS, loads=LOADS)

#: ``--quick``: 100 steps, Llama-3-8B and OPT-6.7B (Fig. 8: Llama-3-8B), every program
#: verified; Fig. 9 at 2,000 steps (hits need second turns; the engine alone runs thousands of
#: steps a second) without the extra loads; the Value-write benchmark at 16 steps (one commit
#: per request: the same activation ratio).
QUICK = Scale(steps=100, models=("llama3-8b", "opt-6.7b"), fig8_models=("llama3-8b",),
              check=True, conversations=300, loads=LOADS[:2], fig9_steps=2000,
              value_write_steps=16)


def max_model_len(model: str) -> int:
    """The context limit of ``model``'s comparison: 2,048 (§5.1), or less where a compared
    runtime holds less (NeuPIMs confines a request to one channel: 1,024 tokens of a
    32-KV-head model); every runtime of the model is served the same workload."""
    from patton.runtime.models import MODELS as SPECS
    from patton.serving.runtimes import max_context

    limits = [max_context(r, SPECS[model]) for r in ("patton", *BASELINES, *FIG8_RUNTIMES)]
    return min([2048] + [x for x in limits if x is not None])


def _cost(scale: Scale, model: str, runtime: str, frontend: str = "shared") -> CostTask:
    clients, pool = SETTINGS[model]
    return CostTask(model=model, runtime=runtime, steps=scale.steps, clients=clients, pool=pool,
                    frontend=frontend, max_model_len=max_model_len(model),
                    conversations=scale.conversations, check=scale.check)


def tasks(figure: str, scale: Scale) -> list[Task]:
    """Return the tasks of ``figure`` (one of :data:`FIGURES`) at ``scale``.

    Raises:
        ValueError: an unknown figure.
    """
    if figure == "fig7":
        return [_cost(scale, m, r, scale.fig7_frontend) for m in scale.models
                for r in ("patton", *BASELINES)]
    if figure == "fig8":
        return [_cost(scale, m, r, f) for f in FRONTENDS for m in scale.fig8_models
                for r in FIG8_RUNTIMES]
    if figure == "fig9":
        return [HitTask(runtime=r, load=load, steps=scale.fig9_steps,
                        clients=scale.fig9_clients,
                        pool=pool, max_model_len=scale.fig9_max_model_len,
                        conversations=scale.conversations)
                for load, pool in scale.loads for r in FIG9_RUNTIMES]
    if figure == "micro":
        return [FragmentationTask(),
                ValueWriteTask(requests=scale.value_write_requests,
                               steps=scale.value_write_steps)]
    raise ValueError(f"unknown figure {figure!r}; known: {', '.join(FIGURES)}")
