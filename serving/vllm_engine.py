"""Real vLLM 0.33 as a serving engine: its v1 ``Scheduler`` driven in-process on CPU, no model.

:class:`VllmEngine` implements :class:`patton.serving.interface.Engine` with vLLM's own
``Scheduler`` + ``KVCacheManager`` (driven without an engine, as ``docs/serving.md`` describes):

* ``VllmConfig`` from a ``ModelConfig`` on a temporary directory holding only a tiny Llama
  ``config.json`` (``skip_tokenizer_init``, ``HF_HUB_OFFLINE=1``), ``DeviceConfig("cpu")``,
  ``CacheConfig(block_size, enable_prefix_caching)`` (on by default) with ``num_gpu_blocks``
  set by hand,
  ``SchedulerConfig(async_scheduling=False, enable_chunked_prefill=True, policy="fcfs", ...)``
  and KV events on a ``null`` publisher; everything else is vLLM's default.
* A ``KVCacheConfig`` with ``num_blocks`` and one full-attention group.
* Requests are ``vllm.v1.request.Request`` with ``SamplingParams(max_tokens=len(output),
  ignore_eos=True)`` and vLLM's sha256 block hasher (as ``EngineCore`` builds them).
* Each :meth:`VllmEngine.step` is ``schedule()`` then ``update_from_output`` with a synthesised
  ``ModelRunnerOutput``: a scheduled request whose computed tokens reach its current length
  emits the next token of its output message; one still prefilling emits nothing.

vLLM is imported lazily, when an engine is built: the rest of ``patton`` never needs it.
Preemptions are recorded in the order vLLM makes them (a wrapper around the scheduler's
``_preempt_request``; ``SchedulerOutput.preempted_req_ids`` is an unordered set).

**Block events and placement** (:class:`_Hooks`): with an ``observer`` and/or a
``placement`` (the same pair the embedded engine takes), methods of the real vLLM
``KVCacheManager`` and ``BlockPool`` are wrapped on the instance (vLLM's code is unchanged):

* ``KVCacheManager.allocate_slots`` / ``free`` set the request the block operations inside
  them belong to; every other block operation is an error (none happens in this workload);
* ``BlockPool.touch`` -> SHARE per block, ``free_blocks`` -> RELEASE/UNSHARE per block
  (in the given order), ``cache_full_blocks`` -> CACHE per newly keyed block, and
  ``_maybe_evict_cached_block`` -> EVICT, followed by ALLOC when called from
  ``get_new_blocks`` (which calls it once per popped block just before ``ref_cnt += 1``), so
  EVICT/ALLOC interleave per block exactly as in :meth:`BlockPool.take`;
* event keys are the embedded engine's interned prefix keys (:class:`PrefixKeys` fed the same
  token sequences at the same points), checked one-to-one against vLLM's sha256 hashes;
* the placement is asked inside ``allocate_slots`` after vLLM's own free-block checks
  would pass and before anything is touched (the embedded ``KVCacheManager.allocate`` order);
  on refusal the cached free block nearest the head of vLLM's free queue, not one of the
  request's hits, loses its hash and moves to the head, and the runtime is asked again; when
  none is left ``allocate_slots`` returns None (vLLM preempts or stops admitting). The
  free-block prediction is checked against vLLM's own answer on every call.
"""

from __future__ import annotations

import json
import os
import tempfile
from types import SimpleNamespace
from typing import Any

from patton.serving.events import BlockEvent, EventKind, Observer
from patton.serving.interface import EngineParams, Finished, Request, Scheduled, StepOutput
from patton.serving.kv_cache import Placement, PrefixKeys

__all__ = ["VllmUnavailable", "VllmEngine", "PoolView", "import_vllm", "VLLM_VERSION", "cdiv"]

#: The vLLM release this adapter is written against (and the golden files were recorded with).
VLLM_VERSION = "0.33.0"


class VllmUnavailable(ImportError):
    """vLLM (or one of its lean dependencies) cannot be imported in this Python."""


