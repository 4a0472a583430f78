"""``patton serve`` as a library call: a conversation file through an engine with a runtime.

:func:`serve` is the step driver (:mod:`patton.serving.driver`) with a :class:`~patton.serving.
meter.Meter` and no device work: the engine's scheduling and caching decisions, the KV-cache
hit rate they give, the live context and the runtime's capacity use. ``patton serve`` prints
it and Fig. 9 of the evaluation runs it (``docs/serving.md``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from patton.runtime.models import ModelSpec
from patton.serving.adapter import Attached, attach
from patton.serving.capacity import REQUIREMENTS, max_context
from patton.serving.conversations import Conversation
from patton.serving.driver import Driver, EngineFactory
from patton.serving.engine import EmbeddedEngine
from patton.serving.interface import EngineParams
from patton.serving.meter import Meter
from patton.serving.record import Run

__all__ = ["Served", "serve"]


@dataclass(slots=True)
class Served:
    """A served run: its record, what the meter measured, the adapter and the parameters."""

    run: Run
    meter: Meter
    attached: Attached
    params: EngineParams
    #: Conversations passed over whole: their first turn does not fit ``max_model_len``.
    passed_over: int = 0

    def report(self) -> dict[str, Any]:
        """The run's report keys (``docs/serving.md``), ``complete``, the live context tokens
        and the runtime's capacity and its use, as plain JSON data."""
        out: dict[str, Any] = self.run.report().as_dict()
        out["complete"] = self.run.complete
        out["live_context_tokens"] = self.meter.report()
        out.update(self.attached.report())
        return out


def serve(conversations: Iterable[Conversation], runtime: str, model: ModelSpec, *,
          clients: int, pool: int, num_blocks: int | None = None,
          block_size: int | None = None, max_num_seqs: int | None = None,
          max_batched_tokens: int = 2048, max_model_len: int = 8192,
          steps: int | None = None, engine: EngineFactory = EmbeddedEngine,
          progress: Any = None) -> Served:
    """Serve ``conversations`` with ``runtime`` attached (one of
    :data:`~patton.serving.capacity.RUNTIMES`), sized by
    :func:`~patton.serving.capacity.capacity` (``num_blocks`` None: the 16 GiB AiM device).

    ``max_num_seqs`` None is ``clients``; the block size is the runtime's
    (:data:`~patton.serving.capacity.REQUIREMENTS`) unless given. ``progress`` is a tqdm-like
    bar (advanced every 64 steps) or None.

    Raises:
        ValueError: a bad count, a capacity the runtime cannot lay out, or a context longer
            than the runtime holds.
        ClientError: a step scheduled nothing (too few blocks for one request).
    """
    convs = list(conversations)
    attached = attach(runtime, model, num_blocks=num_blocks, block_size=block_size)
    limit = max_context(runtime, model)
    if limit is not None and max_model_len > limit:
        raise ValueError(f"runtime {runtime} holds at most {limit} tokens of {model.name} "
                         f"context; max_model_len is {max_model_len}")
    params = EngineParams(block_size=attached.capacity.block_size,
                          enable_prefix_caching=REQUIREMENTS[runtime].prefix_caching,
                          num_blocks=attached.capacity.num_blocks,
                          max_num_seqs=max_num_seqs or clients,
                          max_num_batched_tokens=max_batched_tokens,
                          max_model_len=max_model_len)
    meter = Meter({c.id: c for c in convs}, max_model_len, attached, progress)
    driver = Driver(engine, params, convs, clients=clients, pool=pool, attached=attached,
                    observers=[meter], max_steps=steps)
    run = driver.run()
    return Served(run, meter, attached, params, driver.clients.passed_over)
