"""Task results -> the figure records of ``patton repro --json``.

Each function takes the ``(task, result)`` pairs of a run (``tasks.run``'s ``result``) and
returns one figure's record: first the keys the issue requires (geometric means over the
models, ratios as plain numbers, reductions and hit rates as fractions), then per-model detail.

* **Fig. 7**: per model and runtime, latency = the four PIM parts' seconds (Key writes, Value
  writes, QK^T, SV) + the runtime-induced prefill recomputation's seconds; energy likewise in
  joules. ``speedup[b]`` is the geometric mean over the models of b's latency over PATTON's,
  ``energy_gain[b]`` the same for energy; ``all`` the geometric mean over the four baselines
  (§5.3). ``per_model`` gives every runtime's parts normalised to PATTON's total (the stacked
  bars).
* **Fig. 8**: attention only (the four PIM parts, no recomputation), per front end:
  reductions ``1 - g`` where ``g`` is the geometric mean over the models of PATTON's cost over
  the other's; the Value-write speedup is the geometric mean of wo-CZ's Value-write seconds
  over PATTON's.
* Both give, per model, ``energy_components``: each runtime's attention energy (the four PIM
  parts) split by the energy model's components (activations, reads, writes, MACs, I/O,
  controller, global buffer, standby), as fractions of PATTON's attention energy; absent when
  a result does not split its energy (``energy_components_joules``).
* **Fig. 9**: hit rates per load and runtime; ``pressure_live_tokens`` the most live context
  tokens the GPU reference's pressure run held (the workload's, under vLLM's own cache).
* **micro**: the activation ratio of single-token Value writes without the Commit Zone (the
  paper's per-bank ``W MEM`` baseline) over with it, and the fragmented SV reduction's latency
  and energy ratios.

A ratio whose denominator is zero is None (and so is a mean over it).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from patton.eval.paper import BASELINES
from patton.eval.plan import FIG8_RUNTIMES, FRONTENDS
from patton.eval.tasks import CostTask, FragmentationTask, HitTask, Task, ValueWriteTask

__all__ = ["PARTS", "STACK", "fig7", "fig8", "fig9", "geomean", "micro", "ratio", "record"]

#: The PIM attention parts of a serving run's cost (``RunCost.as_dict()["parts"]``).
PARTS = ("k_write", "v_write", "qk", "sv")
#: Fig. 7's stacks: the PIM parts, then the prefill recomputation.
STACK = (*PARTS, "recompute")

Pairs = Sequence[tuple[Task, dict[str, Any]]]


def geomean(values: Iterable[float | None]) -> float | None:
    """Return the geometric mean of positive numbers (None if any is None).

    Raises:
        ValueError: no values, or one that is not positive.
    """
    xs = list(values)
    if not xs:
        raise ValueError("geometric mean of no values")
    if any(x is None for x in xs):
        return None
    fs = [float(x) for x in xs]  # type: ignore[arg-type]
    if any(not x > 0 for x in fs):  # also refuses nan
        raise ValueError(f"geometric mean needs positive values, got {fs}")
    return math.exp(sum(math.log(x) for x in fs) / len(fs))


def ratio(a: float, b: float) -> float | None:
    """Return ``a / b`` (None when ``b`` is 0)."""
    return a / b if b else None


def _reduction(g: float | None) -> float | None:
    return None if g is None else 1.0 - g


def _costs(pairs: Pairs, frontend: str) -> dict[str, dict[str, dict[str, Any]]]:
    """model -> runtime -> RunCost dict, of the cost tasks on ``frontend``."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for task, result in pairs:
        if isinstance(task, CostTask) and task.frontend == frontend:
            out.setdefault(task.model, {})[task.runtime] = result
    return out


def _split(cost: dict[str, Any], unit: str) -> dict[str, float]:
    """The stack of one run in ``unit`` ("seconds" or "joules"): the parts and recompute."""
    parts = cost["parts"]
    out = {p: float(parts[p][unit]) for p in PARTS}
    out["recompute"] = float(cost[f"recompute_{unit}"])
    return out


def _components(runs: dict[str, dict[str, Any]], order: Sequence[str]
                ) -> dict[str, dict[str, float | None]] | None:
    """Every runtime's attention energy by component over PATTON's attention energy (None
    when a run does not split its energy)."""
    split: dict[str, dict[str, float]] = {}
    for r in order:
        parts = runs[r]["parts"]
        if any("energy_components_joules" not in parts[p] for p in PARTS):
            return None
        total: dict[str, float] = {}
        for p in PARTS:
            for name, j in parts[p]["energy_components_joules"].items():
                total[name] = total.get(name, 0.0) + float(j)
        split[r] = total
    base = sum(split["patton"].values())
    return {r: {name: ratio(j, base) for name, j in comps.items()} for r, comps in split.items()}


