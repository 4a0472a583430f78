"""The closed-loop client model of the multi-turn serving workload, driving any engine.

Exactly items 1-5 of the client model of ``docs/serving.md``, at the level of scheduler steps:

1. ``clients`` C own ``pool // C`` slots each; the conversations are taken from the file in
   order and fill slot 0 of clients 0..C-1, then slot 1 of clients 0..C-1, and so on.
2. A client has at most one request in the engine. When it has none, it sends the next turn of
   the conversation in the first non-empty slot at or after its slot pointer (cyclically) and
   moves the pointer to the slot after that one (the pointer starts at slot 0; a refilled slot
   keeps its position).
3. A conversation leaves when it has no turn left or its next turn would not fit
   (``len(prompt) + len(output) > max_model_len``); its slot is refilled at once with the next
   conversation of the file (one whose first turn does not fit leaves at once too, so the slot
   takes the next one). Conversations that leave in the same step are refilled in client order
   0..C-1; a client whose slots are all empty once the file is exhausted stops.
4. Before each step every client without a request in flight sends its next turn; requests
   sent before the same step enter the engine in client order. A request finishes in the step
   in which its last output token is produced; its client sends again before the next step.
5. Request ids are ``"<conversation id>:<turn>"``; a request asks for exactly ``len(output)``
   tokens and ignores end-of-sequence. The engine emits, after a step, the next token of
   ``Request.output`` for each scheduled request whose computed tokens reach its current
   length (one still prefilling emits nothing).

An engine is anything with ``add(Request)`` and ``step() -> StepOutput`` (:class:`Engine`);
:func:`run` returns a :class:`Run` with the per-step and per-request record and the report keys
of "What a run reports".
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from patton.serving.conversations import Conversation

__all__ = ["Request", "Scheduled", "Finished", "StepOutput", "Engine", "ClientError",
           "Step", "RequestRecord", "Report", "Run", "Clients", "run"]


# ----------------------------------------------------------------------- engine interface


@dataclass(frozen=True, slots=True)
class Request:
    """One turn sent to the engine.

    Invariants: ``prompt`` and ``output`` are non-empty; the request needs exactly
    ``len(output)`` output tokens and ignores end-of-sequence; its k-th output token (from 0)
    is ``output[k]``.
    """

    request_id: str  # "<conversation id>:<turn>"
    prompt: tuple[int, ...]  # the turn's prompt token ids (history + user message)
    output: tuple[int, ...]  # the token ids the "model" emits, one per finishing step


@dataclass(frozen=True, slots=True)
class Scheduled:
    """One request's share of a step."""

    request_id: str
    num_tokens: int  # tokens scheduled for it in the step (prefill chunk or 1 decode token)


@dataclass(frozen=True, slots=True)
class Finished:
    """A request that produced its last output token in a step."""

    request_id: str
    num_cached_tokens: int  # prompt tokens found in the prefix cache when first admitted


@dataclass(frozen=True, slots=True)
class StepOutput:
    """What one scheduler step did.

    Invariants: ``scheduled`` is in the engine's scheduling order with distinct ids;
    ``preempted`` lists the requests preempted in the step (each preemption once, in the
    engine's order); ``finished`` holds the requests whose last output token the step produced.
    """

    scheduled: tuple[Scheduled, ...]
    preempted: tuple[str, ...] = ()
    finished: tuple[Finished, ...] = ()


class Engine(Protocol):
    """A serving engine driven one scheduler step at a time."""

    def add(self, request: Request) -> None:
        """Queue a new request (it is first considered by the next :meth:`step`)."""

    def step(self) -> StepOutput:
        """Run one scheduler step (schedule, then the synthesised model output)."""


class ClientError(RuntimeError):
    """The engine broke the client model's contract or made no progress."""


# ----------------------------------------------------------------------------- records


@dataclass(frozen=True, slots=True)
class Step:
    """One step of a run, as the golden files record it."""

    scheduled: tuple[tuple[str, int], ...]  # (request id, tokens), in scheduled order
    preempted: tuple[str, ...]  # request ids preempted in the step


