"""``docs/evaluation.md``'s measured numbers: the full-scale ``patton repro`` records in
``docs/img/`` (the paper configuration's, ``repro-12000`` of ``readme.py``, the previous
round's and the earlier partial runs') and the bound on Fig. 8's gap
(``benchmarks/fig8_cz_bound.py``)."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from functools import cache

from patton.eval.figures import fig7 as fig7_figure
from patton.eval.figures import fig8 as fig8_figure
from patton.eval.figures import fig9 as fig9_figure
from patton.eval.paper import BASELINES, SETTINGS

from sources.common import ROOT, Timed, minutes, pct, record, slash, span, x

_IMG = ROOT / "docs" / "img"
#: The full run under the paper configuration (``docs/sources/readme.py``'s stored record).
_R = "repro-12000"
#: The previous round's full run, and the earlier partial runs.
_P = "evaluation-repro-12000-previous"
_PC12 = "evaluation-fig7-per-channel-12000"
_L12 = "evaluation-fig7-llama-12000"
_F8L12 = "evaluation-fig8-llama-12000"
_F8L2 = "evaluation-fig8-llama-2000"
_F7_2 = "evaluation-fig7-2000"
_PC2 = "evaluation-fig7-per-channel-2000"
_LPC2 = "evaluation-fig7-llama-per-channel-2000"
_OPC2 = "evaluation-fig7-opt-per-channel-2000"
_BOUND = "evaluation-cz-bound"

#: Stored record name -> its file (``patton repro``'s ``repro.json`` of each run).
STORED = {
    _P: _IMG / "repro-12000-previous.json",
    _PC12: _IMG / "fig7-per-channel-12000.json",
    _L12: _IMG / "fig7-llama-12000.json",
    _F8L12: _IMG / "fig8-llama-12000.json",
    _F8L2: _IMG / "fig8-llama-2000.json",
    _F7_2: _IMG / "fig7-2000.json",
    _PC2: _IMG / "fig7-per-channel-2000.json",
    _LPC2: _IMG / "fig7-llama-per-channel-2000.json",
    _OPC2: _IMG / "fig7-opt-per-channel-2000.json",
}

#: Timed record name -> how it is made (minutes of worker time; remade on a quiet machine).
TIMED: dict[str, Timed] = {
    _BOUND: Timed(["benchmarks/fig8_cz_bound.py", "--steps", "12000", "--json"]),
}

_RUNTIMES = {"patton": "PATTON", "neupims": "NeuPIMs", "pimphony": "PIMphony",
             "attacc": "AttAcc", "blockpim": "BlockPIM", "patton-wo-cz": "PATTON-wo-CZ"}
_MODELS = {"llama3-8b": "Llama-3-8B", "qwen3-8b": "Qwen3-8B", "opt-6.7b": "OPT-6.7B",
           "qwen1.5-7b": "Qwen1.5-7B"}
_GQA, _MHA = ("llama3-8b", "qwen3-8b"), ("opt-6.7b", "qwen1.5-7b")


def _fig7(name: str) -> dict:
    return record(name)["fig7"]


def _fig8(name: str) -> dict:
    return record(name)["fig8"]


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _table(head: list[str], align: list[str], rows: list[list[str]]) -> str:
    return "\n".join(["| " + " | ".join(head) + " |", "|" + "|".join(align) + "|",
                      *("| " + " | ".join(r) + " |" for r in rows)])


def _ceil_pct(value: float) -> str:
    """A relative difference rounded up to a whole per cent."""
    return f"{math.ceil(100 * value)} %"


def _round_pct(value: float) -> str:
    return f"{100 * value:.0f} %"


# --- Fig. 7 -------------------------------------------------------------------------------

def _fig7_table(name: str, head: str = "PATTON over", ratio: bool = True) -> Callable[[], str]:
    """Fig. 7's means: each baseline's speedup and energy gain, ours beside the paper's."""
    def made() -> str:
        fig = _fig7(name)
        rows = []
        for b in (*BASELINES, "all"):
            row = [_RUNTIMES.get(b, b)]
            for key in ("speedup", "energy_gain"):
                ours, paper = fig[key][b], fig7_figure.PAPER[key][b]
                row += [x(ours), x(paper)] + ([f"{ours / paper:.2f}"] if ratio else [])
            rows.append(row)
        cols = (["speedup (ours)", "paper"] + (["ours / paper"] if ratio else [])
                + ["energy gain (ours)", "paper"] + (["ours / paper"] if ratio else []))
        return _table([head, *cols], ["---"] + ["---:"] * len(cols), rows)
    return made


def _fig7_models(name: str) -> Callable[[], str]:
    """Fig. 7 per model: speedups and energy gains, PATTON's hit rate and decode tokens."""
    def made() -> str:
        rows = []
        for m, per in _fig7(name)["per_model"].items():
            patton = per["absolute"]["patton"]
            rows.append([_MODELS[m], slash([per["speedup"][b] for b in BASELINES], ""),
                         slash([per["energy_gain"][b] for b in BASELINES], ""),
                         f"{100 * patton['hit_rate']:.2f} %", f"{patton['decode_tokens']:,}"])
        return _table(["model", "speedup", "energy gain", "PATTON's hit rate", "decode tokens"],
                      ["---", "---", "---", "---:", "---:"], rows)
    return made


def _gains(name: str, model: str, key: str = "speedup") -> Callable[[], str]:
    """One model's four gains over NeuPIMs / PIMphony / AttAcc / BlockPIM, no unit."""
    return lambda: slash([_fig7(name)["per_model"][model][key][b] for b in BASELINES], "")


def _gains_x(name: str, model: str, key: str = "speedup") -> Callable[[], str]:
    """One model's four gains, ``3.36x / 1.49x / ...``."""
    return lambda: " / ".join(x(_fig7(name)["per_model"][model][key][b]) for b in BASELINES)


def _share(name: str, model: str, part: str = "v_write", runtime: str = "patton",
           digits: int = 1) -> Callable[[], str]:
    """A part's share of a runtime's Fig. 7 latency."""
    def made() -> str:
        lat = _fig7(name)["per_model"][model]["latency"][runtime]
        return f"{100 * lat[part] / lat['total']:.{digits}f} %"
    return made


def _norm(name: str, model: str, runtime: str, part: str = "total",
          key: str = "latency", digits: int = 2) -> Callable[[], str]:
    """A runtime's Fig. 7 part, normalised to PATTON's total."""
    return lambda: f"{_fig7(name)['per_model'][model][key][runtime][part]:.{digits}f}"


def _abs_part(name: str, model: str, runtime: str, part: str | None = None) -> float:
    """A runtime's seconds of one Fig. 7 part (or all) on one model."""
    per = _fig7(name)["per_model"][model]
    total = per["absolute"][runtime]["seconds"]
    if part is None:
        return total
    lat = per["latency"][runtime]
    return total * lat[part] / lat["total"]


def _seconds(name: str, model: str, runtime: str, part: str | None = None,
             digits: int = 2) -> Callable[[], str]:
    return lambda: f"{_abs_part(name, model, runtime, part):.{digits}f} s"


