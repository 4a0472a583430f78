"""The Commit Zone's single-token Value writes against no Commit Zone (§4.4, Fig. 6).

A batch of ``requests`` requests, each prefilled with 100 to 199 tokens, decodes ``steps``
tokens together: every decode step writes one token of each request (commits of the blocks
it fills included). The same batch runs on three write paths (:data:`PATHS`): with the Commit
Zone (CZ slots, ``W MEM`` grouped by CRS row), without it using ``WR_ABK`` (one scatter write
per Value row), and without it using ``W MEM`` (one masked burst per bank and Value row, as
the paper describes). Each step's Value-write program (and its commits) runs on the cycle
model from the reset state, alone; the figures are summed over the steps (row activations,
cycles, commands, energy). Only the cycle model runs: the figures are costs, and costs do not
depend on data (the runtime's programs are checked for values on the functional model and the
RTL elsewhere).

The prompt lengths are drawn as the earlier random scenario drew them for a decode-only run
(a prompt length, then a decode length that is not used, per request, from
``numpy.random.default_rng(seed)``), so the recorded figures stand. Timing does not depend on
data: the tokens are a constant pattern.

Device extensions (:mod:`patton.sim.extensions`) are opt-in: for every extension set asked
for besides ``aim``, one more path runs the Commit Zone on a device with it (``cz_wr16`` on
``aim+wr16``: the single-token CZ writes as ``WR_ABK_OPEN``, :func:`ext_path`), and, if the
set has ``wr16``, another runs without the Commit Zone on it (``no_cz_wr16``: the ``WR_ABK``
token writes as ``WR_ABK_OPEN``, a step's sorted by row, so the requests whose O1Vs share a
VRS write each of its rows under one activation); every path then also reports its
instructions and its ``ACT`` / ``ACT16`` commands. With ``aim`` alone (the default) the
figures are exactly the three paths' as before.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
from patton.runtime.patton.config import Config
from patton.runtime.patton.variants import VARIANTS, Variant
from patton.serving.kv_data import PATTERN
from patton.sim.cycle_model import CycleModel, DeviceState
from patton.sim.energy import activations, energy
from patton.sim.executor import closed
from patton.sim.extensions import DEFAULT_EXT, device_ext
from patton.sim.program import concat
from patton.sim.timing import timing_table

__all__ = ["PATHS", "RATIOS", "prompts", "ext_path", "measure"]

#: The three write paths: (name, runtime variant).
PATHS: tuple[tuple[str, Variant], ...] = (
    ("cz", VARIANTS["patton"]), ("no_cz_abk", VARIANTS["patton-wo-cz"]),
    ("no_cz_mem", dataclasses.replace(VARIANTS["patton-wo-cz"], token_op="mem")))
#: What is compared against the Commit Zone.
RATIOS = ("activations", "cycles", "energy_nj")


def prompts(requests: int, seed: int) -> list[int]:
    """The batch's prompt lengths (see the module docstring)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(requests):
        out.append(int(rng.integers(100, 200)))
        rng.integers(10**6, 10**6 + 1)  # the scenario's decode length, drawn and not used
    return out


def ext_path(ext: str, path: str = "cz") -> str:
    """The name of write path ``path`` (``"cz"``, or ``"no_cz"``: no Commit Zone with
    ``WR_ABK`` token writes) on a device of extension set ``ext`` (not ``aim``): ``path``, then
    the set's features (``cz_wr16``, ``no_cz_wr16``)."""
    return f"{path}_" + "_".join(device_ext(ext).features)


