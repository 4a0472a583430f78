"""One figure of the paper's evaluation as a record (:class:`Figure`); the registry is
:data:`patton.eval.figures.FIGURES`."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from patton.eval.plan import Scale
from patton.eval.tasks import Task

__all__ = ["Figure", "Pairs"]

#: Task results of a figure: ``(task, result)`` pairs.
Pairs = Sequence[tuple[Task, dict[str, Any]]]


@dataclass(frozen=True, slots=True)
class Figure:
    """One figure of the paper, whole (see the module docstring).

    Invariants: ``derive`` returns a record holding every key of ``paper`` (the paper's
    numbers have the shape of the record's required part); ``tasks`` is a pure function of the
    scale.
    """

    name: str  # the patton repro verb and the key of repro.json
    title: str  # the section title in repro.md
    source: str  # where the paper states its numbers
    paper: Mapping[str, Any]  # the paper's numbers
    tasks: Callable[[Scale], list[Task]]  # what measures it at a scale
    derive: Callable[[Pairs, Scale], dict[str, Any]]  # task results -> the record
    summary: Callable[[dict[str, Any]], str]  # one line, ours next to the paper's
    markdown: Callable[[dict[str, Any]], list[str]]  # its section of repro.md
    plot: Callable[[dict[str, Any], Path], Path] | None = None  # its PNG, if any