def _fig7_llama_rows() -> str:
    """Llama-3-8B's Fig. 7 gains at 12,000 and 2,000 steps beside the paper's means."""
    big = _fig7(_L12)
    small = _fig7(_F7_2)["per_model"]["llama3-8b"]
    rows = []
    for key, label in (("speedup", "speedup"), ("energy_gain", "energy gain")):
        at2000 = [small[key][b] for b in BASELINES]
        rows += [[f"{label}, 12,000 steps", *(x(big[key][b]) for b in (*BASELINES, "all"))],
                 [f"{label}, 2,000 steps", *(x(v) for v in at2000), x(_geomean(at2000))],
                 ["paper (four-model means)",
                  *(x(fig7_figure.PAPER[key][b]) for b in (*BASELINES, "all"))]]
    return _table(["PATTON over", *(_RUNTIMES[b] for b in BASELINES), "all"],
                  ["---"] + ["---:"] * 5, rows)


def _fig7_per_channel_2000() -> str:
    """Llama-3-8B's and OPT-6.7B's Fig. 7 gains with one decoder per channel, 2,000 steps."""
    rows = []
    for name, model in ((_LPC2, "Llama-3-8B"), (_OPC2, "OPT-6.7B")):
        for key, label in (("speedup", "speedup"), ("energy_gain", "energy gain")):
            rows.append([f"{model} {label}", *(x(_fig7(name)[key][b]) for b in BASELINES)])
    rows += [["paper speedup (four-model means)",
              *(x(fig7_figure.PAPER["speedup"][b]) for b in BASELINES)],
             ["paper energy gain", *(x(fig7_figure.PAPER["energy_gain"][b]) for b in BASELINES)]]
    return _table(["PATTON over, per-channel decoders", *(_RUNTIMES[b] for b in BASELINES)],
                  ["---"] + ["---:"] * 4, rows)


def _fig7_opt_decoders() -> str:
    """OPT-6.7B's speedups on the shared decoder and with one per channel, 2,000 steps."""
    shared = _fig7(_F7_2)["per_model"]["opt-6.7b"]["speedup"]
    per = _fig7(_OPC2)["speedup"]
    return _table(["OPT-6.7B, PATTON's speedup over", *(_RUNTIMES[b] for b in BASELINES)],
                  ["---"] + ["---:"] * 4,
                  [["shared decoder (the 2,000-step run above)",
                    *(x(shared[b]) for b in BASELINES)],
                   ["per-channel decoders", *(x(per[b]) for b in BASELINES)]])


def _fig7_latency_models(name: str) -> Callable[[], str]:
    """Each baseline's latency per model over PATTON's, and PATTON's Value-write share."""
    def made() -> str:
        rows = []
        for m, per in _fig7(name)["per_model"].items():
            lat = per["latency"]
            rows.append([_MODELS[m], *(f"{lat[b]['total']:.2f}" for b in BASELINES),
                         f"{100 * lat['patton']['v_write'] / lat['patton']['total']:.1f} %"])
        return _table(["model", *(_RUNTIMES[b] for b in BASELINES), "PATTON's V-write share"],
                      ["---"] + ["---:"] * 5, rows)
    return made


def _task_walls() -> str:
    """Every Fig. 7 task's own wall time in the full run (tasks one run serves share it)."""
    per = _fig7(_R)["per_model"]
    rows = [[_RUNTIMES[r], *(f"{per[m]['absolute'][r]['wall_seconds']:.0f}" for m in per)]
            for r in ("patton", *BASELINES)]
    return _table(["Fig. 7 task, s", *(_MODELS[m] for m in per)], ["---"] + ["---:"] * len(per),
                  rows)


def _hit(name: str, runtime: str, models: tuple[str, ...]) -> Callable[[], str]:
    """A runtime's hit rate on ``models`` (one figure when they are equal)."""
    return lambda: span([_fig7(name)["per_model"][m]["absolute"][runtime]["hit_rate"]
                         for m in models], lambda v: f"{100 * v:.2f} %")


# --- Fig. 8 -------------------------------------------------------------------------------

_FIG8_KEYS = ("latency_reduction_vs_wo_cz", "energy_reduction_vs_wo_cz",
              "value_write_speedup_vs_wo_cz", "latency_reduction_vs_blockpim",
              "energy_reduction_vs_blockpim")
_FIG8_LABELS = ("latency reduction vs wo-CZ", "energy reduction vs wo-CZ",
                "Value-write speedup vs wo-CZ", "latency reduction vs BlockPIM",
                "energy reduction vs BlockPIM")


def _f8fmt(key: str, value: float) -> str:
    return x(value) if "speedup" in key else pct(value)


def _paper8(key: str) -> str:
    value = fig8_figure.PAPER["shared"][key]
    return "5x" if "speedup" in key else pct(value)


def _fig8_table(name: str, head: list[str], labels: tuple[str, ...] = _FIG8_LABELS,
                extra: str | None = None) -> Callable[[], str]:
    """Fig. 8's headlines on both front ends beside the paper's (and, with ``extra``,
    another record's shared / per-channel figures)."""
    def made() -> str:
        fig = _fig8(name)
        rows = []
        for key, label in zip(_FIG8_KEYS, labels):
            row = [label, _f8fmt(key, fig["shared"][key]), _f8fmt(key, fig["per_channel"][key]),
                   _paper8(key)]
            if extra is not None:
                other = _fig8(extra)
                row.append(f"{_f8fmt(key, other['shared'][key])} / "
                           f"{_f8fmt(key, other['per_channel'][key])}")
            rows.append(row)
        return _table(head, ["---"] + ["---:"] * (len(head) - 1), rows)
    return made


def _fig8_model(name: str, frontend: str, model: str) -> dict:
    """One model's Fig. 8 reductions and Value-write speedup (as the figure derives them)."""
    per = _fig8(name)["per_model"][frontend][model]
    lat, en = per["latency"], per["energy"]
    return {"latency_reduction_vs_wo_cz": 1 - 1 / lat["patton-wo-cz"]["total"],
            "energy_reduction_vs_wo_cz": 1 - 1 / en["patton-wo-cz"]["total"],
            "value_write_speedup_vs_wo_cz": per["value_write_speedup_vs_wo_cz"],
            "latency_reduction_vs_blockpim": 1 - 1 / lat["blockpim"]["total"],
            "energy_reduction_vs_blockpim": 1 - 1 / en["blockpim"]["total"]}


def _signed(value: float) -> str:
    """A reduction with its sign: ``-5.9 %``, ``+1.6 %``."""
    return f"{100 * value:+.1f} %"


def _fig8_models(name: str) -> Callable[[], str]:
    """Fig. 8 per model (the GQA and the MHA model that stand for the others) and front end."""
    def made() -> str:
        rows = []
        for frontend, label in (("shared", "shared"), ("per_channel", "per channel")):
            for m in ("llama3-8b", "opt-6.7b"):
                f = _fig8_model(name, frontend, m)
                rows.append([f"{_MODELS[m]}, {label}",
                             f"{pct(f['latency_reduction_vs_wo_cz'])} / "
                             f"{_signed(f['energy_reduction_vs_wo_cz'])}",
                             x(f["value_write_speedup_vs_wo_cz"]),
                             f"{pct(f['latency_reduction_vs_blockpim'])} / "
                             f"{pct(f['energy_reduction_vs_blockpim'])}"])
        return _table(["model, front end", "vs wo-CZ", "Value writes", "vs BlockPIM"],
                      ["---", "---", "---:", "---"], rows)
    return made


def _f8(name: str, frontend: str, key: str, model: str | None = None) -> Callable[[], str]:
    """One Fig. 8 figure: the four-model mean, or one model's."""
    def made() -> str:
        value = (_fig8(name)[frontend][key] if model is None
                 else _fig8_model(name, frontend, model)[key])
        return _f8fmt(key, value)
    return made


