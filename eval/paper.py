"""The paper's evaluation setup (§5.1): the models, the prior layouts, the load per model.

The paper's numbers are each figure's own (``PAPER`` of every module of
:mod:`patton.eval.figures`, quoted from arXiv 2609.11392v1 with the section that states them:
ratios as plain numbers, 4.27 = 4.27x; reductions and hit rates as fractions, 0.130 = 13.0 %).
"""

from __future__ import annotations

from patton.runtime.models import MODELS as SPECS

__all__ = ["BASELINES", "MODELS", "SETTINGS"]

#: The four prior layouts of Fig. 7, in the paper's order (§5.3): the translated baselines'
#: names (:data:`patton.runtime.baselines.BASELINES`).
BASELINES = ("neupims", "pimphony", "attacc", "blockpim")

#: The four evaluated models (the model presets), in the paper's order (§5.1).
MODELS = tuple(SPECS)

#: Per model: (target concurrency = clients, live request pool) (§5.1).
SETTINGS: dict[str, tuple[int, int]] = {
    "llama3-8b": (32, 64), "qwen3-8b": (32, 64), "opt-6.7b": (8, 16), "qwen1.5-7b": (8, 16)}
