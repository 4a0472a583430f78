"""``patton repro`` as library calls: run the figures' tasks, derive the records, write them.

:func:`reproduce` runs the tasks of the figures asked for (:mod:`patton.eval.figures`) at a
:class:`~patton.eval.plan.Scale` on the runner (local processes or Ray,
:mod:`patton.eval.runner`), keeping every finished task in a store (:mod:`patton.eval.store`),
and derives each figure's record; :func:`write` writes ``repro.json``, ``repro.md`` and the
plots.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from patton.eval.assumptions import describe
from patton.eval.figures import FIGURES, figure
from patton.eval.gpu_calibration import report as gpu_report
from patton.eval.plan import Scale
from patton.eval.report import markdown
from patton.eval.runner import execute, unique
from patton.eval.store import Store
from patton.eval.tasks import Task

__all__ = ["DEFAULT_WORKERS", "reproduce", "write"]

#: Local worker processes by default (this is a 2-core machine).
DEFAULT_WORKERS = 2


def reproduce(figures: Sequence[str], scale: Scale, *, workers: int = DEFAULT_WORKERS,
              ray: str | None = None, progress: bool = False, store: Store | None = None,
              resume: bool = False) -> dict[str, Any]:
    """Run the tasks of ``figures`` at ``scale``; return the records keyed by figure, with
    the assumptions they ran under (``assumptions``: axis -> value; ``axes``: every axis, its
    values and how the paper configuration was chosen) and the GPU model's calibration
    (``gpu_model``: its error against every measured A100 point).

    ``store`` keeps every finished task; with ``resume`` the tasks it holds from the same
    code are taken from it (a line on stderr says how many).

    Raises:
        ValueError: an unknown figure.
        TaskError: a task failed (``StoreError`` for a stored file that cannot be read).
    """
    wanted = {f: figure(f).tasks(scale) for f in figures}
    todo = [t for f in figures for t in wanted[f]]
    known: dict[Task, dict[str, Any]] = {}
    if store is not None and resume:
        distinct = unique(todo)
        for t in distinct:
            found = store.get(t)
            if found is not None:
                known[t] = found
        print(f"resume: {len(known)} of {len(distinct)} task results taken from "
              f"{store.folder}", file=sys.stderr)
    results = execute(todo, workers=workers, ray=ray, progress=progress, store=store,
                      known=known)
    by_task = dict(zip(todo, results, strict=True))
    out: dict[str, Any] = {"assumptions": scale.assumptions.as_dict(), "axes": describe(),
                           "gpu_model": gpu_report()}
    for f in figures:
        pairs = [(t, by_task[t]["result"]) for t in wanted[f]]
        out[f] = figure(f).derive(pairs, scale)
        out[f]["task_seconds"] = round(sum(by_task[t]["wall_seconds"] for t in wanted[f]), 2)
        out[f]["tasks"] = len(wanted[f])
    return out


def write(records: dict[str, Any], out: Path, *, command: str, wall_seconds: float,
          quick: bool) -> list[Path]:
    """Write ``repro.json``, ``repro.md`` and each figure's PNG into ``out``; return the
    files."""
    files = [out / "repro.json", out / "repro.md"]
    files[0].write_text(json.dumps(records, indent=1) + "\n", encoding="utf-8")
    files[1].write_text(markdown(records, command=command, wall_seconds=wall_seconds,
                                 quick=quick), encoding="utf-8")
    for name, rec in records.items():
        f = FIGURES.get(name)
        if f is not None and f.plot is not None:
            files.append(f.plot(rec, out / f"{name}.png"))
    return files
