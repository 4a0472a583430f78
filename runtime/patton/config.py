"""Runtime configuration: granule shapes derived from the device and the model.

Notation (``docs/runtime.md`` §1): ``B`` banks per channel, ``L`` bf16 lanes per 32 B burst,
``W`` bursts per row, ``T`` tokens per block, ``D`` = d_head, ``E = D / L`` bursts per Key
vector, ``P`` = ChPerHead, ``Rv = D / (B * P)`` Value rows per channel, ``N`` = N_O1p2.

Per layer and per KV head group (P channels), the rows of every channel are laid out as
``[CRS x crs_rows][KRS x krs_count][VRS x vrs_count]``; head groups use the same rows in their
own channels, and layer ``l`` is the same layout shifted by ``l * layer_rows``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from patton.runtime.errors import ConfigError
from patton.runtime.models import LayerBand, ModelSpec
from patton.sim.device import DEVICE, Device

__all__ = ["Config"]


@dataclass(frozen=True, slots=True)
class Config(LayerBand):
    """Granule geometry for one model on one device.

    Invariants (checked at construction, :class:`ConfigError` otherwise): ``T == B == L``
    (one token per bank for Key, one burst of tokens for Value); ``D`` is a multiple of ``L``
    and ``B`` and ``E`` divides ``W``; ``P`` (``ch_per_head``, derived) divides ``D / B`` and
    ``N``; ``N`` and the O2V width divide ``W``; at least one CRS, KRS and VRS fit in a layer.

    Args:
        model: attention shape.
        device: AiM organisation.
        block_size: tokens per logical block (vLLM's block size).
        n_o1p2: Order-1 granules per Order-2 granule (N_O1p2, paper default 16).
        o2v_blocks: O1Vs per O2V; ``None`` = ``n_o1p2``; ``W`` = whole-VRS ablation.
        crs_rows: Commit Zone row sets per layer (default: enough for 64 partial blocks,
            the paper's largest live request pool).
        layers: layers to lay out (default: all of the model's; fewer simulate part of it).
        layer_rows: rows per layer (default: ``rows // model.layers``, the real budget even
            when fewer layers are laid out).
    """

    model: ModelSpec
    device: Device = DEVICE
    block_size: int = 16
    n_o1p2: int = 16
    o2v_blocks: int | None = None
    crs_rows: int | None = None
    layers: int | None = None
    layer_rows: int | None = None
    ch_per_head: int = field(init=False)  # P: channels per KV head group
    # derived row counts, computed once (the allocator asks for them per block)
    _counts: dict[str, Any] = field(init=False, repr=False, compare=False, hash=False,
                                    default_factory=dict)

    def __post_init__(self) -> None:
        d, m = self.device, self.model
        if d.banks != d.lanes:
            raise ConfigError(f"the layout needs banks == lanes per burst, got {d.banks} and "
                              f"{d.lanes}")
        if self.block_size != d.banks:
            # The paper requires T >= B and T >= L; blocks larger than one burst of tokens
            # would need several O1 granules per block (not modelled, docs/runtime.md §7).
            if self.block_size < d.banks or self.block_size < d.lanes:
                raise ConfigError(f"block_size {self.block_size} must be at least the "
                                  f"{d.banks} banks and the {d.lanes} lanes per burst")
            raise ConfigError(f"block_size {self.block_size} > {d.banks} is not supported: "
                              f"one block is one bank-row of tokens here")
        if m.kv_heads > d.channels:
            raise ConfigError(f"{m.kv_heads} KV heads need more than {d.channels} channels")
        if m.d_head % d.lanes or d.columns % (m.d_head // d.lanes):
            raise ConfigError(f"d_head {m.d_head} must be a multiple of {d.lanes} whose "
                              f"burst count divides {d.columns}")
        if m.d_head % d.banks:
            raise ConfigError(f"d_head {m.d_head} must be a multiple of {d.banks} banks")
        if self.n_o1p2 <= 0 or d.columns % self.n_o1p2:
            raise ConfigError(f"n_o1p2 {self.n_o1p2} must divide {d.columns} columns")
        v = self.o2v_width
        if v <= 0 or d.columns % v:
            raise ConfigError(f"o2v_blocks {v} must divide {d.columns} columns")
        p = d.channels // m.kv_heads
        while p > 1 and ((m.d_head // d.banks) % p or self.n_o1p2 % p):
            p -= 1
        object.__setattr__(self, "ch_per_head", p)
        if self.crs_rows is None:
            object.__setattr__(self, "crs_rows", -(-64 // self.cz_slots_per_crs))
        if self.crs_rows <= 0:
            raise ConfigError(f"crs_rows must be positive, got {self.crs_rows}")
        if self.n_layers <= 0 or self.n_layers > m.layers:
            raise ConfigError(f"layers {self.layers} outside 1..{m.layers}")
        if self.rows_per_layer * self.n_layers > d.rows:
            raise ConfigError(f"{self.n_layers} layers x {self.rows_per_layer} rows exceed "
                              f"{d.rows} rows")
        if self.krs_count < 1 or self.vrs_count < 1:
            raise ConfigError(f"{self.rows_per_layer} rows per layer leave no room for a KRS "
                              f"and a VRS after {self.crs_rows} CRS rows")

    # ---------------------------------------------------------------- shapes


    @property
    def bursts(self) -> int:
        """E: bursts per Key vector (and per bank in an O1K)."""
        return self.d_head // self.device.lanes

    @property
    def v_rows(self) -> int:
        """Rv: Value rows per channel of a VRS (= bursts per bank of a CZ slot)."""
        return self.d_head // (self.device.banks * self.ch_per_head)

    @property
    def dims_per_channel(self) -> int:
        """Head-dimension elements each channel of a group holds for Value."""
        return self.d_head // self.ch_per_head

    @property
    def o2k_width(self) -> int:
        """Bursts per channel of an O2K (``E * N / P``; may span several rows)."""
        return self.bursts * self.n_o1p2 // self.ch_per_head

    @property
    def krs_rows(self) -> int:
        """Rows per channel of a KRS: one, or as many as a wide O2K needs."""
        return max(1, self.o2k_width // self.device.columns)

    @property
    def o2k_per_krs(self) -> int:
        """O2Ks per KRS."""
        return max(1, self.device.columns // self.o2k_width)

    @property
    def o2v_width(self) -> int:
        """O1Vs (columns) per O2V."""
        return self.n_o1p2 if self.o2v_blocks is None else self.o2v_blocks

    @property
    def o2v_per_vrs(self) -> int:
        """O2Vs per VRS."""
        return self.device.columns // self.o2v_width

    @property
    def cz_slots_per_crs(self) -> int:
        """CZ slots per CRS row (slot width ``Rv`` bursts)."""
        return self.device.columns // self.v_rows

    @property
    def _kv_rows(self) -> int:
        return self.rows_per_layer - self.crs_rows

    @property
    def krs_count(self) -> int:
        """KRSs per layer: half the non-CZ rows, trimmed so Key and Value hold the same O1s."""
        n = self._counts.get("krs")
        if n is None:
            n = self._counts["krs"] = self._krs_count()
        return n

    def _krs_count(self) -> int:
        k = (self._kv_rows // 2) // self.krs_rows
        v = (self._kv_rows - self._kv_rows // 2) // self.v_rows
        blocks = min(k * self.o2k_per_krs * self.n_o1p2, v * self.device.columns)
        return -(-blocks // (self.o2k_per_krs * self.n_o1p2))

    @property
    def vrs_count(self) -> int:
        """VRSs per layer."""
        return (self._kv_rows - self.krs_count * self.krs_rows) // self.v_rows

    @property
    def krs_base(self) -> int:
        """First row (within a layer) of the Key region."""
        return self.crs_rows

    @property
    def vrs_base(self) -> int:
        """First row (within a layer) of the Value region."""
        n = self._counts.get("vrs_base")
        if n is None:
            n = self._counts["vrs_base"] = self.crs_rows + self.krs_count * self.krs_rows
        return n

    # ---------------------------------------------------------------- addresses

    def channel(self, head: int, p: int) -> int:
        """Return the device channel of channel ``p`` of head group ``head``."""
        return head * self.ch_per_head + p

    def key_place(self, o2k: int, slot: int) -> tuple[int, int, int]:
        """Return ``(p, rel_row, col)`` of O1K ``slot`` of O2K ``o2k``: Case Ch, then C."""
        k_consts = self._counts.get("key_place")
        if k_consts is None:  # the allocator asks per block: the derived sizes, once
            k_consts = self._counts["key_place"] = (
                self.o2k_per_krs, self.ch_per_head, self.o2k_width, self.bursts,
                self.device.columns, self.krs_base, self.krs_rows)
        per_krs, chans, width, bursts, cols, base, rows = k_consts
        krs, q = divmod(o2k, per_krs)
        p, k = slot % chans, slot // chans
        lin = q * width + k * bursts
        return p, base + krs * rows + lin // cols, lin % cols

    def value_place(self, o2v: int, index: int) -> tuple[int, int]:
        """Return ``(rel_row0, col)`` of O1V ``index`` of O2V ``o2v`` (rows row0 .. +Rv-1)."""
        v_consts = self._counts.get("value_place")
        if v_consts is None:
            v_consts = self._counts["value_place"] = (self.o2v_per_vrs, self.vrs_base,
                                                      self.v_rows, self.o2v_width)
        per_vrs, base, rv, width = v_consts
        vrs, q = divmod(o2v, per_vrs)
        return base + vrs * rv, q * width + index

    def cz_place(self, slot: int) -> tuple[int, int]:
        """Return ``(rel_row, col0)`` of CZ slot ``slot`` (bursts col0 .. col0 + Rv - 1)."""
        crs, j = divmod(slot, self.cz_slots_per_crs)
        return crs, j * self.v_rows

    def value_dim(self, p: int, i: int, bank: int) -> int:
        """Return the head dimension stored by channel ``p``, Value row/burst ``i``, ``bank``."""
        return p * self.dims_per_channel + i * self.device.banks + bank
