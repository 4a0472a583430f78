"""The markdown report (``repro.md``): every figure's numbers next to the paper's.

A header (the command, the tasks and their time, how a quick or reduced run is below the
paper's scale: :func:`scale_note`), then each figure's section (:mod:`patton.eval.figures`:
its title, where the paper states its numbers, its tables). A value that could not be
computed is ``n/a``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from patton.eval.figures import FIGURES, tables
from patton.eval.plan import FULL, Scale

__all__ = ["markdown", "reduced", "scale_note"]

#: The sizes of a :class:`~patton.eval.plan.Scale` a run can have below the paper's, and how
#: a note names one (``v`` this run's, ``full`` the paper's scale's; a tuple by its length).
SIZES = (("steps", "{v} steps per cost run (full: {full})"), ("models", "{v} of {full} models"),
         ("fig8_models", "Fig. 8 on {v} of {full} models"),
         ("fig9_steps", "{v} steps per Fig. 9 run (full: {full})"),
         ("loads", "{v} of {full} Fig. 9 loads"),
         ("sensitivity_steps", "{v} steps per sensitivity run (full: {full})"),
         ("value_write_steps", "{v} Value-write steps (full: {full})"),
         ("conversations", "{v} conversations (full: {full})"))


def _tasks(figures: Sequence[str], scale: Scale) -> set[Any]:
    return {t for f in figures for t in FIGURES[f].tasks(scale)}


def reduced(figure: str, scale: Scale) -> bool:
    """Whether ``figure`` at ``scale`` runs less than at the paper's (its tasks differ from
    those at :data:`~patton.eval.plan.FULL`'s sizes, the other settings kept)."""
    full = scale.with_(**{name: getattr(FULL, name) for name, _ in SIZES})
    return _tasks([figure], scale) != _tasks([figure], full)


def scale_note(figures: Sequence[str], scale: Scale) -> str | None:
    """How ``figures`` at ``scale`` are below the paper's scale, e.g. ``100 steps per cost
    run (full: 12,000), 2 of 4 models``; None when they are at it. A size is named when it
    changes the tasks of one of ``figures``."""
    def value(v: Any) -> str:
        return f"{v:,}" if isinstance(v, int) else f"{len(v)}"

    here = _tasks(figures, scale)
    parts = [label.format(v=value(getattr(scale, name)), full=value(getattr(FULL, name)))
             for name, label in SIZES
             if getattr(scale, name) != getattr(FULL, name)
             and _tasks(figures, scale.with_(**{name: getattr(FULL, name)})) != here]
    return ", ".join(parts) or None


def _assumptions(records: dict[str, Any]) -> list[str]:
    """The assumptions the figures ran under, and the GPU model's calibration."""
    used, axes = records.get("assumptions"), records.get("axes")
    if not used or not axes:
        return []
    lines = ["", "## Assumptions", "",
             "The headline figures ran under these (`docs/evaluation.md`; change one with "
             "`--assume AXIS=VALUE`):", ""]
    # an opt-in axis at its paper value is left out of "assumptions" (it is listed in
    # "axes" when the sensitivity varied it)
    value = {a["axis"]: used.get(a["axis"], a["paper"]) for a in axes}
    lines += tables.table(("axis", "this run", "paper configuration", "how it was chosen"),
                          ((a["axis"], f"**{value[a['axis']]}**"
                            if value[a["axis"]] != a["paper"] else value[a["axis"]],
                            a["paper"], a["decided_by"]) for a in axes))
    gpu = records.get("gpu_model")
    if gpu:
        lines += ["", f"GPU model `calibrated`: {gpu['source']}; relative error against the "
                  f"{gpu['points']:,} measured points: mean {100 * gpu['mean_rel_error']:.1f} %, "
                  f"max {100 * gpu['max_rel_error']:.1f} %."]
    return lines


def markdown(records: dict[str, Any], *, command: str = "", wall_seconds: float | None = None,
             quick: bool = False, scale: Scale | None = None) -> str:
    """Return the report of ``records`` (keyed by figure) as markdown text; ``scale``, the
    run's, says in the header and in each figure's section how far it is below the paper's
    (without it, ``quick`` says it is a pipeline check)."""
    lines = ["# `patton repro`: the paper's evaluation, reproduced", ""]
    if command:
        lines.append(f"Command: `{command}`" + (f" ({wall_seconds:.0f} s of wall time)"
                                                 if wall_seconds is not None else ""))
        lines.append("")
    counted = {f: r for f, r in records.items() if "tasks" in r and "task_seconds" in r}
    if counted:
        lines += ["Tasks per figure and their own wall time, summed (tasks served by one run "
                  "share its time equally; a task two figures share counts in both; with "
                  "`--resume`, tasks taken from the store count with the time they took "
                  "then): " + ", ".join(
                      f"{f} {r['tasks']} ({r['task_seconds']:,.0f} s)"
                      for f, r in counted.items()) + ".", ""]
    names = [f for f in records if f in FIGURES]
    note = scale_note(names, scale) if scale is not None else None
    if note is not None:
        lines += [f"**{'Quick' if quick else 'Reduced'} run**: "
                  f"{'a pipeline check, ' if quick else ''}not the paper's scale: {note}. "
                  "Its numbers are not the paper's evaluation.", ""]
    elif quick and scale is None:
        lines += [("**--quick**: a pipeline check (a few hundred steps, two models); the "
                   "numbers are not the evaluation's."), ""]
    lines.append("Ratios are ours / paper. Paper: arXiv 2609.11392 (sections in "
                 "`patton/eval/figures/`).")
    lines += _assumptions(records)
    for name, rec in records.items():
        figure = FIGURES.get(name)
        if figure is None:
            continue
        lines += ["", f"## {figure.title}", "", f"Paper: {figure.source}", ""]
        if scale is not None and reduced(name, scale):
            lines += [f"*{'Quick' if quick else 'Reduced'} run, not the paper's scale: "
                      f"{scale_note([name], scale)}.*", ""]
        lines += figure.markdown(rec)
    return "\n".join(lines) + "\n"
