"""What the text readers share: one error type, one number syntax, one way to read a file.

The trace reader (:mod:`patton.sim.trace`) and the schedule reader
(:mod:`patton.sim.schedule`) read user files with the same rules:

* A file is UTF-8 text (a UTF-8 byte-order mark at its start is skipped). Bytes that do not
  decode, and NUL bytes (UTF-16 or binary data), are ``file:line: not UTF-8 text``. Outside
  comments a line is ASCII.
* A file is read a line at a time (:func:`read_lines`, also the conversation and cost-table
  readers'): a line is at most :data:`MAX_LINE` bytes, and that, not the file's size, bounds
  the memory a reader takes. A file read as one document (a JSON reference, a stored task:
  :func:`document`) is at most :data:`MAX_DOCUMENT` bytes.
* Lines end at ``\\n`` (a ``\\r`` before it is whitespace). A ``#`` starts a comment that runs
  to the end of the line, at the start of a line or after fields; a line whose field count is
  wrong and that has a comment says so (:data:`COMMENT_NOTE`).
* Numbers are decimal (``0`` or a digit 1-9 followed by digits) or ``0x`` hexadecimal
  (``0x`` or ``0X`` and hex digits), ASCII digits only. No sign, no ``_`` separators, no
  leading zeros on decimals (``010``: C reads that as octal 8, the public simulator as 10, so
  the reader refuses to guess). :func:`number` is the one parser.
* A file may be gzip-compressed (recognised by its first bytes, ``1f 8b``, not by its name: a
  ``.gz`` file that holds plain text is read as text), and the name ``-`` (:data:`STDIN`) is
  standard input, shown as ``<stdin>`` (:data:`STDIN_NAME`) in messages (a file named ``-``
  is ``./-``). Standard input that is a terminal is refused rather than waited on.
* Every problem is a :class:`ReadError` (the readers' :class:`~patton.sim.trace.TraceError`
  and :class:`~patton.sim.schedule.ScheduleError`) with the file, the 1-based line and the
  reason; ``str()`` is ``file:line: reason``, or ``file: reason`` for a file that cannot be
  read or written at all (``line`` is ``None``).
"""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import re
import sys
import tempfile
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

__all__ = ["ReadError", "FieldCountError", "COMMENT_NOTE", "MAX_LINE", "MAX_DOCUMENT", "number",
           "decimal", "decode", "read_lines", "document", "write_text", "write_atomic",
           "atomic_sink", "content", "strip_comment", "STDIN", "STDIN_NAME", "shown"]

_DECIMAL = re.compile(r"0|[1-9][0-9]*")
_NUMBER = re.compile(r"0|[1-9][0-9]*|0[xX][0-9a-fA-F]+")
_BOM = b"\xef\xbb\xbf"
_GZIP = b"\x1f\x8b"
#: The file name that means standard input.
STDIN = "-"
#: How standard input is named in messages (``<stdin>:3: reason``).
STDIN_NAME = "<stdin>"


class ReadError(ValueError):
    """A problem in a text file given to a reader (or a file that cannot be read or written).

    Attributes:
        file: the file (or the ``source`` name given to a parser).
        line: the 1-based line, ``None`` when the problem is the file as a whole (it cannot be
            opened, read or written).
        reason: what is wrong, without the ``file:line:`` prefix.
    """

    def __init__(self, file: str, line: int | None, reason: str) -> None:
        where = f"{file}:{line}" if line is not None else str(file)
        super().__init__(f"{where}: {reason}")
        self.file = str(file)
        self.line = line
        self.reason = reason

    @property
    def source(self) -> str:
        """The file (the name this attribute had before ``file``)."""
        return self.file

    def to_json(self) -> dict[str, str | int | None]:
        """Return ``{"error": reason, "file": file, "line": line}`` (``line`` may be None)."""
        return {"error": self.reason, "file": self.file, "line": self.line}


class FieldCountError(ValueError):
    """A line with the wrong number of fields (the readers add :data:`COMMENT_NOTE` when the
    line has a ``#`` comment, which may have hidden fields)."""


#: Appended to a field-count error on a line with a comment.
COMMENT_NOTE = " (a '#' starts a comment: nothing after it is a field)"