def _path(config: Config, variant: Variant, lengths: list[int], steps: int, timing: str,
          frontend: str, ext: str = DEFAULT_EXT, detail: bool = False) -> dict[str, Any]:
    """One write path's figures over the batch's decode steps on a device of extension set
    ``ext``; with ``detail`` also its instructions and ACT / ACT16 commands."""
    rt = variant.runtime(config, ext)
    t = config.block_size
    shape = (config.n_layers, 0, config.heads, config.d_head)

    def tokens(n: int) -> np.ndarray:
        return np.full(shape[:1] + (n,) + shape[2:], PATTERN, np.uint16)

    next_id = 0
    tables: list[list[int]] = []
    for r, n in enumerate(lengths):  # the prefills (their programs are not timed)
        items, table = [], []
        for pos in range(0, n, t):
            k = min(t, n - pos)
            rt.allocate(r, next_id)
            items.append((next_id, 0, tokens(k), tokens(k)))
            table.append(next_id)
            next_id += 1
        rt.write_program(items)
        tables.append(table)
    length = list(lengths)
    cycle_model = CycleModel(config.device, timing_table(timing, ext), record=False, drain=True,
                             frontend=frontend)
    reset = DeviceState.reset(config.device)
    out = {"activations": 0, "cycles": 0, "commands": 0, "energy_nj": 0.0, "writes": 0,
           "commits": 0}
    if detail:
        out.update(instructions=0, act=0, act16=0)
    one = tokens(1)
    for _ in range(steps):
        items = []
        for r in range(len(lengths)):
            if length[r] % t == 0:
                rt.allocate(r, next_id)
                tables[r].append(next_id)
                next_id += 1
            items.append((tables[r][-1], length[r] % t, one, one))
            length[r] += 1
        w = rt.write_program(items)
        out["writes"] += len(items)
        out["commits"] += sum(1 for _, start, _, _ in items if start == t - 1 and start > 0)
        program = concat([w.value, w.commit])
        res = cycle_model.run(closed(program), reset)
        if detail:
            out["instructions"] += len(program)
            for name in ("act", "act16"):
                out[name] += sum(c.get(name.upper(), 0) for c in res.command_counts.values())
        out["activations"] += activations(res.command_counts)
        out["cycles"] += res.cycles
        out["commands"] += sum(sum(c.values()) for c in res.command_counts.values())
        out["energy_nj"] += energy(res.command_counts, res.bank_state_cycles, res.cycles).total
    return out


def measure(config: Config, requests: int, steps: int, seed: int, timing: str,
            frontend: str = "shared",
            device_exts: Sequence[str] = (DEFAULT_EXT,)) -> dict[str, Any]:
    """Return, per write path, the Value-write figures of the batch under ``timing`` and
    ``frontend``, plus the ratios of the no-CZ paths over the Commit Zone's.

    The three paths of :data:`PATHS` run on ``aim``; each other set of ``device_exts`` adds
    the Commit Zone on it (:func:`ext_path`), its ratios over ``cz`` (``cz_wr16_over_cz``)
    and the no-CZ paths' over it (``no_cz_abk_over_cz_wr16``), and, with ``wr16``, no
    Commit Zone on it (``no_cz_wr16``) with its ratios over both (``no_cz_wr16_over_cz``,
    ``no_cz_wr16_over_cz_wr16``); and every path's instructions and ACT / ACT16 counts (see
    the module).
    """
    exts = [device_ext(e).name for e in device_exts]
    extra = [e for e in dict.fromkeys(exts) if e != DEFAULT_EXT]
    lengths = prompts(requests, seed)
    paths = [(name, variant, DEFAULT_EXT) for name, variant in PATHS]
    for e in extra:
        paths.append((ext_path(e), VARIANTS["patton"], e))
        if device_ext(e).has("wr16"):  # WR_ABK as WR_ABK_OPEN (patton-wo-cz's token_op "abk")
            paths.append((ext_path(e, "no_cz"), VARIANTS["patton-wo-cz"], e))
    out: dict[str, Any] = {}
    for name, variant, ext in paths:
        start = time.perf_counter()
        out[name] = _path(config, variant, lengths, steps, timing, frontend, ext, bool(extra))
        out[name]["wall_seconds"] = round(time.perf_counter() - start, 1)
    cz = out["cz"]
    for name in ("no_cz_abk", "no_cz_mem"):
        out[f"{name}_over_cz"] = {k: out[name][k] / cz[k] for k in RATIOS}
    for e in extra:
        ez, nz = ext_path(e), ext_path(e, "no_cz")
        for name in (ez, nz):
            if name in out:
                out[f"{name}_over_cz"] = {k: out[name][k] / cz[k] for k in RATIOS}
        for name in ("no_cz_abk", "no_cz_mem", nz):
            if name in out:
                out[f"{name}_over_{ez}"] = {k: out[name][k] / out[ez][k] for k in RATIOS}
    return out
