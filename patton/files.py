"""Output files written whole or not at all.

:func:`write_atomic` is the one way the project writes a result file: the bytes go to a
temporary file in the same folder, which is fsynced and renamed over the target, and the
folder is fsynced so the rename itself survives a crash. A run that is interrupted, killed or
that loses its machine mid-write leaves either the old file or the new one, never a part.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["write_atomic"]


def write_atomic(path: str | os.PathLike[str], data: str | bytes) -> Path:
    """Write ``data`` (``str``: as UTF-8) to ``path`` whole or not at all; return the path.

    Raises:
        OSError: the folder cannot be written (no temporary file is left behind).
    """
    target = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
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
    return target