def _why(token: str, what: str, kind: str, generic: str | None = None) -> str:
    """Return why ``token`` is not a number of ``kind`` (``decimal`` or ``decimal or 0x-hex``);
    ``generic`` is the reason when no specific one applies."""
    head = f"{what}{token!r}" if what.endswith("=") else f"{what} {token!r}"
    if token[:1] == "-" and token[1:] and _NUMBER.fullmatch(token[1:]):
        return f"{head} is negative"
    if token[:1] == "+":
        return f"{head} is not a {kind} number (no sign)"
    if "_" in token:
        return f"{head} is not a {kind} number (no '_' separators)"
    if not token.isascii():
        return f"{head} is not a {kind} number (ASCII digits only)"
    if re.fullmatch(r"0[0-9]+", token):
        return (f"{head} has a leading zero: write {token.lstrip('0') or '0'} (a leading 0 "
                f"reads as octal in C, so it is refused rather than guessed)")
    return f"{head} {generic or f'is not a {kind} number'}"


def number(token: str, what: str, *, dash: bool = False) -> int:
    """Return the value of a decimal or ``0x`` hexadecimal number (see the module docstring).

    With ``dash``, ``-`` is also accepted and returns -1 (a schedule's "not given").

    Raises:
        ValueError: naming ``what``, the token and why it is not such a number.
    """
    if _NUMBER.fullmatch(token):
        return int(token, 0)
    if dash:
        if token == "-":
            return -1
        raise ValueError(_why(token, what, "decimal or 0x-hex",
                              "is not a number (decimal, 0x-hex or '-')"))
    raise ValueError(_why(token, what, "decimal or 0x-hex"))


def decimal(token: str, what: str) -> int:
    """Return the value of a decimal number (the syntax of :func:`number` without hex).

    Raises:
        ValueError: naming ``what``, the token and why it is not a decimal number.
    """
    if _DECIMAL.fullmatch(token):
        return int(token)
    raise ValueError(_why(token, what, "decimal"))


def strip_comment(text: str) -> str:
    """Return ``text`` without its ``#`` comment."""
    cut = text.find("#")
    return text if cut < 0 else text[:cut]


def content(text: str) -> str:
    """Return a line without its comment; raise ``ValueError`` on a non-ASCII character.

    The readers call it on each line (their fast paths only on lines that hold ``#`` or a
    non-ASCII character).
    """
    text = strip_comment(text)
    if not text.isascii():
        ch = next(c for c in text if not c.isascii())
        raise ValueError(f"non-ASCII character {ch!r} (U+{ord(ch):04X}) outside a comment")
    return text


#: The longest line a reader takes, in bytes: a reader holds one line and one :data:`CHUNK`
#: at a time, so this bounds its memory whatever the file's size, and a damaged file (one that
#: lost its newlines) is reported at the line, not after filling the memory. ShareGPT's
#: longest conversation is about 0.5 MB as token ids; a trace or schedule line is at most a
#: few hundred bytes.
MAX_LINE = 16 << 20
#: The largest file read as one document (a JSON reference or stored task), in bytes.
MAX_DOCUMENT = 64 << 20
#: Bytes read at a time; at most :data:`MAX_LINE` (a line begun and ended within one chunk is
#: then within the limit, so :func:`read_lines` checks only the line a chunk ends).
CHUNK = 1 << 20


def decode(data: bytes, file: str, error: type[ReadError], first: int = 1) -> list[str]:
    """Return the lines of ``data``, bytes of a file whose first line is line ``first``
    (without line ends).

    Lines end at ``\\n`` only (a ``\\r`` before it stays, as whitespace), so line numbers are
    those of the file; a last line without a line end is a line.

    Raises:
        error: ``file:line: not UTF-8 text`` at the first line that does not decode or holds
            a NUL byte.
    """
    nul = data.find(b"\0")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as failure:
        if not 0 <= nul < failure.start:
            raise error(file, first + data.count(b"\n", 0, failure.start),
                        "not UTF-8 text") from None
        text = ""  # a NUL byte comes first: reported below
    if nul >= 0:
        raise error(file, first + data.count(b"\n", 0, nul),
                    "not UTF-8 text (a NUL byte: UTF-16 or binary data?)")
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


def shown(path: str | os.PathLike[str]) -> str:
    """Return the name ``path`` goes by in messages: :data:`STDIN_NAME` for ``-``."""
    name = os.fspath(path)
    return STDIN_NAME if name == STDIN else name


#: What a damaged gzip stream raises (``BadGzipFile`` is an ``OSError``: caught before it).
_GZIP_ERRORS = (gzip.BadGzipFile, EOFError, zlib.error)


