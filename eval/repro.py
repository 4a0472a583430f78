"""``patton repro`` as library calls: run the figures' tasks, derive the records, write them.

:func:`reproduce` runs the tasks of the figures asked for (:mod:`patton.eval.figures`) at a
:class:`~patton.eval.plan.Scale` on the runner (local processes or Ray,
:mod:`patton.eval.runner`), keeping every finished task in a store (:mod:`patton.eval.store`),
and derives each figure's record; :func:`write` writes ``repro.json``, ``repro.md`` and the
plots.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from patton.eval.assumptions import AXES, describe
from patton.eval.figures import FIGURES, figure
from patton.eval.gpu_calibration import report as gpu_report
from patton.eval.plan import Scale
from patton.eval.report import markdown
from patton.eval.runner import execute, unique
from patton.eval.store import Store
from patton.eval.tasks import Task, TaskError, failed_checks
from patton.sim.textfile import write_atomic

__all__ = ["DEFAULT_WORKERS", "WALL_TIMES", "reproduce", "write", "without_wall_times"]

#: Local worker processes by default (this is a 2-core machine).
DEFAULT_WORKERS = 2


def reproduce(figures: Sequence[str], scale: Scale, *, workers: int = DEFAULT_WORKERS,
              ray: str | None = None, progress: bool | None = False,
              store: Store | None = None,
              resume: bool = False) -> dict[str, Any]:
    """Run the tasks of ``figures`` at ``scale``; return the records keyed by figure, with
    the assumptions they ran under (``assumptions``: axis -> value; ``axes``: every axis, its
    values and how the paper configuration was chosen) and the GPU model's calibration
    (``gpu_model``: its error against every measured A100 point).

    ``store`` keeps every finished task, under its lock for the whole run; with ``resume`` the
    tasks it holds are taken from it when :meth:`Store.look` takes them (a line on stderr says
    how many; one per file not taken says why, and that task runs again). No record is made
    from a result whose own checks failed (:func:`patton.eval.tasks.failed_checks`).

    Raises:
        ValueError: an unknown figure.
        StoreBusy: another run holds ``store``'s lock.
        TaskError: a task failed, or its checks did.
    """
    wanted = {f: figure(f).tasks(scale) for f in figures}
    todo = [t for f in figures for t in wanted[f]]
    with store.lock() if store is not None else contextlib.nullcontext():
        known = _resumed(store, unique(todo)) if store is not None and resume else {}
        results = execute(todo, workers=workers, ray=ray, progress=progress, store=store,
                          known=known)
    by_task = dict(zip(todo, results, strict=True))
    for task in unique(todo):
        failed = failed_checks(by_task[task]["result"])
        if failed:
            raise TaskError(f"{task.key}: its checks failed ({failed}); no figure is made "
                            "from it")
    shown = (*scale.what_if, *(a for a in scale.assumptions.as_dict() if AXES[a].opt_in))
    out: dict[str, Any] = {"assumptions": scale.assumptions.as_dict(), "axes": describe(shown),
                           "gpu_model": gpu_report()}
    for f in figures:
        pairs = [(t, by_task[t]["result"]) for t in wanted[f]]
        out[f] = figure(f).derive(pairs, scale)
        out[f]["task_seconds"] = round(sum(by_task[t]["wall_seconds"] for t in wanted[f]), 2)
        out[f]["tasks"] = len(wanted[f])
    return out


#: Files not taken on ``--resume`` that are named one per line; the rest are counted.
SHOW_STALE = 10


#: The fields of a figure's record that measure wall time: they vary from run to run (and
#: with what the process did before), so comparisons of records leave them out.
WALL_TIMES = ("task_seconds", "wall_seconds")


def without_wall_times(records: Any) -> Any:
    """``records`` (what :func:`reproduce` returns, or any JSON value) without the
    :data:`WALL_TIMES` fields, at any depth: what is left is a function of the inputs."""
    if isinstance(records, dict):
        return {k: without_wall_times(v) for k, v in records.items() if k not in WALL_TIMES}
    if isinstance(records, list):
        return [without_wall_times(v) for v in records]
    return records


def _resumed(store: Store, tasks: Sequence[Task]) -> dict[Task, dict[str, Any]]:
    """The results of ``tasks`` that ``store`` holds and takes; print on stderr how many, and
    for each file it does not take, why (that task runs again)."""
    known: dict[Task, dict[str, Any]] = {}
    stale = []
    for t in tasks:
        found = store.look(t)
        if found.result is not None:
            known[t] = found.result
        elif found.reason is not None:
            stale.append(found)
    for s in stale[:SHOW_STALE]:
        print(f"resume: {s.path}: {s.reason}; running it again", file=sys.stderr)
    if len(stale) > SHOW_STALE:
        print(f"resume: ... and {len(stale) - SHOW_STALE} more files not taken",
              file=sys.stderr)
    print(f"resume: {len(known)} of {len(tasks)} task results taken from {store.folder}",
          file=sys.stderr)
    return known


def write(records: dict[str, Any], out: Path, *, command: str, wall_seconds: float,
          quick: bool, scale: Scale | None = None) -> list[Path]:
    """Write ``repro.json``, ``repro.md`` (saying how ``scale`` is below the paper's, if it
    is) and each figure's PNG into ``out``; return the files."""
    files = [write_atomic(out / "repro.json", json.dumps(records, indent=1) + "\n"),
             write_atomic(out / "repro.md", markdown(records, command=command,
                                                     wall_seconds=wall_seconds, quick=quick,
                                                     scale=scale))]
    for name, rec in records.items():
        f = FIGURES.get(name)
        if f is not None and f.plot is not None:
            files.append(f.plot(rec, out / f"{name}.png"))
    return files