def _f8_sv(name: str, frontend: str, runtime: str, part: str = "sv") -> Callable[[], str]:
    """A runtime's Fig. 8 part (Llama-3-8B), a fraction of PATTON's attention latency."""
    return lambda: f"{_fig8(name)['per_model'][frontend]['llama3-8b']['latency'][runtime][part]:.3f}"  # noqa: E501


def _f8_sv_gap(name: str, frontend: str = "per_channel") -> Callable[[], str]:
    """PATTON's SV less wo-CZ's (Llama-3-8B), fractions of PATTON's attention latency."""
    def made() -> str:
        lat = _fig8(name)["per_model"][frontend]["llama3-8b"]["latency"]
        return f"{lat['patton']['sv'] - lat['patton-wo-cz']['sv']:.3f}"
    return made


def _components() -> str:
    """Llama-3-8B's attention energy by component, over PATTON's, at 12,000 steps."""
    per = _fig8(_F8L12)["per_model"]
    rows = []
    for frontend, label in (("shared", "shared"), ("per_channel", "per channel")):
        for r in ("patton", "blockpim"):
            c = per[frontend]["llama3-8b"]["energy_components"][r]
            rest = c["read"] + c["write"] + c["controller"] + c["global_buffer"]
            rows.append([f"{_RUNTIMES[r]}, {label}",
                         *(f"{v:.3f}" for v in (c["act"], c["pim"], c["dq"], c["standby"], rest,
                                                sum(c.values())))])
    return _table(["Llama-3-8B, 12,000 steps", "activations", "MACs", "I/O", "standby",
                   "the rest", "total"], ["---"] + ["---:"] * 6, rows)


def _component(frontend: str, runtime: str, key: str, minus: str | None = None,
               digits: int = 3, sign: bool = False) -> Callable[[], str]:
    """A component of Llama-3-8B's attention energy at 12,000 steps (less another runtime's)."""
    def made() -> str:
        c = _fig8(_F8L12)["per_model"][frontend]["llama3-8b"]["energy_components"]
        value = c[runtime][key] - (c[minus][key] if minus else 0)
        return f"{value:+.{digits}f}" if sign else f"{value:.{digits}f}"
    return made


def _blockpim_time(frontend: str) -> Callable[[], str]:
    """BlockPIM's attention seconds over PATTON's (Llama-3-8B, 12,000 steps)."""
    return lambda: x(_fig8(_F8L12)["per_model"][frontend]["llama3-8b"]["latency"]["blockpim"]
                     ["total"])


# --- Fig. 9 and micro ---------------------------------------------------------------------

_LOADS = ("light", "normal", "pressure", "overload")


def _fig9() -> dict:
    return record(_R)["fig9"]


def _hits(load: str) -> list[str]:
    f = _fig9()[load]
    return [f"{100 * f[r]:.2f} %" for r in ("gpu", "patton", "patton-no-o2v")]


def _paper9(load: str) -> str:
    paper = fig9_figure.PAPER.get(load)
    if paper is None:
        return ""
    return " / ".join(f"{100 * paper[r]:.2f}" for r in ("gpu", "patton", "patton-no-o2v")) + " %"


def _fig9_table() -> str:
    """Fig. 9's hit rates per load with the perfect-cache ceiling, beside the paper's."""
    rows = []
    for load in _LOADS:
        run = _fig9()["runs"][load]["gpu"]
        rows.append([f"{load} ({run['clients']} / {run['pool']})", *_hits(load),
                     f"{100 * _fig9()[load]['ceiling']:.2f} %", _paper9(load)])
    return _table(["load (clients / pool)", "GPU reference", "PATTON", "no-O2V",
                   "perfect-cache ceiling", "paper (GPU / PATTON / no-O2V)"],
                  ["---", "---:", "---:", "---:", "---:", "---"], rows)


def _fig9_live_table() -> str:
    """Fig. 9's hit rates with each load's most live context tokens (the GPU reference's)."""
    rows = []
    for load in ("normal", "pressure", "light", "overload"):
        run = _fig9()["runs"][load]["gpu"]
        paper = _paper9(load)
        if load == "pressure":
            paper += f" (> {fig9_figure.PAPER['pressure_live_tokens']:,} live)"
        label = load if load in ("normal", "pressure") else f"{load} (extra)"
        rows.append([label, f"{run['clients']} / {run['pool']}", f"{run['live_max']:,}",
                     *_hits(load), paper])
    return _table(["load", "C / P", "live context max", "GPU", "PATTON", "no-O2V",
                   "paper (GPU / PATTON / no-O2V)"],
                  ["---", "---", "---:", "---:", "---:", "---:", "---"], rows)


def _live(load: str) -> Callable[[], str]:
    """A load's most live context tokens, in thousands."""
    return lambda: f"{_fig9()['runs'][load]['gpu']['live_max'] / 1000:.0f} k"


def _prev_fig9_micro() -> str:
    """The previous round's Fig. 9 and micro figures beside the paper's."""
    prev = record(_P)
    f9, micro = prev["fig9"], prev["micro"]
    rows = []
    for load, pool in (("normal", 64), ("pressure", 96)):
        rows.append([f"hit rate, {load} (pool {pool}): GPU / PATTON / no-O2V",
                     " / ".join(f"{100 * f9[load][r]:.2f}" for r in ("gpu", "patton",
                                                                       "patton-no-o2v"))
                     + " %", _paper9(load)])
    rows += [["live context tokens under pressure (max)", f"{f9['pressure_live_tokens']:,}",
              f"> {fig9_figure.PAPER['pressure_live_tokens']:,}"],
             ["CZ: row activations of single-token Value writes, no CZ over CZ",
              x(micro["cz_activation_reduction"]), "12.6x"],
             ["one 2 KB SV reduction in 8 fragments: latency / energy",
              f"{x(micro['fragmentation_latency'])} / {x(micro['fragmentation_energy'])}",
              "2.18x / 1.34x"]]
    return _table(["", "ours", "paper"], ["---", "---:", "---:"], rows)


def _micro_table() -> str:
    """The microbenchmarks beside the paper's figures."""
    micro = record(_R)["micro"]
    rows = [["row activations of single-token Value writes, no CZ (`W MEM`) over CZ",
             x(micro["cz_activation_reduction"]), "12.6x"],
            ["one 2 KB SV reduction in 8 fragments: latency", x(micro["fragmentation_latency"]),
             "2.18x"],
            ["one 2 KB SV reduction in 8 fragments: energy", x(micro["fragmentation_energy"]),
             "1.34x"]]
    return _table(["", "ours", "paper"], ["---", "---:", "---:"], rows)


def _writes(key: str, name: str = _R) -> Callable[[], str]:
    """A figure of the Value-write microbenchmark (CZ against no-CZ)."""
    return lambda: x(record(name)["micro"]["value_writes"][key])


# --- sensitivity --------------------------------------------------------------------------

_METRICS = ("fig7_speedup_all", "fig7_energy_gain_all", "fig8_latency_reduction",
            "fig8_energy_reduction", "fig8_value_write_speedup")


def _sens_rows() -> dict[str, dict]:
    return {r["axis"]: r for r in record(_R)["sensitivity"]["rows"]}


def _sens12() -> dict[str, dict]:
    return {r["axis"]: r for r in record(_R)["sensitivity"]["at_headline_steps"]["rows"]}