@dataclass(slots=True)
class RequestRecord:
    """One request of a run.

    Invariants: ``cached_tokens`` and ``finish_step`` are None until the request finished;
    ``history`` is what the conversation's previous turn had computed (its prompt and all but
    its last output token; 0 for turn 1).
    """

    request_id: str
    prompt_tokens: int  # len(prompt)
    output_tokens: int  # len(output)
    history: int  # tokens the previous turn computed
    sent_step: int  # index (from 0) of the first step the request was in the engine for
    cached_tokens: int | None = None  # vLLM's num_cached_tokens, reported at finish
    finish_step: int | None = None  # index (from 0) of the step that produced its last token

    @property
    def recomputed_tokens(self) -> int:
        """History that was computed before and had to be computed again (0 until finished)."""
        if self.cached_tokens is None:
            return 0
        return max(0, min(self.prompt_tokens, self.history) - self.cached_tokens)


@dataclass(frozen=True, slots=True)
class Report:
    """The keys of "What a run reports" (sums over finished requests)."""

    steps: int  # scheduler steps run
    requests: int  # requests finished
    prompt_tokens: int
    cached_tokens: int
    hit_rate: float  # cached_tokens / prompt_tokens (0.0 when no prompt tokens)
    preemptions: int  # times a running request was preempted
    recomputed_tokens: int

    def as_dict(self) -> dict[str, Any]:
        """Return the report as a plain dict in the table's key order."""
        return {"steps": self.steps, "requests": self.requests,
                "prompt_tokens": self.prompt_tokens, "cached_tokens": self.cached_tokens,
                "hit_rate": self.hit_rate, "preemptions": self.preemptions,
                "recomputed_tokens": self.recomputed_tokens}


@dataclass(slots=True)
class Run:
    """Everything a run did: steps in order and requests in the order they were sent."""

    steps: list[Step] = field(default_factory=list)
    requests: dict[str, RequestRecord] = field(default_factory=dict)
    complete: bool = False  # True when every request finished before the step limit

    def report(self) -> Report:
        """Return the report keys of the run."""
        done = [r for r in self.requests.values() if r.finish_step is not None]
        prompt = sum(r.prompt_tokens for r in done)
        cached = sum(r.cached_tokens or 0 for r in done)
        return Report(steps=len(self.steps), requests=len(done), prompt_tokens=prompt,
                      cached_tokens=cached, hit_rate=cached / prompt if prompt else 0.0,
                      preemptions=sum(len(s.preempted) for s in self.steps),
                      recomputed_tokens=sum(r.recomputed_tokens for r in done))

    def as_dict(self) -> dict[str, Any]:
        """Return the run as plain JSON data (the body of a golden file).

        ``steps`` is a list of ``{"scheduled": [[request id, tokens], ...], "preempted":
        [...]}`` in step order; ``requests`` maps request ids, in the order they were sent, to
        their record (``cached_tokens``/``finish_step`` null when unfinished).
        """
        return {
            "complete": self.complete,
            "report": self.report().as_dict(),
            "steps": [{"scheduled": [list(s) for s in st.scheduled],
                       "preempted": list(st.preempted)} for st in self.steps],
            "requests": {rid: {"prompt_tokens": r.prompt_tokens,
                               "output_tokens": r.output_tokens, "history": r.history,
                               "sent_step": r.sent_step, "cached_tokens": r.cached_tokens,
                               "finish_step": r.finish_step}
                         for rid, r in self.requests.items()},
        }


# ------------------------------------------------------------------------------ clients


@dataclass(slots=True)
class _Live:
    """A conversation in a slot: the next turn to send and what the previous turn computed."""

    conversation: Conversation
    turn: int  # next turn to send (from 1)
    history: int  # tokens the previous turn computed (0 before turn 1)


@dataclass(slots=True)
class _Client:
    """One closed-loop client: its slots, its round-robin pointer, its request in flight."""

    slots: list[_Live | None]
    pointer: int = 0  # the slot to look at first
    in_flight: tuple[str, int] | None = None  # (request id, its conversation's slot)


