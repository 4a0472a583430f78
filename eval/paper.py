"""The paper's evaluation numbers as data: the one definition ``patton repro`` compares with.

Every number is quoted from the paper (arXiv 2609.11392v1) with the section that states it
(:data:`SOURCES`). Ratios are plain numbers
(4.27 = 4.27x), reductions and hit rates fractions (0.130 = 13.0 %). The keys are the keys of
``patton repro --json``: :data:`PAPER` has the same shape as its figures' required part.
"""

from __future__ import annotations

from typing import Any

__all__ = [
           "BASELINES",
           "FIG7",
           "FIG8",
           "FIG9",
           "MICRO",
           "MODELS",
           "PAPER",
           "SETTINGS",
           "SOURCES",
]

#: The four prior layouts of Fig. 7, in the paper's order (§5.3).
BASELINES = ("neupims", "pimphony", "attacc", "blockpim")

#: The four evaluated models, in the paper's order (§5.1).
MODELS = ("llama3-8b", "qwen3-8b", "opt-6.7b", "qwen1.5-7b")

#: Per model: (target concurrency = clients, live request pool) (§5.1).
SETTINGS: dict[str, tuple[int, int]] = {
    "llama3-8b": (32, 64), "qwen3-8b": (32, 64), "opt-6.7b": (8, 16), "qwen1.5-7b": (8, 16)}


#: Fig. 7 (§5.3, "Performance Comparison with the Baselines"): PATTON's speedup and
#: energy-efficiency gain over each baseline, geometric means over the four models; ``all`` is
#: the abstract's and §1's overall 1.95x / 4.83x (the geometric mean over the four baselines:
#: geomean(4.27, 1.42, 1.52, 1.57) = 1.950, geomean(7.94, 6.77, 6.70, 1.51) = 4.829).
FIG7: dict[str, dict[str, float]] = {
    "speedup": {"neupims": 4.27, "pimphony": 1.42, "attacc": 1.52, "blockpim": 1.57,
                "all": 1.95},
    "energy_gain": {"neupims": 7.94, "pimphony": 6.77, "attacc": 6.70, "blockpim": 1.51,
                    "all": 4.83},
}

#: Fig. 8 (§5.4, "Effectiveness of the Commit Zone"): attention latency and energy of PATTON
#: against PATTON-wo-CZ and BlockPIM. The paper has one simulator front end; the same numbers
#: stand next to both of ours (``shared``, the public simulator's, and ``per_channel``).
_FIG8 = {"latency_reduction_vs_wo_cz": 0.130, "energy_reduction_vs_wo_cz": 0.124,
         "value_write_speedup_vs_wo_cz": 5.0, "latency_reduction_vs_blockpim": 0.227,
         "energy_reduction_vs_blockpim": 0.345}
FIG8: dict[str, dict[str, float]] = {"shared": dict(_FIG8), "per_channel": dict(_FIG8)}

#: Fig. 9 (§5.4, "O2V Allocation"): KV-cache hit rates of the GPU reference, PATTON and
#: PATTON without O2V, Llama-3-8B on the 16 GiB device, under normal load (91.28 % for all)
#: and under capacity pressure with "more than 250,000 live context tokens".
FIG9: dict[str, Any] = {
    "normal": {"gpu": 0.9128, "patton": 0.9128, "patton-no-o2v": 0.9128},
    "pressure": {"gpu": 0.8786, "patton": 0.8209, "patton-no-o2v": 0.3030},
    "pressure_live_tokens": 250_000,  # "more than": a lower bound
}

#: The microbenchmarks: the Commit Zone's row activations for single-token Value writes
#: (12.6x fewer, commits included: §4.4 "Committing a Filled CZ Slot" and Fig. 6's caption) and
#: one 2 KB MAC run split into eight fragments with intermediate RDMAC/WRBIAS (2.18x latency,
#: 1.34x energy: §3.2.2, "Capacity utilization conflict").
MICRO: dict[str, float] = {"cz_activation_reduction": 12.6, "fragmentation_latency": 2.18,
                           "fragmentation_energy": 1.34}

#: Where the paper states each figure's numbers.
SOURCES: dict[str, str] = {
    "fig7": "§5.3 Performance Comparison with the Baselines (Fig. 7); overall: Abstract, §1",
    "fig8": "§5.4 Effectiveness of the Commit Zone (Fig. 8)",
    "fig9": "§5.4 O2V Allocation: Balancing GEMV and Capacity Efficiency (Fig. 9)",
    "micro.cz_activation_reduction": "§4.4 Committing a Filled CZ Slot; Fig. 6 caption",
    "micro.fragmentation_latency": "§3.2.2 Value cache placement, capacity utilization "
                                   "conflict",
    "micro.fragmentation_energy": "§3.2.2 Value cache placement, capacity utilization "
                                  "conflict",
}

#: Everything, keyed by figure as ``patton repro --json`` is.
PAPER: dict[str, Any] = {"fig7": FIG7, "fig8": FIG8, "fig9": FIG9, "micro": MICRO}
