"""Block and request ids at the runtime's entry points (``patton.runtime.errors.ident``): an
``int`` or a NumPy integer is an id; ``bool``, strings, floats and negatives are refused with
an ``IdError`` (a ``PattonError`` and a ``TypeError``) that names the id, and the runtime is
left as it was."""

from __future__ import annotations

import numpy as np
import pytest
from patton.runtime.errors import IdError, PattonError, ShapeError
from patton.runtime.models import model
from patton.runtime.patton.config import Config
from patton.runtime.patton.lifecycle import Runtime


@pytest.fixture
def rt() -> Runtime:
    return Runtime(Config(model("llama3-8b"), layers=1))


@pytest.mark.parametrize("request_id, block_id, message", [
    (0, True, "block id True is a bool; ids are non-negative integers"),  # was block 1
    ("abc", 9, "request id 'abc' is a str; ids are non-negative integers"),
    (0, 2.0, "block id 2.0 is a float"),
    (0, -1, "block id -1 is negative"),
    (np.int64(-2), 3, "request id -2 is negative"),
])
def test_what_is_not_an_id_is_refused(rt, request_id, block_id, message):
    with pytest.raises(IdError) as err:
        rt.allocate(request_id, block_id)
    assert isinstance(err.value, PattonError) and isinstance(err.value, TypeError)
    assert str(err.value).startswith(message)
    assert rt.blocks == {} and rt.requests == {}


def test_numpy_integers_are_ids(rt):
    rt.allocate(np.int32(0), np.int64(5))  # was refused as "not a non-negative integer"
    assert list(rt.blocks) == [5] and type(next(iter(rt.blocks))) is int
    assert rt.table(0) == [5]


def test_a_write_of_no_tokens_says_so(rt):
    rt.allocate(0, 1)
    c = rt.config
    empty = np.zeros((c.n_layers, 0, c.heads, c.d_head), np.uint16)
    with pytest.raises(ShapeError, match="a write of 0 tokens into block 1: write at least one"):
        rt.write(1, 0, empty, empty)
