"""PATTON: granules, Commit Zone, block lifecycle, command generation (``docs/runtime.md``).

Public API (``from patton.runtime import ...``; imported on first use): :class:`Runtime` and its
configuration (:class:`Config`, :class:`ModelSpec`, :data:`MODELS`, :func:`model`,
:class:`WriteMode`), what it returns (:class:`Writes`, :class:`WriteProgram`, :class:`QkPlan`,
:class:`SvPlan`, the placements :class:`KeyPlace`, :class:`ValuePlace`, :class:`CzPlace`), its
variants, PATTON and the ablations (:class:`Variant`, :func:`variant`, :data:`VARIANTS`), and
its typed errors (:class:`PattonError` and its subclasses).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from patton.sim._exports import lazy

#: Each public name by the submodule that defines it.
_EXPORTS = {
    "patton.lifecycle": ("Runtime",),
    "patton.writes": ("Writes", "WriteProgram"),
    "patton.config": ("Config",),
    "models": ("ModelSpec", "MODELS", "model"),
    "patton.metadata": ("WriteMode", "KeyPlace", "ValuePlace", "CzPlace"),
    "programs.plans": ("QkPlan", "SvPlan"),
    "patton.variants": ("Variant", "variant", "VARIANTS"),
    "interface": ("KvRuntime",),
    "errors": ("PattonError", "ConfigError", "UnknownBlock", "UnknownRequest",
               "DuplicateBlock", "DoubleFree", "ReadOnlyBlock", "OffsetError", "CapacityError",
               "BlockStateError", "DtypeError", "ShapeError", "LayerError"),
}
__all__ = [
    "Runtime", "Writes", "WriteProgram", "Config", "ModelSpec", "MODELS", "model", "WriteMode",
    "KeyPlace", "ValuePlace", "CzPlace", "QkPlan", "SvPlan", "Variant", "variant", "VARIANTS",
    "KvRuntime", "PattonError", "ConfigError", "UnknownBlock", "UnknownRequest", "DuplicateBlock",
    "DoubleFree",
    "ReadOnlyBlock", "OffsetError", "CapacityError", "BlockStateError", "DtypeError", "ShapeError",
    "LayerError",
]
__getattr__, __dir__ = lazy(__name__, globals(), _EXPORTS, __all__)

if TYPE_CHECKING:
    from patton.runtime.errors import (
        BlockStateError,
        CapacityError,
        ConfigError,
        DoubleFree,
        DtypeError,
        DuplicateBlock,
        LayerError,
        OffsetError,
        PattonError,
        ReadOnlyBlock,
        ShapeError,
        UnknownBlock,
        UnknownRequest,
    )
    from patton.runtime.interface import KvRuntime
    from patton.runtime.models import MODELS, ModelSpec, model
    from patton.runtime.patton.config import Config
    from patton.runtime.patton.lifecycle import Runtime
    from patton.runtime.patton.metadata import CzPlace, KeyPlace, ValuePlace, WriteMode
    from patton.runtime.patton.variants import VARIANTS, Variant, variant
    from patton.runtime.patton.writes import WriteProgram, Writes
    from patton.runtime.programs.plans import QkPlan, SvPlan
