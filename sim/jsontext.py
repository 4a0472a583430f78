"""Strict JSON: the one parser for JSON the project reads from users' and its own files.

:func:`json_value` parses one JSON text as Python's ``json`` does (``NaN`` and ``Infinity``
included: stored K/V values keep them), with limits that give the reader's own message, as a
:class:`~patton.sim.textfile.ReadError` naming the file and line, instead of a traceback or a
silently chosen value:

* a key repeated in one object is refused, named (Python's ``json`` keeps the last);
* nesting deeper than :data:`MAX_DEPTH` arrays and objects is refused before parsing (a
  100,000-deep array would otherwise exhaust Python's recursion limit);
* an integer literal longer than :data:`MAX_DIGITS` digits is refused (Python refuses more
  than 4,300 with advice about ``sys.set_int_max_str_digits``; no count the project reads
  comes near 30 digits);
* a text that is not one JSON value says where (line and column within the text).
"""

from __future__ import annotations

import json
import re
from typing import Any

from patton.sim.textfile import ReadError

__all__ = ["MAX_DEPTH", "MAX_DIGITS", "json_value"]

#: Arrays and objects nested deeper than this are refused.
MAX_DEPTH = 64
#: Integer literals with more digits than this are refused.
MAX_DIGITS = 30

#: A string literal, or one bracket: what the depth scan looks at.
_SCAN = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)


def _depth(text: str) -> int:
    """The deepest nesting of arrays and objects in ``text`` (brackets inside strings do not
    count; unbalanced text is left for the parser to report)."""
    depth = deepest = 0
    for m in _SCAN.finditer(text):
        c = m.group()
        if c in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif c in "]}":
            depth -= 1
    return deepest


class _Refused(ValueError):
    """A limit of this reader (the message is the reason)."""


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Refused(f"key {key!r} given twice in one object")
        out[key] = value
    return out


def _integer(token: str) -> int:
    digits = len(token.lstrip("-"))
    if digits > MAX_DIGITS:
        raise _Refused(f"an integer of {digits:,} digits (at most {MAX_DIGITS})")
    return int(token)


def json_value(text: str, file: str, line: int | None) -> Any:
    """Return the value of the JSON text ``text`` (see the module docstring for its rules).

    ``file`` and ``line`` name where ``text`` came from (``line``: the 1-based line of a JSONL
    file, or None for a whole-file JSON document, where the error gives the line inside it).

    Raises:
        ReadError: ``file:line: reason`` (what is wrong, and the limit where one applies).
    """
    deepest = _depth(text)
    if deepest > MAX_DEPTH:
        raise ReadError(file, line, f"JSON nested {deepest:,} deep (at most {MAX_DEPTH})")
    try:
        return json.loads(text, object_pairs_hook=_object, parse_int=_integer)
    except _Refused as e:
        raise ReadError(file, line, str(e)) from None
    except json.JSONDecodeError as e:
        where = line if line is not None else e.lineno
        raise ReadError(file, where, f"not JSON: {e.msg} at column {e.colno}") from None
    except (ValueError, RecursionError) as e:  # e.g. a number Python cannot hold
        raise ReadError(file, line, f"not JSON: {e}") from None
