"""Real vLLM 0.33 as a serving engine: its v1 ``Scheduler`` driven in-process on CPU, no model.

:class:`VllmEngine` implements :class:`patton.sim.serving.clients.Engine` with vLLM's own
``Scheduler`` + ``KVCacheManager`` (vllm-kv-cache.md §8, "Driving it without an engine"):

* ``VllmConfig`` from a ``ModelConfig`` on a temporary directory holding only a tiny Llama
  ``config.json`` (``skip_tokenizer_init``, ``HF_HUB_OFFLINE=1``), ``DeviceConfig("cpu")``,
  ``CacheConfig(block_size, enable_prefix_caching=True)`` with ``num_gpu_blocks`` set by hand,
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
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from patton.sim.serving.clients import Finished, Request, Scheduled, StepOutput

__all__ = ["VllmUnavailable", "VllmParams", "VllmEngine", "import_vllm", "VLLM_VERSION"]

#: The vLLM release this adapter is written against (and the golden files were recorded with).
VLLM_VERSION = "0.33.0"


class VllmUnavailable(ImportError):
    """vLLM (or one of its lean dependencies) cannot be imported in this Python."""


@dataclass(frozen=True, slots=True)
class VllmParams:
    """vLLM v1 engine parameters of a run (serving-workload.md, "Engine parameters").

    Invariants: ``num_blocks >= 2`` (block 0 is vLLM's null block, so ``num_blocks - 1`` are
    usable); every other count >= 1.
    """

    block_size: int = 16  # tokens per KV block
    num_blocks: int = 1024  # vLLM's num_gpu_blocks, null block included
    max_num_seqs: int = 128  # running requests at most
    max_num_batched_tokens: int = 2048  # tokens scheduled per step at most
    max_model_len: int = 8192  # context length

    def __post_init__(self) -> None:
        if self.num_blocks < 2:
            raise ValueError(f"num_blocks must be >= 2 (block 0 is the null block), "
                             f"got {self.num_blocks}")
        for name in ("block_size", "max_num_seqs", "max_num_batched_tokens", "max_model_len"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")


def import_vllm() -> SimpleNamespace:
    """Import the vLLM pieces the adapter uses; raise VllmUnavailable with a hint if missing."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    try:
        import vllm
        from vllm.config import (CacheConfig, DeviceConfig, KVEventsConfig, ModelConfig,
                                 SchedulerConfig, VllmConfig)
        from vllm.sampling_params import SamplingParams
        from vllm.utils.hashing import get_hash_fn_by_name
        from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
        from vllm.v1.core.sched.scheduler import Scheduler
        from vllm.v1.kv_cache_interface import (FullAttentionSpec, KVCacheConfig,
                                                KVCacheGroupSpec)
        from vllm.v1.outputs import ModelRunnerOutput
        from vllm.v1.request import Request as VRequest
        from vllm.v1.structured_output import StructuredOutputManager
        import torch
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


class VllmEngine:
    """vLLM 0.33's real v1 ``Scheduler`` as an :class:`~patton.sim.serving.clients.Engine`.

    Args:
        params: the engine parameters (block size, blocks, batch limits, context length).
    """

    def __init__(self, params: VllmParams) -> None:
        v = import_vllm()
        self.params = params
        self._v = v
        self._model_dir = tempfile.TemporaryDirectory(prefix="patton-vllm-model-")
        with open(os.path.join(self._model_dir.name, "config.json"), "w",
                  encoding="utf-8") as f:
            json.dump(_MODEL_CONFIG, f)
        model = v.ModelConfig(model=self._model_dir.name, skip_tokenizer_init=True,
                              max_model_len=params.max_model_len, dtype="float32")
        cache = v.CacheConfig(block_size=params.block_size, enable_prefix_caching=True)
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
        finished: list[Finished] = []
        for eco in engine_outputs.values():
            for o in eco.outputs:
                if o.request_id not in self._cached:
                    stats = o.prefill_stats
                    self._cached[o.request_id] = stats.num_cached_tokens if stats else 0
                if o.finish_reason is not None:
                    finished.append(Finished(o.request_id, self._cached.pop(o.request_id)))
                    self._outputs.pop(o.request_id)
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
