"""The embedded engine: vLLM 0.33's v1 ``Scheduler`` restated for the multi-turn workload.

:class:`EmbeddedEngine` is a :class:`patton.serving.interface.SplitEngine` that makes the same
scheduling decision as real vLLM 0.33.0 (``vllm/v1/core/sched/scheduler.py``) in every step,
for exactly what the workload uses: one full-attention KV cache group, prefix caching on,
chunked prefill on, FCFS, recompute preemption, synchronous scheduling, no spec decode, no
connectors, no LoRA, no multimodal, no structured output, ``long_prefill_token_threshold`` 0,
watermark 0, ``scheduler_reserve_full_isl`` on (vLLM's defaults). In our own words:

``step()`` = ``schedule()`` then ``update_from_output()`` with the synthesised model output.

schedule():
  1. **Running** requests, in ``running`` order, while the token budget
     (``max_num_batched_tokens``) lasts: each gets ``min(len - computed, budget,
     max_model_len - computed - 1)`` tokens (a prefill chunk, or 1 decode token). When its
     slots do not fit, the **last** request of ``running`` is preempted (blocks freed tail
     first, computed tokens reset to 0, output tokens kept, put at the **front** of the
     waiting queue) and the allocation retried; if the victim was the request itself, the
     running pass stops.
  2. **Waiting** requests, only if nothing was preempted in this step, front first, while the
     budget lasts and fewer than ``max_num_seqs`` run: prefix lookup (hits capped at
     ``len - 1`` tokens), then ``min(len - hit, budget)`` tokens, with the admission check
     that the whole sequence fits; the first request that does not fit stops the pass.
     A request's reported ``num_cached_tokens`` is its hit in the step it is first admitted
     (lookups after a preemption do not change it).
  3. Every scheduled request's computed tokens advance by its scheduled tokens.

update_from_output(), in scheduling order (one pass with step 3): a scheduled request whose computed tokens reach
its length appends the next token of its output (new full blocks get keys); it finishes with
its last output token (or at ``max_model_len``), and its blocks are freed at once, tail first.

``params.enable_prefix_caching`` False is vLLM with prefix caching off: no request finds a
prefix hit and no block is cached (``KVCacheManager(prefix_caching=False)``).

Block events go to an optional observer and a :class:`~patton.serving.kv_cache.Placement`
may refuse new blocks (see :mod:`patton.serving.kv_cache`); with neither (the ``gpu``
reference) the engine is plain vLLM.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from patton.serving.block_pool import BlockPool
from patton.serving.events import Observer
from patton.serving.interface import EngineParams, Finished, Request, Scheduled, StepOutput
from patton.serving.kv_cache import KVCacheManager, Placement, PrefixKeys

__all__ = ["SETTINGS", "Sequence", "Schedule", "EmbeddedEngine"]

#: The vLLM 0.33 settings this engine restates (vLLM's defaults, as the golden files record the
#: settings in force; ``max_num_scheduled_tokens`` is ``max_num_batched_tokens``).
SETTINGS: dict[str, object] = {
    "vllm": "0.33.0", "policy": "fcfs", "enable_chunked_prefill": True,
    "enable_prefix_caching": True, "long_prefill_token_threshold": 0,
    "scheduler_reserve_full_isl": True, "watermark": 0.0, "async_scheduling": False,
}

WAITING, RUNNING, PREEMPTED = "waiting", "running", "preempted"


@dataclass(slots=True, eq=False)
class Sequence:
    """One request inside the engine (vLLM's ``Request`` for this workload).

    Invariants: ``tokens`` is the prompt followed by the output tokens emitted so far
    (``num_output`` of them); ``keys`` are the prefix keys of ``tokens``' full blocks;
    ``0 <= num_computed <= len(tokens)``; ``num_computed == 0`` unless ``status`` is RUNNING;
    ``cached_tokens`` is the hit of the first admission (0 until then).
    """

    request_id: str
    tokens: list[int]
    output: tuple[int, ...]  # the tokens the "model" emits, in order
    keys: list[int] = field(default_factory=list)
    num_computed: int = 0
    num_output: int = 0
    status: str = WAITING
    num_preemptions: int = 0
    cached_tokens: int = 0
    limit: int = -1  # the last token it can compute without allocating (KVCacheManager.limit)
    decode_entry: Scheduled = field(init=False)  # Scheduled(request_id, 1), made once

    def __post_init__(self) -> None:
        self.decode_entry = Scheduled(self.request_id, 1)


@dataclass(frozen=True, slots=True)
class Schedule:
    """One step's schedule before the model runs (what :meth:`EmbeddedEngine.schedule` made).

    Invariants: ``scheduled[i]`` is ``(sequence, tokens)`` in scheduling order; the step
    computes tokens ``starts[i] .. starts[i] + tokens - 1`` of that sequence (its KV is
    written in this step), ``starts[i]`` being its computed tokens after the prefix lookup;
    the first ``running`` entries were running before the step, the rest were admitted from
    the waiting queue in it (their ``starts`` are their prefix-cache hits); ``preempted`` lists
    the sequences preempted while scheduling.
    """

    scheduled: list[tuple[Sequence, int]]
    starts: list[int]
    preempted: list[Sequence]
    running: int  # entries of requests that were running before the step


class EmbeddedEngine:
    """vLLM 0.33's scheduler and KV cache manager in pure Python.

    Args:
        params: the engine parameters (block size, blocks, batch limits, context length).
        observer: receives every block event in program order, or None.
        placement: a runtime that may refuse new blocks, or None.
    """

    def __init__(self, params: EngineParams, *, observer: Observer | None = None,
                 placement: Placement | None = None) -> None:
        self.params = params
        self.kv = KVCacheManager(params.num_blocks, params.block_size, params.max_model_len,
                                 observer=observer, placement=placement,
                                 prefix_caching=params.enable_prefix_caching)
        self._keys = PrefixKeys(params.block_size)
        self.running: list[Sequence] = []
        self.waiting: deque[Sequence] = deque()
        self.requests: dict[str, Sequence] = {}
        self.num_steps = 0

    # --------------------------------------------------------------------- interface

    def add(self, request: Request) -> None:
        """Queue a request at the back of the waiting queue."""
        if request.request_id in self.requests:
            raise ValueError(f"duplicate request id {request.request_id!r}")
        if not request.prompt or not request.output:
            raise ValueError(f"request {request.request_id!r} needs a prompt and an output")
        seq = Sequence(request.request_id, list(request.prompt), request.output)
        self._keys.extend(seq.keys, seq.tokens)
        self.requests[request.request_id] = seq
        self.waiting.append(seq)

    def step(self) -> StepOutput:
        """Run one scheduler step: schedule, then the synthesised model output."""
        scheduled, preempted, _ = self._schedule()
        return self._output(scheduled, preempted)

    def schedule(self) -> Schedule:
        """Schedule one step (vLLM's ``schedule()``); :meth:`update` must follow.

        ``step()`` is ``update(schedule())``; between the two a driver runs the model's work
        for the batch (e.g. writes its KV to a device), while every block the batch needs is
        bound and no finished request has released its blocks yet.
        """
        scheduled, preempted, running = self._schedule()
        return Schedule(scheduled, [seq.num_computed for seq, _ in scheduled], preempted,
                        running)

    def update(self, schedule: Schedule) -> StepOutput:
        """Finish the step :meth:`schedule` began (vLLM's ``update_from_output()``)."""
        return self._output(schedule.scheduled, schedule.preempted)

    def _output(self, scheduled: list[tuple[Sequence, int]],
                preempted: list[Sequence]) -> StepOutput:
        entries, finished = self._update(scheduled)
        self.num_steps += 1
        return StepOutput(
            scheduled=tuple(entries),
            preempted=tuple(s.request_id for s in preempted),
            finished=tuple(Finished(s.request_id, s.cached_tokens) for s in finished))

    # ---------------------------------------------------------------------- schedule

    def _schedule(self) -> tuple[list[tuple[Sequence, int]], list[Sequence], int]:
        p = self.params
        kv = self.kv
        allocate = kv.allocate
        max_len = p.max_model_len
        budget = p.max_num_batched_tokens
        running = self.running
        scheduled: list[tuple[Sequence, int]] = []
        preempted: list[Sequence] = []

        i = 0
        while i < len(running) and budget > 0:
            seq = running[i]
            computed = seq.num_computed
            num_tokens = len(seq.tokens)
            n = num_tokens - computed
            if n > budget:
                n = budget
            if n > max_len - computed - 1:
                n = max_len - computed - 1
            if n <= 0:
                i += 1
                continue
            if computed + n > seq.limit:  # else allocate_slots would change nothing
                rid = seq.request_id
                while True:
                    ok = allocate(rid, seq.keys, num_tokens, computed, n)
                    if ok:
                        seq.limit = kv.limit(rid)
                        break
                    victim = running.pop()
                    self._preempt(victim)
                    preempted.append(victim)
                    if victim is seq:
                        break
                if not ok:
                    break
            scheduled.append((seq, n))
            budget -= n
            i += 1

        running_entries = len(scheduled)
        if not preempted:
            waiting = self.waiting
            while budget > 0 and waiting and len(running) < p.max_num_seqs:
                seq = waiting[0]
                num_tokens = len(seq.tokens)
                hits = kv.hits(seq.keys, num_tokens)
                hit = len(hits) * p.block_size
                if seq.num_preemptions == 0:
                    seq.cached_tokens = hit
                n = min(num_tokens - hit, budget)
                if not allocate(seq.request_id, seq.keys, num_tokens, 0, n, hits, whole=True):
                    break
                seq.limit = kv.limit(seq.request_id)
                waiting.popleft()
                running.append(seq)
                seq.status = RUNNING
                seq.num_computed = hit
                scheduled.append((seq, n))
                budget -= n

        return scheduled, preempted, running_entries

    def _preempt(self, seq: Sequence) -> None:
        """Recompute preemption: free the blocks, forget the computed tokens, requeue in front."""
        self.kv.free(seq.request_id)
        seq.limit = -1
        seq.status = PREEMPTED
        seq.num_computed = 0
        seq.num_preemptions += 1
        self.waiting.appendleft(seq)

    # ------------------------------------------------------------------------ output

    def _update(self, scheduled: list[tuple[Sequence, int]]) -> tuple[list[Scheduled],
                                                                       list[Sequence]]:
        """Advance computed tokens (vLLM's ``_update_after_schedule``), then the model output.

        One pass does both: a request's output depends on its own computed tokens only, and
        every free happens after all allocations of the step, in scheduling order.
        """
        max_len = self.params.max_model_len
        block_size = self.params.block_size
        entries: list[Scheduled] = []
        finished: list[Sequence] = []
        for seq, n in scheduled:
            if n == 1:
                entries.append(seq.decode_entry)
            else:
                entries.append(Scheduled(seq.request_id, n))
            computed = seq.num_computed = seq.num_computed + n
            tokens = seq.tokens
            if computed < len(tokens):  # still prefilling: no token
                continue
            k = seq.num_output
            tokens.append(seq.output[k])
            seq.num_output = k = k + 1
            if not len(tokens) % block_size:
                self._keys.extend(seq.keys, tokens)
            if k >= len(seq.output) or len(tokens) >= max_len:
                finished.append(seq)
                self.kv.free(seq.request_id)
                del self.requests[seq.request_id]
        if finished:
            done = {id(s) for s in finished}
            self.running = [s for s in self.running if id(s) not in done]
        return entries, finished

    # ------------------------------------------------------------------------ queries

    @property
    def tables(self) -> dict[str, list[int]]:
        """Every request's block table (request id -> block ids), as scheduled."""
        return self.kv.tables

    @property
    def pool(self) -> BlockPool:
        """The block pool (what the adapter's capacity sampling reads)."""
        return self.kv.pool

    @property
    def num_free_blocks(self) -> int:
        """Blocks in the free queue (cached or not)."""
        return self.kv.pool.num_free
