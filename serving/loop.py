"""The serving loop: replay an event log through a runtime and the device executors.

:func:`execute` replays a log (:mod:`patton.serving.scenario`) on a fresh runtime of any
mode, optionally on a functional executor (checking every attention result and every token's
placement, :mod:`patton.serving.checks`) and on a cycle executor (the Value writes of
decode steps, commits included: row activations, cycles, commands and energy).
"""

from __future__ import annotations

from patton.runtime.patton.config import Config
from patton.runtime.patton.lifecycle import Runtime
from patton.runtime.patton.variants import VARIANTS, Variant
from patton.sim.executor import CycleExecutor, FunctionalExecutor
from patton.sim.functional import FunctionalModel
from patton.sim.isa import Instruction
from patton.sim.program import concat
from patton.serving.checks import Report, check_attention, check_placements
from patton.serving.scenario import Event, Tokens
from patton.sim.timing import DEFAULT_PROFILE, Timing

__all__ = ["execute", "apply_lifecycle"]


def _activations(counts: dict[int, dict[str, int]]) -> int:
    return sum(c.get("ACT", 0) + 4 * c.get("ACT4", 0) + 16 * c.get("ACT16", 0)
               for c in counts.values())


def apply_lifecycle(rt: Runtime, event: tuple) -> bool:
    """Apply an ``alloc``/``share``/``finish``/``evict`` event; return False for other kinds."""
    kind = event[0]
    if kind == "alloc":
        rt.allocate(event[1], event[2])
    elif kind == "share":
        rt.share(event[1], event[2])
    elif kind == "finish":
        rt.finish(event[1])
    elif kind == "evict":
        rt.evict(event[1])
    else:
        return False
    return True


def execute(config: Config, log: list[Event], variant: Variant = VARIANTS["patton"], *,
            seed: int = 0, functional: bool = True, cycles: bool = False,
            placements: bool = True, model: FunctionalModel | None = None,
            sink: list[Instruction] | None = None, timing: Timing = DEFAULT_PROFILE,
            frontend: str = "shared") -> tuple[Runtime, Report]:
    """Replay ``log`` on a fresh runtime; check on the functional model and time Value writes.

    Args:
        config: geometry (as for :func:`~patton.serving.scenario.generate`).
        log: events.
        variant: the runtime variant (:mod:`patton.runtime.patton.variants`: PATTON or an ablation).
        seed: the data seed (as for :func:`~patton.serving.scenario.generate`).
        functional: run every program on a functional executor and check attention.
        cycles: run each decode step's Value writes (and commits) on a cycle executor, from
            the reset state (each step's writes timed alone).
        placements: after the log, read every bound token back from the mats.
        model: the functional model to run on (default: a fresh one when ``functional``); the
            cycle executors keep its mats in step too.
        sink: if given, every program run on the functional model is appended to it (in
            order; add an EOC and it is one replayable trace of the whole scenario).
        timing: the timing profile of the cycle executors (:mod:`patton.sim.timing`).
        frontend: their front end (:data:`patton.sim.cycle_model.FRONTENDS`).
    """
    rt = variant.runtime(config)
    data = Tokens(config, seed)
    fx = FunctionalExecutor(config.device, model) if functional or model is not None else None
    # the mats the cycle executors keep in step: the functional executor's when there is one
    mats = fx.model if fx is not None else FunctionalModel(config.device) if cycles else None
    rep = Report()
    origin: dict[int, tuple[int, int]] = {}  # block id -> (conv, position of offset 0)
    for ev in log:
        kind = ev[0]
        if apply_lifecycle(rt, ev):
            continue
        if kind in ("prefill", "decode"):
            items = []
            for bid, start, n, conv, pos0 in ev[1]:
                if start == 0:
                    origin[bid] = (conv, pos0)
                items.append((bid, start, *data.span(conv, pos0, n)))
            w = rt.write_program(items)  # valid until the next write call
            timed = concat([w.value, w.commit]) if cycles and kind == "decode" else None
            if timed is not None and not len(timed):
                timed = None
            if fx is not None:
                fx.run(w.all if timed is None else w.key)  # the timed rest runs below
                if sink is not None:
                    sink += w.all.to_instructions()
            if kind == "decode":
                rep.decode_steps += 1
                rep.value_writes += len(items)
                rep.commits += sum(1 for bid, start, n, _, _ in ev[1]
                                   if start + n == config.block_size and start > 0)
            if timed is not None:
                # each step's Value writes timed alone, from the reset state: a fresh executor
                res = CycleExecutor(config.device, timing, record=False, model=mats,
                                    frontend=frontend).run(timed)
                assert res.cycles is not None and res.command_counts is not None
                assert res.energy is not None
                rep.value_write_cycles += res.cycles
                rep.value_write_activations += _activations(res.command_counts)
                rep.value_write_commands += sum(sum(c.values())
                                                for c in res.command_counts.values())
                rep.value_write_energy_nj += res.energy.total
        elif kind == "attend":
            if fx is not None:
                check_attention(rt, fx, data, ev[1], ev[2], ev[3], seed, rep, sink)
        else:
            raise ValueError(f"unknown event {kind!r}")
    if fx is not None and placements:
        bad, checked = check_placements(rt, fx.model, data, origin)
        rep.placement_mismatches += bad
        rep.placement_checked += checked
    return rt, rep
