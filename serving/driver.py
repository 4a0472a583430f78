"""The serving loop, written once: one scheduler step at a time, with observers.

One :meth:`Driver.step`::

    send      the clients' next turns enter the engine            (observers: sent)
    schedule  the engine schedules the step; every block event     (observers: event)
              goes to the runtime through the adapter, which may
              refuse placements
              the step's work (:class:`~patton.serving.work.StepWork`)  (observers: scheduled)
    forward   the runtime's programs for the step's KV writes and decode attention, run on
              the executor (:mod:`patton.serving.forward`)     (writing, program, ran, wrote,
                                                                attending, scores, outputs)
    update    the model output: tokens appended, finished requests release their blocks,
              the clients send again                               (observers: stepped)

``patton serve``, the chat demo, the cost runs of the evaluation and the random scenario are
this driver with other observers (metering, checks, costing, fault injection). An observer is
any object; the driver calls the hooks it defines (:data:`HOOKS`), in the order the observers
were given, and ignores the rest.

The engine is built by the driver from a factory (``EmbeddedEngine``, ``VllmEngine``), so that
its block events reach the adapter and the observers. Device work needs an engine whose step
splits around it (:class:`~patton.serving.interface.SplitEngine`); without a forward pass any
engine will do. The driver keeps the run's record (:class:`~patton.serving.record.Run`: every
step's schedule and preemptions, every request) and raises
:class:`~patton.serving.clients.ClientError` when the engine finishes a request that is not in
flight or schedules nothing while requests wait.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from patton.serving.adapter import Attached
from patton.serving.clients import ClientError, Clients
from patton.serving.conversations import Conversation
from patton.serving.events import BlockEvent
from patton.serving.forward import Batching, Forward
from patton.serving.interface import Engine, EngineParams, SplitEngine, StepOutput
from patton.serving.kv_cache import Placement
from patton.serving.kv_data import KvData
from patton.serving.record import RequestRecord, Run, Step
from patton.serving.work import StepWork, split
from patton.sim.executor import Executor

__all__ = ["HOOKS", "Driver", "EngineFactory"]

#: The hooks an observer may define, with what they receive.
HOOKS = {
    "start": "(driver): the driver is built (its engine exists), nothing has run",
    "sent": "(request, history): a request entered the engine",
    "event": "(event): a block event, after the runtime has applied it",
    "scheduled": "(work): the step is scheduled (its StepWork), before any device work",
    "writing": "(work, items): before the step's writes; False: write nothing",
    "program": "(work, phase, program) -> program: before a program runs (may replace it)",
    "ran": "(work, phase, program, result): after it ran (result None without an executor)",
    "wrote": "(work, items): after the step's writes and commits",
    "attending": "(work): before the decode requests' attention",
    "scores": "(work, layer, queries, scores): the QK^T scores read back, per request",
    "outputs": "(work, layer, probs, plans, index, outputs): the SV outputs, per request",
    "stepped": "(work, out): the step is over (work None when the engine ran it whole)",
}

#: Builds an engine: ``factory(params, observer=..., placement=...)``.
EngineFactory = Callable[..., Engine]


class Driver:
    """Serves conversations through an engine, a runtime and a device, one step at a time.

    Args:
        engine: the engine's factory (``EmbeddedEngine`` or ``VllmEngine``).
        params: the engine's parameters.
        conversations: the workload, taken in order by the clients.
        clients: C closed-loop clients; ``pool``: the live conversations (a multiple of C).
        attached: the runtime the engine drives (its adapter), or None (vLLM's own cache).
        observers: objects with any of the :data:`HOOKS`.
        data: with ``executor`` or ``batching``, the forward pass's Keys, Values and queries.
        executor: the device the forward pass runs on, or None.
        batching: the forward pass's write batching; None with no executor: no forward pass.
        max_steps: stop after this many steps (None: when every conversation is served).
    """

    def __init__(self, engine: EngineFactory, params: EngineParams,
                 conversations: Iterable[Conversation], *, clients: int, pool: int,
                 attached: Attached | None = None, observers: Sequence[object] = (),
                 data: KvData | None = None, executor: Executor | None = None,
                 batching: Batching | None = None, max_steps: int | None = None) -> None:
        if max_steps is not None and max_steps < 0:
            raise ValueError(f"max_steps must be >= 0, got {max_steps}")
        self.params = params
        self.attached = attached
        self.observers = list(observers)
        self.hooks: dict[str, list[Callable[..., Any]]] = {
            name: [getattr(o, name) for o in self.observers if callable(getattr(o, name, None))]
            for name in HOOKS}
        self.clients = Clients(conversations, clients=clients, pool=pool,
                               max_model_len=params.max_model_len)
        placement: Placement | None = attached.placement if attached is not None else None
        events = self.hooks["event"]
        observe = attached.observe if attached is not None else None
        observer: Callable[[BlockEvent], None] | None = observe
        if events:
            observer = self._event
        self.engine = engine(params, observer=observer, placement=placement)
        self.forward: Forward | None = None
        if executor is not None or batching is not None:
            if attached is None or attached.runtime is None:
                raise ValueError("a forward pass needs a runtime attached")
            if data is None or batching is None:
                raise ValueError("a forward pass needs its data and its batching")
            if not isinstance(self.engine, SplitEngine):
                raise ValueError(f"{type(self.engine).__name__} cannot stop between scheduling "
                                 "and the model output: it cannot run a forward pass")
            self.forward = Forward(attached.runtime, data, executor, batching, self.hooks)
        self.max_steps = max_steps
        self.run_record = Run()
        # the step is split around its device work only when something needs the split
        self._split = isinstance(self.engine, SplitEngine) and (
            self.forward is not None or bool(self.hooks["scheduled"]))
        for h in self.hooks["start"]:
            h(self)

    def _event(self, event: BlockEvent) -> None:
        if self.attached is not None:
            self.attached.observe(event)
        for h in self.hooks["event"]:
            h(event)

    # ---------------------------------------------------------------------- the loop

    @property
    def steps(self) -> int:
        """Steps run so far."""
        return len(self.run_record.steps)

    def run(self) -> Run:
        """Step until every conversation is served or ``max_steps``; return the record."""
        while self.step():
            pass
        return self.run_record

    def step(self) -> bool:
        """Run one step; return False (running nothing) when the run is over."""
        record = self.run_record
        index = len(record.steps)
        clients, engine = self.clients, self.engine
        sent = self.hooks["sent"]
        for request, history in clients.send():
            record.requests[request.request_id] = RequestRecord(
                request.request_id, len(request.prompt), len(request.output), history, index)
            for h in sent:
                h(request, history)
            engine.add(request)
        if clients.in_flight == 0:
            record.complete = True
            return False
        if self.max_steps is not None and index >= self.max_steps:
            return False
        work: StepWork | None = None
        if self._split:
            schedule = engine.schedule()  # type: ignore[attr-defined]
            if not schedule.scheduled:  # type: ignore[attr-defined]
                raise self._stalled(index)
            work = self._work(index, schedule)
            for h in self.hooks["scheduled"]:
                h(work)
            if self.forward is not None:
                self.forward.run(work)
            out = engine.update(schedule)  # type: ignore[attr-defined]
        else:
            out = engine.step()
            if not out.scheduled:
                raise self._stalled(index)
        self._record(index, out)
        clients.finish(f.request_id for f in out.finished)
        for h in self.hooks["stepped"]:
            h(work, out)
        return True

    def _work(self, index: int, schedule: Any) -> StepWork:
        ids = self.attached.ids if self.attached is not None else None
        return split(index, schedule, self.engine.tables,  # type: ignore[attr-defined]
                     self.params.block_size, ids)

    def _stalled(self, index: int) -> ClientError:
        return ClientError(f"step {index} scheduled nothing with {self.clients.in_flight} "
                           "request(s) in flight (too few blocks or batched tokens for one "
                           "request?)")

    def _record(self, index: int, out: StepOutput) -> None:
        record = self.run_record
        record.steps.append(Step(tuple((s.request_id, s.num_tokens) for s in out.scheduled),
                                 tuple(out.preempted)))
        for f in out.finished:
            r = record.requests.get(f.request_id)
            if r is None or r.finish_step is not None:
                raise ClientError(f"step {index}: engine finished {f.request_id!r}, which is "
                                  "not in flight")
            r.cached_tokens = f.num_cached_tokens
            r.finish_step = index
