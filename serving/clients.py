"""The closed-loop client model of the multi-turn serving workload.

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

:class:`Clients` is the workload side of the step driver (:mod:`patton.serving.driver`), which
sends what they send, steps the engine and tells them which requests finished.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from patton.serving.conversations import Conversation
from patton.serving.interface import Request

__all__ = ["ClientError", "Clients"]


class ClientError(RuntimeError):
    """The engine broke the client model's contract or made no progress."""


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
        #: Conversations of the file passed over because their first turn does not fit.
        self.passed_over = 0
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
            self.passed_over += 1
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
