"""Run tasks: in this process, in local worker processes, or on a Ray cluster.

:func:`execute` runs every task once (equal tasks are one) and returns their results in the
order given. ``workers`` 1 runs them one after the other in this process; more runs them in a
``concurrent.futures.ProcessPoolExecutor(max_workers=workers)`` (the heaviest first, by
``Task.weight``), and ``ray`` (an address, or
``"local"`` for a Ray instance started here) sends them to Ray as remote tasks. Ray is an
optional extra (``pip install 'patton-testbench[ray]'``), imported only then.

With a :class:`~patton.eval.store.Store`, every task is stored as soon as it finishes; tasks
whose results are ``known`` (what a store held, for ``--resume``) are not run again.

Progress: one tqdm bar per task on stderr. Workers report steps through a
``multiprocessing.Manager().Queue()`` that the parent drains while it waits; Ray tasks
report when they finish (a queue proxy cannot cross a cluster).
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import multiprocessing
import queue as queue_module
import sys
from collections.abc import Callable, Sequence
from typing import Any

from patton.eval.store import Store
from patton.eval.tasks import Task, TaskError, run

__all__ = ["RayUnavailable", "execute", "unique"]

#: Seconds the parent waits between two looks at the progress queue.
POLL = 0.2


class RayUnavailable(TaskError):
    """``--ray`` without the ``ray`` package (or a cluster that cannot be reached)."""


def unique(tasks: Sequence[Task]) -> list[Task]:
    """Return ``tasks`` without repeats, in first-seen order."""
    return list(dict.fromkeys(tasks))


class _Bars:
    """One tqdm bar per task on stderr (or nothing when not shown)."""

    def __init__(self, tasks: Sequence[Task], show: bool) -> None:
        self.bars: list[Any] = []
        if show:
            from tqdm import tqdm

            width = max(len(t.key) for t in tasks) if tasks else 0
            self.bars = [tqdm(total=t.total, desc=t.key.ljust(width), position=i,
                              unit="step" if t.total > 1 else "task", file=sys.stderr,
                              dynamic_ncols=True, leave=True)
                         for i, t in enumerate(tasks)]

    def update(self, index: int, n: int) -> None:
        if self.bars:
            bar = self.bars[index]
            bar.update(min(n, bar.total - bar.n))

    def finish(self, index: int) -> None:
        if self.bars:
            bar = self.bars[index]
            bar.update(bar.total - bar.n)
            bar.refresh()

    def close(self) -> None:
        for bar in self.bars:
            bar.close()


class _Report:
    """``progress`` for a task in a worker: puts ``(index, n)`` on the parent's queue."""

    def __init__(self, q: Any, index: int) -> None:
        self.q, self.index = q, index

    def __call__(self, n: int) -> None:
        self.q.put((self.index, n))


def _named(task: Task, error: BaseException) -> TaskError:
    if isinstance(error, TaskError):
        return error
    return TaskError(f"{task.key}: {type(error).__name__}: {error}")


def execute(tasks: Sequence[Task], *, workers: int = 2, ray: str | None = None,
            progress: bool = False, store: Store | None = None,
            known: dict[Task, dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Run every task of ``tasks`` once; return their results, in the order of ``tasks``.

    ``store``: put each result there as soon as its task finishes; ``known``: results at
    hand (those tasks are not run).

    Raises:
        TaskError: a task failed (the first failure; the tasks not started are cancelled).
        RayUnavailable: ``ray`` given and Ray is not installed or cannot be reached.
    """
    todo = unique(tasks)
    by_task: dict[Task, dict[str, Any]] = dict(known or {})
    left = [t for t in todo if t not in by_task]

    def done(i: int, result: dict[str, Any]) -> None:
        if store is not None:
            store.put(left[i], result)

    bars = _Bars(left, progress)
    try:
        if not left:
            results: list[dict[str, Any]] = []
        elif ray is not None:
            results = _ray(left, ray, bars, done)
        elif workers <= 1 or len(left) <= 1:
            results = _inline(left, bars, done)
        else:
            results = _pool(left, workers, bars, done)
    finally:
        bars.close()
    by_task.update(zip(left, results, strict=True))
    return [by_task[t] for t in tasks]


Done = Callable[[int, dict[str, Any]], None]


def _inline(todo: list[Task], bars: _Bars, done: Done) -> list[dict[str, Any]]:
    out = []
    for i, task in enumerate(todo):
        try:
            out.append(run(task, lambda n, i=i: bars.update(i, n)))
        except Exception as e:
            raise _named(task, e) from e
        done(i, out[-1])
        bars.finish(i)
    return out


def _pool(todo: list[Task], workers: int, bars: _Bars, done: Done) -> list[dict[str, Any]]:
    out: list[dict[str, Any] | None] = [None] * len(todo)
    with multiprocessing.Manager() as manager:
        q = manager.Queue()
        with cf.ProcessPoolExecutor(max_workers=min(workers, len(todo))) as pool:
            # heaviest first: the longest task does not start last
            order = sorted(range(len(todo)), key=lambda i: -todo[i].weight)
            futures = {pool.submit(run, todo[i], _Report(q, i)): i for i in order}
            pending = set(futures)
            try:
                while pending:
                    finished, pending = cf.wait(pending, timeout=POLL,
                                                return_when=cf.FIRST_COMPLETED)
                    _drain(q, bars)
                    for f in finished:
                        i = futures[f]
                        error = f.exception()
                        if error is not None:
                            raise _named(todo[i], error) from error
                        out[i] = f.result()
                        done(i, out[i])
                        bars.finish(i)
            except BaseException:
                # A failure (or ^C) ends the run: drop what has not started and stop the
                # workers still running a task (our own processes) rather than wait for them.
                pool.shutdown(wait=False, cancel_futures=True)
                for process in list(getattr(pool, "_processes", {}).values()):
                    process.terminate()
                raise
            _drain(q, bars)
    assert all(r is not None for r in out)
    return out  # type: ignore[return-value]


def _drain(q: Any, bars: _Bars) -> None:
    while True:
        try:
            i, n = q.get_nowait()
        except queue_module.Empty:
            return
        bars.update(i, n)


def _ray(todo: list[Task], address: str, bars: _Bars, done: Done) -> list[dict[str, Any]]:
    try:
        import ray as ray_module
    except ImportError:
        raise RayUnavailable("--ray needs the ray package: pip install "
                             "'patton-testbench[ray]' (or pip install ray)") from None
    started = not ray_module.is_initialized()
    if started:
        try:
            ray_module.init(address=None if address == "local" else address,
                            include_dashboard=False, log_to_driver=False,
                            logging_level=logging.WARNING)
        except Exception as e:  # noqa: BLE001 - Ray raises many kinds; report it as ours
            raise RayUnavailable(f"--ray {address}: cannot connect: {type(e).__name__}: "
                                 f"{e}") from None
    try:
        remote = ray_module.remote(run)
        order = sorted(range(len(todo)), key=lambda i: -todo[i].weight)
        index = {remote.remote(todo[i]): i for i in order}
        refs = list(index)
        out: list[dict[str, Any] | None] = [None] * len(todo)
        pending = list(refs)
        while pending:
            ready, pending = ray_module.wait(pending, num_returns=1)
            for ref in ready:
                i = index[ref]
                try:
                    out[i] = ray_module.get(ref)
                except Exception as e:
                    for p in pending:
                        ray_module.cancel(p)
                    cause = getattr(e, "cause", None) or e
                    raise _named(todo[i], cause) from e
                done(i, out[i])
                bars.finish(i)
        return out  # type: ignore[return-value]
    finally:
        if started:
            ray_module.shutdown()
