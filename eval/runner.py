"""Run tasks: in this process, in local worker processes, or on a Ray cluster.

:func:`execute` runs every task once (equal tasks are one) and returns their results in the
order given. ``workers`` 1 runs them one after the other in this process; more runs them in
``workers`` worker processes (one ``concurrent.futures.ProcessPoolExecutor(max_workers=1)``
each), and ``ray`` (an address, or ``"local"`` for a Ray instance started here) sends them to
Ray as remote tasks. Ray is an optional extra (``pip install 'patton-testbench[ray]'``),
imported only then.

A process keeps the cycle model's costs across the tasks it runs (``run_cost.costs``), so
the order matters: a free worker, or this process, takes the task that shares most with the
one it ran last (:func:`patton.eval.tasks.affinity`: Qwen3-8B after Llama-3-8B, the same
runtime and front end) and least with what the other workers run, then the heaviest
(``Task.weight``). Ray tasks go out heaviest first, with no such choice.

Cost tasks that one run can serve together (front ends, models of one attention shape) run
as one :class:`~patton.eval.tasks.CostPass` (:func:`patton.eval.tasks.passes`): the unit a
worker runs is a task or such a pass.

With a :class:`~patton.eval.store.Store`, every task is stored as soon as it finishes; tasks
whose results are ``known`` (what a store held, for ``--resume``) are not run again.

Progress (:class:`_Bars`): one tqdm bar per task on a terminal, else one line for the whole
run now and then (:mod:`patton.sim.progress`). Workers report steps through a
``multiprocessing`` manager's queue that the parent drains while it waits; Ray tasks report
when they finish (a queue proxy cannot cross a cluster).

Interrupts: worker and manager processes ignore SIGINT (a terminal sends it to the whole
process group); the parent, on ^C, SIGTERM or a failed task, cancels what has not started,
terminates the workers (killing any that has not exited after
:data:`~patton.sim.workers.GRACE` seconds: :mod:`patton.sim.workers`) and re-raises. Every
task finished before that is already in the store.
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import queue as queue_module
import sys
from collections.abc import Callable, Sequence
from multiprocessing.managers import SyncManager
from typing import Any

from patton.eval.store import Store
from patton.eval.tasks import CostPass, Task, TaskError, Unit, affinity, passes, run
from patton.sim.progress import Progress, mode
from patton.sim.workers import ignore_interrupts, stop

__all__ = ["RayUnavailable", "execute", "unique"]

#: Seconds the parent waits between two looks at the progress queue.
POLL = 0.2


class RayUnavailable(TaskError):
    """``--ray`` without the ``ray`` package (or a cluster that cannot be reached)."""


def unique(tasks: Sequence[Task]) -> list[Task]:
    """Return ``tasks`` without repeats, in first-seen order."""
    return list(dict.fromkeys(tasks))


class _Bars:
    """Progress on stderr (:mod:`patton.sim.progress`): on a terminal (or ``show`` True) one
    tqdm bar per unit; otherwise (``show`` None) one line for all of them now and then,
    ``repro: 14/52 tasks done, 2 min 10 s elapsed, about 3 min left`` (the time left from the
    units' weights); nothing when ``show`` is False."""

    def __init__(self, tasks: Sequence[Unit], show: bool | None) -> None:
        self.bars: list[Any] = []
        self.line: Progress | None = None
        self.tasks = list(tasks)
        self.finished: set[int] = set()
        self.done = [0] * len(tasks)  # steps reported per unit
        how = mode(show) if tasks else None
        if how == "bar":
            from tqdm import tqdm

            width = max(len(t.key) for t in tasks)
            self.bars = [tqdm(total=t.total, desc=t.key.ljust(width), position=i,
                              unit="step" if t.total > 1 else "task", file=sys.stderr,
                              dynamic_ncols=True, leave=True)
                         for i, t in enumerate(tasks)]
        elif how == "lines":
            count = sum(_tasks(t) for t in tasks)
            self.line = Progress(sum(t.weight for t in tasks), "repro", status=lambda: (
                f"{sum(_tasks(self.tasks[i]) for i in self.finished)}/{count} tasks done"))

    def update(self, index: int, n: int) -> None:
        if self.bars:
            bar = self.bars[index]
            bar.update(min(n, bar.total - bar.n))
        elif self.line is not None:
            task = self.tasks[index]
            n = min(n, task.total - self.done[index])
            self.done[index] += n
            self.line.update(task.weight * n / task.total)

    def finish(self, index: int) -> None:
        if self.bars:
            bar = self.bars[index]
            bar.update(bar.total - bar.n)
            bar.refresh()
        elif self.line is not None:
            self.finished.add(index)
            self.update(index, self.tasks[index].total)

    def tick(self) -> None:
        """Let the line show the time going by while nothing reports."""
        if self.line is not None:
            self.line.refresh()

    def close(self) -> None:
        for bar in self.bars:
            bar.close()
        if self.line is not None:
            self.line.close()


def _tasks(unit: Unit) -> int:
    """The tasks a unit runs (a pass runs several)."""
    return len(unit.tasks) if isinstance(unit, CostPass) else 1


class _Report:
    """``progress`` for a task in a worker: puts ``(index, n)`` on the parent's queue."""

    def __init__(self, q: Any, index: int) -> None:
        self.q, self.index = q, index

    def __call__(self, n: int) -> None:
        self.q.put((self.index, n))


def _named(task: Unit, error: BaseException) -> TaskError:
    if isinstance(error, TaskError):
        return error
    return TaskError(f"{task.key}: {type(error).__name__}: {error}")


def execute(tasks: Sequence[Task], *, workers: int = 2, ray: str | None = None,
            progress: bool | None = False, store: Store | None = None,
            known: dict[Task, dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Run every task of ``tasks`` once; return their results, in the order of ``tasks``.

    ``store``: put each result there as soon as its task finishes; ``known``: results at
    hand (those tasks are not run). ``progress``: a bar per unit (True), one line now and
    then on stderr when it is not a terminal, bars when it is (None), nothing (False).

    Raises:
        TaskError: a task failed (the first failure; the tasks not started are cancelled).
        RayUnavailable: ``ray`` given and Ray is not installed or cannot be reached.
    """
    todo = unique(tasks)
    by_task: dict[Task, dict[str, Any]] = dict(known or {})
    units = passes([t for t in todo if t not in by_task])

    def done(i: int, result: Any) -> None:
        for task, one in _each(units[i], result):
            by_task[task] = one
            if store is not None:
                store.put(task, one)

    bars = _Bars(units, progress)
    try:
        if not units:
            pass
        elif ray is not None:
            _ray(units, ray, bars, done)
        elif workers <= 1 or len(units) <= 1:
            _inline(units, bars, done)
        else:
            _pool(units, workers, bars, done)
    finally:
        bars.close()
    return [by_task[t] for t in tasks]


def _each(unit: Unit, result: Any) -> list[tuple[Task, dict[str, Any]]]:
    """A unit's result per task (a pass returns one per task, in its order)."""
    if isinstance(unit, CostPass):
        return list(zip(unit.tasks, result, strict=True))
    return [(unit, result)]


Done = Callable[[int, Any], None]


def _shared(a: tuple, b: tuple) -> int:
    """How many leading parts two affinities share."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _pick(left: list[int], todo: Sequence[Unit], last: tuple, others: Sequence[tuple]) -> int:
    """Take from ``left`` (indices, heaviest first) the task a worker runs next.

    ``last``: the affinity of the task the worker ran last; ``others``: those the other
    workers are running. The task sharing most with ``last`` wins (its costs are in the
    worker's cache), then the one sharing least with ``others`` (it would find theirs in
    their caches, not this one's), then the heaviest.
    """
    def score(k: int) -> tuple[int, int]:
        mine = affinity(todo[left[k]])
        return (_shared(mine, last), -max((_shared(mine, o) for o in others), default=0))

    best = max(range(len(left)), key=score)  # the first best: the heaviest of them
    return left.pop(best)


def _heaviest_first(todo: Sequence[Unit]) -> list[int]:
    return sorted(range(len(todo)), key=lambda i: -todo[i].weight)


def _inline(todo: list[Unit], bars: _Bars, done: Done) -> None:
    left, last = _heaviest_first(todo), ()
    while left:
        i = _pick(left, todo, last, ())
        last = affinity(todo[i])
        try:
            result = run(todo[i], lambda n, i=i: bars.update(i, n))
        except Exception as e:
            raise _named(todo[i], e) from e
        done(i, result)
        bars.finish(i)


def _pool(todo: list[Unit], workers: int, bars: _Bars, done: Done) -> None:
    """Run ``todo`` on ``workers`` processes, each fed its next unit when it is free (by
    :func:`_pick`: the worker's own cost cache decides, then the weight)."""
    count = min(workers, len(todo))
    left = _heaviest_first(todo)
    last: list[tuple] = [()] * count
    busy: dict[int, tuple] = {}  # worker -> affinity of the task it runs
    manager = SyncManager()
    manager.start(ignore_interrupts)
    pools = [cf.ProcessPoolExecutor(max_workers=1, initializer=ignore_interrupts)
             for _ in range(count)]
    try:
        q = manager.Queue()
        running: dict[cf.Future, tuple[int, int]] = {}  # future -> (worker, task)

        def start(w: int) -> None:
            if not left:
                busy.pop(w, None)
                return
            i = _pick(left, todo, last[w], [a for v, a in busy.items() if v != w])
            last[w] = busy[w] = affinity(todo[i])
            running[pools[w].submit(run, todo[i], _Report(q, i))] = (w, i)

        for w in range(count):
            start(w)
        while running:
            finished, _ = cf.wait(running, timeout=POLL, return_when=cf.FIRST_COMPLETED)
            _drain(q, bars)
            bars.tick()
            for f in finished:
                w, i = running.pop(f)
                error = f.exception()
                if error is not None:
                    raise _named(todo[i], error) from error
                done(i, f.result())
                bars.finish(i)
                start(w)
        _drain(q, bars)
    except BaseException:
        # A failure (or ^C, or SIGTERM) ends the run: drop what has not started and stop
        # the workers still running a task (our own processes) rather than wait for them.
        stop(pools)
        raise
    finally:
        for pool in pools:
            pool.shutdown()
        manager.shutdown()


def _drain(q: Any, bars: _Bars) -> None:
    while True:
        try:
            i, n = q.get_nowait()
        except queue_module.Empty:
            return
        bars.update(i, n)


def _ray(todo: list[Unit], address: str, bars: _Bars, done: Done) -> None:
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
        order = _heaviest_first(todo)
        index = {remote.remote(todo[i]): i for i in order}
        pending = list(index)
        while pending:
            ready, pending = ray_module.wait(pending, num_returns=1, timeout=POLL)
            bars.tick()
            for ref in ready:
                i = index[ref]
                try:
                    result = ray_module.get(ref)
                except Exception as e:
                    for p in pending:
                        ray_module.cancel(p)
                    cause = getattr(e, "cause", None) or e
                    raise _named(todo[i], cause) from e
                done(i, result)
                bars.finish(i)
    finally:
        if started:
            ray_module.shutdown()