def _gzip_reason(failure: Exception) -> str:
    """Return the reason a gzip stream that raised ``failure`` is refused with."""
    why = ("its compressed data ends early (a truncated file?)"
           if isinstance(failure, EOFError) else str(failure))
    if why[1:2].islower():  # "Not a gzipped file", not "CRC check failed"
        why = why[:1].lower() + why[1:]
    return f"not a valid gzip file: {why}"


class _Prefixed(io.RawIOBase):
    """The bytes ``head``, then the rest of ``rest`` (a pipe whose first bytes were read to
    tell gzip from text: a pipe cannot be rewound). Closing it leaves ``rest`` open."""

    def __init__(self, head: bytes, rest: BinaryIO) -> None:
        super().__init__()
        self._head = head
        self._rest = rest

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        if self._head:
            n = min(len(buffer), len(self._head))
            buffer[:n] = self._head[:n]
            self._head = self._head[n:]
            return n
        read1 = getattr(self._rest, "read1", self._rest.read)
        data = read1(len(buffer))
        buffer[:len(data)] = data
        return len(data)


def _stdin(error: type[ReadError], what: str) -> BinaryIO:
    """Return standard input's bytes, refusing a terminal (a reader would wait on it)."""
    stdin = sys.stdin
    buffer = getattr(stdin, "buffer", None)
    if buffer is None:
        raise error(STDIN_NAME, None, f"cannot read {what}: there is no standard input")
    try:
        terminal = stdin.isatty()
    except (OSError, ValueError):
        terminal = False
    if terminal:
        raise error(STDIN_NAME, None, f"cannot read {what}: standard input is a terminal: pipe "
                                      f"the {what} in (cat FILE | patton ... -) or give its "
                                      f"file name instead of '-'")
    return buffer


@contextlib.contextmanager
def _input(path: str | os.PathLike[str], error: type[ReadError], what: str
           ) -> Iterator[tuple[BinaryIO, int, Callable[[], int] | None]]:
    """Yield the bytes of ``path`` (decompressed if gzip), its size in bytes (0 when unknown:
    standard input) and, for a gzip file, a function returning how many of its compressed
    bytes were read (None: the bytes read are the file's). Standard input is not closed.

    Raises:
        error: ``file: cannot read <what>: <reason>``.
    """
    name = shown(path)
    with contextlib.ExitStack() as stack:
        try:
            if os.fspath(path) == STDIN:
                raw, total = _stdin(error, what), 0
            else:
                raw = stack.enter_context(open(path, "rb"))
                total = os.fstat(raw.fileno()).st_size
            if raw.seekable():
                start = raw.tell()
                head = raw.read(len(_GZIP))
                raw.seek(start)
            else:  # a pipe: read its first bytes (a peek may return fewer) and put them back
                head = raw.read(len(_GZIP))
                raw = stack.enter_context(io.BufferedReader(_Prefixed(head, raw)))
        except OSError as failure:
            raise error(name, None, f"cannot read {what}: "
                                    f"{failure.strerror or failure}") from None
        if head != _GZIP:
            yield raw, total, None
            return
        stream = stack.enter_context(gzip.GzipFile(fileobj=raw, mode="rb"))
        yield stream, total, (raw.tell if total else None)


