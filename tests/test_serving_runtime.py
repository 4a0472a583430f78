"""The engine driving a KV-cache runtime (``serving/adapter.py``).

* the runtime's bound blocks equal the engine's running + cached blocks after every step
  (ref counts and fullness too), on golden workloads, for every variant;
* ``gpu`` is the embedded engine without placement: every golden file exactly;
* a small capacity makes PATTON refuse blocks, and its hit rate drops below gpu's;
* no-O2V strands capacity: more stranded positions and a lower hit rate than PATTON;
* the 16 GiB defaults, and one laid-out layer placing exactly like all 32.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from conftest import golden_runs
from drive import serve as drive
from patton.runtime.baselines import BASELINES
from patton.runtime.models import MODELS
from patton.runtime.patton.config import Config
from patton.runtime.patton.lifecycle import Runtime
from patton.serving.adapter import Attached, attach, mirror_errors
from patton.serving.capacity import (
    REQUIREMENTS,
    RUNTIMES,
    capacity,
    device_bytes,
    kv_bytes_per_token,
    layer_config,
)
from patton.serving.conversations import read
from patton.serving.engine import EmbeddedEngine
from patton.serving.interface import Engine, EngineParams, Request, StepOutput

ROOT = Path(__file__).resolve().parent.parent
#: The golden runs with vLLM's prefix caching on (the GPU runtime's setting).
GOLDEN = golden_runs(prefix_caching=True)
LLAMA = MODELS["llama3-8b"]
FILE = ROOT / "tests/data/serving/sharegpt-llama3-300.jsonl"


def load(name: str) -> dict:
    return json.loads(gzip.decompress((ROOT / f"tests/data/serving/golden/{name}.json.gz")
                                      .read_bytes()))


def params_of(p: dict, prefix_caching: bool = True) -> EngineParams:
    return EngineParams(block_size=p["block_size"], num_blocks=p["num_blocks"],
                      max_num_seqs=p["max_num_seqs"],
                      max_num_batched_tokens=p["max_num_batched_tokens"],
                      max_model_len=p["max_model_len"], enable_prefix_caching=prefix_caching)


class Checked:
    """An engine that checks the mirror after every step (and the runtime's invariants)."""

    def __init__(self, engine: EmbeddedEngine, attached: Attached, every: int = 0) -> None:
        self.engine, self.attached, self.every, self.steps = engine, attached, every, 0

    def add(self, request: Request) -> None:
        self.engine.add(request)

    def step(self) -> StepOutput:
        out = self.engine.step()
        self.steps += 1
        errors = mirror_errors(self.engine.kv.pool, self.attached)
        assert not errors, f"step {self.steps - 1}: {errors[:3]}"
        rt = self.attached.runtime
        if rt is not None and self.every and not self.steps % self.every:
            rt.check()
        self.attached.sample(self.engine.kv.pool)
        return out


def serve(variant: str, p: dict, *, check: int = -1, steps: int | None = None,
          runtime: Runtime | None = None):
    """Run golden-file parameters ``p`` with ``variant`` attached; return (run, attached)."""
    profile = REQUIREMENTS[variant]
    if variant in BASELINES:  # a baseline's block size and memory in its blocks
        p = dict(p, block_size=profile.block_size,
                 num_blocks=p["num_blocks"] * p["block_size"] // profile.block_size)
    attached = attach(variant, LLAMA, num_blocks=p["num_blocks"], block_size=p["block_size"])
    if runtime is not None:
        attached = Attached(attached.capacity, runtime)
    engine = EmbeddedEngine(params_of(p, profile.prefix_caching), observer=attached.observe,
                            placement=attached.placement)
    driven: Engine = engine if check < 0 else Checked(engine, attached, check)
    result = drive(driven, read(ROOT / p["conversations"]), clients=p["clients"],
                 pool=p["pool"], max_model_len=p["max_model_len"],
                 max_steps=p["max_steps"] if steps is None else steps)
    return result, attached


# ------------------------------------------------------------------------------- mirror


@pytest.mark.parametrize("variant", [v for v in RUNTIMES if v not in BASELINES])
def test_runtime_blocks_are_the_engines_running_and_cached_blocks(variant):
    # c8-p16-evict: eviction, chunked prefill and preemption; PATTON refuses here too
    result, attached = serve(variant, load("c8-p16-evict")["params"], check=40, steps=800)
    assert len(result.steps) == 800
    if variant != "gpu":
        assert attached.refused and attached.placement_evictions  # the runtime bound the run


@pytest.mark.parametrize("variant", list(BASELINES))
def test_baseline_blocks_are_the_engines_running_and_cached_blocks(variant):
    """A baseline under the engine with its profile (block size, prefix caching): the mirror
    holds and its invariants too, on 8 times c8-p16-evict's memory (a NeuPIMs request needs a
    Value page per head in one channel: 8 Value groups, 128 rows a layer)."""
    p = dict(load("c8-p16-evict")["params"], num_blocks=2048)
    result, attached = serve(variant, p, check=40, steps=800)
    assert len(result.steps) == 800 and result.report().requests > 8
    rt = attached.runtime
    assert rt is not None and rt.blocks
    assert (not REQUIREMENTS[variant].prefix_caching) == (result.report().hit_rate == 0)


def test_mirror_holds_through_preemptions_and_a_finished_file():
    result, attached = serve("patton", load("c8-p32-preempt")["params"], check=50, steps=600)
    assert result.report().preemptions or attached.refused
    result, attached = serve("patton", load("c16-p32-short")["params"], check=0)
    assert result.complete  # every request finished: nothing referenced is left
    assert attached.held == {} and attached.runtime is not None
    assert all(m.ref_cnt == 0 for m in attached.runtime.blocks.values())
    assert attached.runtime.requests == {}


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.name.split(".")[0])
def test_gpu_is_the_embedded_engine_exactly(path):
    golden = json.loads(gzip.decompress(path.read_bytes()))
    result, attached = serve("gpu", golden["params"])
    assert attached.placement is None
    body = result.as_dict()
    assert body["report"] == golden["report"]
    assert body["steps"] == golden["steps"] and body["requests"] == golden["requests"]


# ----------------------------------------------------------------------------- capacity


def test_small_capacity_makes_patton_refuse_and_lose_hits():
    p = dict(load("c4-p8-ample")["params"], num_blocks=160, max_steps=1500)
    gpu, _ = serve("gpu", p)
    patton, attached = serve("patton", p, check=0)
    assert attached.capacity.blocks < p["num_blocks"] - 1  # CZ rows and K/V rounding
    assert attached.refused > 0 and attached.placement_evictions > 0
    assert patton.report().hit_rate < gpu.report().hit_rate
    assert patton.report().recomputed_tokens > gpu.report().recomputed_tokens


def test_no_o2v_strands_capacity_under_pressure():
    p = dict(load("c8-p16-evict")["params"], num_blocks=512, max_steps=1500)
    patton, a = serve("patton", p, check=0)
    whole, b = serve("patton-no-o2v", p, check=0)
    assert a.capacity.blocks == b.capacity.blocks  # the same rows: only the O2V width differs
    assert b.capacity.o2v_blocks == 64 and a.capacity.o2v_blocks == 16
    assert b.usage.stranded_sum > 2 * a.usage.stranded_sum
    assert whole.report().hit_rate < patton.report().hit_rate


def test_wo_cz_places_like_patton():
    # bookkeeping writes whole blocks: the Commit Zone is never used, the geometry is equal
    p = dict(load("c8-p16-evict")["params"], max_steps=600)
    a, _ = serve("patton", p)
    b, _ = serve("patton-wo-cz", p)
    assert a.as_dict() == b.as_dict()


def test_sixteen_gib_defaults():
    assert kv_bytes_per_token(LLAMA) == 2 * 32 * 8 * 128 * 2
    assert device_bytes() == 16 << 30
    gpu = capacity("gpu", LLAMA)
    assert (gpu.num_blocks, gpu.blocks, gpu.bytes) == (8192, 8191, 16 << 30)
    for v in ("patton", "patton-wo-cz", "patton-no-o2v"):
        pim = capacity(v, LLAMA)
        full = Config(LLAMA)  # the runtime's own geometry of the whole device
        assert pim.layer_rows == full.rows_per_layer == 512
        assert pim.crs_rows == full.crs_rows
        assert pim.num_blocks == 8192 and pim.bytes == 16 << 30
        assert pim.blocks == min(full.krs_count * full.o2k_per_krs * full.n_o1p2,
                                 full.vrs_count * full.device.columns) == 8128
    assert capacity("patton", LLAMA, num_blocks=8192) == capacity("patton", LLAMA)
    with pytest.raises(ValueError, match="cannot lay out"):
        capacity("patton", LLAMA, num_blocks=16)
    with pytest.raises(ValueError, match="null block"):
        capacity("gpu", LLAMA, num_blocks=1)


def test_one_layer_places_like_all_layers():
    """Every layer's placement is layer 0's: the allocator is shared by the layers."""
    full = Config(LLAMA)
    one = layer_config(LLAMA, full.rows_per_layer)
    for name in ("krs_count", "vrs_count", "crs_rows", "o2k_per_krs", "o2v_per_vrs",
                 "ch_per_head", "krs_base", "vrs_base", "v_rows", "cz_slots_per_crs"):
        assert getattr(one, name) == getattr(full, name), name
    p = dict(load("c8-p16-evict")["params"], max_steps=400)
    a, ra = serve("patton", p, runtime=Runtime(one))
    b, rb = serve("patton", p, runtime=Runtime(full))
    assert a.as_dict() == b.as_dict()
    assert ra.runtime is not None and rb.runtime is not None
    assert set(ra.runtime.blocks) == set(rb.runtime.blocks)
    for block in ra.runtime.blocks:
        assert ra.runtime.placements(block) == rb.runtime.placements(block)
    # layer l of the full layout is layer 0 shifted by l * layer_rows
    assert [full.row(layer, 7) for layer in (0, 1, 31)] == [7, 519, 31 * 512 + 7]