def _sfmt(metric: str, value: float) -> str:
    return pct(value) if "reduction" in metric else x(value)


def _sensitivity_table() -> str:
    """Each axis changed alone, at 2,000 steps, and the pricing axes at 12,000."""
    sens = record(_R)["sensitivity"]
    paper = ["1.95x", "4.83x", "13.0 %", "12.4 %", "5x"]
    rows = [["paper", *paper]]
    for r in sens["rows"]:
        label = (f"nothing ({sens['steps']:,} steps)" if r["axis"] == "none"
                 else f"{r['axis']}={r['value']}")
        rows.append([label, *(_sfmt(m, r[m]) for m in _METRICS)])
    steps = sens["at_headline_steps"]["steps"]
    for r in sens["at_headline_steps"]["rows"]:
        label = "nothing" if r["axis"] == "none" else f"{r['axis']}={r['value']}"
        rows.append([f"{label}, {steps:,} steps", *(_sfmt(m, r[m]) for m in _METRICS)])
    return _table(["changed from the paper configuration", "Fig. 7 speedup (all)",
                   "Fig. 7 energy gain (all)", "Fig. 8 latency red. vs wo-CZ",
                   "Fig. 8 energy red. vs wo-CZ", "Fig. 8 V-write speedup"],
                  ["---"] + ["---:"] * 5, rows)


def _sens12_metric(axis: str, metric: str) -> Callable[[], str]:
    return lambda: _sfmt(metric, _sens12()[axis][metric])


def _moves() -> str:
    """How far the timing profile and the GPU model move Fig. 7's speedup: under N %."""
    rows = _sens_rows()
    base = rows["none"]["fig7_speedup_all"]
    return _ceil_pct(max(abs(rows[a]["fig7_speedup_all"] / base - 1) for a in ("timing", "gpu")))


def _gqa_span() -> str:
    """PATTON's speedups over PIMphony, AttAcc and BlockPIM on the GQA models."""
    per = _fig7(_R)["per_model"]
    return span([per[m]["speedup"][b] for m in _GQA for b in BASELINES[1:]], x)


def _gqa_within() -> str:
    """The largest relative gap of those speedups to the paper's, rounded up."""
    per = _fig7(_R)["per_model"]
    return _ceil_pct(max(abs(per[m]["speedup"][b] / fig7_figure.PAPER["speedup"][b] - 1)
                         for m in _GQA for b in BASELINES[1:]))


def _energy_within() -> str:
    """Fig. 7's energy gains over PIMphony and AttAcc against the paper's: within N %."""
    fig = _fig7(_R)["energy_gain"]
    return _ceil_pct(max(abs(fig[b] / fig7_figure.PAPER["energy_gain"][b] - 1)
                         for b in ("pimphony", "attacc")))


def _pim_energy() -> str:
    """The PIM energy (recomputation aside) of the layouts without prefix caching over
    PATTON's, on Llama-3-8B and OPT-6.7B."""
    per = _fig7(_R)["per_model"]
    ratios = []
    for m in ("llama3-8b", "opt-6.7b"):
        e = per[m]["energy"]
        own = e["patton"]["total"] - e["patton"]["recompute"]
        ratios += [(e[b]["total"] - e[b]["recompute"]) / own
                   for b in ("neupims", "pimphony", "attacc")]
    return span(ratios, x)


def _cent_energy() -> str:
    """Fig. 8's energy reduction vs wo-CZ under CENT's standby (the paper configuration and
    one decoder per channel, at 12,000 and 2,000 steps)."""
    fig, rows = _fig8(_R), _sens_rows()
    return span([fig["shared"]["energy_reduction_vs_wo_cz"],
                 fig["per_channel"]["energy_reduction_vs_wo_cz"],
                 rows["none"]["fig8_energy_reduction"], rows["frontend"]["fig8_energy_reduction"]],
                pct)


def _standby_energy() -> str:
    """Fig. 8's energy reduction vs wo-CZ with standby charged per channel."""
    return span([_sens_rows()["standby"]["fig8_energy_reduction"],
                 _sens12()["standby"]["fig8_energy_reduction"]], _round_pct)


# --- the runs' times and tasks ------------------------------------------------------------

def _repro_wall() -> str:
    """The full run's wall time, as its ``repro.md`` records it (``repro.json`` has the tasks'
    own times only)."""
    text = (_IMG / "repro-12000.md").read_text()
    found = re.search(r"\((\d+) s of wall time\)", text)
    if found is None:
        raise ValueError("docs/img/repro-12000.md states no wall time")
    return minutes(float(found.group(1)))


def _tasks() -> str:
    """Each figure's tasks and their own wall time, summed (the record's ``task_seconds``)."""
    rec = record(_R)
    return ", ".join(f"{fig} {rec[fig]['tasks']:,} ({rec[fig]['task_seconds']:,.0f} s)"
                     for fig in ("fig7", "fig8", "fig9", "micro", "sensitivity"))


def _count(name: str, fig: str) -> Callable[[], str]:
    return lambda: str(record(name)[fig]["tasks"])


def _fig8_only(name: str) -> int:
    """Fig. 8's runs that Fig. 7 does not have (PATTON and BlockPIM shared are Fig. 7's)."""
    return record(name)["fig8"]["tasks"] - 2 * len(record(name)["fig8"]["models"])


# --- the bound ----------------------------------------------------------------------------

_BOUND_NAMES = (("patton", "PATTON"), ("patton, CZ reads left out",
                                       "PATTON without the CZ read-outs"),
                ("patton-wo-cz", "PATTON-wo-CZ"))


def _bound_run(frontend: str, name: str) -> dict:
    return next(r for r in record(_BOUND) if r["frontend"] == frontend and r["name"] == name)


def _bound_vs(frontend: str, name: str, unit: str) -> float:
    """A bound run's reduction against wo-CZ, latency (``seconds``) or energy (``joules``)."""
    run, wo = _bound_run(frontend, name), _bound_run(frontend, "patton-wo-cz")
    return 1 - sum(run[unit].values()) / sum(wo[unit].values())


def _bound_table() -> str:
    """The bound's three runs per front end: Value writes, SV, attention, against wo-CZ."""
    rows = []
    steps = record(_BOUND)[0]["steps"]
    for frontend, label in (("shared", "shared"), ("per_channel", "per channel")):
        for name, shown in _BOUND_NAMES:
            run = _bound_run(frontend, name)
            cells = [f"{shown}, {label}", f"{run['seconds']['v_write']:.3f}",
                     f"{run['seconds']['sv']:.2f}", f"{sum(run['seconds'].values()):.2f}"]
            if name == "patton-wo-cz":
                cells += ["", ""]
            else:
                cells += [_signed(_bound_vs(frontend, name, u)) for u in ("seconds", "joules")]
            rows.append(cells)
    return _table([f"Llama-3-8B, {steps:,} steps, seconds", "V write", "SV", "attention",
                   "vs wo-CZ: latency", "energy"], ["---"] + ["---:"] * 5, rows)


def _bound_sv(frontend: str, name: str) -> Callable[[], str]:
    return lambda: f"{_bound_run(frontend, name)['seconds']['sv']:.2f} s"


def _bound_share() -> str:
    """wo-CZ's Value writes' share of its attention, both front ends."""
    shares = []
    for frontend in ("shared", "per_channel"):
        wo = _bound_run(frontend, "patton-wo-cz")["seconds"]
        shares.append(wo["v_write"] / sum(wo.values()))
    return span(shares, pct)


