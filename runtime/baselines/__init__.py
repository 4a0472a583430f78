"""The four prior layouts PATTON is compared with, translated behind the runtime interface.

Each baseline is a placement policy (:mod:`.neupims`, :mod:`.attacc`, :mod:`.blockpim`,
:mod:`.pimphony`) over one runtime (:class:`~.runtime.PlacedRuntime`: vLLM's block lifecycle
and the programs of :mod:`.programs`, in the GEMV-optimised units of :mod:`.geometry`).
:data:`BASELINES` names them; :func:`baseline` builds one. ``docs/baselines.md`` gives every
decision taken where a system leaves the placement open, with its source.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from patton.runtime.baselines.attacc import MAX_CONTEXT, AttAcc
from patton.runtime.baselines.blockpim import BlockPim
from patton.runtime.baselines.geometry import Geometry
from patton.runtime.baselines.neupims import NeuPims
from patton.runtime.baselines.pimphony import PimPhony
from patton.runtime.baselines.runtime import PlacedRuntime, Policy
from patton.runtime.errors import ConfigError

__all__ = ["Baseline", "BASELINES", "baseline", "Geometry", "PlacedRuntime"]


@dataclass(frozen=True, slots=True)
class Baseline:
    """A baseline by name: its block size, prefix caching, context limit and policy."""

    name: str
    block_size: int  # tokens per logical block (the engine's block size)
    prefix_caching: bool  # vLLM's scheduler and prefix caching (else a lifecycle emulator)
    max_context: int | None  # tokens a request may reach (None: capacity only)
    policy: Callable[[Geometry], Policy]

    def context_limit(self, geometry: Geometry) -> int | None:
        """Tokens a request may reach on ``geometry``: :attr:`max_context`, or less where the
        policy confines a request to what one channel holds (NeuPIMs' ``limit``)."""
        own = getattr(self.policy(geometry), "limit", None)
        limits = [x for x in (self.max_context, own) if x is not None]
        return min(limits) if limits else None

    def runtime(self, geometry: Geometry) -> PlacedRuntime:
        """A fresh runtime of this baseline on ``geometry``."""
        if geometry.block_size != self.block_size:
            raise ConfigError(f"{self.name} uses {self.block_size}-token blocks, not "
                              f"{geometry.block_size}")
        return PlacedRuntime(geometry, self.policy(geometry))


#: The baselines by name (the serving engine's ``--runtime`` names).
BASELINES: dict[str, Baseline] = {b.name: b for b in (
    Baseline("neupims", 16, False, MAX_CONTEXT, NeuPims),
    Baseline("attacc", 16, False, MAX_CONTEXT, AttAcc),
    Baseline("blockpim", 128, True, None, BlockPim),
    Baseline("pimphony", 16, False, None, PimPhony),
)}


def baseline(name: str) -> Baseline:
    """Return the baseline called ``name``.

    Raises:
        ConfigError: unknown name (the message lists the known ones).
    """
    try:
        return BASELINES[name]
    except KeyError:
        raise ConfigError(f"unknown baseline {name!r}; known: {', '.join(BASELINES)}") from None
