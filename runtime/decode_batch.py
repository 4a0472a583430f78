"""Decode steps of a batch that has been decoding: PATTON's programs, step after step.

:func:`prefilled` sets up a runtime whose requests already hold their context (the data taken
as in place, as after a prefill); :func:`decode_steps` then yields each decode step's programs
as an engine's forward pass issues them: the step's token writes (all layers), then per layer
the batch's QK^T and SV programs. Keys, Values and queries are random bfloat16; the programs'
addresses, and so their cost, are what the runtime's placements make them. Benchmarks and the
cost-reuse tests run on these.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from patton.runtime.models import model
from patton.runtime.patton.config import Config
from patton.runtime.patton.lifecycle import Runtime
from patton.sim.executor import closed
from patton.sim.program import Program

__all__ = ["prefilled", "decode_steps"]


def prefilled(requests: int, tokens: int, layers: int = 1, name: str = "llama3-8b",
              stagger: bool = False) -> tuple[Runtime, int]:
    """Return a runtime whose ``requests`` hold ``tokens`` tokens each, and the next block id.

    With ``stagger``, request ``r`` holds ``(r * T // requests) % T`` tokens fewer (``T`` the
    block size), so the requests' last blocks are at every fill level.
    """
    config = Config(model(name), layers=layers)
    rt = Runtime(config)
    t = config.block_size
    have = [tokens - ((r * t // requests) % t if stagger else 0) for r in range(requests)]
    next_id = 0
    for block in range(-(-max(have) // t)):
        for req in range(requests):
            n = min(t, have[req] - block * t)
            if n <= 0:
                continue
            zeros = np.zeros((layers, n, config.heads, config.d_head), dtype=np.uint16)
            rt.allocate(req, next_id)
            rt.write_many([(next_id, 0, zeros, zeros)], emit=False)
            next_id += 1
    return rt, next_id


def decode_steps(rt: Runtime, steps: int, next_id: int,
                 seed: int = 0) -> Iterator[list[Program]]:
    """Yield ``steps`` decode steps of every request of ``rt``: each a list of closed programs
    (token writes, then QK^T and SV of layer 0, 1, ...), copies that stay valid."""
    config = rt.config
    rng = np.random.default_rng(seed)
    reqs = sorted(rt.requests)
    layers = config.n_layers
    shape = (len(reqs), layers, config.heads, config.d_head)
    for _ in range(steps):
        ids = []
        for req in reqs:  # a full last block gets a successor, as an engine allocates
            last = rt.blocks[rt.requests[req].table[-1]]
            if last.full:
                rt.allocate(req, next_id)
                last = rt.blocks[next_id]
                next_id += 1
            ids.append(last.block_id)
        keys = rng.integers(0x3000, 0x4000, shape, dtype=np.uint16)
        values = rng.integers(0x3000, 0x4000, shape, dtype=np.uint16)
        step = [closed(rt.append(ids, keys, values).all).copy()]
        width = None
        for layer in range(layers):
            query = rng.integers(0x3000, 0x4000, (len(reqs), config.heads, config.d_head),
                                 dtype=np.uint16)
            step.append(closed(rt.qk_step(reqs, layer, query)[0]).copy())
            width = max(len(rt.requests[r].table) for r in reqs) * config.block_size
            step.append(closed(rt.sv_step(reqs, layer, rt.sv_buffer(reqs, layer, width))[0])
                        .copy())
        yield step
