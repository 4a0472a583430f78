"""The GEMV-optimised Key and Value layouts every translated baseline is given (§3, §5.2).

The baselines name which channel (and which rows) a request, block or chunk goes to, but not
where each token's Key and Value land inside it. The paper gives each of them the Key and Value
layouts of its §3 wherever they fit the documented design ("giving each baseline a favorable
physical mapping"), so every baseline here stores its KV in *units* of 16 tokens of one KV head
in one layer, placed whole in one channel:

* a **Key unit** is ``E = D / 16`` consecutive bursts from ``col0`` in one row of all 16 banks;
  token ``t`` of the unit lives in bank ``t`` (one QK^T ``MAC_ABK`` of ``E`` columns gives the
  16 tokens' scores, one per bank: §3.2.1's token-per-bank layout);
* a **Value unit** is one burst column ``col`` in ``Rv = D / 16`` consecutive rows of all 16
  banks; Value row ``i``, bank ``b`` holds dimension ``16 i + b`` and lane ``t`` token ``t``
  (SV reduces along the row over the GB's scores, continuing over adjacent columns: §3.2.2's
  dims-across-banks layout, with the whole head in one channel).

Each channel's band of rows per layer is split into a Key region (``key_rows`` rows of
``W / E`` Key units each) and a Value region (``value_groups`` groups of ``Rv`` rows of ``W``
Value units each), sized so both regions hold the same number of units. Key *slot* ``k`` and
Value slot ``v`` of a channel number those units (:meth:`Geometry.key_slot`,
:meth:`Geometry.value_slot`); the policies hand out slots, the program builders turn slots into
addresses. Layer ``l`` uses the same layout ``l * rows_per_layer`` rows further down.
"""

from __future__ import annotations

from dataclasses import dataclass

from patton.runtime.errors import ConfigError
from patton.runtime.models import LayerBand, ModelSpec
from patton.sim.device import DEVICE, Device

__all__ = ["UNIT", "Geometry"]

#: Tokens per unit: one per bank (Key), one per lane of a burst (Value).
UNIT = 16


@dataclass(frozen=True, slots=True)
class Geometry(LayerBand):
    """A baseline's geometry for one model on one device.

    Invariants (checked, :class:`ConfigError` otherwise): ``banks == lanes == UNIT``;
    ``block_size`` is a positive multiple of :data:`UNIT`; ``d_head`` is a multiple of
    :data:`UNIT` whose burst count ``E`` divides the row's ``W`` bursts; a layer has room for
    at least one Value group and its Key rows.

    Args:
        model: attention shape.
        device: AiM organisation.
        block_size: tokens per logical block (the engine's block size).
        layers: layers laid out (default all of the model's).
        layer_rows: rows per layer (default ``rows // model.layers``).
    """

    model: ModelSpec
    device: Device = DEVICE
    block_size: int = 16
    layers: int | None = None
    layer_rows: int | None = None

    def __post_init__(self) -> None:
        d, m = self.device, self.model
        if d.banks != UNIT or d.lanes != UNIT:
            raise ConfigError(f"the baseline layouts need {UNIT} banks and {UNIT} lanes, got "
                              f"{d.banks} and {d.lanes}")
        if self.block_size < UNIT or self.block_size % UNIT:
            raise ConfigError(f"block_size {self.block_size} must be a positive multiple of "
                              f"{UNIT}")
        if m.d_head % UNIT or d.columns % (m.d_head // UNIT):
            raise ConfigError(f"d_head {m.d_head} must be a multiple of {UNIT} whose burst "
                              f"count divides {d.columns}")
        if self.n_layers <= 0 or self.n_layers > m.layers:
            raise ConfigError(f"layers {self.layers} outside 1..{m.layers}")
        if self.rows_per_layer * self.n_layers > d.rows:
            raise ConfigError(f"{self.n_layers} layers x {self.rows_per_layer} rows exceed "
                              f"{d.rows} rows")
        if self.value_groups < 1:
            raise ConfigError(f"{self.rows_per_layer} rows per layer leave no room for one "
                              f"Value group of {self.v_rows} rows and its Key rows")

    # ---------------------------------------------------------------- shapes

    @property
    def channels(self) -> int:
        """Channels of the device."""
        return self.device.channels

    @property
    def units(self) -> int:
        """Units per block and head."""
        return self.block_size // UNIT

    @property
    def bursts(self) -> int:
        """E: bursts per Key vector."""
        return self.d_head // UNIT

    @property
    def v_rows(self) -> int:
        """Rv: rows of a Value unit (the head's dimensions over the 16 banks)."""
        return self.d_head // UNIT

    @property
    def keys_per_row(self) -> int:
        """Key units per row."""
        return self.device.columns // self.bursts

    @property
    def value_groups(self) -> int:
        """Value groups (``Rv`` rows, ``W`` units each) per channel and layer."""
        # a group of Rv rows holds W units; the Key rows holding as many take W / (W / E)
        per_group = self.v_rows + self.device.columns // self.keys_per_row
        return self.rows_per_layer // per_group

    @property
    def key_rows(self) -> int:
        """Rows of the Key region per channel and layer."""
        return self.value_groups * self.device.columns // self.keys_per_row

    @property
    def slots(self) -> int:
        """Key (and Value) units per channel and layer."""
        return self.key_rows * self.keys_per_row

    # ---------------------------------------------------------------- addresses

    def key_slot(self, k: int) -> tuple[int, int]:
        """Return ``(rel_row, col0)`` of Key slot ``k`` of a channel."""
        r, q = divmod(k, self.keys_per_row)
        return r, q * self.bursts

    def value_slot(self, v: int) -> tuple[int, int]:
        """Return ``(rel_row0, col)`` of Value slot ``v`` of a channel (rows row0 .. +Rv-1)."""
        g, col = divmod(v, self.device.columns)
        return self.key_rows + g * self.v_rows, col
