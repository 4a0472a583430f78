"""Files are read a line at a time (``patton.sim.textfile.read_lines``): the lines and the
errors are those of the whole file, whatever the chunk size, and memory is bounded by the
line limit, not by the file. A gzip file reads as the text it holds, and ``-`` is standard
input."""

from __future__ import annotations

import gzip
import io
import os
import sys
import threading
import time
import tracemalloc
import zlib
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


@settings(max_examples=200, deadline=None)
@given(st.lists(PIECES, max_size=40), st.integers(1, 24), st.data())
def test_a_gzip_file_reads_as_the_text_it_holds(
        tmp_path_factory: pytest.TempPathFactory, pieces: list[bytes], limit: int,
        draw: st.DataObject) -> None:
    """Lines and errors (a long line, bad UTF-8, a BOM inside the compressed data) are those
    of the plain file, from a file or from standard input, whatever the chunk size."""
    chunk = draw.draw(st.integers(1, limit), label="chunk")
    path = tmp_path_factory.mktemp("lines") / "f.txt"  # not named .gz: the bytes tell
    data = b"".join(pieces)
    packed = gzip.compress(data, mtime=0)
    path.write_bytes(packed)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(textfile, "CHUNK", chunk)
        patch.setattr(textfile, "MAX_LINE", limit)
        assert outcome(path) == expected(data, limit)
        patch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(packed)))
        assert outcome("-") == expected(data, limit)


def _stdin(monkeypatch: pytest.MonkeyPatch, data: bytes) -> io.TextIOWrapper:
    """Make standard input a file holding ``data``; return it."""
    stdin = io.TextIOWrapper(io.BytesIO(data))
    monkeypatch.setattr(sys, "stdin", stdin)
    return stdin


def test_standard_input_is_read_and_left_open(monkeypatch: pytest.MonkeyPatch) -> None:
    stdin = _stdin(monkeypatch, BOM + b"AiM EOC\n# end\n")
    assert list(textfile.read_lines("-", ReadError, "trace")) == ["AiM EOC", "# end"]
    assert not stdin.buffer.closed
    _stdin(monkeypatch, b"AiM EOC\n\xff\n")
    with pytest.raises(ReadError) as err:
        list(textfile.read_lines("-", ReadError, "trace"))
    assert str(err.value) == "<stdin>:2: not UTF-8 text"
    _stdin(monkeypatch, gzip.compress(b'{"t": {}}'))
    assert textfile.document("-", ReadError, "reference") == '{"t": {}}'


def test_each_reader_takes_standard_input_and_names_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The trace, schedule and conversation readers read ``-``; their errors say
    ``<stdin>:LINE``."""
    plain = (DATA / "aim" / "probe_gemv.trace").read_bytes()
    _stdin(monkeypatch, gzip.compress(plain))
    assert trace.dumps(trace.read("-")) == trace.dumps(trace.read(DATA / "aim" /
                                                                  "probe_gemv.trace"))
    _stdin(monkeypatch, b"0 0 ACT 0 1 -\n5 0 BOGUS\n")
    with pytest.raises(schedule.ScheduleError) as bad_schedule:
        schedule.read("-")
    assert str(bad_schedule.value).startswith("<stdin>:2: ")
    _stdin(monkeypatch, b'{"id": "a", "messages": [[1], [2]]}\n{"id": "a"}\n')
    with pytest.raises(conversations.WorkloadError) as bad_conversations:
        conversations.read("-")
    assert str(bad_conversations.value).startswith("<stdin>:2: ")
    _stdin(monkeypatch, b"AiM NOPE\n")
    with pytest.raises(trace.TraceError) as bad_trace:
        trace.read("-")
    assert (bad_trace.value.file, bad_trace.value.line) == ("<stdin>", 1)


class _Terminal(io.TextIOWrapper):
    def isatty(self) -> bool:
        return True


def test_a_terminal_as_standard_input_is_refused_not_waited_on(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", _Terminal(io.BytesIO(b"AiM EOC\n")))
    with pytest.raises(trace.TraceError) as err:
        trace.read("-")
    assert err.value.line is None and err.value.file == "<stdin>"
    assert err.value.reason.startswith("cannot read trace: standard input is a terminal: "
                                       "pipe the trace in")
    monkeypatch.setattr(sys, "stdin", None)  # no standard input at all (a detached process)
    with pytest.raises(ReadError, match="^<stdin>: cannot read trace: there is no standard "
                                        "input$"):
        list(textfile.read_lines("-", ReadError, "trace"))


def test_a_pipe_is_sniffed_whatever_its_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pipe (which cannot be rewound) delivering the gzip magic one byte at a time is still
    read as gzip, and plain text through a pipe as text."""
    text = b"".join(b"line %d\n" % i for i in range(50_000))
    for data in (gzip.compress(text), text):
        read_end, write_end = os.pipe()

        def write(data: bytes = data, fd: int = write_end) -> None:
            with open(fd, "wb", buffering=0) as pipe:
                pipe.write(data[:1])
                time.sleep(0.05)
                pipe.write(data[1:])

        writer = threading.Thread(target=write)
        writer.start()
        with open(read_end, "rb") as raw:
            monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(raw))
            lines = list(textfile.read_lines("-", ReadError, "text"))
        writer.join()
        assert lines == text.decode().splitlines()


