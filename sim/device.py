"""Device organisation of an AiM GDDR6 device, read from the one data file.

The numbers live in ``data/timing_params.json`` (``org``), next to the timing parameters, so that
the organisation and the timing table are defined once, as data.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from functools import cache
from importlib import resources

__all__ = ["Device", "DEVICE", "AF_ROW_BASE", "params"]

#: Row address of the activation-function LUT rows: AF16 opens row ``AF_ROW_BASE + AFM``.
AF_ROW_BASE = 1 << 29


@cache
def params() -> dict:
    """Return the timing parameters and organisation (``data/timing_params.json``)."""
    text = resources.files(__package__).joinpath("data/timing_params.json").read_text()
    return json.loads(text)


@dataclass(frozen=True, slots=True)
class Device:
    """Organisation of one AiM device (all channels).

    A column is one 32 B burst of 16 bfloat16 lanes; a row holds ``columns`` of them; the global
    buffer of a channel holds ``gb_columns`` columns (2 KB).
    """

    channels: int = 32  # GDDR6 channels (the public simulator hard-wires 32)
    bankgroups: int = 4  # bank groups per channel
    banks_per_group: int = 4  # banks per bank group
    rows: int = 16384  # rows per bank
    columns: int = 64  # 32 B columns per row (2 KB rows)
    column_bytes: int = 32  # bytes per column (one BL16 burst on x16)
    gb_columns: int = 64  # global buffer size in columns (2 KB)

    def __post_init__(self) -> None:
        for name in ("channels", "bankgroups", "banks_per_group", "rows", "columns",
                     "column_bytes", "gb_columns"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"Device.{name} must be a positive integer, got {value!r}")
        if self.channels > 32:
            raise ValueError(f"Device.channels must be at most 32 (mask width), got "
                             f"{self.channels!r}")

    @property
    def banks(self) -> int:
        """Banks per channel."""
        return self.bankgroups * self.banks_per_group

    @property
    def lanes(self) -> int:
        """bfloat16 elements per column."""
        return self.column_bytes // 2

    @property
    def cycle_ns(self) -> float:
        """Length of one memory-system cycle in ns (the timing table's clock)."""
        return float(params()["cycle_ns"])

    @property
    def row_bytes(self) -> int:
        """Bytes per row."""
        return self.columns * self.column_bytes

    def with_(self, **changes: int) -> Device:
        """Return a copy with some fields changed (e.g. ``rows=256`` for a small RTL build)."""
        return replace(self, **changes)

    @classmethod
    def from_params(cls) -> Device:
        """Build the device from ``data/timing_params.json``."""
        org = params()["org"]
        assert org["row_bytes"] == org["columns_per_row"] * org["column_bytes"]
        return cls(channels=org["channels"], bankgroups=org["bankgroups"],
                   banks_per_group=org["banks_per_bg"], rows=org["rows"],
                   columns=org["columns_per_row"], column_bytes=org["column_bytes"],
                   gb_columns=org["row_bytes"] // org["column_bytes"])


#: The AiM device the public simulator models.
DEVICE = Device.from_params()
