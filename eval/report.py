"""The markdown report (``repro.md``): every figure's numbers next to the paper's.

A header (the command, the tasks and their time, what ``--quick`` means), then each figure's
section (:mod:`patton.eval.figures`: its title, where the paper states its numbers, its
tables). A value that could not be computed is ``n/a``.
"""

from __future__ import annotations

from typing import Any

from patton.eval.figures import FIGURES

__all__ = ["markdown"]


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
    for name, rec in records.items():
        figure = FIGURES.get(name)
        if figure is None:
            continue
        lines += ["", f"## {figure.title}", "", f"Paper: {figure.source}", ""]
        lines += figure.markdown(rec)
    return "\n".join(lines) + "\n"
