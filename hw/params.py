"""Build parameters of the RTL channel, derived from the device organisation of ``sim``."""

from __future__ import annotations

from dataclasses import dataclass

from ..sim.device import DEVICE, Device

__all__ = ["ChannelParams"]


@dataclass(frozen=True)
class ChannelParams:
    """Organisation of one AiM channel as the RTL builds it.

    Parameters
    ----------
    bankgroups : int
        Bank groups per channel.
    banks_per_group : int
        Banks per bank group.
    rows : int
        Rows per bank (the mat depth; small values keep simulation cheap).
    columns : int
        32 B columns per row.
    lanes : int
        bfloat16 lanes per column.
    gb_columns : int
        Columns of the global buffer.

    Raises
    ------
    ValueError
        If a field is not a positive integer, or the organisation does not give one payload
        word per bank (WRMAC16, RDMAC16 and WRA16 need ``banks == lanes``).
    """

    bankgroups: int = DEVICE.bankgroups
    banks_per_group: int = DEVICE.banks_per_group
    rows: int = DEVICE.rows
    columns: int = DEVICE.columns
    lanes: int = DEVICE.lanes
    gb_columns: int = DEVICE.gb_columns

    def __post_init__(self) -> None:
        for name in ("bankgroups", "banks_per_group", "rows", "columns", "lanes",
                     "gb_columns"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"ChannelParams.{name} must be a positive integer, "
                                 f"got {value!r}")
        if self.banks != self.lanes:
            raise ValueError(f"ChannelParams needs one lane per bank, got {self.banks!r} banks "
                             f"and {self.lanes!r} lanes")
        if self.rows > COMMAND_ROWS:
            raise ValueError(f"ChannelParams.rows must be at most {COMMAND_ROWS}, "
                             f"got {self.rows!r}")

    @classmethod
    def from_device(cls, device: Device = DEVICE, *, rows: int | None = None) -> ChannelParams:
        """Return the parameters of one channel of ``device`` (optionally with fewer rows)."""
        return cls(bankgroups=device.bankgroups, banks_per_group=device.banks_per_group,
                   rows=device.rows if rows is None else rows, columns=device.columns,
                   lanes=device.lanes, gb_columns=device.gb_columns)

    @property
    def banks(self) -> int:
        """Banks per channel."""
        return self.bankgroups * self.banks_per_group

    @property
    def width(self) -> int:
        """Bits per column (one 32 B burst)."""
        return 16 * self.lanes

    @property
    def row_bits(self) -> int:
        """Bits of a row address inside the mat."""
        return max(1, (self.rows - 1).bit_length())

    @property
    def col_bits(self) -> int:
        """Bits of a column address inside the mat."""
        return max(1, (self.columns - 1).bit_length())

    @property
    def gb_col_bits(self) -> int:
        """Bits of a global-buffer column address."""
        return max(1, (self.gb_columns - 1).bit_length())


#: Rows the command port can address (its row field is 16 bits wide, enough for 16384 rows and
#: for out-of-range values the checker must reject).
COMMAND_ROWS = 1 << 15
