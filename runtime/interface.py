"""The one runtime interface: what the serving engine and the evaluation ask of a KV runtime.

A KV-cache runtime on AiM turns vLLM's block events into placements and the placements into
programs in the shared ISA (:mod:`patton.sim.isa`), which run on every executor. PATTON
(:class:`~patton.runtime.patton.lifecycle.Runtime`, every :mod:`~patton.runtime.patton.variants` variant)
implements :class:`KvRuntime`; so must every translated baseline layout (NeuPIMs, AttAcc,
BlockPIM, PIMphony), so that the engine's adapter (:mod:`patton.serving.runtimes`), the
decode-step programs (:mod:`patton.runtime.decode_batch`) and the evaluation drive them
alike. ``tests/test_runtime_interface.py`` checks that each implementation has every member
with these parameter names.

Contract, in vLLM's terms (block ids are the engine's; request ids are small integers):

* **Lifecycle** (each call checks before it mutates: a raised
  :class:`~patton.runtime.errors.PattonError` leaves the runtime unchanged):
  ``allocate`` binds a new empty block to a request and appends it to the request's block
  table; ``share`` appends a full block another request holds (reference count up, nothing
  copied); ``free`` drops one reference (a full block at zero references stays mapped as
  *cached*, a partial one is released); ``finish`` frees a request's blocks, last first;
  ``evict`` unbinds a cached block. A runtime without prefix caching may refuse ``share``
  and never keep cached blocks; it says so in its own docstring.
* **Capacity**: ``free_blocks()`` is what a new request could allocate in every layer now,
  ``free_blocks_for(r)`` what request ``r`` could (a runtime may refuse a block while the
  engine still has free blocks: its placement constraint).
* **Writes**: ``write_many`` writes whole or partial blocks (prefill), ``append`` one token at
  the fill level of each block (a decode step); both return the programs by kind, Key writes,
  Value writes and (PATTON's) Commit Zone commits (:class:`~patton.runtime.patton.writes.Writes`,
  :class:`~patton.runtime.patton.writes.WriteProgram`), so that costs decompose as the paper's Fig. 7.
* **Attention**: ``qk_step`` and ``sv_step`` return one program for a batch of requests in one
  layer, with each request's plan (where its scores or outputs are read back);
  ``sv_buffer`` is the zeroed score buffer ``sv_step`` takes without a copy.
* **Read-outs**: a batch program's read-outs are split into each request's by
  :func:`split_readouts` (PATTON's are contiguous per request, a baseline's interleave), and
  each plan's ``decode(readouts, config)`` turns them into scores ``(heads, blocks * T)`` or
  outputs ``(heads, D)``.
* **State**: ``blocks`` maps every bound block id to its record, which has at least the
  reference count ``ref_cnt`` and ``full`` (the engine's adapter mirrors both); ``check()``
  asserts every invariant of the runtime's metadata.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

import numpy as np
from patton.runtime.baselines.geometry import Geometry
from patton.runtime.patton.config import Config
from patton.runtime.patton.writes import WriteProgram, Writes
from patton.sim.program import Program

__all__ = ["KvRuntime", "BoundBlock", "MEMBERS", "split_readouts"]


class BoundBlock(Protocol):
    """What the interface promises of a bound block's record."""

    ref_cnt: int  # requests holding it (0: cached)
    full: bool  # every token position written


@runtime_checkable
class KvRuntime(Protocol):
    """A KV-cache runtime on AiM (the contract is in the module's docstring)."""

    config: Config | Geometry  # PATTON's granule geometry, or a baseline's unit geometry
    blocks: Mapping[int, BoundBlock]

    def free_blocks(self) -> int: ...

    def free_blocks_for(self, request: int) -> int: ...

    def allocate(self, request: int, block_id: int) -> object: ...

    def share(self, request: int, block_id: int) -> None: ...

    def free(self, request: int, block_id: int) -> None: ...

    def finish(self, request: int) -> None: ...

    def evict(self, block_id: int) -> None: ...

    def write_many(self, items: list[tuple[int, int, np.ndarray, np.ndarray]], *,
                   emit: bool = True) -> Writes: ...

    def append(self, block_ids: Sequence[int], keys: np.ndarray,
               values: np.ndarray) -> WriteProgram: ...

    def qk_step(self, requests: list[int], layer: int,
                queries: np.ndarray) -> tuple[Program, list]: ...

    def sv_buffer(self, requests: list[int], layer: int, width: int) -> np.ndarray: ...

    def sv_step(self, requests: list[int], layer: int,
                probs: np.ndarray) -> tuple[Program, list]: ...

    def check(self) -> None: ...


#: The interface's methods, in the order above (the conformance test walks them).
MEMBERS = ("free_blocks", "free_blocks_for", "allocate", "share", "free", "finish", "evict",
           "write_many", "append", "qk_step", "sv_buffer", "sv_step", "check")


def split_readouts(plans: Sequence, readouts: Sequence, config: Config | Geometry) -> list[list]:
    """Split a batch program's read-outs into each request's, in the order its plan decodes.

    A baseline's plans carry the order its interleaved program returns them in
    (:func:`patton.runtime.baselines.programs.deal`); PATTON's are contiguous, one plan's
    ``readouts(config)`` after another.

    Raises:
        ValueError: the read-outs do not add up to the plans'.
    """
    if hasattr(plans, "order"):
        from patton.runtime.baselines.programs import deal

        return deal(plans, readouts)
    out, k = [], 0
    for plan in plans:
        n = plan.readouts(config)
        out.append(list(readouts[k:k + n]))
        k += n
    if k != len(readouts):
        raise ValueError(f"{len(readouts)} read-outs for plans of {k}")
    return out
