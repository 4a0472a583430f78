"""Files are read a line at a time (``patton.sim.textfile.read_lines``): the lines and the
errors are those of the whole file, whatever the chunk size, and memory is bounded by the
line limit, not by the file."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from patton.eval import gpu_cost
from patton.serving import conversations
from patton.sim import schedule, textfile, trace
from patton.sim.textfile import ReadError

BOM = b"\xef\xbb\xbf"
DATA = Path(__file__).resolve().parent / "data"


def outcome(path: Path) -> list[str] | tuple[int | None, str]:
    """The lines of ``path`` (``read_lines``), or the line and reason it is refused with."""
    try:
        return list(textfile.read_lines(path, ReadError, "text"))
    except ReadError as error:
        return error.line, error.reason


def expected(data: bytes, limit: int) -> list[str] | tuple[int, str]:
    """What a reader of the whole file makes of ``data``: split at ``\\n`` (a BOM at the start
    skipped, a last line without a line end kept), each line at most ``limit`` bytes and
    UTF-8 text."""
    parts = data.removeprefix(BOM).split(b"\n")
    if parts[-1] == b"":
        parts.pop()
    lines = []
    for no, part in enumerate(parts, start=1):
        if len(part) > limit:
            return no, f"a line longer than {limit:,} bytes (the readers' limit)"
        try:
            lines += textfile.decode(part, "f", ReadError)
        except ReadError as error:
            return no, error.reason
        if not part:
            lines.append("")
    return lines


# Bytes that make lines, long lines, bad UTF-8, NUL and BOMs likely.
PIECES = st.sampled_from([b"\n", b"\r\n", b"a", b"AiM EOC", b"\xc3\xa9", b"\xe2\x82", b"\xff",
                          b"\0", BOM, b"x" * 9, b"#"])


@settings(max_examples=400, deadline=None)
@given(st.lists(PIECES, max_size=40), st.integers(1, 24), st.data())
def test_lines_are_those_of_the_whole_file_whatever_the_chunk(
        tmp_path_factory: pytest.TempPathFactory, pieces: list[bytes], limit: int,
        draw: st.DataObject) -> None:
    chunk = draw.draw(st.integers(1, limit), label="chunk")  # CHUNK <= MAX_LINE, as set
    path = tmp_path_factory.mktemp("lines") / "f.txt"
    data = b"".join(pieces)
    path.write_bytes(data)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(textfile, "CHUNK", chunk)
        patch.setattr(textfile, "MAX_LINE", limit)
        assert outcome(path) == expected(data, limit)


def test_a_real_trace_reads_the_same_in_small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    path = max((DATA / "aim" / "cent").glob("*.trace"), key=lambda p: p.stat().st_size)
    assert path.stat().st_size > 4 * 4093
    whole = trace.read(path)
    monkeypatch.setattr(textfile, "CHUNK", 4093)  # lines cut anywhere
    assert trace.dumps(trace.read(path)) == trace.dumps(whole)


def _trace(path: Path) -> None:
    trace.read(path)


def _schedule(path: Path) -> None:
    schedule.read(path)


def _conversations(path: Path) -> None:
    conversations.read(path)


def _cost_table(path: Path) -> None:
    gpu_cost.MeasuredCost.read(path)


READERS: dict[str, tuple[Callable[[Path], None], bytes]] = {
    "trace": (_trace, b"AiM EOC\n"),
    "schedule": (_schedule, b"0 0 ACT 0 1 -\n"),
    "conversations": (_conversations, b'{"id": "a", "messages": [[1], [2]]}\n'),
    "cost table": (_cost_table, b"tokens,ms,joules\n"),
}


@pytest.mark.parametrize("name", sorted(READERS))
def test_a_huge_file_is_read_a_line_at_a_time(tmp_path: Path, name: str) -> None:
    """A 2 GB sparse file whose second line is NUL bytes to the end: line 2 is reported at
    once, and the reader holds at most about the line limit, not the file."""
    read, first = READERS[name]
    path = tmp_path / "huge"
    with open(path, "wb") as f:
        f.write(first)
        f.truncate(2 << 30)
    tracemalloc.start()
    try:
        with pytest.raises(ReadError) as err:
            read(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (err.value.line, err.value.reason) == (
        2, f"a line longer than {textfile.MAX_LINE:,} bytes (the readers' limit)")
    assert peak < 3 * textfile.MAX_LINE


def test_a_document_past_its_limit_is_refused(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "ref.json"
    path.write_text('{"t": {"cycles": 1}}')
    monkeypatch.setattr(textfile, "MAX_DOCUMENT", 8)
    with pytest.raises(ReadError) as err:
        textfile.document(path, ReadError, "reference")
    assert str(err.value) == f"{path}: larger than 8 bytes (the limit of a reference)"
