"""Typed errors of the PATTON runtime.

Every error a caller can trigger is a :class:`PattonError` (a :class:`RuntimeError`). An
operation that raises leaves the runtime exactly as it was: checks run before the first
mutation.
"""

from __future__ import annotations

import numbers

__all__ = [
    "PattonError", "ConfigError", "UnknownBlock", "UnknownRequest", "DuplicateBlock",
    "DoubleFree", "ReadOnlyBlock", "OffsetError", "CapacityError", "BlockStateError",
    "DtypeError", "ShapeError", "LayerError", "IdError", "ident",
]


class PattonError(RuntimeError):
    """Base class of every runtime error."""


class ConfigError(PattonError, ValueError):
    """A device/model combination the runtime cannot lay out."""


class UnknownBlock(PattonError, KeyError):
    """A block id that is not bound to a placement."""


class UnknownRequest(PattonError, KeyError):
    """A request id the runtime has never seen or has already finished."""


class DuplicateBlock(PattonError):
    """Allocating a block id that is still bound (evict it first)."""


class DoubleFree(PattonError):
    """Freeing a block the request no longer references."""


class ReadOnlyBlock(PattonError):
    """Writing to a shared, cached or full block."""


class OffsetError(PattonError, IndexError):
    """Token offsets outside the block, not appending at the block's fill level, or one block
    written twice in one call."""


class CapacityError(PattonError):
    """No free granule or Commit Zone slot for an allocation."""


class BlockStateError(PattonError):
    """An operation that the block's lifecycle state forbids (e.g. evicting a used block)."""


class DtypeError(PattonError, TypeError):
    """Data that is not bfloat16: K, V, queries and scores are ``uint16`` bit patterns or an
    ``ml_dtypes.bfloat16`` array (float32, float64, int64 ... are refused, not converted)."""


class ShapeError(PattonError, ValueError):
    """Data whose shape does not match the call (its block list, the model's layers, heads and
    head dimension, or a request's tokens)."""


class LayerError(PattonError, IndexError):
    """A layer outside ``0 .. layers - 1`` of the configuration."""


class IdError(PattonError, TypeError):
    """A block or request id that is not a non-negative integer: ``int`` and NumPy integers
    are ids; ``bool``, floats, strings and everything else are refused, not converted."""


def ident(value: object, what: str) -> int:
    """Return ``value`` as an id (a Python ``int``), the one rule every runtime entry point
    applies to block and request ids.

    Raises:
        IdError: ``value`` is a ``bool``, not an integer, or negative; the message names
            ``what`` ("block id", "request id"), the value and its type.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise IdError(f"{what} {value!r} is a {type(value).__name__}; ids are non-negative "
                      "integers (int or a NumPy integer; bool is refused)")
    if value < 0:
        raise IdError(f"{what} {value} is negative; ids are non-negative integers")
    return int(value)
