"""Runtime configuration: presets, derived granule shapes, placements, rejected shapes."""

from __future__ import annotations

import pytest
from patton.runtime.errors import ConfigError, PattonError
from patton.runtime.models import MODELS, ModelSpec, model
from patton.runtime.patton.config import Config
from patton.sim.device import DEVICE


@pytest.mark.parametrize("name, p, rv, krs_rows", [
    ("llama3-8b", 4, 2, 1), ("qwen3-8b", 4, 2, 1), ("opt-6.7b", 1, 8, 2), ("qwen1.5-7b", 1, 8, 2),
])
def test_presets_derive_ch_per_head(name: str, p: int, rv: int, krs_rows: int) -> None:
    c = Config(model(name))
    assert c.ch_per_head == p
    assert c.v_rows == rv
    assert c.krs_rows == krs_rows  # an MHA O2K (E*N = 128 bursts) spans two rows
    assert c.heads * c.ch_per_head <= DEVICE.channels
    assert c.rows_per_layer * c.n_layers <= DEVICE.rows


@pytest.mark.parametrize("d_head, kv_heads", [(64, 8), (128, 8), (256, 8), (64, 32), (128, 32),
                                              (256, 32), (128, 2), (256, 1)])
def test_granule_sizes_are_equal(d_head: int, kv_heads: int) -> None:
    c = Config(ModelSpec("m", 32, kv_heads, kv_heads * 2, d_head))
    banks = DEVICE.banks
    o1k = c.bursts * banks  # burst-bank units of one O1K (one channel)
    o1v = c.ch_per_head * c.v_rows * banks  # one column in Rv rows of P channels
    slot = c.ch_per_head * c.v_rows * banks  # Rv bursts in one CRS row of P channels
    assert o1k == o1v == slot == d_head * banks // DEVICE.lanes
    o2k = c.o2k_width * c.ch_per_head * banks
    o2v = c.o2v_width * c.ch_per_head * c.v_rows * banks
    assert o2k == o2v == c.n_o1p2 * o1k
    # Key and Value hold the same number of blocks per layer (within one Order-2 granule).
    k_blocks = c.krs_count * c.o2k_per_krs * c.n_o1p2
    v_blocks = c.vrs_count * c.o2v_per_vrs * c.o2v_width
    assert abs(k_blocks - v_blocks) <= c.n_o1p2 * max(c.o2k_per_krs, c.o2v_per_vrs)
    rows = c.crs_rows + c.krs_count * c.krs_rows + c.vrs_count * c.v_rows
    assert rows <= c.rows_per_layer


def test_key_placement_is_channel_first_then_column() -> None:
    c = Config(model("llama3-8b"))
    places = [c.key_place(0, s) for s in range(c.n_o1p2)]
    assert [p for p, _, _ in places[:4]] == [0, 1, 2, 3]
    assert {col for _, _, col in places[:4]} == {0}
    assert [col for p, _, col in places if p == 0] == [0, 8, 16, 24]
    assert c.key_place(1, 0) == (0, c.krs_base, 32)  # second O2K of the same KRS
    assert c.key_place(2, 0) == (0, c.krs_base + 1, 0)


def test_mha_o2k_spans_two_rows() -> None:
    c = Config(model("opt-6.7b"))
    rows = {c.key_place(0, s)[1] for s in range(c.n_o1p2)}
    assert rows == {c.krs_base, c.krs_base + 1}
    assert c.key_place(1, 0)[1] == c.krs_base + 2


def test_value_and_cz_placement() -> None:
    c = Config(model("llama3-8b"))
    assert c.value_place(0, 3) == (c.vrs_base, 3)
    assert c.value_place(1, 0) == (c.vrs_base, 16)
    assert c.value_place(4, 0) == (c.vrs_base + c.v_rows, 0)
    assert c.cz_place(0) == (0, 0) and c.cz_place(1) == (0, 2) and c.cz_place(32) == (1, 0)
    # Head dimension d lives in channel d // 32, row/burst (d % 32) // 16, bank d % 16.
    assert c.value_dim(1, 1, 5) == 32 + 16 + 5


def test_no_o2v_ablation_is_one_o2v_per_vrs() -> None:
    c = Config(model("llama3-8b"), o2v_blocks=DEVICE.columns)
    assert c.o2v_per_vrs == 1 and c.o2v_width == DEVICE.columns


@pytest.mark.parametrize("kwargs, words", [
    ({"block_size": 8}, "at least"),
    ({"block_size": 32}, "not supported"),
    ({"n_o1p2": 12}, "divide"),
    ({"o2v_blocks": 48}, "divide"),
    ({"layers": 40}, "layers"),
    ({"layer_rows": 3}, "no room"),
])
def test_rejected_configs(kwargs: dict, words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        Config(model("llama3-8b"), **kwargs)


def test_rejected_models() -> None:
    with pytest.raises(ConfigError):
        Config(ModelSpec("m", 2, 64, 64, 128))  # more KV heads than channels
    with pytest.raises(ConfigError):
        Config(ModelSpec("m", 2, 8, 32, 72))  # d_head not a multiple of 16 lanes
    with pytest.raises(ConfigError):
        ModelSpec("m", 2, 8, 12, 128)
    with pytest.raises(PattonError):
        model("gpt-5")
    assert set(MODELS) == {"llama3-8b", "qwen3-8b", "opt-6.7b", "qwen1.5-7b"}
