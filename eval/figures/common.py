"""What the cost figures share: geometric means, ratios, the parts of a run's cost.

Task results are ``(task, result)`` pairs (``tasks.run``'s ``result``); a cost result is a
:meth:`~patton.eval.cost.RunCost.as_dict`. A ratio whose denominator is zero is None (and so
is a mean over it).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Sequence
from typing import Any

from patton.eval.assumptions import Assumptions
from patton.eval.paper import BASELINES, SETTINGS
from patton.eval.plan import Scale
from patton.eval.tasks import CostTask, Task
from patton.sim.extensions import DEFAULT_EXT

__all__ = ["PARTS", "STACK", "COMPARED", "Pairs", "Runs", "geomean", "ratio", "reduction",
           "results", "stack", "components", "cost_task", "context_limit"]

#: The PIM attention parts of a serving run's cost (``RunCost.as_dict()["parts"]``).
PARTS = ("k_write", "v_write", "qk", "sv")
#: Fig. 7's stacks: the PIM parts, then the prefill recomputation.
STACK = (*PARTS, "recompute")
#: Every runtime a model's cost figures compare (Fig. 7's and Fig. 8's).
COMPARED = ("patton", *BASELINES, "patton-wo-cz")

Pairs = Sequence[tuple[Task, dict[str, Any]]]
#: Cost results by model, then runtime (:func:`results`).
Runs = dict[str, dict[str, dict[str, Any]]]


def geomean(values: Iterable[float | None]) -> float | None:
    """Return the geometric mean of positive numbers (None if any is None).

    Raises:
        ValueError: no values, or one that is not positive.
    """
    xs = list(values)
    if not xs:
        raise ValueError("geometric mean of no values")
    if any(x is None for x in xs):
        return None
    fs = [float(x) for x in xs]  # type: ignore[arg-type]
    if any(not x > 0 for x in fs):  # also refuses nan
        raise ValueError(f"geometric mean needs positive values, got {fs}")
    return math.exp(sum(math.log(x) for x in fs) / len(fs))


def ratio(a: float, b: float) -> float | None:
    """Return ``a / b`` (None when ``b`` is 0)."""
    return a / b if b else None


def reduction(g: float | None) -> float | None:
    return None if g is None else 1.0 - g


def results(pairs: Pairs, scale: Scale, models: Iterable[str], runtimes: Iterable[str],
            assumptions: Assumptions, figure: str, steps: int | None = None) -> Runs:
    """model -> runtime -> the result of its cost task at ``scale`` under ``assumptions``
    (:func:`cost_task`; ``steps`` instead of the scale's if given).

    Raises:
        ValueError: a model without a result for one of ``runtimes`` (named).
    """
    by_task = {t: r for t, r in pairs if isinstance(t, CostTask)}
    out: Runs = {}
    for m in models:
        out[m] = {}
        missing = []
        for r in runtimes:
            found = by_task.get(cost_task(scale, m, r, assumptions, steps=steps))
            if found is None:
                missing.append(r)
            else:
                out[m][r] = found
        if missing:
            raise ValueError(f"{figure}: {m} has no result for {', '.join(missing)}")
    return out


def stack(cost: dict[str, Any], unit: str) -> dict[str, float]:
    """The stack of one run in ``unit`` ("seconds" or "joules"): the parts and recompute."""
    parts = cost["parts"]
    out = {p: float(parts[p][unit]) for p in PARTS}
    out["recompute"] = float(cost[f"recompute_{unit}"])
    return out


def components(runs: dict[str, dict[str, Any]], order: Sequence[str]
                ) -> dict[str, dict[str, float | None]] | None:
    """Every runtime's attention energy by component over PATTON's attention energy (None
    when a run does not split its energy)."""
    split: dict[str, dict[str, float]] = {}
    for r in order:
        parts = runs[r]["parts"]
        if any("energy_components_joules" not in parts[p] for p in PARTS):
            return None
        total: dict[str, float] = {}
        for p in PARTS:
            for name, j in parts[p]["energy_components_joules"].items():
                total[name] = total.get(name, 0.0) + float(j)
        split[r] = total
    base = sum(split["patton"].values())
    return {r: {name: ratio(j, base) for name, j in comps.items()} for r, comps in split.items()}


#: The context limit §5.1 applies when PATTON is compared with AttAcc and NeuPIMs.
PAPER_CONTEXT = 2048


@functools.cache  # a pure function of names: the figures' task lists ask it often
def context_limit(model: str, runtime: str, context: str) -> int:
    """The context limit ``runtime`` serves ``model``'s workload at, under the ``context``
    assumption (:data:`~patton.eval.assumptions.AXES`): ``paper``, 2,048 tokens (§5.1) or
    the runtime's own lower limit (NeuPIMs confines a request to one channel: 1,024 tokens
    of a 32-KV-head model); ``common``, the lowest of those limits among every runtime the
    model is compared on, so that all of them serve one workload."""
    from patton.runtime.models import MODELS as SPECS
    from patton.serving.capacity import max_context

    if context == "paper":
        limit = max_context(runtime, SPECS[model])
        return PAPER_CONTEXT if limit is None else min(PAPER_CONTEXT, limit)
    if context != "common":
        raise ValueError(f"unknown context assumption {context!r}")
    limits = [max_context(r, SPECS[model]) for r in COMPARED]
    return min([PAPER_CONTEXT] + [x for x in limits if x is not None])


def cost_task(scale: Scale, model: str, runtime: str, assumptions: Assumptions | None = None,
              *, steps: int | None = None) -> CostTask:
    """The cost run of ``runtime`` serving ``model``'s workload at ``scale`` (§5.1's clients
    and pool) under ``assumptions`` (default the scale's)."""
    a = scale.assumptions if assumptions is None else assumptions
    clients, pool = SETTINGS[model]
    token_op = a.wo_cz_write if runtime == "patton-wo-cz" else None
    return CostTask(model=model, runtime=runtime,
                    steps=scale.steps if steps is None else steps, clients=clients,
                    pool=pool, frontend=a.frontend,
                    max_model_len=context_limit(model, runtime, a.context),
                    conversations=scale.conversations, check=scale.check, timing=a.timing,
                    gpu=a.gpu, standby=a.standby,
                    token_op=token_op,
                    device_ext=a.device_ext if uses_extensions(runtime, token_op)
                    else DEFAULT_EXT)


def uses_extensions(runtime: str, token_op: str | None = None) -> bool:
    """True if ``runtime`` issues a device extension's commands when the device has them
    (``docs/extensions.md``): PATTON's variants with a Commit Zone (its single-token Value
    writes), and PATTON-wo-CZ when it writes a token by all-bank writes (``token_op`` "abk").
    Every other runtime emits the same programs on any extension set, and a device with an
    extension runs a program without its commands as the device without it (the extension
    only adds rules that name its commands), so their runs are shared between the sets."""
    from patton.runtime.patton.variants import VARIANTS

    if runtime not in VARIANTS:
        return False
    return VARIANTS[runtime].commit_zone or token_op == "abk"
