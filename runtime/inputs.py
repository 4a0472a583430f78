"""Checks of the data a caller hands the runtime: dtype, shape and layer, with typed errors.

K, V, queries and scores are bfloat16. The runtime takes them as ``uint16`` bit patterns, or
as an ``ml_dtypes.bfloat16`` array, whose bits are the same patterns (it is viewed as
``uint16``, as :mod:`patton.sim.datapath` reads bfloat16 operands: nothing is rounded). Every
other dtype is refused with :class:`~patton.runtime.errors.DtypeError`, never cast: a float32
1.0 cast to ``uint16`` would be stored as 0x0001. Real values go through the one conversion,
:func:`patton.sim.datapath.to_bf16`, on the caller's side.

The checks run before the runtime changes anything, so a refused call leaves it as it was.
"""

from __future__ import annotations

import numpy as np
from patton.runtime.errors import DtypeError, LayerError, ShapeError
from patton.sim.datapath import is_bf16

__all__ = ["bf16_bits", "check_shape", "check_layer"]

_U16 = np.dtype(np.uint16)


def bf16_bits(x: object, what: str) -> np.ndarray:
    """Return ``x`` as ``uint16`` bfloat16 bit patterns (``x`` itself when it is ``uint16``).

    Raises:
        DtypeError: ``x`` is not a NumPy array of ``uint16`` or ``ml_dtypes.bfloat16``.
    """
    if not isinstance(x, np.ndarray):
        raise DtypeError(f"{what} must be a NumPy array of bfloat16 bit patterns (uint16) or "
                         f"an ml_dtypes.bfloat16 array, not {type(x).__name__}")
    dtype = x.dtype
    if dtype == _U16:
        return x
    if is_bf16(dtype):
        return x.view(np.uint16)
    raise DtypeError(f"{what} has dtype {dtype}: give bfloat16 bit patterns (uint16) or an "
                     f"ml_dtypes.bfloat16 array (patton.sim.datapath.to_bf16 converts real "
                     f"values)")


def check_shape(x: np.ndarray, shape: tuple[int, ...], what: str, meaning: str) -> None:
    """Raise :class:`ShapeError` unless ``x.shape == shape`` (``meaning`` names the axes)."""
    if x.shape != shape:
        raise ShapeError(f"{what} must have shape {meaning} = {shape}, got {x.shape}")


def check_layer(layer: object, layers: int) -> int:
    """Return ``layer`` as an int, or raise :class:`LayerError` unless ``0 <= layer < layers``."""
    if isinstance(layer, (bool, np.bool_)) or not isinstance(layer, (int, np.integer)):
        raise LayerError(f"layer {layer!r} is not an integer")
    if not 0 <= layer < layers:
        raise LayerError(f"layer {layer} outside 0..{layers - 1} (the configuration lays out "
                         f"{layers} layer{'s' if layers != 1 else ''})")
    return int(layer)
