"""Typed errors of the PATTON runtime.

Every error a caller can trigger is a :class:`PattonError` (a :class:`RuntimeError`). An
operation that raises leaves the runtime exactly as it was: checks run before the first
mutation.
"""

from __future__ import annotations

__all__ = [
    "PattonError", "ConfigError", "UnknownBlock", "UnknownRequest", "DuplicateBlock",
    "DoubleFree", "ReadOnlyBlock", "OffsetError", "CapacityError", "BlockStateError",
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
    """Token offsets outside the block, or not appending at the block's fill level."""


class CapacityError(PattonError):
    """No free granule or Commit Zone slot for an allocation."""


class BlockStateError(PattonError):
    """An operation that the block's lifecycle state forbids (e.g. evicting a used block)."""
