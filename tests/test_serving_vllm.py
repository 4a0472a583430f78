"""Real vLLM 0.33 driving the runtime through block-pool hooks (``serving/vllm_engine.py``).

Without vLLM (CI): the pure helpers, the lazy import, and the CLI accepting every runtime
with ``--engine vllm``. With vLLM (``/work/venv-vllm/bin/python -m pytest -q -p
no:cacheprovider tests/test_serving_vllm.py``):

* every golden configuration: real vLLM's block events equal the embedded engine's, event
  for event (kind, block, request, key, ref), and its steps equal the golden steps;
* PATTON attached with a capacity small enough to refuse: the same per-step decisions, event
  streams, runtime reports and mirror, and ``patton serve --engine vllm|embedded`` print the
  same report.
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pytest
from conftest import golden_runs
from drive import serve
from patton.serving.conversations import read
from patton.serving.events import BlockEvent
from patton.serving.interface import EngineParams
from patton.serving.vllm_engine import cdiv

ROOT = Path(__file__).resolve().parent.parent
#: The golden runs with prefix caching on (the block-pool event hooks are written for it).
GOLDEN = golden_runs(prefix_caching=True)
FILE = str(ROOT / "tests/data/serving/sharegpt-llama3-300.jsonl")
#: (golden configuration, num_blocks, variant, steps) at which the runtime refuses blocks:
#: refusals with placement evictions, with preemptions, and refusals that fail allocations
#: (no cached free block left: more refusals than placement evictions).
REFUSING = [("c4-p8-ample", 160, "patton", 600), ("c8-p16-evict", 256, "patton", 2000),
            ("c8-p32-preempt", 80, "patton", 2000), ("c8-p16-evict", 512, "patton-wo-cz", 800),
            ("c8-p16-evict", 512, "patton-no-o2v", 800)]


def load(path: Path) -> dict:
    return json.loads(gzip.decompress(path.read_bytes()))


def params_of(p: dict) -> EngineParams:
    return EngineParams(block_size=p["block_size"], num_blocks=p["num_blocks"],
                      max_num_seqs=p["max_num_seqs"],
                      max_num_batched_tokens=p["max_num_batched_tokens"],
                      max_model_len=p["max_model_len"])


def first_difference(a: list[BlockEvent], b: list[BlockEvent]) -> str:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"event {i}: embedded {x} vs vLLM {y}"
    return f"lengths: embedded {len(a)} vs vLLM {len(b)}"


# ------------------------------------------------------------------------- no vLLM


def test_cdiv():
    assert [cdiv(n, 16) for n in (0, 1, 15, 16, 17, 32, 33)] == [0, 1, 1, 1, 2, 2, 3]


def test_module_imports_without_vllm():
    import patton.serving.vllm_engine as m

    assert m.VLLM_VERSION == "0.33.0" and "VllmEngine" in m.__all__


def test_without_vllm_the_engine_says_how_to_get_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # ``import vllm`` fails, as without it
    from patton.serving.vllm_engine import VllmEngine, VllmUnavailable

    with pytest.raises(VllmUnavailable, match="docs/serving.md"):
        VllmEngine(EngineParams())


@pytest.mark.parametrize("runtime", ["patton", "patton-wo-cz", "patton-no-o2v"])
def test_cli_accepts_every_runtime_with_engine_vllm(capsys, monkeypatch, runtime):
    monkeypatch.setitem(sys.modules, "vllm", None)  # ``import vllm`` fails, as without it
    from patton.cli.serve import main

    code = main(["serve", "--conversations", FILE, "--engine", "vllm", "--runtime", runtime,
                 "--num-blocks", "256", "--steps", "10"])
    err = capsys.readouterr().err
    assert code == 2 and "own cache only" not in err
    assert "--engine vllm" in err and "docs/serving.md" in err  # only vLLM itself is missing


# ------------------------------------------------------------------------ live vLLM


@pytest.mark.parametrize("path", GOLDEN, ids=[p.name.split(".")[0] for p in GOLDEN])
def test_vllm_event_stream_equals_embedded(path):
    pytest.importorskip("vllm", reason="live real-vLLM check: needs the optional vLLM extra (docs/serving.md)")
    from patton.serving.engine import EmbeddedEngine
    from patton.serving.vllm_engine import VllmEngine

    golden = load(path)
    p = golden["params"]
    conversations = read(ROOT / p["conversations"])
    streams, steps = {}, {}
    for name, cls in (("embedded", EmbeddedEngine), ("vllm", VllmEngine)):
        events: list[BlockEvent] = []
        engine = cls(params_of(p), observer=events.append)
        result = serve(engine, conversations, clients=p["clients"], pool=p["pool"],
                     max_model_len=p["max_model_len"], max_steps=p["max_steps"])
        streams[name], steps[name] = events, result.as_dict()["steps"]
    assert steps["vllm"] == golden["steps"] == steps["embedded"]
    assert streams["vllm"] == streams["embedded"], first_difference(streams["embedded"],
                                                                    streams["vllm"])


def _attached_run(engine_name: str, golden: str, num_blocks: int, variant: str,
                  steps: int) -> tuple[dict, list[BlockEvent], dict, list[str]]:
    from patton.runtime.models import MODELS
    from patton.serving.adapter import attach, mirror_errors
    from patton.serving.engine import EmbeddedEngine
    from patton.serving.vllm_engine import VllmEngine

    p = dict(load(ROOT / f"tests/data/serving/golden/{golden}.json.gz")["params"],
             num_blocks=num_blocks)
    attached = attach(variant, MODELS["llama3-8b"], num_blocks=p["num_blocks"],
                      block_size=p["block_size"])
    events: list[BlockEvent] = []

    def observe(e: BlockEvent) -> None:
        events.append(e)
        attached.observe(e)

    params = params_of(dict(p, num_blocks=attached.capacity.num_blocks))
    cls = VllmEngine if engine_name == "vllm" else EmbeddedEngine
    engine = cls(params, observer=observe, placement=attached.placement)
    pool = engine.pool if engine_name == "vllm" else engine.kv.pool
    result = serve(engine, read(ROOT / p["conversations"]), clients=p["clients"],
                 pool=p["pool"], max_model_len=p["max_model_len"],
                 max_steps=steps)
    return result.as_dict(), events, attached.report(), mirror_errors(pool, attached)


@pytest.mark.parametrize("config", REFUSING, ids=["-".join(map(str, c)) for c in REFUSING])
def test_vllm_with_runtime_refusing_equals_embedded(config):
    pytest.importorskip("vllm", reason="live real-vLLM check: needs the optional vLLM extra (docs/serving.md)")
    emb, emb_events, emb_kv, emb_mirror = _attached_run("embedded", *config)
    vll, vll_events, vll_kv, vll_mirror = _attached_run("vllm", *config)
    assert emb_kv["refusals"] > 0 and emb_kv["placement_evictions"] > 0  # refusals happen
    assert vll["steps"] == emb["steps"]  # per-step decisions
    assert vll == emb
    assert vll_events == emb_events, first_difference(emb_events, vll_events)
    assert vll_kv == emb_kv
    assert emb_mirror == [] and vll_mirror == []


def test_cli_vllm_and_embedded_reports_are_identical(capsys):
    pytest.importorskip("vllm", reason="live real-vLLM check: needs the optional vLLM extra (docs/serving.md)")
    from patton.cli.serve import main

    reports = {}
    for engine in ("embedded", "vllm"):
        code = main(["serve", "--conversations", FILE, "--engine", engine, "--runtime",
                     "patton", "--clients", "4", "--pool", "8", "--num-blocks",
                     "160", "--max-model-len", "4096",
                     "--max-batched-tokens", "2048", "--steps", "400", "--json"])
        out = capsys.readouterr().out
        assert code == 0
        reports[engine] = json.loads(out)
    for r in reports.values():
        for k in ("wall_seconds", "steps_per_second", "engine"):
            r.pop(k)
    assert reports["embedded"]["refusals"] > 0
    assert reports["vllm"] == reports["embedded"]
