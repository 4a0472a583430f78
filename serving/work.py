"""One step's work as the device sees it: which tokens' KV is written where, who attends.

:func:`split` turns the engine's :class:`~patton.serving.engine.Schedule` into a
:class:`StepWork`: an :class:`Entry` per scheduled request (its tokens, where they start,
whether they are a decode token and whether the request was admitted in this step) and the
:class:`Piece` of each entry's tokens that falls in each block of its block table. The forward
pass (:mod:`patton.serving.forward`) writes the pieces and runs decode attention for the
decode entries; observers of the step driver read the same record.

A **decode** entry is one token at or past the prompt (``tokens == 1 and start >= prompt``):
its KV is written on the PIM and the request attends there. Every other entry is a prefill
chunk, the GPU's attention; a chunk that recomputes generated tokens after a preemption is a
prefill chunk too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from patton.serving.engine import Schedule, Sequence

__all__ = ["Entry", "Piece", "StepWork", "split"]


@dataclass(frozen=True, slots=True)
class Entry:
    """One scheduled request's share of a step.

    Invariants: the step computes tokens ``start .. start + tokens - 1`` of ``seq``;
    ``decode`` iff ``tokens == 1 and start >= prompt``; an ``admitted`` entry's ``start`` is its
    prefix-cache hit.
    """

    seq: Sequence  # the engine's sequence (tokens, outputs so far, preemptions)
    request: int  # the runtime's request number (-1 when no runtime is attached)
    tokens: int  # tokens scheduled
    start: int  # the request's computed tokens before the step
    decode: bool  # a decode token (else a prefill chunk)
    admitted: bool  # admitted from the waiting queue in this step
    table: list[int]  # the request's block table (the engine's, at the step)

    @property
    def prompt(self) -> int:
        """The request's prompt tokens."""
        return len(self.seq.tokens) - self.seq.num_output


@dataclass(frozen=True, slots=True)
class Piece:
    """The tokens of an entry that fall in one block."""

    entry: Entry
    block: int  # the engine's (and the runtime's) block id
    offset: int  # first token's offset in the block
    position: int  # first token's position in the sequence
    tokens: int  # tokens in this block


@dataclass(slots=True)
class StepWork:
    """One step of the run, between scheduling and the model output.

    Invariants: ``entries`` are in scheduling order; ``pieces`` are every entry's, in
    scheduling order, block by block; ``width`` is the widest decode request's block table
    times the block size (the SV score buffer's width), 0 without decode entries.
    """

    index: int  # the step (from 0)
    schedule: Schedule
    entries: list[Entry]
    pieces: list[Piece]
    width: int
    decode: list[Entry] = field(default_factory=list)  # the decode entries, in order
    prefill: list[Entry] = field(default_factory=list)  # the prefill chunks, in order
    #: The forward pass's runtime call whose programs run now: ``"append"`` (the decode
    #: tokens, one each), ``"write"`` (a write call's pieces), ``"attention"``.
    call: str = ""


def split(index: int, schedule: Schedule, tables: Mapping[str, list[int]], block_size: int,
          ids: Mapping[str, int] | None = None) -> StepWork:
    """Return step ``index``'s :class:`StepWork` (``tables``: the engine's block tables;
    ``ids``: engine request id -> runtime request, None without a runtime)."""
    entries: list[Entry] = []
    pieces: list[Piece] = []
    decode: list[Entry] = []
    prefill: list[Entry] = []
    widest = 0
    running = schedule.running
    for i, ((seq, n), start) in enumerate(zip(schedule.scheduled, schedule.starts)):
        rid = seq.request_id
        table = tables[rid]
        is_decode = n == 1 and start >= len(seq.tokens) - seq.num_output
        entry = Entry(seq, -1 if ids is None else ids[rid], n, start, is_decode, i >= running,
                      table)
        entries.append(entry)
        if is_decode:
            decode.append(entry)
            widest = max(widest, len(table))
        else:
            prefill.append(entry)
        pos = start
        while pos < start + n:
            end = min(start + n, (pos // block_size + 1) * block_size)
            pieces.append(Piece(entry, table[pos // block_size], pos % block_size, pos,
                                end - pos))
            pos = end
    return StepWork(index, schedule, entries, pieces, widest * block_size, decode, prefill)
