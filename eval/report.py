"""The markdown report (``repro.md``): every figure's numbers next to the paper's.

A header (the command, the tasks and their time, what ``--quick`` means), then each figure's
section (:mod:`patton.eval.figures`: its title, where the paper states its numbers, its
tables). A value that could not be computed is ``n/a``.
"""

from __future__ import annotations

from typing import Any

from patton.eval.figures import FIGURES, tables

__all__ = ["markdown"]


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
             quick: bool = False) -> str:
    """Return the report of ``records`` (keyed by figure) as markdown text."""
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
    if quick:
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
        lines += figure.markdown(rec)
    return "\n".join(lines) + "\n"