class Clients:
    """C closed-loop clients over a live pool of P conversations (items 1-3 of the model).

    Args:
        conversations: the file's conversations, taken in order.
        clients: C, the target concurrency (>= 1).
        pool: P, live conversations, a multiple of C.
        max_model_len: L; a turn fits when ``len(prompt) + len(output) <= L``.
    """

    def __init__(self, conversations: Iterable[Conversation], *, clients: int, pool: int,
                 max_model_len: int) -> None:
        if clients < 1:
            raise ValueError(f"clients must be >= 1, got {clients}")
        if pool < clients or pool % clients:
            raise ValueError(f"pool must be a positive multiple of clients ({clients}), "
                             f"got {pool}")
        if max_model_len < 2:
            raise ValueError(f"max_model_len must be >= 2, got {max_model_len}")
        self.max_model_len = max_model_len
        self._file: Iterator[Conversation] = iter(conversations)
        self.clients = [_Client([None] * (pool // clients)) for _ in range(clients)]
        for s in range(pool // clients):
            for c in self.clients:
                c.slots[s] = self._take()

    def _fits(self, conversation: Conversation, turn: int) -> bool:
        if turn > conversation.num_turns:
            return False
        prompt, output = conversation.turn(turn)
        return len(prompt) + len(output) <= self.max_model_len

    def _take(self) -> _Live | None:
        """Return the next conversation of the file whose first turn fits (None at the end)."""
        for conversation in self._file:
            if self._fits(conversation, 1):
                return _Live(conversation, 1, 0)
        return None

    def send(self) -> list[tuple[Request, int]]:
        """Return the requests idle clients send now, in client order, as (request, history)."""
        out: list[tuple[Request, int]] = []
        for c in self.clients:
            if c.in_flight is not None:
                continue
            n = len(c.slots)
            for k in range(n):
                s = (c.pointer + k) % n
                live = c.slots[s]
                if live is None:
                    continue
                prompt, output = live.conversation.turn(live.turn)
                rid = f"{live.conversation.id}:{live.turn}"
                c.in_flight = (rid, s)
                c.pointer = (s + 1) % n
                out.append((Request(rid, prompt, output), live.history))
                break
        return out

    def finish(self, request_ids: Iterable[str]) -> None:
        """Advance the conversations of finished requests; refill left slots in client order."""
        done = set(request_ids)
        for c in self.clients:
            if c.in_flight is None or c.in_flight[0] not in done:
                continue
            rid, s = c.in_flight
            done.discard(rid)
            c.in_flight = None
            live = c.slots[s]
            assert live is not None  # a slot with a request in flight is never refilled
            prompt, output = live.conversation.turn(live.turn)
            live.history = len(prompt) + len(output) - 1
            live.turn += 1
            if not self._fits(live.conversation, live.turn):
                c.slots[s] = self._take()
        if done:
            raise ClientError(f"engine finished requests not in flight: {sorted(done)}")

    @property
    def in_flight(self) -> int:
        """The number of requests in the engine."""
        return sum(c.in_flight is not None for c in self.clients)


def run(engine: Engine, conversations: Iterable[Conversation], *, clients: int, pool: int,
        max_model_len: int, max_steps: int | None = None) -> Run:
    """Drive ``engine`` with the client model until every request finished or ``max_steps``.

    Raises ClientError when the engine finishes an unknown request or a step schedules
    nothing while requests are in flight (it would never finish: e.g. too few blocks).
    """
    if max_steps is not None and max_steps < 0:
        raise ValueError(f"max_steps must be >= 0, got {max_steps}")
    model = Clients(conversations, clients=clients, pool=pool, max_model_len=max_model_len)
    out = Run()
    while True:
        for request, history in model.send():
            out.requests[request.request_id] = RequestRecord(
                request.request_id, len(request.prompt), len(request.output), history,
                len(out.steps))
            engine.add(request)
        if model.in_flight == 0:
            out.complete = True
            return out
        if max_steps is not None and len(out.steps) >= max_steps:
            return out
        result = engine.step()
        if not result.scheduled:
            raise ClientError(f"step {len(out.steps)} scheduled nothing with "
                              f"{model.in_flight} request(s) in flight (too few blocks or "
                              f"batched tokens for one request?)")
        index = len(out.steps)
        out.steps.append(Step(tuple((s.request_id, s.num_tokens) for s in result.scheduled),
                              tuple(result.preempted)))
        for f in result.finished:
            record = out.requests.get(f.request_id)
            if record is None or record.finish_step is not None:
                raise ClientError(f"step {index}: engine finished {f.request_id!r}, "
                                  f"which is not in flight")
            record.cached_tokens = f.num_cached_tokens
            record.finish_step = index
        model.finish(f.request_id for f in result.finished)