def read_lines(path: str | os.PathLike[str], error: type[ReadError], what: str, *,
          progress: Callable[[int, int], None] | None = None) -> Iterator[str]:
    """Yield the lines of the text file ``path`` one at a time (see :func:`decode`), reading
    it a :data:`CHUNK` at a time: memory stays bounded by :data:`MAX_LINE` whatever the
    file's size. A UTF-8 byte-order mark at its start is skipped. A gzip file is
    decompressed as it is read; ``-`` is standard input (named ``<stdin>`` in errors).

    ``progress(bytes_read, file_bytes)`` is called after each chunk: of a gzip file, the
    compressed bytes; ``file_bytes`` is 0 when unknown (standard input).

    Raises:
        error: the path cannot be read (``file: cannot read <what>: <reason>``), a line is
            longer than :data:`MAX_LINE` bytes or is not UTF-8 text, or the gzip data is
            damaged or cut short (``file:line: not a valid gzip file: ...``, at the line
            being read).
    """
    name = shown(path)
    with _input(path, error, what) as (f, total, position):
        line = 1  # the line ``begun`` starts
        begun: list[bytes] = []  # the bytes of a line not ended yet
        size = 0  # their length
        done = 0  # bytes read (of the decompressed data)
        first = True
        # Of gzip data, what is decompressed so far (a damaged stream is then reported at the
        # line it breaks, not at the start of a chunk it spoils).
        read = f.read1 if isinstance(f, gzip.GzipFile) else f.read
        while True:
            try:
                chunk = read(CHUNK)
                while first and chunk != _BOM and _BOM.startswith(chunk) and chunk:
                    more = f.read(1)  # a chunk shorter than a BOM (a CHUNK set that small)
                    if not more:
                        break
                    chunk += more
            except _GZIP_ERRORS as failure:
                raise error(name, line, _gzip_reason(failure)) from None
            except OSError as failure:
                raise error(name, line, f"cannot read {what}: "
                                        f"{failure.strerror or failure}") from None
            if not chunk:
                break
            done += len(chunk)
            if first:
                chunk, first = chunk.removeprefix(_BOM), False
            end = chunk.rfind(b"\n")
            if size + (len(chunk) if end < 0 else chunk.find(b"\n")) > MAX_LINE:
                raise error(name, line, f"a line longer than {MAX_LINE:,} bytes (the "
                                        f"readers' limit)")
            if end < 0:
                begun.append(chunk)
                size += len(chunk)
                continue
            begun.append(chunk[:end + 1])
            block = decode(b"".join(begun), name, error, line)
            begun, size = [chunk[end + 1:]], len(chunk) - end - 1
            line += len(block)
            yield from block
            if progress is not None:
                progress(position() if position is not None else done, total)
        if size:
            yield from decode(b"".join(begun), name, error, line)
            if progress is not None:
                progress(position() if position is not None else done, total)


def document(path: str | os.PathLike[str], error: type[ReadError], what: str) -> str:
    """Return the text of ``path``, a file read as one document (UTF-8, at most
    :data:`MAX_DOCUMENT` bytes; gzip and ``-`` as :func:`read_lines`).

    Raises:
        error: the path cannot be read (``file: cannot read <what>: <reason>``), it is larger
            than :data:`MAX_DOCUMENT` or not UTF-8 text (``file: ...``, or ``file:line:
            not UTF-8 text``), or its gzip data is damaged (``file: not a valid gzip file:
            ...``).
    """
    name = shown(path)
    with _input(path, error, what) as (f, _, _):
        try:
            data = f.read(MAX_DOCUMENT + 1)
        except _GZIP_ERRORS as failure:
            raise error(name, None, _gzip_reason(failure)) from None
        except OSError as failure:
            raise error(name, None, f"cannot read {what}: "
                                    f"{failure.strerror or failure}") from None
    if len(data) > MAX_DOCUMENT:
        raise error(name, None, f"larger than {MAX_DOCUMENT:,} bytes (the limit of a {what})")
    return "\n".join(decode(data.removeprefix(_BOM), name, error))


def write_text(path: str | os.PathLike[str], text: str, error: type[ReadError],
               what: str) -> None:
    """Write ``text`` to ``path`` (UTF-8; whole or not at all, :func:`write_atomic`).

    Raises:
        error: the path cannot be written (``file: cannot write <what>: <reason>``).
    """
    try:
        write_atomic(path, text)
    except OSError as failure:
        raise error(os.fspath(path), None,
                    f"cannot write {what}: {failure.strerror or failure}") from None


@contextlib.contextmanager
def atomic_sink(path: str | os.PathLike[str]) -> Iterator[BinaryIO]:
    """Yield a binary file whose bytes replace ``path`` whole when the block ends normally,
    and vanish if it raises (or the process is interrupted): the one way the project writes
    a result file, streamed or not.

    The bytes go to a temporary file in ``path``'s folder, which is fsynced and renamed over
    ``path``; the folder is then fsynced so the rename itself survives a crash. A run
    interrupted, killed or losing its machine mid-write leaves the old file or the new one,
    never a part.

    Raises:
        OSError: the folder cannot be written (no temporary file is left behind).
    """
    target = Path(path)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    folder = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


def write_atomic(path: str | os.PathLike[str], data: str | bytes) -> Path:
    """Write ``data`` (``str``: as UTF-8) to ``path`` whole or not at all (:func:`atomic_sink`);
    return the path.

    Raises:
        OSError: the folder cannot be written (no temporary file is left behind).
    """
    with atomic_sink(path) as sink:
        sink.write(data.encode("utf-8") if isinstance(data, str) else data)
    return Path(path)
