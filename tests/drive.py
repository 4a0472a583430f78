"""Tests' shortcut to the step driver: drive an engine the test built (or a test double)."""

from __future__ import annotations

from collections.abc import Iterable

from patton.serving.conversations import Conversation
from patton.serving.driver import Driver
from patton.serving.interface import Engine, EngineParams
from patton.serving.record import Run


def serve(engine: Engine, conversations: Iterable[Conversation], *, clients: int, pool: int,
          max_model_len: int, max_steps: int | None = None) -> Run:
    """Serve ``conversations`` with the client model through ``engine`` (already built: its
    observer and placement are the test's) on the step driver; return the run's record."""
    return Driver(lambda params, **_: engine, EngineParams(max_model_len=max_model_len),
                  conversations, clients=clients, pool=pool, max_steps=max_steps).run()