def _need(costs: dict[str, dict[str, Any]], model: str, runtimes: Iterable[str],
          figure: str) -> None:
    missing = [r for r in runtimes if r not in costs]
    if missing:
        raise ValueError(f"{figure}: {model} has no result for {', '.join(missing)}")


def fig7(pairs: Pairs, models: Sequence[str], frontend: str = "shared") -> dict[str, Any]:
    """Return Fig. 7's record over ``models`` from the cost tasks on ``frontend``."""
    costs = _costs(pairs, frontend)
    per_model: dict[str, Any] = {}
    speed: dict[str, list[float | None]] = {b: [] for b in BASELINES}
    gain: dict[str, list[float | None]] = {b: [] for b in BASELINES}
    for m in models:
        runs = costs.get(m, {})
        _need(runs, m, ("patton", *BASELINES), "fig7")
        latency = {r: _split(runs[r], "seconds") for r in ("patton", *BASELINES)}
        energy = {r: _split(runs[r], "joules") for r in ("patton", *BASELINES)}
        lat_p, en_p = sum(latency["patton"].values()), sum(energy["patton"].values())
        detail: dict[str, Any] = {"speedup": {}, "energy_gain": {}, "latency": {},
                                  "energy": {}, "absolute": {}}
        for r in ("patton", *BASELINES):
            lat, en = sum(latency[r].values()), sum(energy[r].values())
            detail["latency"][r] = {k: ratio(v, lat_p) for k, v in latency[r].items()}
            detail["latency"][r]["total"] = ratio(lat, lat_p)
            detail["energy"][r] = {k: ratio(v, en_p) for k, v in energy[r].items()}
            detail["energy"][r]["total"] = ratio(en, en_p)
            c = runs[r]
            detail["absolute"][r] = {"seconds": lat, "joules": en,
                                     "hit_rate": c.get("hit_rate"), "steps": c.get("steps"),
                                     "decode_tokens": c.get("decode_tokens"),
                                     "prefill_tokens": c.get("prefill_tokens"),
                                     "violations": c.get("violations"),
                                     "mismatches": c.get("mismatches"),
                                     "checked_programs": c.get("checked_programs"),
                                     "wall_seconds": c.get("wall_seconds")}
            if r != "patton":
                detail["speedup"][r] = ratio(lat, lat_p)
                detail["energy_gain"][r] = ratio(en, en_p)
                speed[r].append(detail["speedup"][r])
                gain[r].append(detail["energy_gain"][r])
        components = _components(runs, ("patton", *BASELINES))
        if components is not None:
            detail["energy_components"] = components
        per_model[m] = detail
    speedup = {b: geomean(speed[b]) for b in BASELINES}
    energy_gain = {b: geomean(gain[b]) for b in BASELINES}
    speedup["all"] = geomean(speedup.values())
    energy_gain["all"] = geomean(energy_gain.values())
    return {"speedup": speedup, "energy_gain": energy_gain, "models": list(models),
            "frontend": frontend, "per_model": per_model}


def fig8(pairs: Pairs, models: Sequence[str]) -> dict[str, Any]:
    """Return Fig. 8's record over ``models``: one entry per front end (attention only)."""
    out: dict[str, Any] = {}
    per_model: dict[str, Any] = {}
    for f in FRONTENDS:
        costs = _costs(pairs, f)
        g: dict[str, list[float | None]] = {k: [] for k in ("lat_cz", "en_cz", "vw", "lat_bp",
                                                            "en_bp")}
        per_model[f] = {}
        for m in models:
            runs = costs.get(m, {})
            _need(runs, m, FIG8_RUNTIMES, f"fig8 ({f})")
            parts = {r: {p: float(runs[r]["parts"][p]["seconds"]) for p in PARTS}
                     for r in FIG8_RUNTIMES}
            joules = {r: {p: float(runs[r]["parts"][p]["joules"]) for p in PARTS}
                      for r in FIG8_RUNTIMES}
            lat = {r: sum(parts[r].values()) for r in FIG8_RUNTIMES}
            en = {r: sum(joules[r].values()) for r in FIG8_RUNTIMES}
            g["lat_cz"].append(ratio(lat["patton"], lat["patton-wo-cz"]))
            g["en_cz"].append(ratio(en["patton"], en["patton-wo-cz"]))
            g["vw"].append(ratio(parts["patton-wo-cz"]["v_write"], parts["patton"]["v_write"]))
            g["lat_bp"].append(ratio(lat["patton"], lat["blockpim"]))
            g["en_bp"].append(ratio(en["patton"], en["blockpim"]))
            per_model[f][m] = {
                "latency": {r: {**{p: ratio(v, lat["patton"]) for p, v in parts[r].items()},
                                "total": ratio(lat[r], lat["patton"])} for r in FIG8_RUNTIMES},
                "energy": {r: {**{p: ratio(v, en["patton"]) for p, v in joules[r].items()},
                               "total": ratio(en[r], en["patton"])} for r in FIG8_RUNTIMES},
                "value_write_speedup_vs_wo_cz": g["vw"][-1],
                "absolute": {r: {"seconds": lat[r], "joules": en[r]} for r in FIG8_RUNTIMES}}
            components = _components(runs, FIG8_RUNTIMES)
            if components is not None:
                per_model[f][m]["energy_components"] = components
        out[f] = {"latency_reduction_vs_wo_cz": _reduction(geomean(g["lat_cz"])),
                  "energy_reduction_vs_wo_cz": _reduction(geomean(g["en_cz"])),
                  "value_write_speedup_vs_wo_cz": geomean(g["vw"]),
                  "latency_reduction_vs_blockpim": _reduction(geomean(g["lat_bp"])),
                  "energy_reduction_vs_blockpim": _reduction(geomean(g["en_bp"]))}
    out["models"] = list(models)
    out["per_model"] = per_model
    return out


