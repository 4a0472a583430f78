"""Build parameters of the RTL channel, derived from the device organisation of ``sim``."""

from __future__ import annotations

from dataclasses import dataclass

from patton.sim.device import DEVICE, Device
from patton.sim.protocol import LUT_ROWS

__all__ = ["ChannelParams"]


@dataclass(frozen=True)
class ChannelParams:
    """One channel of a device as the RTL builds it: the device's organisation, except that the
    mats may hold fewer rows (small builds keep simulation and Verilog generation cheap).

    Parameters
    ----------
    rows : int
        Rows per bank (the mat depth), fewer than or as many as the device has, up to what the
        command port can address (:data:`COMMAND_ROWS`); defaults to the device's.
    device : Device
        The organisation every other figure comes from (:mod:`patton.sim.device`).

    Raises
    ------
    ValueError
        If ``rows`` is not a positive integer the command port can address, or the
        organisation does not give one payload word per bank (WRMAC16, RDMAC16 and WRA16 need
        ``banks == lanes``).
    """

    rows: int = DEVICE.rows
    device: Device = DEVICE

    def __post_init__(self) -> None:
        if not isinstance(self.rows, int) or isinstance(self.rows, bool) or self.rows <= 0:
            raise ValueError(f"ChannelParams.rows must be a positive integer, got {self.rows!r}")
        if self.banks != self.lanes:
            raise ValueError(f"ChannelParams needs one lane per bank, got {self.banks!r} banks "
                             f"and {self.lanes!r} lanes")
        if self.rows > COMMAND_ROWS:
            raise ValueError(f"ChannelParams.rows must be at most {COMMAND_ROWS}, "
                             f"got {self.rows!r}")

    @classmethod
    def from_device(cls, device: Device = DEVICE, *, rows: int | None = None) -> ChannelParams:
        """Return the parameters of one channel of ``device`` (optionally with fewer rows)."""
        return cls(device.rows if rows is None else rows, device)

    @property
    def bankgroups(self) -> int:
        """Bank groups per channel."""
        return self.device.bankgroups

    @property
    def banks_per_group(self) -> int:
        """Banks per bank group."""
        return self.device.banks_per_group

    @property
    def columns(self) -> int:
        """32 B columns per row."""
        return self.device.columns

    @property
    def lanes(self) -> int:
        """bfloat16 lanes per column."""
        return self.device.lanes

    @property
    def gb_columns(self) -> int:
        """Columns of the global buffer."""
        return self.device.gb_columns

    @property
    def banks(self) -> int:
        """Banks per channel."""
        return self.device.banks

    @property
    def width(self) -> int:
        """Bits per column (one 32 B burst)."""
        return 16 * self.lanes

    @property
    def row_bits(self) -> int:
        """Bits of a row address inside the mat."""
        return max(1, (self.rows - 1).bit_length())

    @property
    def lut_rows(self) -> int:
        """Activation-function LUT rows per bank (one per AFM value), behind the normal rows."""
        return LUT_ROWS

    @property
    def open_row_bits(self) -> int:
        """Bits of a bank's open-row register: a normal row, or a LUT row's index ``k`` (its
        ``lut`` flag beside it)."""
        return max(self.row_bits, (self.lut_rows - 1).bit_length())

    @property
    def mat_rows(self) -> int:
        """Rows of a bank's mat: the normal rows, then the LUT rows (LUT row ``k`` is mat row
        ``rows + k``)."""
        return self.rows + self.lut_rows

    @property
    def mat_row_bits(self) -> int:
        """Bits of a row address inside the mat (normal and LUT rows)."""
        return max(1, (self.mat_rows - 1).bit_length())

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
