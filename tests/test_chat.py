"""The multi-turn chat served on a device (``patton.serving.chat``): the loop, its checks,
and faults injected one at a time that the checks must catch, on the device models.

The same chat on live RTL channels is in ``tests/test_chat_rtl.py``.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from patton.serving import conversations as cv
from patton.serving import engine as eng
from patton.serving.chat import DEMO_CONVERSATIONS, Chat, ChatSetup
from patton.serving.clients import Clients
from patton.serving.faults import Faults
from patton.serving.kv_data import TokenKV
from patton.sim.executor import CycleExecutor

SETUP = ChatSetup()


@pytest.fixture(scope="module")
def conversations():
    return cv.read(DEMO_CONVERSATIONS)


@pytest.fixture(scope="module")
def served(conversations):
    """The first 70 steps of the demo chat on the cycle and functional models."""
    chat = Chat(conversations, CycleExecutor(SETUP.config().device), SETUP, max_steps=70)
    return chat, chat.run()


def test_schedule_then_update_is_step(conversations):
    """``update(schedule())`` makes exactly the decisions of ``step()`` (the golden files pin
    ``step()`` to vLLM 0.33)."""
    params = SETUP.engine()
    a, b = eng.EmbeddedEngine(params), eng.EmbeddedEngine(params)
    ca = Clients(conversations, clients=4, pool=8, max_model_len=params.max_model_len)
    cb = Clients(conversations, clients=4, pool=8, max_model_len=params.max_model_len)
    for _ in range(150):
        for (ra, _), (rb, _) in zip(ca.send(), cb.send(), strict=True):
            a.add(ra)
            b.add(rb)
        if not ca.in_flight:
            break
        batch = b.schedule()
        assert [s.num_computed for s, _ in batch.scheduled] == batch.starts
        got = b.update(batch)
        want = a.step()
        assert got == want
        ca.finish(f.request_id for f in want.finished)
        cb.finish(f.request_id for f in got.finished)


def test_the_chat_exercises_what_it_checks(served):
    """Prefills, decode steps across block boundaries, commits, prefix-cache hits, evictions
    and a request finishing with a partial block, with every check passing."""
    chat, rep = served
    f = rep.as_dict()
    assert f["failures"] == []
    assert f["steps"] == 70 and f["checks"] == 70
    assert f["prefill_tokens"] > 0 and f["decode_tokens"] > 0
    assert f["commits"] > 0 and f["hit_tokens"] > 0 and f["evictions"] > 0
    assert f["finished_partial"] > 0
    assert f["placement_mismatches"] == 0 and f["placement_checked"] > 100_000
    assert f["mismatches"] == 0 and f["violations"] == 0
    assert 0 < f["max_tolerance_ratio"] <= 1.0
    assert f["cycles"] == sum(f["cycles_by_phase"].values()) > 0
    assert all(f["cycles_by_phase"][p] > 0 for p in ("writes", "commits", "qk", "sv"))
    # decode tokens crossed block boundaries: commits happened in decode steps
    assert any(s.commits and s.decode_tokens for s in rep.steps)


def test_kv_is_a_function_of_the_token_prefix():
    data = TokenKV(SETUP.config(), seed=3)
    a = data.hashes("a", [5, 6, 7, 8], 4)
    b = data.hashes("b", [5, 6, 7, 9], 4)
    assert a[:3] == b[:3] and a[3] != b[3]
    ka, va = data.of(a)
    kb, vb = data.of(b)
    assert ka.shape == (SETUP.layers, 4, 1, 128) and ka.dtype == np.uint16
    assert (ka[:, :3] == kb[:, :3]).all() and (ka[:, 3] != kb[:, 3]).any()
    assert (TokenKV(SETUP.config(), seed=3).of(a)[1] == va).all()
    assert (TokenKV(SETUP.config(), seed=4).of(a)[0] != ka).any()


@pytest.mark.parametrize("kind, what", [
    ("kv-column", "placement in the functional model's mats: block"),
    ("commit-row", "commit of block"),
])
def test_a_program_fault_is_reported_where_it_was_made(conversations, kind, what):
    """A Key write moved one column, a commit moved one row: the step they hit fails with a
    placement failure naming the block, and every earlier step passes."""
    faults = Faults(kind, step=12)
    chat = Chat(conversations, CycleExecutor(SETUP.config().device), SETUP, faults=faults,
                max_steps=40)
    rep = chat.run()
    assert faults.hit is not None
    hit = int(faults.hit.split()[1].rstrip(":"))
    first = next(s for s in rep.steps if s.failures)
    assert first.step == hit
    assert any(what in f for f in first.failures), first.failures
    assert first.placement_mismatches > 0
    assert first.violations == 0


def test_a_chat_on_the_wrong_device_is_refused(conversations):
    with pytest.raises(ValueError, match="not the chat's"):
        Chat(conversations, CycleExecutor(SETUP.config().device.with_(channels=8)), SETUP)


@pytest.mark.parametrize("kw, message", [
    ({"layers": 0}, "layers must be >= 1"),
    ({"seed": -1}, "seed must be >= 0"),
    ({"layers": 9}, "need 72 rows"),
    ({"kv_heads": 0}, "kv_heads must be 1..8"),
    ({"kv_heads": 9}, "kv_heads must be 1..8"),
])
def test_bad_setups_are_refused(kw, message):
    with pytest.raises(ValueError, match=message):
        ChatSetup(**kw)


@pytest.mark.parametrize("channels", [0, 6, 36])
def test_a_device_of_other_than_groups_of_four_is_refused(channels):
    with pytest.raises(ValueError, match=f"multiple of 4 from 4 to 32 .*got {channels}"):
        ChatSetup.of_channels(channels)


class _Heads:
    """An observer of the driver: the heads of every query, score and output it is shown."""

    def __init__(self) -> None:
        self.heads: set[tuple[int, int, int]] = set()

    def scores(self, work, layer, queries, scores) -> None:
        self.heads.update((queries.shape[1], s.shape[0], -1) for s in scores)

    def outputs(self, work, layer, probs, plans, index, outputs) -> None:
        self.heads.update((-1, -1, o.shape[0]) for o in outputs)


def test_the_whole_device_serves_every_head_on_every_channel(conversations):
    """``kv_heads=8``: Llama-3-8B's 8 KV heads on 32 channels, 8 ChPerHead groups of 4. A few
    steps pass every check; the engine schedules what it schedules on one group, every head's
    KV is read back (8 times one group's elements), attention is asked and checked for the 8
    heads, and every one of the 32 channels holds KV."""
    steps = 4
    setup = ChatSetup.of_channels(32)
    config = setup.config()
    assert (setup.kv_heads, setup.channels, config.heads, config.ch_per_head) == (8, 32, 8, 4)
    assert config.device.channels == 32 and setup.model.q_heads == 32
    ex = CycleExecutor(config.device)
    seen = _Heads()
    f = Chat(conversations, ex, setup, max_steps=steps, observers=[seen]).run().as_dict()
    one = Chat(conversations, CycleExecutor(SETUP.config().device), SETUP,
               max_steps=steps).run().as_dict()
    assert f["failures"] == [] and f["steps"] == f["checks"] == steps
    assert f["placement_mismatches"] == f["mismatches"] == f["violations"] == 0
    assert 0 < f["max_tolerance_ratio"] <= 1.0
    assert (f["kv_heads"], f["channels"]) == (8, 32)
    assert "kv_heads" not in one and "channels" not in one  # one group: the keys it had
    same = ("requests", "prefill_tokens", "decode_tokens", "kv_writes", "commits",
            "evictions", "finished")
    assert f["decode_tokens"] > 0 and {k: f[k] for k in same} == {k: one[k] for k in same}
    assert f["placement_checked"] == 8 * one["placement_checked"] > 0
    assert seen.heads == {(8, 8, -1), (-1, -1, 8)}
    assert all(any(m.any() for m in ex.model.channels[c].mats.values()) for c in range(32))


def test_demo_serves_the_whole_device_on_the_models(tmp_path, capsys):
    from patton.cli import main

    assert main(["demo", "--device", "model", "--channels", "32", "--steps", "2", "--out",
                 str(tmp_path), "--json"]) == 0
    got = capsys.readouterr()
    figures = json.loads(got.out)
    assert (figures["kv_heads"], figures["channels"], figures["steps"]) == (8, 32, 2)
    assert figures["failures"] == [] and "verdict      PASS" in got.err
    assert "Llama-3-8B, 8 KV heads on 32 AiM channels, 2 layers" in got.err


@pytest.mark.parametrize("value, message", [
    ("6", "must be a multiple of 4 from 4 to 32 (4 channels per KV head of Llama-3-8B, which "
          "has 8), got 6"),
    ("0", "must be a multiple of 4 from 4 to 32 (4 channels per KV head of Llama-3-8B, which "
          "has 8), got 0"),
    ("36", "must be a multiple of 4 from 4 to 32 (4 channels per KV head of Llama-3-8B, which "
           "has 8), got 36"),
    ("x", "value 'x' is not a decimal number (expected a multiple of 4 from 4 to 32)"),
])
def test_demo_refuses_a_bad_channel_count(value, message, tmp_path, capsys):
    from patton.cli import main

    with pytest.raises(SystemExit) as e:
        main(["demo", "--device", "model", "--channels", value, "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert e.value.code == 2
    assert f"error: argument --channels: {message}" in err and "Traceback" not in err
    assert not any(tmp_path.iterdir())  # refused before anything ran


def test_unknown_fault_is_refused():
    with pytest.raises(ValueError, match="unknown fault 'x'"):
        Faults("x", 1)


def test_the_bundled_demo_chat_is_its_recipe(conversations):
    from patton.serving.chat import demo_conversations

    assert demo_conversations() == conversations
    assert len(conversations) == 8 and all(2 <= c.num_turns <= 3 for c in conversations)
