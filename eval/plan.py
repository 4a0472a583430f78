"""The sizes of a ``patton repro`` run: :data:`FULL` (the paper's) and :data:`QUICK`.

:class:`Scale` holds every size a run depends on; :data:`FULL` is the paper's (more than
10,000 scheduler steps per configuration, the four models), :data:`QUICK` the pipeline check
(a few hundred steps, two models, every program verified). Each figure
(:mod:`patton.eval.figures`) lists its tasks at a scale; equal tasks of two figures are one
(Fig. 8's PATTON and BlockPIM runs on the shared front end are Fig. 7's).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from patton.eval.assumptions import PAPER, Assumptions
from patton.eval.paper import MODELS
from patton.eval.tasks import CONVERSATIONS

__all__ = ["FULL", "LOADS", "QUICK", "Scale"]


@dataclass(frozen=True, slots=True)
class Scale:
    """The sizes of one ``patton repro`` run.

    Invariants: every count is positive; ``loads`` maps each Fig. 9 load to its pool (a
    multiple of ``fig9_clients``); ``assumptions`` are the headline figures' (the paper's
    configuration by default, :mod:`patton.eval.assumptions`); the sensitivity runs
    ``sensitivity_steps`` steps per configuration; ``what_if`` names opt-in axes
    (:attr:`~patton.eval.assumptions.Axis.opt_in`) it varies too.
    """

    steps: int  # scheduler steps of every cost configuration (Fig. 7, 8)
    models: tuple[str, ...]  # Fig. 7's models
    fig8_models: tuple[str, ...]  # Fig. 8's models (geometric means over them)
    check: bool  # verify every program a runtime emits (the cost run's check)
    conversations: int  # ShareGPT conversations the serving runs draw from
    loads: tuple[tuple[str, int], ...]  # Fig. 9: (load, pool) at 32 clients
    sensitivity_steps: int  # scheduler steps of every sensitivity configuration
    fig9_steps: int = 12_000  # scheduler steps of every Fig. 9 run (the engine alone: fast)
    fig9_clients: int = 32
    fig9_max_model_len: int = 8192  # PATTON has no hardware context limit (§5.1)
    value_write_steps: int = 32  # micro: decode steps of the Value-write benchmark
    value_write_requests: int = 32  # micro: its batch (the paper's concurrency)
    assumptions: Assumptions = PAPER  # the headline figures' assumptions
    what_if: tuple[str, ...] = ()  # opt-in axes the sensitivity varies too (device_ext)

    def with_(self, **changes: object) -> Scale:
        """Return a copy with ``changes`` (``dataclasses.replace``)."""
        return dataclasses.replace(self, **changes)


#: Fig. 9's loads, (name, pool), at 32 clients on the 16 GiB device
#: (:mod:`patton.eval.figures.fig9`).
LOADS = (("normal", 64), ("pressure", 96), ("light", 32), ("overload", 512))

#: The paper's scale: > 10,000 steps per configuration, all four models.
FULL = Scale(steps=12_000, models=MODELS, fig8_models=MODELS, check=False,
             conversations=CONVERSATIONS, loads=LOADS, sensitivity_steps=2_000)

#: ``--quick``: 100 steps, Llama-3-8B and OPT-6.7B (Fig. 8: Llama-3-8B), every program
#: verified; Fig. 9 at 2,000 steps (hits need second turns; the engine alone runs thousands of
#: steps a second) without the extra loads; the Value-write benchmark at 16 steps (one commit
#: per request: the same activation ratio).
QUICK = Scale(steps=100, models=("llama3-8b", "opt-6.7b"), fig8_models=("llama3-8b",),
              check=True, conversations=300, loads=LOADS[:2], sensitivity_steps=100,
              fig9_steps=2000, value_write_steps=16)