def test_a_gz_named_plain_file_is_read_as_text(tmp_path: Path) -> None:
    path = tmp_path / "x.trace.gz"
    path.write_bytes((DATA / "aim" / "probe_gemv.trace").read_bytes())
    assert trace.dumps(trace.read(path)) == trace.dumps(trace.read(DATA / "aim" /
                                                                   "probe_gemv.trace"))


def test_several_gzip_members_read_as_one_text(tmp_path: Path) -> None:
    path = tmp_path / "x.gz"
    path.write_bytes(gzip.compress(b"a\nb") + gzip.compress(b"c\n"))
    assert list(textfile.read_lines(path, ReadError, "text")) == ["a", "bc"]


def _numbered(lines: int) -> bytes:
    """Lines that compress badly (so a cut falls in the middle of the text)."""
    return b"".join(b"%d %x\n" % (i, (i * 2654435761) % 2**32) for i in range(1, lines + 1))


def test_damaged_gzip_is_reported_at_the_line_it_breaks(tmp_path: Path) -> None:
    text = _numbered(20_000)
    packed = gzip.compress(text)
    path = tmp_path / "x.gz"
    cut = packed[:len(packed) // 2]
    path.write_bytes(cut)
    complete = len(zlib.decompressobj(16 + 15).decompress(cut).split(b"\n")) - 1
    assert 1000 < complete < 19_000
    read = []
    with pytest.raises(ReadError) as err:
        for line in textfile.read_lines(path, ReadError, "text"):
            read.append(line)
    assert str(err.value) == (f"{path}:{complete + 1}: not a valid gzip file: its compressed "
                              "data ends early (a truncated file?)")
    assert read == text.decode().splitlines()[:complete]  # what was read was right
    path.write_bytes(packed[:-8] + b"\0\0\0\0" + packed[-4:])  # a wrong CRC
    with pytest.raises(ReadError, match=r":20001: not a valid gzip file: CRC check failed"):
        list(textfile.read_lines(path, ReadError, "text"))
    path.write_bytes(b"\x1f\x8b" + b"junk" * 10)
    with pytest.raises(ReadError, match=r":1: not a valid gzip file: "):
        list(textfile.read_lines(path, ReadError, "text"))
    with pytest.raises(ReadError, match=r"^[^:]*x.gz: not a valid gzip file: "):
        textfile.document(path, ReadError, "reference")


def test_progress_counts_compressed_bytes_and_unknown_for_stdin(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = _numbered(300_000)
    path = tmp_path / "x.schedule.gz"
    path.write_bytes(gzip.compress(text))
    calls: list[tuple[int, int]] = []
    assert len(list(textfile.read_lines(path, ReadError, "text",
                                        progress=lambda *c: calls.append(c)))) == 300_000
    size = path.stat().st_size
    assert len(calls) > 1 and {total for _, total in calls} == {size}
    assert [done for done, _ in calls] == sorted(done for done, _ in calls)
    assert calls[-1][0] == size
    calls.clear()
    _stdin(monkeypatch, text)
    list(textfile.read_lines("-", ReadError, "text", progress=lambda *c: calls.append(c)))
    assert calls[-1] == (len(text), 0)


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


def _refuses_line_2_in_bounded_memory(read: Callable[[Path], object], path: Path) -> None:
    """``read(path)`` refuses line 2 as too long, holding at most about the line limit."""
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


def test_a_huge_gzip_file_is_read_a_line_at_a_time(tmp_path: Path) -> None:
    """64 MB of NUL bytes compressed to 64 kB: line 2 is reported at once, and the reader
    holds about the line limit, not the decompressed data."""
    path = tmp_path / "huge.gz"
    with gzip.open(path, "wb", compresslevel=9) as f:
        f.write(b"AiM EOC\n")
        for _ in range(64):
            f.write(bytes(1 << 20))
    _refuses_line_2_in_bounded_memory(trace.read, path)


@pytest.mark.parametrize("name", sorted(READERS))
def test_a_huge_file_is_read_a_line_at_a_time(tmp_path: Path, name: str) -> None:
    """A 2 GB sparse file whose second line is NUL bytes to the end: line 2 is reported at
    once, and the reader holds at most about the line limit, not the file."""
    read, first = READERS[name]
    path = tmp_path / "huge"
    with open(path, "wb") as f:
        f.write(first)
        f.truncate(2 << 30)
    _refuses_line_2_in_bounded_memory(read, path)


def test_a_document_past_its_limit_is_refused(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "ref.json"
    path.write_text('{"t": {"cycles": 1}}')
    monkeypatch.setattr(textfile, "MAX_DOCUMENT", 8)
    with pytest.raises(ReadError) as err:
        textfile.document(path, ReadError, "reference")
    assert str(err.value) == f"{path}: larger than 8 bytes (the limit of a reference)"
