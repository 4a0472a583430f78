"""The paper's evaluation, one figure a module, in one registry (``patton repro``).

A :class:`Figure` is everything one figure of the paper is to the evaluation: its name (the
verb of ``patton repro`` and the key of ``repro.json``), its title and where the paper states
its numbers, the paper's numbers themselves, the tasks that measure it at a
:class:`~patton.eval.plan.Scale`, how its record is derived from their results, a one-line
summary next to the paper's, its section of ``repro.md`` and (if it has one) its plot.

:data:`FIGURES` lists them; adding a figure is one module defining its :class:`Figure` and one
line here (``docs/evaluation.md``, "Adding a figure").
"""

from __future__ import annotations

import importlib
from typing import Any

from patton.eval.figures.figure import Figure
from patton.eval.plan import Scale
from patton.eval.tasks import Task

__all__ = ["Figure", "FIGURES", "NAMES", "figure", "paper", "tasks"]


def _registry(*modules: str) -> dict[str, Figure]:
    """The :class:`Figure` each module of this package defines (``FIGURE``), by name."""
    out: dict[str, Figure] = {}
    for module in modules:
        f = importlib.import_module(f"{__name__}.{module}").FIGURE
        if not isinstance(f, Figure) or f.name in out or f.name == "all":
            raise ImportError(f"{__name__}.{module}: FIGURE is not a Figure of a new name")
        out[f.name] = f
    return out


#: Every figure, by name, in the paper's order: one line per figure module.
FIGURES: dict[str, Figure] = _registry(
    "fig7",
    "fig8",
    "fig9",
    "micro",
    "sensitivity",
)
#: Their names (``all`` stands for every one).
NAMES: tuple[str, ...] = tuple(FIGURES)


def figure(name: str) -> Figure:
    """Return the figure called ``name``.

    Raises:
        ValueError: an unknown figure (the message lists the known ones).
    """
    try:
        return FIGURES[name]
    except KeyError:
        raise ValueError(f"unknown figure {name!r}; known: {', '.join(NAMES)}") from None


def tasks(name: str, scale: Scale) -> list[Task]:
    """Return the tasks of figure ``name`` at ``scale``."""
    return figure(name).tasks(scale)


def paper() -> dict[str, Any]:
    """The paper's numbers of every figure, keyed as ``patton repro --json`` is."""
    return {name: f.paper for name, f in FIGURES.items()}