def _bound_times() -> str:
    """How many times its Value writes wo-CZ would need for the paper's pair of figures (13.0 %
    less latency from writes 5x faster: 0.130 / (1 - 1/5) of its attention), at the most."""
    need = fig8_figure.PAPER["shared"]["latency_reduction_vs_wo_cz"] / (
        1 - 1 / fig8_figure.PAPER["shared"]["value_write_speedup_vs_wo_cz"])
    shares = []
    for frontend in ("shared", "per_channel"):
        wo = _bound_run(frontend, "patton-wo-cz")["seconds"]
        shares.append(wo["v_write"] / sum(wo.values()))
    return f"{need / max(shares):.0f} times"


@cache
def _pimphony(model: str) -> dict[str, int]:
    """PIMphony's layout of ``model`` on the device: layers, rows per layer, units per chunk
    and per channel of a chunk, blocks of room, chunks (a request's per head) that fit."""
    from patton.runtime.baselines import BASELINES as RUNTIMES
    from patton.runtime.baselines import Geometry
    from patton.runtime.baselines.pimphony import PimPhony
    from patton.runtime.models import MODELS
    from patton.sim.device import DEVICE

    spec = MODELS[model]
    geometry = Geometry(spec, DEVICE, block_size=RUNTIMES["pimphony"].block_size)
    layout = PimPhony(geometry)
    return {"layers": spec.layers, "rows": geometry.rows_per_layer, "chunk": layout.chunk,
            "stripe": layout.stripe, "room": layout.room(),
            "chunks": layout.room() // layout.chunk,
            "tokens": layout.chunk * RUNTIMES["pimphony"].block_size}


