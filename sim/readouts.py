"""``--readouts FILE``: the values a run read back, written as JSON or NPY.

``patton aim run`` (the functional model's read-outs) and ``patton rtl run`` (the RTL's) write
every :class:`~patton.sim.program.Readout` of the trace, in its canonical order (by
instruction, then column, then channel), to a file whose extension picks the format:

``.json``
    ``{"trace": ..., "source": "functional model" | "rtl", "readouts": [{"index", "opcode",
    "channel", "data", "values"}, ...]}``: ``index`` is the instruction's position in the trace
    (0-based), ``opcode`` its name (``RD_MAC``, ``RD_SBK``, ...), ``channel`` the channel the
    data came from (``null`` for ``R GPR``), ``data`` the 16 bfloat16 bit patterns as integers
    and ``values`` the same 16 as numbers (non-finite ones as the strings ``"nan"``, ``"inf"``,
    ``"-inf"``, which JSON cannot hold as numbers).
``.npy``
    one structured NumPy array (``numpy.load`` without pickles) with fields ``index`` (int64),
    ``opcode`` (unicode), ``channel`` (int64, -1 for none) and ``data`` (16 uint16).

Any other extension is refused before the run (:func:`check`), as is a path that cannot be
written.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from patton.sim.program import Readout
from patton.sim.schedule import check_writable
from patton.sim.textfile import ReadError, atomic_sink, write_atomic

__all__ = ["FORMATS", "ReadoutsError", "check", "write", "to_json", "to_array"]

#: File extensions ``--readouts`` accepts, and the format each one selects.
FORMATS = {".json": "JSON", ".npy": "NPY"}


class ReadoutsError(ReadError):
    """A ``--readouts`` path that cannot be used (``file: reason``; ``line`` is None)."""


def check(path: str | os.PathLike[str]) -> None:
    """Refuse an extension other than :data:`FORMATS` or a path that cannot be written."""
    name = os.fspath(path)
    suffix = Path(name).suffix.lower()
    if suffix not in FORMATS:
        known = " or ".join(FORMATS)
        raise ReadoutsError(name, None, f"--readouts: name a {known} file (the extension picks "
                                        f"the format), not {suffix or 'a file without one'!r}")
    try:
        check_writable(name, "read-outs")
    except ReadError as error:
        raise ReadoutsError(name, None, error.reason) from None


def _value(x: float) -> float | str:
    return x if math.isfinite(x) else ("nan" if math.isnan(x) else ("inf" if x > 0 else "-inf"))


def to_json(readouts: Sequence[Readout]) -> list[dict]:
    """Return the read-outs as JSON-ready objects (see the module docstring)."""
    from patton.sim.datapath import from_bf16

    out = []
    for r in readouts:
        data = np.asarray(r.data, dtype=np.uint16)
        out.append({"index": r.index, "opcode": r.opcode.value, "channel": r.channel,
                    "data": data.tolist(),
                    "values": [_value(float(v)) for v in from_bf16(data)]})
    return out


def to_array(readouts: Sequence[Readout]) -> np.ndarray:
    """Return the read-outs as one structured array (see the module docstring)."""
    width = max((len(r.opcode.value) for r in readouts), default=1)
    dtype = np.dtype([("index", np.int64), ("opcode", f"U{width}"), ("channel", np.int64),
                      ("data", np.uint16, (16,))])
    out = np.zeros(len(readouts), dtype=dtype)
    for i, r in enumerate(readouts):
        out[i] = (r.index, r.opcode.value, -1 if r.channel is None else r.channel,
                  np.asarray(r.data, dtype=np.uint16))
    return out


def write(path: str | os.PathLike[str], readouts: Sequence[Readout], trace: str,
          source: str) -> None:
    """Write ``readouts`` to ``path`` in the format its extension names (:func:`check` first).

    Raises:
        ReadoutsError: a bad extension, or the file cannot be written.
    """
    check(path)
    name = os.fspath(path)
    try:
        if Path(name).suffix.lower() == ".npy":
            with atomic_sink(name) as sink:
                np.save(sink, to_array(readouts), allow_pickle=False)
        else:
            write_atomic(name, json.dumps({"trace": trace, "source": source,
                                           "readouts": to_json(readouts)}) + "\n")
    except OSError as failure:
        raise ReadoutsError(name, None,
                            f"cannot write read-outs: {failure.strerror or failure}") from None
