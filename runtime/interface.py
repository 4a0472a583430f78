"""The one runtime interface: what the serving engine and the evaluation ask of a KV runtime.

A KV-cache runtime on AiM turns vLLM's block events into placements and the placements into
programs in the shared ISA (:mod:`patton.sim.isa`), which run on every executor. PATTON
(:class:`~patton.runtime.patton.lifecycle.Runtime`, every :mod:`~patton.runtime.patton.variants`
variant) implements :class:`KvRuntime`; so must every translated baseline layout (NeuPIMs,
AttAcc, BlockPIM, PIMphony), so that the engine's adapter (:mod:`patton.serving.adapter`), the
serving step driver's forward pass (:mod:`patton.serving.forward`) and the evaluation drive them
alike. The interface names no implementation: each plan family splits its own read-outs.
``tests/test_runtime_interface.py`` checks that each implementation has every member with these
parameter names.

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
  :class:`~patton.runtime.patton.writes.WriteProgram`), so that costs decompose as the paper's
  Fig. 7.
* **Attention**: ``qk_step`` and ``sv_step`` return one program for a batch of requests in one
  layer, with each request's plan (where its scores or outputs are read back);
  ``sv_buffer`` is the zeroed score buffer ``sv_step`` takes without a copy.
* **Read-outs**: ``qk_step``/``sv_step`` return the batch's :class:`Plans`, whose
  ``split(readouts)`` gives each request's read-outs (PATTON's come contiguous per request, a
  baseline's interleave), and each plan's ``decode(readouts, config)`` turns them into scores
  ``(heads, blocks * T)`` or outputs ``(heads, D)``.
* **State**: ``blocks`` maps every bound block id to its record, which has at least the
  reference count ``ref_cnt`` and ``full`` (the engine's adapter mirrors both); ``check()``
  asserts every invariant of the runtime's metadata; ``config`` is the runtime's
  :class:`Geometry`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Protocol, runtime_checkable

import numpy as np
from patton.sim.device import Device
from patton.sim.isa import Instruction
from patton.sim.program import Program, Readout

__all__ = ["KvRuntime", "BoundBlock", "Geometry", "Written", "Plans", "ColumnarWrites",
           "MEMBERS"]


class BoundBlock(Protocol):
    """What the interface promises of a bound block's record."""

    ref_cnt: int  # requests holding it (0: cached)
    full: bool  # every token position written


class Geometry(Protocol):
    """What the interface promises of a runtime's layout (PATTON's
    :class:`~patton.runtime.patton.config.Config`, a baseline's
    :class:`~patton.runtime.baselines.geometry.Geometry`)."""

    device: Device  # the AiM device it lays the KV cache out on
    block_size: int  # tokens per block (the engine's)
    n_layers: int  # layers laid out
    heads: int  # KV heads
    d_head: int  # head dimension
    rows_per_layer: int  # rows of every channel one layer takes (layer l: l bands down)


class Written(Protocol):
    """What a write call returns: its programs by kind, Key writes, Value writes and (PATTON's)
    Commit Zone commits (:class:`~patton.runtime.patton.writes.Writes` and
    :class:`~patton.runtime.patton.writes.WriteProgram`), each a program or its
    instructions."""

    key: Program | Sequence[Instruction]
    value: Program | Sequence[Instruction]
    commit: Program | Sequence[Instruction]


class Plans(Protocol):
    """A batch program's plans, one per request in batch order."""

    def __len__(self) -> int: ...

    def __iter__(self) -> Iterator: ...

    def __getitem__(self, i: int) -> object: ...

    def split(self, readouts: Sequence[Readout]) -> list[list[Readout]]:
        """Each request's read-outs, in the order its plan decodes them.

        Raises:
            ValueError: the read-outs do not add up to the plans'.
        """
        ...


@runtime_checkable
class KvRuntime(Protocol):
    """A KV-cache runtime on AiM (the contract is in the module's docstring)."""

    config: Geometry  # PATTON's granule geometry, or a baseline's unit geometry
    blocks: Mapping[int, BoundBlock]

    def free_blocks(self) -> int: ...

    def free_blocks_for(self, request: int) -> int: ...

    def allocate(self, request: int, block_id: int) -> object: ...

    def share(self, request: int, block_id: int) -> None: ...

    def free(self, request: int, block_id: int) -> None: ...

    def finish(self, request: int) -> None: ...

    def evict(self, block_id: int) -> None: ...

    def write_many(self, items: list[tuple[int, int, np.ndarray, np.ndarray]], *,
                   emit: bool = True) -> Written: ...

    def append(self, block_ids: Sequence[int], keys: np.ndarray,
               values: np.ndarray) -> Written: ...

    def qk_step(self, requests: list[int], layer: int,
                queries: np.ndarray) -> tuple[Program, Plans]: ...

    def sv_buffer(self, requests: list[int], layer: int, width: int) -> np.ndarray: ...

    def sv_step(self, requests: list[int], layer: int,
                probs: np.ndarray) -> tuple[Program, Plans]: ...

    def token_index(self, request: int) -> np.ndarray: ...

    def check(self) -> None: ...


@runtime_checkable
class ColumnarWrites(Protocol):
    """A runtime that also builds a write call's programs as columns, fast
    (PATTON's :meth:`~patton.runtime.patton.lifecycle.Runtime.write_program`): the same
    programs as :meth:`KvRuntime.write_many` with ``emit``, valid until its next write call."""

    def write_program(self, items: list[tuple[int, int, np.ndarray, np.ndarray]]
                      ) -> Written: ...


#: The interface's methods, in the order above (the conformance test walks them).
MEMBERS = ("free_blocks", "free_blocks_for", "allocate", "share", "free", "finish", "evict",
           "write_many", "append", "qk_step", "sv_buffer", "sv_step", "token_index", "check")