#: Number name -> how it is made from the records.
NUMBERS: dict[str, Callable[[], str]] = {
    # how to run it; the full run's times
    "evaluation.repro.wall": _repro_wall,
    "evaluation.repro.tasks": _tasks,
    "evaluation.fig8.extra.wo_cz": lambda: str(len(_fig8(_R)["models"])),
    "evaluation.fig8.extra.per_channel": lambda: str(_fig8_only(_R) - len(_fig8(_R)["models"])),
    # what each figure measures
    "evaluation.fig8.pc.latency": _f8(_R, "per_channel", "latency_reduction_vs_wo_cz"),
    "evaluation.fig8.pc.energy": _f8(_R, "per_channel", "energy_reduction_vs_wo_cz"),
    "evaluation.fig8.pc.writes": _f8(_R, "per_channel", "value_write_speedup_vs_wo_cz"),
    "evaluation.fig8.pc.vs_blockpim": _f8(_R, "per_channel", "latency_reduction_vs_blockpim"),
    "evaluation.fig8.shared.vs_blockpim": _f8(_R, "shared", "latency_reduction_vs_blockpim"),
    "evaluation.fig8.shared.latency.round": lambda: _round_pct(
        _fig8(_R)["shared"]["latency_reduction_vs_wo_cz"]),
    # decisions
    "evaluation.fig9.capacity": lambda: (
        f"{_fig9()['runs']['normal']['gpu']['capacity_tokens'] / 1000:.0f} k"),
    "evaluation.fig9.overload.live": _live("overload"),
    "evaluation.fig9.overload.hits": lambda: pct(max(_fig9()["overload"][r] for r in
                                                     ("gpu", "patton", "patton-no-o2v"))),
    "evaluation.fig9.pressure.live": _live("pressure"),
    "evaluation.fig9.pressure.gap": lambda: (
        f"{100 * (_fig9()['pressure']['gpu'] - _fig9()['pressure']['patton']):.1f}"),
    "evaluation.fig9.ceiling": lambda: span(
        [_fig9()[load]["ceiling"] for load in ("light", "normal")], _round_pct),
    # results under the paper configuration
    "evaluation.fig8.wo_cz.gqa.shared": lambda: span(
        [_fig8(_R)["per_model"]["shared"][m]["latency"]["patton-wo-cz"]["total"] for m in _GQA],
        lambda v: f"{v:.2f}"),
    "evaluation.fig8.writes.gqa.shared": lambda: span(
        [_fig8(_R)["per_model"]["shared"][m]["value_write_speedup_vs_wo_cz"] for m in _GQA], x),
    "evaluation.fig8.wo_cz.mha.shared": lambda: span(
        [_fig8(_R)["per_model"]["shared"][m]["latency"]["patton-wo-cz"]["total"] for m in _MHA],
        lambda v: f"{v:.2f}"),
    "evaluation.fig8.writes.mha.shared": lambda: span(
        [_fig8(_R)["per_model"]["shared"][m]["value_write_speedup_vs_wo_cz"] for m in _MHA], x),
    "evaluation.fig8.wo_cz.gqa.pc": lambda: span(
        [_fig8(_R)["per_model"]["per_channel"][m]["latency"]["patton-wo-cz"]["total"]
         for m in _GQA], lambda v: f"{v:.2f}"),
    "evaluation.fig8.wo_cz.mha.pc": lambda: span(
        [_fig8(_R)["per_model"]["per_channel"][m]["latency"]["patton-wo-cz"]["total"]
         for m in _MHA], lambda v: f"{v:.2f}"),
    "evaluation.fig8.writes.pc": lambda: span(
        [v["value_write_speedup_vs_wo_cz"] for v in _fig8(_R)["per_model"]["per_channel"]
         .values()], lambda v: x(v, 1)),
    "evaluation.micro.activations.0f28a07": lambda: x(record(_P)["micro"]
                                                      ["cz_activation_reduction"]),
    "evaluation.micro.activations.abk": lambda: x(record(_R)["micro"]["value_writes"]
                                                  ["activation_reduction_vs_wr_abk"], 1),
    "evaluation.micro.cycles.mem": _writes("cycle_speedup_vs_w_mem"),
    "evaluation.micro.energy.mem": _writes("energy_gain_vs_w_mem"),
    "evaluation.micro.cycles.abk": _writes("cycle_speedup_vs_wr_abk"),
    "evaluation.sens.closest.distance": lambda: (
        f"{record(_R)['sensitivity']['closest']['distance']:.3f}"),
    "evaluation.sens.none.distance": lambda: f"{_sens_rows()['none']['distance']:.3f}",
    "evaluation.sens.closest.fig7_speedup": lambda: x(
        record(_R)["sensitivity"]["closest"]["fig7_speedup_all"]),
    "evaluation.fig7.speedup.all": lambda: x(_fig7(_R)["speedup"]["all"]),
    "evaluation.fig7.speedup.ratio": lambda: (
        f"{_fig7(_R)['speedup']['all'] / fig7_figure.PAPER['speedup']['all']:.2f}"),
    "evaluation.fig7.energy.all": lambda: x(_fig7(_R)["energy_gain"]["all"]),
    "evaluation.fig7.energy.ratio": lambda: (
        f"{_fig7(_R)['energy_gain']['all'] / fig7_figure.PAPER['energy_gain']['all']:.2f}"),
    "evaluation.fig7.energy.pimphony_attacc": lambda: ", ".join(
        x(_fig7(_R)["energy_gain"][b]) for b in ("pimphony", "attacc")),
    "evaluation.fig7.energy.within": _energy_within,
    "evaluation.fig7.gqa.span": _gqa_span,
    "evaluation.fig7.gqa.within": _gqa_within,
    "evaluation.fig7.mha.blockpim": lambda: span(
        [_fig7(_R)["per_model"][m]["speedup"]["blockpim"] for m in _MHA], x),
    "evaluation.fig7.mha.vwrite_share": lambda: _round_pct(
        _fig7(_R)["per_model"]["opt-6.7b"]["latency"]["patton"]["v_write"]
        / _fig7(_R)["per_model"]["opt-6.7b"]["latency"]["patton"]["total"]),
    "evaluation.fig7.pim_energy": _pim_energy,
    "evaluation.sens.moves": _moves,
    "evaluation.sens12.standby.fig7_energy": _sens12_metric("standby", "fig7_energy_gain_all"),
    "evaluation.sens12.gpu.fig7_energy": _sens12_metric("gpu", "fig7_energy_gain_all"),
    "evaluation.fig8.mha.wo_cz": lambda: x(
        _fig8(_R)["per_model"]["shared"]["opt-6.7b"]["latency"]["patton-wo-cz"]["total"]),
    "evaluation.sens.abk.slower": lambda: _round_pct(
        -_sens_rows()["wo_cz_write"]["fig8_latency_reduction"]),
    "evaluation.fig8.energy.cent": _cent_energy,
    "evaluation.fig8.energy.standby": _standby_energy,
    # the previous round's full run
    "evaluation.prev.fig7.tasks": _count(_P, "fig7"),
    "evaluation.prev.fig8.tasks": lambda: str(_fig8_only(_P)),
    "evaluation.prev.fig9.tasks": _count(_P, "fig9"),
    "evaluation.prev.micro.tasks": _count(_P, "micro"),
    "evaluation.prev.tasks": lambda: str(sum(record(_P)[f]["tasks"] for f in ("fig7", "fig9",
                                                                                "micro"))
                                         + _fig8_only(_P)),
    **{f"evaluation.pc12.{m}.{key}": _gains(_PC12, m, key)
       for m in ("llama3-8b", "qwen3-8b", "opt-6.7b") for key in ("speedup", "energy_gain")},
    "evaluation.pc12.twins": lambda: f"{max(abs(_fig7(_PC12)['per_model']['opt-6.7b'][k][b] - _fig7(_PC12)['per_model']['qwen1.5-7b'][k][b]) for k in ('speedup', 'energy_gain') for b in BASELINES):.2f}",  # noqa: E501
    "evaluation.pc12.vwrite.gqa": _share(_PC12, "llama3-8b"),
    "evaluation.pc12.vwrite.mha": _share(_PC12, "opt-6.7b"),
    # Fig. 7 at 12,000 steps, Llama-3-8B
    "evaluation.l12.within3": lambda: _ceil_pct(max(
        abs(_fig7(_L12)["speedup"][b] / fig7_figure.PAPER["speedup"][b] - 1)
        for b in BASELINES[1:])),
    "evaluation.l12.pimphony_attacc_blockpim": lambda: ", ".join(
        f"{_RUNTIMES[b]} {x(_fig7(_L12)['speedup'][b])} against "
        f"{x(fig7_figure.PAPER['speedup'][b])}" for b in BASELINES[1:]),
    "evaluation.l12.all": lambda: x(_fig7(_L12)["speedup"]["all"]),
    "evaluation.l12.all.within": lambda: _ceil_pct(
        abs(_fig7(_L12)["speedup"]["all"] / fig7_figure.PAPER["speedup"]["all"] - 1)),
    "evaluation.l12.energy.within": lambda: _ceil_pct(max(
        abs(_fig7(_L12)["energy_gain"][b] / fig7_figure.PAPER["energy_gain"][b] - 1)
        for b in (*BASELINES, "all"))),
    "evaluation.l12.energy.all": lambda: x(_fig7(_L12)["energy_gain"]["all"]),
    "evaluation.l12.neupims": lambda: x(_fig7(_L12)["speedup"]["neupims"]),
    "evaluation.l12.neupims.qk": _norm(_L12, "llama3-8b", "neupims", "qk"),
    "evaluation.l12.neupims.sv": _norm(_L12, "llama3-8b", "neupims", "sv"),
    "evaluation.l12.recompute.latency": _norm(_L12, "llama3-8b", "attacc", "recompute"),
    "evaluation.l12.recompute.energy": lambda: x(
        _fig7(_L12)["per_model"]["llama3-8b"]["energy"]["attacc"]["recompute"]),
    "evaluation.l12.decode.baselines": lambda: (
        f"{_fig7(_L12)['per_model']['llama3-8b']['absolute']['attacc']['decode_tokens']:,}"),
    "evaluation.l12.decode.patton": lambda: (
        f"{_fig7(_L12)['per_model']['llama3-8b']['absolute']['patton']['decode_tokens']:,}"),
    "evaluation.l12.hit.patton": _hit(_L12, "patton", ("llama3-8b",)),
    "evaluation.l12.hit.blockpim": _hit(_L12, "blockpim", ("llama3-8b",)),
    "evaluation.l12.attention": lambda: f"{_fig8(_F8L12)['per_model']['shared']['llama3-8b']['absolute']['patton']['seconds']:.2f} s",  # noqa: E501
    # Fig. 8 at 12,000 steps, Llama-3-8B
    "evaluation.f8l12.pc.latency": _f8(_F8L12, "per_channel", "latency_reduction_vs_wo_cz"),
    "evaluation.f8l12.shared.latency": _f8(_F8L12, "shared", "latency_reduction_vs_wo_cz"),
    "evaluation.f8l2.pc.latency": _f8(_F8L2, "per_channel", "latency_reduction_vs_wo_cz"),
    "evaluation.f8l2.shared.latency": _f8(_F8L2, "shared", "latency_reduction_vs_wo_cz"),
    "evaluation.f8l12.sv.patton": _f8_sv(_F8L12, "per_channel", "patton"),
    "evaluation.f8l12.sv.wo_cz": _f8_sv(_F8L12, "per_channel", "patton-wo-cz"),
    "evaluation.f8l12.sv.gap": _f8_sv_gap(_F8L12),
    "evaluation.f8l2.sv.gap": _f8_sv_gap(_F8L2),
    "evaluation.f8l12.vw.wo_cz": _f8_sv(_F8L12, "per_channel", "patton-wo-cz", "v_write"),
    "evaluation.f8l12.vw.patton": _f8_sv(_F8L12, "per_channel", "patton", "v_write"),
    "evaluation.f8l12.blockpim": lambda: ", ".join(
        pct(_fig8(_F8L12)[f]["latency_reduction_vs_blockpim"]) for f in ("shared", "per_channel")),
    "evaluation.f8l12.blockpim.sv": lambda: span(
        [_fig8(_F8L12)["per_model"][f]["llama3-8b"]["latency"]["blockpim"]["sv"]
         for f in ("shared", "per_channel")], lambda v: f"{v:.2f}"),
    "evaluation.f8l12.writes": lambda: (
        f"{x(_fig8(_F8L12)['shared']['value_write_speedup_vs_wo_cz'])} shared, "
        f"{x(_fig8(_F8L12)['per_channel']['value_write_speedup_vs_wo_cz'])} per channel"),
    "evaluation.f8l12.time": lambda: (f"{_blockpim_time('shared')()} "
                                      f"({_blockpim_time('per_channel')()} per channel)"),
    "evaluation.f8l12.standby": lambda: (
        f"{_component('shared', 'blockpim', 'standby', 'patton', sign=True)()} and "
        f"{_component('per_channel', 'blockpim', 'standby', 'patton', sign=True)()}"),
    "evaluation.f8l12.act": lambda: (
        f"{_component('shared', 'blockpim', 'act', 'patton', sign=True)()} / "
        f"{_component('per_channel', 'blockpim', 'act', 'patton', sign=True)()}"),
    "evaluation.f8l12.io": lambda: (
        f"{_component('shared', 'patton', 'dq', 'blockpim', sign=True)()} / "
        f"{_component('per_channel', 'patton', 'dq', 'blockpim', sign=True)()}"),
    # Fig. 7 at 2,000 steps
    "evaluation.f7_2.hit.patton.gqa": _hit(_F7_2, "patton", _GQA),
    "evaluation.f7_2.hit.patton.mha": _hit(_F7_2, "patton", _MHA),
    "evaluation.f7_2.hit.blockpim.gqa": _hit(_F7_2, "blockpim", _GQA),
    "evaluation.f7_2.hit.blockpim.mha": _hit(_F7_2, "blockpim", _MHA),
    "evaluation.f7_2.recompute.latency": _norm(_F7_2, "llama3-8b", "attacc", "recompute"),
    "evaluation.f7_2.recompute.energy": lambda: x(
        _fig7(_F7_2)["per_model"]["llama3-8b"]["energy"]["attacc"]["recompute"]),
    "evaluation.f7_2.llama.speedup": _gains_x(_F7_2, "llama3-8b"),
    "evaluation.f7_2.llama.energy": _gains_x(_F7_2, "llama3-8b", "energy_gain"),
    "evaluation.f7_2.mha.span": lambda: span(
        [_fig7(_F7_2)["per_model"][m]["speedup"][b] for m in _MHA for b in BASELINES[1:]], x),
    "evaluation.f7_2.mha.vwrite": _share(_F7_2, "opt-6.7b", digits=0),
    "evaluation.f7_2.mha.energy": lambda: span(
        [_fig7(_F7_2)["per_model"][m]["energy_gain"][b] for m in _MHA
         for b in ("neupims", "pimphony", "attacc")], lambda v: x(v, 1)),
    "evaluation.f7_2.mha.energy.blockpim": lambda: x(
        _fig7(_F7_2)["per_model"]["opt-6.7b"]["energy_gain"]["blockpim"]),
    "evaluation.f7_2.pimphony.qwen": lambda: x(
        _fig7(_F7_2)["per_model"]["qwen3-8b"]["speedup"]["pimphony"]),
    "evaluation.f7_2.pimphony.llama": lambda: x(
        _fig7(_F7_2)["per_model"]["llama3-8b"]["speedup"]["pimphony"]),
    "evaluation.f7_2.all": lambda: (f"{x(_fig7(_F7_2)['speedup']['all'])} and "
                                    f"{x(_fig7(_F7_2)['energy_gain']['all'])}"),
    # Fig. 7 with one decoder per channel, 2,000 steps
    **{f"evaluation.pc2.{m}": _gains(_PC2, m) for m in ("llama3-8b", "qwen3-8b", "opt-6.7b")},
    "evaluation.pc2.speedup.all": lambda: x(_fig7(_PC2)["speedup"]["all"]),
    "evaluation.pc2.energy.all": lambda: x(_fig7(_PC2)["energy_gain"]["all"]),
    "evaluation.pc2.speedup.within": lambda: _ceil_pct(
        abs(_fig7(_PC2)["speedup"]["all"] / fig7_figure.PAPER["speedup"]["all"] - 1)),
    "evaluation.pc2.energy.within": lambda: _ceil_pct(
        abs(_fig7(_PC2)["energy_gain"]["all"] / fig7_figure.PAPER["energy_gain"]["all"] - 1)),
    "evaluation.lpc2.energy.within": lambda: _ceil_pct(max(
        abs(_fig7(_LPC2)["energy_gain"][b] / fig7_figure.PAPER["energy_gain"][b] - 1)
        for b in BASELINES)),
    "evaluation.f7_2.llama.energy.slash": lambda: " / ".join(
        x(_fig7(_F7_2)["per_model"]["llama3-8b"]["energy_gain"][b]) for b in BASELINES),
    "evaluation.lpc2.speedup.within": lambda: _ceil_pct(max(
        abs(_fig7(_LPC2)["speedup"][b] / fig7_figure.PAPER["speedup"][b] - 1)
        for b in BASELINES[1:])),
    "evaluation.lpc2.neupims": lambda: x(_fig7(_LPC2)["speedup"]["neupims"]),
    "evaluation.f7_2.llama.neupims": lambda: x(
        _fig7(_F7_2)["per_model"]["llama3-8b"]["speedup"]["neupims"]),
    "evaluation.lpc2.vwrite": _share(_LPC2, "llama3-8b"),
    "evaluation.lpc2.neupims.qk": _norm(_LPC2, "llama3-8b", "neupims", "qk"),
    "evaluation.lpc2.decode": lambda: (
        f"{_fig7(_LPC2)['per_model']['llama3-8b']['absolute']['patton']['decode_tokens']:,}"),
    "evaluation.opc2.vwrite.seconds": lambda: (
        f"{_abs_part(_F7_2, 'opt-6.7b', 'patton', 'v_write'):.2f} s to "
        f"{_abs_part(_OPC2, 'opt-6.7b', 'patton', 'v_write'):.2f} s"),
    "evaluation.opc2.vwrite.share": lambda: (
        f"{_share(_F7_2, 'opt-6.7b', digits=0)()} to {_share(_OPC2, 'opt-6.7b', digits=0)()}"),
    "evaluation.opc2.total": lambda: (f"{_abs_part(_F7_2, 'opt-6.7b', 'patton'):.2f} s to "
                                      f"{_abs_part(_OPC2, 'opt-6.7b', 'patton'):.2f} s"),
    "evaluation.opc2.abk": lambda: (
        f"{_abs_part(_F7_2, 'opt-6.7b', 'attacc', 'v_write') / _abs_part(_OPC2, 'opt-6.7b', 'attacc', 'v_write'):.1f}x "  # noqa: E501
        f"({_abs_part(_F7_2, 'opt-6.7b', 'attacc', 'v_write'):.2f} s to "
        f"{_abs_part(_OPC2, 'opt-6.7b', 'attacc', 'v_write'):.2f} s"),
    "evaluation.opc2.sv": lambda: (
        f"{_fig7(_OPC2)['per_model']['opt-6.7b']['latency']['patton']['sv']:.3f} of its total, "
        f"against {_fig7(_OPC2)['per_model']['opt-6.7b']['latency']['attacc']['sv']:.3f}"),
    "evaluation.opc2.neupims": lambda: (
        f"{_abs_part(_F7_2, 'opt-6.7b', 'neupims'):.1f} s to "
        f"{_abs_part(_OPC2, 'opt-6.7b', 'neupims'):.1f} s"),
    # Fig. 8 at 2,000 steps, Llama-3-8B
    "evaluation.f8l2.blockpim": lambda: ", ".join(
        pct(_fig8(_F8L2)[f]["latency_reduction_vs_blockpim"]) for f in ("shared", "per_channel")),
    "evaluation.f8l2.blockpim.sv": lambda: span(
        [_fig8(_F8L2)["per_model"][f]["llama3-8b"]["latency"]["blockpim"]["sv"]
         for f in ("shared", "per_channel")], lambda v: f"{v:.2f}"),
    "evaluation.f8l2.patton.sv": lambda: span(
        [_fig8(_F8L2)["per_model"][f]["llama3-8b"]["latency"]["patton"]["sv"]
         for f in ("shared", "per_channel")], lambda v: f"{v:.2f}"),
    "evaluation.f8l2.writes": lambda: (
        f"{x(_fig8(_F8L2)['per_channel']['value_write_speedup_vs_wo_cz'])}"),
    "evaluation.f8l2.writes.shared": lambda: (
        f"{x(_fig8(_F8L2)['shared']['value_write_speedup_vs_wo_cz'])}"),
    "evaluation.f8l2.writes.slower": lambda: (
        f"{x(1 / _fig8(_F8L2)['shared']['value_write_speedup_vs_wo_cz'], 1)}"),
    "evaluation.f8l2.sv.patton": _f8_sv(_F8L2, "per_channel", "patton"),
    "evaluation.f8l2.sv.wo_cz": _f8_sv(_F8L2, "per_channel", "patton-wo-cz"),
    "evaluation.f8l2.vw.wo_cz": _f8_sv(_F8L2, "per_channel", "patton-wo-cz", "v_write"),
    "evaluation.f8l2.vw.patton": _f8_sv(_F8L2, "per_channel", "patton", "v_write"),
    "evaluation.f8l2.energy.blockpim": lambda: span(
        [_fig8(_F8L2)[f]["energy_reduction_vs_blockpim"] for f in ("shared", "per_channel")],
        _round_pct),
    # the bound
    "evaluation.bound.sv": lambda: (
        f"{_bound_sv('per_channel', 'patton, CZ reads left out')()} against "
        f"{_bound_sv('per_channel', 'patton-wo-cz')()}"),
    "evaluation.bound.latency": lambda: pct(_bound_vs("per_channel",
                                                     "patton, CZ reads left out", "seconds")),
    "evaluation.bound.energy": lambda: pct(_bound_vs("per_channel",
                                                    "patton, CZ reads left out", "joules")),
    "evaluation.bound.share": _bound_share,
    "evaluation.bound.times": _bound_times,
    # Fig. 9's PATTON capacity, in blocks of 16 tokens (the setting's block size)
    "evaluation.fig9.pim_blocks": lambda: (
        f"{_fig9()['runs']['normal']['patton']['capacity_tokens'] // 16:,}"),
    # the runs' own task time, and facts of the code behind them
    **{f"evaluation.{key}.task_seconds": (lambda name, fig: lambda: (
        f"{record(name)[fig]['task_seconds']:,.0f} s"))(name, fig)
       for key, name, fig in (("pc12", _PC12, "fig7"), ("l12", _L12, "fig7"),
                              ("f8l12", _F8L12, "fig8"), ("f7_2", _F7_2, "fig7"),
                              ("pc2", _PC2, "fig7"), ("opc2", _OPC2, "fig7"),
                              ("lpc2", _LPC2, "fig7"), ("f8l2", _F8L2, "fig8"))},
    "evaluation.f8l12.io.ratio": lambda: x(
        _fig8(_F8L12)["per_model"]["shared"]["llama3-8b"]["energy_components"]["patton"]["dq"]
        / _fig8(_F8L12)["per_model"]["shared"]["llama3-8b"]["energy_components"]["blockpim"]
        ["dq"]),
    "evaluation.f7_2.pimphony.qk": _norm(_F7_2, "llama3-8b", "pimphony", "qk", digits=3),
    "evaluation.opc2.three": lambda: " / ".join(x(_fig7(_OPC2)["speedup"][b])
                                                for b in BASELINES[1:]),
    "evaluation.f7_2.energy.all": lambda: x(_fig7(_F7_2)["energy_gain"]["all"]),
    "evaluation.f7_2.energy.slash": lambda: " / ".join(x(_fig7(_F7_2)["energy_gain"][b])
                                                       for b in BASELINES),
    "evaluation.f8l2.energy.blockpim.both": lambda: ", ".join(
        pct(_fig8(_F8L2)[f]["energy_reduction_vs_blockpim"]) for f in ("shared", "per_channel")),
    "evaluation.f8l12.energy.blockpim": lambda: " / ".join(
        pct(_fig8(_F8L12)[f]["energy_reduction_vs_blockpim"])
        for f in ("shared", "per_channel")),
    "evaluation.pimphony.layers": lambda: " against ".join(
        str(_pimphony(m)["layers"]) for m in _GQA[::-1]),
    "evaluation.pimphony.rows": lambda: " against ".join(
        str(_pimphony(m)["rows"]) for m in _GQA[::-1]),
    "evaluation.pimphony.stripes": lambda: (
        f"{_pimphony('qwen3-8b')['chunks']} PIMphony stripes of {_pimphony('qwen3-8b')['stripe']} "
        f"units instead of {_pimphony('llama3-8b')['chunks']}"),
    "evaluation.pimphony.room": lambda: " against ".join(
        f"{_pimphony(m)['room']:,}" for m in _GQA[::-1]),
    "evaluation.pimphony.chunk": lambda: (f"{_pimphony('qwen3-8b')['chunk']} units, "
                                          f"{_pimphony('qwen3-8b')['tokens']:,} tokens"),
    "evaluation.pimphony.batch": lambda: str(min(_pimphony("qwen3-8b")["chunks"],
                                                 SETTINGS["qwen3-8b"][0])),
}

