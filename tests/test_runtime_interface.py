"""Every runtime implements the one runtime interface (``runtime/interface.py``)."""

from __future__ import annotations

import inspect

import pytest
from patton.runtime.baselines import BASELINES, Geometry
from patton.runtime.interface import MEMBERS, KvRuntime
from patton.runtime.models import model
from patton.runtime.patton.config import Config
from patton.runtime.patton.variants import VARIANTS

RUNTIMES = [*VARIANTS, *BASELINES]


def build(name: str):
    """A small one-layer runtime of PATTON's variant or baseline ``name``."""
    if name in BASELINES:
        b = BASELINES[name]
        return b.runtime(Geometry(model("llama3-8b"), block_size=b.block_size, layers=1,
                                  layer_rows=512))
    return VARIANTS[name].runtime(Config(model("llama3-8b"), layers=1, layer_rows=9))


def _parameters(function) -> list[tuple[str, object]]:
    return [(p.name, p.kind) for p in inspect.signature(function).parameters.values()]


def test_members_are_the_protocols_methods():
    declared = [n for n, v in vars(KvRuntime).items() if callable(v) and not n.startswith("_")]
    assert sorted(declared) == sorted(MEMBERS)


@pytest.mark.parametrize("name", RUNTIMES)
def test_every_runtime_is_a_kv_runtime_with_the_same_signatures(name):
    runtime = build(name)
    assert isinstance(runtime, KvRuntime)
    assert isinstance(runtime.config, Geometry if name in BASELINES else Config)
    runtime.allocate(0, 5)
    record = runtime.blocks[5]
    assert record.ref_cnt == 1 and record.full is False
    for member in MEMBERS:
        got = _parameters(getattr(type(runtime), member))
        want = _parameters(getattr(KvRuntime, member))
        assert got == want, f"{name}: {member}{got} differs from the interface's {want}"
    runtime.check()


def test_an_object_missing_a_member_is_not_a_kv_runtime():
    class Partial:
        config = blocks = None

        def allocate(self, request: int, block_id: int) -> object: ...

    assert not isinstance(Partial(), KvRuntime)
