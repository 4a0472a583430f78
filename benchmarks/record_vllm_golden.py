"""Record golden runs of the multi-turn client model through the real vLLM 0.33 scheduler.

Run with the vLLM virtualenv's python (docs/serving.md, "Installing the vLLM extra"):

    /work/venv-vllm/bin/python benchmarks/record_vllm_golden.py [--only NAME ...]

Each configuration of :data:`CONFIGS` feeds ``tests/data/serving/sharegpt-llama3-300.jsonl``
through the step driver (:class:`patton.serving.driver.Driver`) and
:class:`patton.serving.vllm_engine.VllmEngine`, and writes
``tests/data/serving/golden/<name>.json.gz`` (gzip, mtime 0, of JSON text with one step per
line): ``params`` (the conversation file and its sha256, clients, pool, the engine parameters,
the step limit), ``vllm`` (the scheduler settings in force), then the run
(:meth:`patton.serving.record.Run.as_dict`: ``complete``, ``report``, per step the
scheduled requests with their token counts in vLLM's order and the preempted ids, per request
its cached tokens as vLLM reports ``num_cached_tokens`` and its finish step).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Any

from patton.serving.conversations import read
from patton.serving.driver import Driver
from patton.serving.interface import EngineParams
from patton.serving.vllm_engine import VllmEngine

ROOT = Path(__file__).resolve().parent.parent
CONVERSATIONS = "tests/data/serving/sharegpt-llama3-300.jsonl"
GOLDEN = ROOT / "tests/data/serving/golden"

#: name -> (clients, pool, EngineParams, step limit). Sized so each file stays small.
CONFIGS: dict[str, tuple[int, int, EngineParams, int]] = {
    # Ample blocks: prefix hits across turns, no eviction, no preemption.
    "c4-p8-ample": (4, 8, EngineParams(block_size=16, num_blocks=1024, max_num_seqs=8,
                                     max_num_batched_tokens=2048, max_model_len=4096), 2000),
    # Moderate pressure: cached blocks of idle conversations are evicted, chunked prefill.
    "c8-p16-evict": (8, 16, EngineParams(block_size=16, num_blocks=256, max_num_seqs=8,
                                       max_num_batched_tokens=512, max_model_len=2048), 2000),
    # Heavy pressure: few blocks, recompute preemptions.
    "c8-p32-preempt": (8, 32, EngineParams(block_size=16, num_blocks=80, max_num_seqs=8,
                                         max_num_batched_tokens=256, max_model_len=1024), 2000),
    # Fewer sequence slots than clients (a waiting queue), small chunks, conversations that
    # leave because their next turn would exceed max_model_len.
    "c4-p4-seqs2": (4, 4, EngineParams(block_size=16, num_blocks=128, max_num_seqs=2,
                                     max_num_batched_tokens=64, max_model_len=768), 2000),
    # Block size 8, pool of 3 conversations per client, tight blocks.
    "c2-p6-bs8": (2, 6, EngineParams(block_size=8, num_blocks=120, max_num_seqs=4,
                                   max_num_batched_tokens=128, max_model_len=900), 2000),
    # A short context: most conversations leave after turn 1, the file runs out and every
    # client stops (a complete run).
    "c16-p32-short": (16, 32, EngineParams(block_size=16, num_blocks=400, max_num_seqs=16,
                                         max_num_batched_tokens=1024, max_model_len=320),
                      8000),
    # The two pressure configurations with vLLM's prefix caching off: no hits, every freed
    # block to the head of the free queue, more preemption.
    "c8-p16-evict-nopc": (8, 16, EngineParams(block_size=16, num_blocks=256, max_num_seqs=8,
                                            max_num_batched_tokens=512, max_model_len=2048,
                                            enable_prefix_caching=False), 1500),
    "c8-p32-preempt-nopc": (8, 32, EngineParams(block_size=16, num_blocks=80, max_num_seqs=8,
                                              max_num_batched_tokens=256, max_model_len=1024,
                                              enable_prefix_caching=False), 1500),
}


def sha256(path: Path) -> str:
    """Return the hex sha256 of a file."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def record(name: str) -> dict[str, Any]:
    """Return the golden record of one configuration (runs vLLM)."""
    clients, pool, params, max_steps = CONFIGS[name]
    conversations = read(ROOT / CONVERSATIONS)
    driver = Driver(VllmEngine, params, conversations, clients=clients, pool=pool,
                    max_steps=max_steps)
    result = driver.run()
    engine = driver.engine
    return {"name": name,
            "params": {"conversations": CONVERSATIONS,
                       "conversations_sha256": sha256(ROOT / CONVERSATIONS),
                       "clients": clients, "pool": pool, "block_size": params.block_size,
                       "num_blocks": params.num_blocks, "max_num_seqs": params.max_num_seqs,
                       "max_num_batched_tokens": params.max_num_batched_tokens,
                       "max_model_len": params.max_model_len, "max_steps": max_steps,
                       **({} if params.enable_prefix_caching
                          else {"enable_prefix_caching": False})},
            "vllm": engine.settings(),
            **result.as_dict()}


def dumps(data: dict[str, Any]) -> str:
    """Return a golden record as JSON text with one step and one request per line."""
    head = {k: v for k, v in data.items() if k not in ("steps", "requests")}
    lines = [json.dumps(head, indent=1)[:-2] + ","]
    lines.append(' "steps": [')
    steps = data["steps"]
    lines += ["  " + json.dumps(s) + ("," if i < len(steps) - 1 else "")
              for i, s in enumerate(steps)]
    lines.append(" ],")
    lines.append(' "requests": {')
    reqs = list(data["requests"].items())
    lines += ["  " + json.dumps(k) + ": " + json.dumps(v) + ("," if i < len(reqs) - 1 else "")
              for i, (k, v) in enumerate(reqs)]
    lines.append(" }")
    lines.append("}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", metavar="NAME", help="configurations to record")
    ap.add_argument("--out", type=Path, default=GOLDEN, help="output directory")
    args = ap.parse_args(argv)
    names = args.only or list(CONFIGS)
    unknown = [n for n in names if n not in CONFIGS]
    if unknown:
        print(f"unknown configuration(s) {unknown}; known: {list(CONFIGS)}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    for name in names:
        t = time.perf_counter()
        data = record(name)
        text = dumps(data)
        assert json.loads(text) == data
        path = args.out / f"{name}.json.gz"
        path.write_bytes(gzip.compress(text.encode("utf-8"), compresslevel=9, mtime=0))
        r = data["report"]
        print(f"{name}: {r['steps']} steps, {r['requests']} requests, hit rate "
              f"{r['hit_rate']:.3f}, {r['preemptions']} preemptions, {r['recomputed_tokens']} "
              f"recomputed, complete={data['complete']}, {len(text)} B ({path.stat().st_size} B "
              f"gzipped), {time.perf_counter() - t:.1f} s -> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
