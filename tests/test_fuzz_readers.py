"""Fuzzing the readers: random bytes and random mutations of valid traces and schedules either
parse or raise the reader's own error with a line number, never another exception."""

from __future__ import annotations

import functools
import gzip
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from patton.sim import schedule, trace
from patton.sim.cycle_model import CycleModel
from patton.sim.random_programs import random_program

TRACES = Path(__file__).resolve().parent / "data" / "aim"
SMALL = ("all_isr", "probe_2ch", "probe_act", "probe_af", "probe_block", "probe_gemv",
         "probe_misc")
FUZZ = settings(max_examples=200, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])

#: Tokens that probe the number syntax, the field rules and the comment rule.
TOKENS = ["-", "0", "00", "010", "+1", "-1", "0x", "0x1_0", "1_0", "0o7", "1e3", "９",
          "99999999999999999999", "0xffffffff", "#", "# c", "=", "data=", "mask=0",
          "mask=0x10000", "src=", "src=01", "cfr=0,1", "cfr=9,9,9", "col=64", "ACT16", "ACT",
          "MAC16", "EOC", "AiM", "W", "R", "MEM", "CFR", "GPR", "\t", ",", "é", "\u00a0",
          "\r", "\x00", "\ufeff", "data=" + ":".join(["3f80"] * 16)]


@functools.cache
def _traces() -> list[bytes]:
    return [(TRACES / f"{name}.trace").read_bytes() for name in SMALL]


@functools.cache
def _schedules() -> list[bytes]:
    out = []
    for name in ("probe_gemv", "probe_act", "all_isr"):
        recorded = CycleModel(record=True).run(trace.read(TRACES / f"{name}.trace")).schedule
        out.append(schedule.dumps(recorded[:150]).encode())
    rng = np.random.default_rng(3)  # payloads, masks, CFRs and sources on some lines
    program = random_program(rng, 12, channels=2, rows=2, data=True, broadcast=True)
    out.append(schedule.dumps(CycleModel(record=True).run(program).schedule[:150]).encode())
    return out


def _mutate(data: st.DataObject, text: bytes) -> bytes:
    lines = text.split(b"\n")
    for _ in range(data.draw(st.integers(1, 4), label="mutations")):
        i = data.draw(st.integers(0, max(len(lines) - 1, 0)), label="line")
        kind = data.draw(st.sampled_from(["token", "insert", "delete", "bytes", "swap",
                                          "duplicate", "drop"]), label="kind")
        line = lines[i] if lines else b""
        words = line.split(b" ")
        if kind == "token" and words:
            j = data.draw(st.integers(0, len(words) - 1))
            words[j] = data.draw(st.sampled_from(TOKENS)).encode()
            lines[i] = b" ".join(words)
        elif kind == "insert":
            j = data.draw(st.integers(0, len(words)))
            words.insert(j, data.draw(st.sampled_from(TOKENS)).encode())
            lines[i] = b" ".join(words)
        elif kind == "delete" and words:
            del words[data.draw(st.integers(0, len(words) - 1))]
            lines[i] = b" ".join(words)
        elif kind == "bytes":
            j = data.draw(st.integers(0, len(line)))
            lines[i] = line[:j] + data.draw(st.binary(min_size=1, max_size=4)) + line[j:]
        elif kind == "swap" and len(lines) > 1:
            j = data.draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        elif kind == "duplicate" and lines:
            lines.insert(data.draw(st.integers(0, len(lines))), line)
        elif kind == "drop" and lines:
            del lines[i]
    return b"\n".join(lines)


@pytest.fixture(scope="module")
def path(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz") / "input"


def _read(module, error: type, path: Path, data: bytes) -> None:
    path.write_bytes(data)
    try:
        module.read(path)
    except error as e:
        lines = data.count(b"\n") + 1
        assert isinstance(e.line, int) and 1 <= e.line <= lines, (e.line, lines, str(e))
        assert str(e) == f"{path}:{e.line}: {e.reason}" and e.reason
        assert e.to_json() == {"error": e.reason, "file": str(path), "line": e.line}


@FUZZ
@given(data=st.binary(max_size=300))
def test_random_bytes_as_a_trace(path, data):
    _read(trace, trace.TraceError, path, data)


@FUZZ
@given(data=st.binary(max_size=300))
def test_random_bytes_as_a_schedule(path, data):
    _read(schedule, schedule.ScheduleError, path, data)


@FUZZ
@given(data=st.data())
def test_mutated_traces(path, data):
    text = data.draw(st.sampled_from(_traces()), label="trace")
    _read(trace, trace.TraceError, path, _mutate(data, text))


@FUZZ
@given(data=st.data())
def test_mutated_schedules(path, data):
    text = data.draw(st.sampled_from(_schedules()), label="schedule")
    _read(schedule, schedule.ScheduleError, path, _mutate(data, text))


def _outcome(module, error: type, path: Path, data: bytes) -> str:
    """What reading ``data`` from ``path`` gives: the dump, or the error's text."""
    path.write_bytes(data)
    try:
        return module.dumps(module.read(path))
    except error as e:
        return str(e)


@FUZZ
@given(data=st.data())
def test_gzip_wrapped_inputs(path, data):
    """A mutated trace or schedule compressed reads exactly as it does plain; its compressed
    bytes cut or altered, it is still only the reader's error with a line number."""
    module, error, texts = data.draw(st.sampled_from([
        (trace, trace.TraceError, _traces()), (schedule, schedule.ScheduleError,
                                               _schedules())]), label="reader")
    text = _mutate(data, data.draw(st.sampled_from(texts), label="text"))
    packed = gzip.compress(text, mtime=0)
    assert _outcome(module, error, path, packed) == _outcome(module, error, path, text)
    at = data.draw(st.integers(0, len(packed) - 1), label="at")
    damage = data.draw(st.sampled_from(["cut", "flip"]), label="damage")
    damaged = (packed[:at] if damage == "cut"
               else packed[:at] + bytes([packed[at] ^ 0x55]) + packed[at + 1:])
    lines = text.count(b"\n") + 2  # the line after the last when the end is damaged
    path.write_bytes(damaged)
    try:
        module.read(path)
    except error as e:
        assert isinstance(e.line, int) and 1 <= e.line <= lines, (e.line, lines, str(e))
        assert str(e) == f"{path}:{e.line}: {e.reason}" and e.reason


def test_unmutated_inputs_parse(path):
    for text in _traces():
        path.write_bytes(text)
        assert trace.read(path)
    for text in _schedules():
        path.write_bytes(text)
        assert schedule.read(path)