#: Block name -> how it is made from the records.
BLOCKS: dict[str, Callable[[], str]] = {
    "evaluation.fig7": _fig7_table(_R),
    "evaluation.fig7.models": _fig7_models(_R),
    "evaluation.fig8": _fig8_table(_R, ["", "shared (the paper's)", "per channel", "paper"],
                                   tuple(("" if "Value" in label else "attention ")
                                         + label.replace("wo-CZ", "PATTON-wo-CZ")
                                         for label in _FIG8_LABELS)),
    "evaluation.fig9": _fig9_table,
    "evaluation.sensitivity": _sensitivity_table,
    "evaluation.task_walls": _task_walls,
    "evaluation.prev.fig7": _fig7_table(_P),
    "evaluation.prev.fig7.models": _fig7_models(_P),
    "evaluation.prev.fig7.per_channel": _fig7_table(_PC12, "PATTON over, per channel"),
    "evaluation.prev.fig8": _fig8_table(_P, ["", "shared (ours)", "per_channel (ours)",
                                             "paper"]),
    "evaluation.prev.fig8.models": _fig8_models(_P),
    "evaluation.prev.fig9_micro": _prev_fig9_micro,
    "evaluation.l12.fig7": _fig7_llama_rows,
    "evaluation.f8l12.fig8": _fig8_table(
        _F8L12, ["Llama-3-8B, attention only", "shared (ours)", "per_channel (ours)", "paper",
                 "at 2,000 steps (shared / per_channel)"], extra=_F8L2),
    "evaluation.f8l12.components": _components,
    "evaluation.f7_2.fig7": _fig7_table(_F7_2, ratio=False),
    "evaluation.f7_2.latency": _fig7_latency_models(_F7_2),
    "evaluation.pc2.fig7": _fig7_table(_PC2, ratio=False),
    "evaluation.pc2.models": _fig7_per_channel_2000,
    "evaluation.opc2.decoders": _fig7_opt_decoders,
    "evaluation.f8l2.fig8": _fig8_table(_F8L2, ["Llama-3-8B, attention only", "shared (ours)",
                                                "per_channel (ours)", "paper"]),
    "evaluation.fig9.live": _fig9_live_table,
    "evaluation.micro": _micro_table,
    "evaluation.bound": _bound_table,
}