def import_vllm() -> SimpleNamespace:
    """Import the vLLM pieces the adapter uses; raise VllmUnavailable with a hint if missing."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    try:
        import torch
        import vllm
        from vllm.config import (
            CacheConfig,
            DeviceConfig,
            KVEventsConfig,
            ModelConfig,
            SchedulerConfig,
            VllmConfig,
        )
        from vllm.sampling_params import SamplingParams
        from vllm.utils.hashing import get_hash_fn_by_name
        from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
        from vllm.v1.core.sched.scheduler import Scheduler
        from vllm.v1.kv_cache_interface import (
            FullAttentionSpec,
            KVCacheConfig,
            KVCacheGroupSpec,
        )
        from vllm.v1.outputs import ModelRunnerOutput
        from vllm.v1.request import Request as VRequest
        from vllm.v1.structured_output import StructuredOutputManager
    except ImportError as e:
        raise VllmUnavailable(
            f"vLLM {VLLM_VERSION} is not importable here ({e}); install it in a separate "
            f"virtualenv with docs/serving.md's lean CPU recipe and run with that python") \
            from None
    if vllm.__version__ != VLLM_VERSION:
        raise VllmUnavailable(f"this adapter needs vLLM {VLLM_VERSION}, found "
                              f"{vllm.__version__}")
    return SimpleNamespace(
        CacheConfig=CacheConfig, DeviceConfig=DeviceConfig, KVEventsConfig=KVEventsConfig,
        ModelConfig=ModelConfig, SchedulerConfig=SchedulerConfig, VllmConfig=VllmConfig,
        SamplingParams=SamplingParams, get_hash_fn_by_name=get_hash_fn_by_name,
        get_request_block_hasher=get_request_block_hasher, init_none_hash=init_none_hash,
        Scheduler=Scheduler, FullAttentionSpec=FullAttentionSpec, KVCacheConfig=KVCacheConfig,
        KVCacheGroupSpec=KVCacheGroupSpec, ModelRunnerOutput=ModelRunnerOutput,
        Request=VRequest, StructuredOutputManager=StructuredOutputManager, torch=torch)


#: The tiny model config vLLM's ModelConfig reads (no weights, no tokenizer): Llama-3-like
#: vocabulary so token ids up to 128255 are valid; sizes are irrelevant to scheduling.
_MODEL_CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 128256,
    "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1,
    "num_attention_heads": 4, "num_key_value_heads": 4, "head_dim": 16,
    "max_position_embeddings": 1 << 20, "rms_norm_eps": 1e-5, "torch_dtype": "float32",
    "bos_token_id": 128000, "eos_token_id": 128001, "tie_word_embeddings": False,
}


def cdiv(a: int, b: int) -> int:
    """Ceiling division (vLLM's ``cdiv``)."""
    return -(-a // b)


class VllmEngine:
    """vLLM 0.33's real v1 ``Scheduler`` as an :class:`~patton.serving.interface.Engine`.

    Args:
        params: the engine parameters (block size, blocks, batch limits, context length).
        observer: receives every block event in program order (as the embedded engine's),
            or None.
        placement: a runtime that may refuse new blocks (as the embedded engine's), or None.
    """

    def __init__(self, params: EngineParams, *, observer: Observer | None = None,
                 placement: Placement | None = None) -> None:
        v = import_vllm()
        self.params = params
        self._v = v
        self._model_dir = tempfile.TemporaryDirectory(prefix="patton-vllm-model-")
        with open(os.path.join(self._model_dir.name, "config.json"), "w",
                  encoding="utf-8") as f:
            json.dump(_MODEL_CONFIG, f)
        model = v.ModelConfig(model=self._model_dir.name, skip_tokenizer_init=True,
                              max_model_len=params.max_model_len, dtype="float32")
        if not params.enable_prefix_caching and (observer is not None or placement is not None):
            raise ValueError("the vLLM block-pool hooks follow prefix caching on only; "
                             "serve a runtime without prefix caching with the embedded engine")
        cache = v.CacheConfig(block_size=params.block_size,
                              enable_prefix_caching=params.enable_prefix_caching)
        cache.num_gpu_blocks = params.num_blocks
        sched = v.SchedulerConfig(
            max_num_seqs=params.max_num_seqs,
            max_num_batched_tokens=params.max_num_batched_tokens,
            max_model_len=params.max_model_len, is_encoder_decoder=False,
            enable_chunked_prefill=True, policy="fcfs", async_scheduling=False)
        config = v.VllmConfig(
            model_config=model, cache_config=cache, scheduler_config=sched,
            device_config=v.DeviceConfig(device="cpu"),
            kv_events_config=v.KVEventsConfig(enable_kv_cache_events=True, publisher="null"))
        config.cache_config.num_gpu_blocks = params.num_blocks
        spec = v.FullAttentionSpec(block_size=params.block_size, num_kv_heads=4, head_size=16,
                                   dtype=v.torch.float32)
        kv_config = v.KVCacheConfig(
            num_blocks=params.num_blocks, kv_cache_tensors=[],
            kv_cache_groups=[v.KVCacheGroupSpec(["layer0"], spec)])
        self.scheduler = v.Scheduler(
            vllm_config=config, kv_cache_config=kv_config,
            structured_output_manager=v.StructuredOutputManager(config),
            block_size=params.block_size, hash_block_size=params.block_size, log_stats=False)
        self.config = config
        hash_fn = v.get_hash_fn_by_name(cache.prefix_caching_hash_algo)
        v.init_none_hash(hash_fn)
        self._hasher = v.get_request_block_hasher(params.block_size, hash_fn)
        self._outputs: dict[str, tuple[int, ...]] = {}  # request id -> output tokens
        self._cached: dict[str, int] = {}  # request id -> num_cached_tokens (first output)
        self._preempted: list[str] = []  # this step's preemptions, in vLLM's order
        preempt = self.scheduler._preempt_request

        def record(request: Any, *args: Any, **kwargs: Any) -> None:
            self._preempted.append(request.request_id)
            preempt(request, *args, **kwargs)

        self.scheduler._preempt_request = record  # type: ignore[method-assign]
        self._keys = PrefixKeys(params.block_size)  # the embedded engine's key interning
        self._vreqs: dict[str, Any] = {}  # request id -> vLLM Request (kept past finish)
        self._req_keys: dict[str, list[int]] = {}  # request id -> interned prefix keys
        self.hooks: _Hooks | None = None
        if observer is not None or placement is not None:
            self.hooks = _Hooks(self, observer, placement)
        self.pool = PoolView(self.scheduler.kv_cache_manager.block_pool, self)

    def add(self, request: Request) -> None:
        """Queue a request: exactly ``len(output)`` tokens, end-of-sequence ignored."""
        if request.request_id in self._outputs:
            raise ValueError(f"duplicate request id {request.request_id!r}")
        if not request.prompt or not request.output:
            raise ValueError(f"request {request.request_id!r} needs a prompt and an output")
        v = self._v
        sampling = v.SamplingParams(max_tokens=len(request.output), ignore_eos=True,
                                       temperature=0.0)
        vreq = v.Request(request.request_id, list(request.prompt), sampling, None,
                             block_hasher=self._hasher)
        self._outputs[request.request_id] = request.output
        self._vreqs[request.request_id] = vreq
        keys = self._req_keys[request.request_id] = []
        self._keys.extend(keys, vreq.all_token_ids)
        self.scheduler.add_request(vreq)

    def step(self) -> StepOutput:
        """Run ``schedule()`` and ``update_from_output`` with the synthesised model output."""
        self._preempted = []
        out = self.scheduler.schedule()
        req_ids = list(out.num_scheduled_tokens)
        sampled: list[list[int]] = []
        for rid in req_ids:
            r = self.scheduler.requests[rid]
            if r.num_computed_tokens >= r.num_tokens:  # reached its length: emits a token
                sampled.append([self._outputs[rid][r.num_output_tokens]])
            else:  # still prefilling
                sampled.append([])
        mro = self._v.ModelRunnerOutput(
            req_ids=req_ids, req_id_to_index={rid: i for i, rid in enumerate(req_ids)},
            sampled_token_ids=sampled)
        engine_outputs = self.scheduler.update_from_output(out, mro)
        for rid in req_ids:  # new full blocks get keys, in scheduling order (as embedded)
            self._keys.extend(self._req_keys[rid], self._vreqs[rid].all_token_ids)
        finished: list[Finished] = []
        for eco in engine_outputs.values():
            for o in eco.outputs:
                if o.request_id not in self._cached:
                    stats = o.prefill_stats
                    self._cached[o.request_id] = stats.num_cached_tokens if stats else 0
                if o.finish_reason is not None:
                    finished.append(Finished(o.request_id, self._cached.pop(o.request_id)))
                    self._outputs.pop(o.request_id)
                    self._vreqs.pop(o.request_id)
                    self._req_keys.pop(o.request_id)
        preempted = tuple(self._preempted)
        if set(preempted) != set(out.preempted_req_ids or ()):
            raise RuntimeError(f"preemption record {preempted} disagrees with vLLM's "
                               f"{sorted(out.preempted_req_ids or ())}")
        return StepOutput(
            scheduled=tuple(Scheduled(rid, n) for rid, n in out.num_scheduled_tokens.items()),
            preempted=preempted, finished=tuple(finished))

    def settings(self) -> dict[str, Any]:
        """Return the vLLM settings that shape scheduling, as the golden files record them."""
        s, c = self.config.scheduler_config, self.config.cache_config
        return {"vllm": VLLM_VERSION, "policy": str(s.policy),
                "enable_chunked_prefill": s.enable_chunked_prefill,
                "enable_prefix_caching": c.enable_prefix_caching,
                "prefix_caching_hash_algo": c.prefix_caching_hash_algo,
                "long_prefill_token_threshold": s.long_prefill_token_threshold,
                "scheduler_reserve_full_isl": s.scheduler_reserve_full_isl,
                "watermark": s.watermark, "async_scheduling": s.async_scheduling,
                "max_num_scheduled_tokens": self.scheduler.max_num_scheduled_tokens}


class PoolView:
    """The block-pool queries :class:`~patton.serving.adapter.Attached` reads, over vLLM's.

    ``num_blocks``, ``num_free``, and per-block ``ref[b]`` / ``key[b]`` (the interned prefix
    key, or None) as the embedded :class:`~patton.serving.block_pool.BlockPool` has them.
    """

    def __init__(self, pool: Any, engine: VllmEngine) -> None:
        self._pool = pool
        self.num_blocks: int = pool.num_gpu_blocks
        self.ref = _Refs(pool)
        self.key = _Keys(pool, engine)

    @property
    def num_free(self) -> int:
        """Blocks in vLLM's free queue (cached or not)."""
        return int(self._pool.get_num_free_blocks())

    def free_order(self) -> list[int]:
        """vLLM's free queue, head first."""
        q = self._pool.free_block_queue
        out, b = [], q.fake_free_list_head.next_free_block
        while b is not None and b is not q.fake_free_list_tail:
            out.append(b.block_id)
            b = b.next_free_block
        return out


class _Refs:
    def __init__(self, pool: Any) -> None:
        self._blocks = pool.blocks

    def __getitem__(self, block: int) -> int:
        return int(self._blocks[block].ref_cnt)


class _Keys:
    def __init__(self, pool: Any, engine: VllmEngine) -> None:
        self._blocks = pool.blocks
        self._engine = engine

    def __getitem__(self, block: int) -> int | None:
        if self._blocks[block].block_hash is None:
            return None
        hooks = self._engine.hooks
        return -1 if hooks is None else hooks.block_key.get(block, -1)


class _Hooks:
    """The observer and placement hooks on one engine's vLLM ``KVCacheManager``/``BlockPool``.

    Invariants: ``rid`` is the request of the ``allocate_slots``/``free`` call in progress
    (None outside one); ``block_key[b]`` is the interned key of every block vLLM has hashed;
    ``hash_key`` is one-to-one between vLLM's block hashes and interned keys.
    """

    def __init__(self, engine: VllmEngine, observer: Observer | None,
                 placement: Placement | None) -> None:
        self.engine = engine
        self.observer = observer
        self.placement = placement
        self.rid: str | None = None
        self.taking = 0  # blocks get_new_blocks is handing out; ALLOCs still to emit
        self.block_key: dict[int, int] = {}
        self.hash_key: dict[bytes, int] = {}
        self.key_hash: dict[int, bytes] = {}
        km = engine.scheduler.kv_cache_manager
        if len(km.coordinator.single_type_managers) != 1:
            raise RuntimeError("block events need exactly one KV cache group")
        if getattr(km, "watermark_blocks", 0):
            raise RuntimeError("the placement hook models watermark 0 only")
        self.manager = km.coordinator.single_type_managers[0]
        self.pool = pool = km.block_pool
        self.block_size = engine.params.block_size
        self.max_model_len = engine.params.max_model_len
        self._allocate_slots = km.allocate_slots
        self._free = km.free
        self._get_new_blocks = pool.get_new_blocks
        self._touch = pool.touch
        self._free_blocks = pool.free_blocks
        self._cache_full_blocks = pool.cache_full_blocks
        self._evict = pool._maybe_evict_cached_block
        km.allocate_slots = self.allocate_slots
        km.free = self.free
        km.cache_blocks = self._outside("KVCacheManager.cache_blocks")
        km.evict_blocks = self._outside("KVCacheManager.evict_blocks")
        if observer is not None:
            pool.get_new_blocks = self.get_new_blocks
            pool.touch = self.touch
            pool.free_blocks = self.free_blocks
            pool.cache_full_blocks = self.cache_full_blocks
            pool._maybe_evict_cached_block = self.maybe_evict

    # ------------------------------------------------------------------ KVCacheManager

    def allocate_slots(self, request: Any, num_new_tokens: int, *args: Any,
                       **kwargs: Any) -> Any:
        """vLLM's ``allocate_slots`` for ``request``, asking the placement first."""
        if args:
            raise RuntimeError("allocate_slots called with positional options; the hook "
                               "reads them by name")
        self.rid = request.request_id
        try:
            fits = None
            if self.placement is not None:
                fits = self._place(request, num_new_tokens, kwargs)
                if fits is False:
                    return None
            out = self._allocate_slots(request, num_new_tokens, **kwargs)
            if fits is not None and (out is not None) != fits:
                raise RuntimeError(
                    f"allocate_slots({request.request_id!r}, {num_new_tokens}): predicted "
                    f"{'a fit' if fits else 'no fit'}, vLLM answered "
                    f"{'blocks' if out is not None else 'None'}")
            return out
        finally:
            self.rid = None

    def free(self, request: Any) -> None:
        """vLLM's ``free`` for ``request``."""
        self.rid = request.request_id
        try:
            self._free(request)
        finally:
            self.rid = None

    def _outside(self, name: str) -> Any:
        def refuse(*args: Any, **kwargs: Any) -> None:
            raise RuntimeError(f"{name} is outside what the block-event hooks follow")
        return refuse

    def _place(self, request: Any, num_new: int, kwargs: dict[str, Any]) -> bool | None:
        """Predict vLLM's free-block checks (as ``KVCacheManager.allocate``); ask the placement.

        Returns None when vLLM's own checks fail (vLLM answers None by itself), True when
        the new blocks may be placed (after any evictions), False when the placement refused
        and no cached free block is left to evict.
        """
        unsupported = {k: v for k, v in kwargs.items()
                       if k not in ("num_new_computed_tokens", "new_computed_blocks",
                                    "full_sequence_must_fit", "has_scheduled_reqs")
                       and v not in (0, False, (), None)}
        if unsupported:
            raise RuntimeError(f"allocate_slots options the placement hook does not model: "
                               f"{unsupported}")
        bs, max_len, pool = self.block_size, self.max_model_len, self.pool
        computed = kwargs.get("new_computed_blocks")
        hits = list(computed.blocks[0]) if computed is not None else []
        held = len(self.manager.req_to_blocks.get(request.request_id, ()))
        have = held + len(hits)
        total = min(request.num_computed_tokens + kwargs.get("num_new_computed_tokens", 0),
                    max_len)
        free = pool.get_num_free_blocks()
        evictable = sum(1 for b in hits if b.ref_cnt == 0)
        if kwargs.get("full_sequence_must_fit", False):
            need = cdiv(min(request.num_tokens, max_len), bs) - have
            if max(need, 0) + evictable > free:
                return None
        new = max(cdiv(min(total + num_new, max_len), bs) - have, 0)
        if new + evictable > free:
            return None
        if not new:
            return True
        assert self.placement is not None
        keep = {b.block_id for b in hits}
        while not self.placement.can_place(request.request_id, new):
            if not self._evict_first(keep):
                return False
        return True

    def _evict_first(self, keep: set[int]) -> bool:
        """Evict the cached free block nearest the head, not in ``keep``; move it to the head."""
        q = self.pool.free_block_queue
        b = q.fake_free_list_head.next_free_block
        while b is not None and b is not q.fake_free_list_tail:
            if b.block_hash is not None and b.block_id not in keep:
                break
            b = b.next_free_block
        else:
            return False
        key = self.block_key.pop(b.block_id, None)
        if not self._evict(b):
            raise RuntimeError(f"block {b.block_id} has a hash but vLLM did not evict it")
        self._emit(EventKind.EVICT, b.block_id, None, key, b.ref_cnt)
        q.remove(b)
        q.prepend_n([b])
        return True

    # ------------------------------------------------------------------------ BlockPool

    def _emit(self, kind: str, block: int, request_id: str | None, key: int | None,
              ref: int) -> None:
        if self.observer is not None:
            self.observer(BlockEvent(kind, block, request_id, key, ref))

    def _request(self, what: str) -> str:
        if self.rid is None:
            raise RuntimeError(f"BlockPool.{what} outside allocate_slots/free: no request "
                               f"to attribute its block events to")
        return self.rid

    def get_new_blocks(self, num_blocks: int) -> list[Any]:
        """Pop blocks; :meth:`maybe_evict` emits each one's EVICT (if cached) and ALLOC."""
        self._request("get_new_blocks")
        self.taking = num_blocks
        try:
            out = self._get_new_blocks(num_blocks)
        finally:
            left, self.taking = self.taking, 0
        if left:
            raise RuntimeError(f"get_new_blocks({num_blocks}) evicted {num_blocks - left} "
                               f"blocks' hashes, expected one call per block")
        return out

    def maybe_evict(self, block: Any) -> bool:
        """vLLM's ``_maybe_evict_cached_block``: EVICT when it drops a hash, then ALLOC."""
        rid = self._request("_maybe_evict_cached_block")
        key = self.block_key.pop(block.block_id, None)
        evicted = self._evict(block)
        if evicted:
            self._emit(EventKind.EVICT, block.block_id, rid, key, block.ref_cnt)
        if self.taking:
            self.taking -= 1
            self._emit(EventKind.ALLOC, block.block_id, rid, None, block.ref_cnt + 1)
        return bool(evicted)

    def touch(self, blocks: Any) -> None:
        """vLLM's ``touch``: SHARE per hit block."""
        rid = self._request("touch")
        blocks = list(blocks)
        self._touch(blocks)
        for b in blocks:
            if not b.is_null:
                self._emit(EventKind.SHARE, b.block_id, rid, None, b.ref_cnt)

    def free_blocks(self, ordered_blocks: Any) -> None:
        """vLLM's ``free_blocks``: RELEASE (ref 0) or UNSHARE per block, in the given order."""
        rid = self._request("free_blocks")
        blocks = list(ordered_blocks)
        self._free_blocks(blocks)
        for b in blocks:
            if not b.is_null:
                kind = EventKind.RELEASE if b.ref_cnt == 0 else EventKind.UNSHARE
                self._emit(kind, b.block_id, rid, None,
                           b.ref_cnt)

    def cache_full_blocks(self, request: Any, blocks: list[Any], num_cached_blocks: int,
                          num_full_blocks: int, *args: Any, **kwargs: Any) -> None:
        """vLLM's ``cache_full_blocks``: CACHE per block that gets its hash."""
        rid = request.request_id
        span = blocks[num_cached_blocks:num_full_blocks]
        unhashed = [b.block_hash is None for b in span]
        self._cache_full_blocks(request, blocks, num_cached_blocks, num_full_blocks,
                                *args, **kwargs)
        keys = self.engine._req_keys[rid]
        hashes = request.block_hashes
        for i, (b, was) in enumerate(zip(span, unhashed), num_cached_blocks):
            if not was or b.is_null or b.block_hash is None:
                continue
            if i >= len(keys):
                raise RuntimeError(f"{rid}: block {i} hashed by vLLM has no prefix key")
            k, h = keys[i], hashes[i]
            if self.hash_key.setdefault(h, k) != k or self.key_hash.setdefault(k, h) != h:
                raise RuntimeError(f"{rid}: block {i}: vLLM's hash and the prefix key "
                                   f"{k} are not one-to-one")
            self.block_key[b.block_id] = k
            self._emit(EventKind.CACHE, b.block_id, rid, k, b.ref_cnt)
