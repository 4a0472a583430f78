"""The serving engine's interface: what goes in (requests), what a step reports, its parameters.

Both engines implement :class:`Engine`: the embedded one (:mod:`patton.serving.engine`, vLLM
0.33's scheduler restated) and real vLLM (:mod:`patton.serving.vllm_engine`). An engine that
can stop between scheduling a step and its model output (:class:`SplitEngine`: the embedded
one) lets the step driver run the step's device work in between (:mod:`patton.serving.driver`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = ["Request", "Scheduled", "Finished", "StepOutput", "Engine", "SplitEngine",
           "EngineParams"]


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


@runtime_checkable
class SplitEngine(Engine, Protocol):
    """An engine whose step can be split around the model's work: ``step()`` is
    ``update(schedule())``, and between the two every block the schedule needs is bound and
    no finished request has released its blocks yet."""

    def schedule(self) -> object:
        """Schedule one step (vLLM's ``schedule()``); :meth:`update` must follow."""

    def update(self, schedule: object) -> StepOutput:
        """Finish the step :meth:`schedule` began (vLLM's ``update_from_output()``)."""

    @property
    def tables(self) -> Mapping[str, list[int]]:
        """Every request's block table (request id -> block ids), as scheduled."""


@dataclass(frozen=True, slots=True)
class EngineParams:
    """vLLM v1 engine parameters of a run (``docs/serving.md``).

    Invariants: ``num_blocks >= 2`` (block 0 is vLLM's null block, so ``num_blocks - 1`` are
    usable); every other count >= 1.
    """

    block_size: int = 16  # tokens per KV block
    num_blocks: int = 1024  # vLLM's num_gpu_blocks, null block included
    max_num_seqs: int = 128  # running requests at most
    max_num_batched_tokens: int = 2048  # tokens scheduled per step at most
    max_model_len: int = 8192  # context length
    #: vLLM's prefix caching (``CacheConfig.enable_prefix_caching``). Off: no prefix hits, and
    #: a freed block returns to the free list without a key (nothing stays cached).
    enable_prefix_caching: bool = True

    def __post_init__(self) -> None:
        if self.num_blocks < 2:
            raise ValueError(f"num_blocks must be >= 2 (block 0 is the null block), "
                             f"got {self.num_blocks}")
        for name in ("block_size", "max_num_seqs", "max_num_batched_tokens", "max_model_len"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