def fig9(pairs: Pairs) -> dict[str, Any]:
    """Return Fig. 9's record: hit rates per load (``normal``, ``pressure``, ...) and runtime."""
    out: dict[str, Any] = {}
    runs: dict[str, dict[str, Any]] = {}
    live: dict[str, int] = {}
    for task, result in pairs:
        if not isinstance(task, HitTask):
            continue
        out.setdefault(task.load, {})[task.runtime] = float(result["hit_rate"])
        lt = result["live_context_tokens"]
        if task.runtime == "gpu" or task.load not in live:  # the reference's, if there
            live[task.load] = int(lt["max"])
        usage = result.get("usage", {})
        runs.setdefault(task.load, {})[task.runtime] = {
            "hit_rate": float(result["hit_rate"]), "pool": task.pool,
            "clients": task.clients, "steps": result["steps"],
            "requests": result["requests"], "live_mean": lt["mean"], "live_max": lt["max"],
            "capacity_tokens": result["capacity"]["tokens"],
            "stranded_mean": usage.get("stranded_mean"), "refusals": result.get("refusals"),
            "preemptions": result["preemptions"], "complete": result["complete"]}
    for load in ("normal", "pressure"):
        if load not in out:
            raise ValueError(f"fig9: no {load} runs")
    record: dict[str, Any] = {"normal": out["normal"], "pressure": out["pressure"],
                              "pressure_live_tokens": live["pressure"]}
    for load, hit in out.items():
        if load not in ("normal", "pressure"):
            record[load] = hit
            record[f"{load}_live_tokens"] = live[load]
    record["runs"] = runs
    return record


def micro(pairs: Pairs) -> dict[str, Any]:
    """Return the microbenchmarks' record."""
    frag = next((r for t, r in pairs if isinstance(t, FragmentationTask)), None)
    writes = next(((t, r) for t, r in pairs if isinstance(t, ValueWriteTask)), None)
    if frag is None or writes is None:
        raise ValueError("micro: the fragmentation and Value-write results are both needed")
    task, vw = writes
    over_mem, over_abk = vw["no_cz_mem_over_cz"], vw["no_cz_abk_over_cz"]
    return {"cz_activation_reduction": float(over_mem["activations"]),
            "fragmentation_latency": float(frag["latency"]),
            "fragmentation_energy": float(frag["energy"]),
            "value_writes": {
                "model": task.model, "requests": task.requests, "steps": task.steps,
                "timing": task.timing, "frontend": task.frontend,
                "activation_reduction_vs_wr_abk": float(over_abk["activations"]),
                "cycle_speedup_vs_w_mem": float(over_mem["cycles"]),
                "cycle_speedup_vs_wr_abk": float(over_abk["cycles"]),
                "energy_gain_vs_w_mem": float(over_mem["energy_nj"]),
                "energy_gain_vs_wr_abk": float(over_abk["energy_nj"]),
                "paths": {k: vw[k] for k in ("cz", "no_cz_mem", "no_cz_abk")}},
            "fragmentation": frag}


def record(figure: str, pairs: Pairs, models: Sequence[str] = (),
           fig8_models: Sequence[str] = (), fig7_frontend: str = "shared") -> dict[str, Any]:
    """Return ``figure``'s record from ``pairs`` (``models``: Fig. 7's, on ``fig7_frontend``;
    ``fig8_models``: Fig. 8's)."""
    if figure == "fig7":
        return fig7(pairs, models, fig7_frontend)
    if figure == "fig8":
        return fig8(pairs, fig8_models)
    if figure == "fig9":
        return fig9(pairs)
    if figure == "micro":
        return micro(pairs)
    raise ValueError(f"unknown figure {figure!r}")
