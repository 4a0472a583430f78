"""Finished tasks kept on disk, so a long ``patton repro`` can be resumed (``--resume``).

A :class:`Store` is a folder (``OUT/tasks/``) with one JSON file per finished task: the task's
description (``tasks.describe``), the fingerprint of the code that ran it and what
``tasks.run`` returned. The runner puts every task in the store as soon as it finishes, so an
interrupted run (a failure, ^C, a lost machine) keeps what it had done; with ``--resume`` the
next run takes those results instead of running the tasks again.

A result is reused only when both its description and its fingerprint are the current ones: the
fingerprint is a SHA-256 over the source of every ``patton`` package (Python files, the cycle
kernel's C and the packaged data), so any change to the code invalidates every stored result
(stale figures are never mixed with new ones). A file that cannot be read as a stored task is an
error naming the file, not a miss.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from patton.eval.tasks import Task, TaskError, describe

__all__ = ["Store", "StoreError", "fingerprint"]

#: The packages whose source makes up the fingerprint.
PACKAGES = ("patton", "patton.sim", "patton.serving", "patton.hw", "patton.runtime",
            "patton.tb", "patton.eval")
#: Kinds of files whose content makes up the fingerprint.
SOURCES = (".py", ".c", ".json", ".jsonl")


class StoreError(TaskError):
    """A stored task file that cannot be read (its message names the file)."""


def _roots() -> list[Path]:
    """The folders of the ``patton`` packages (found without importing them)."""
    roots = []
    for name in PACKAGES:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations:
            roots.extend(Path(p).resolve() for p in spec.submodule_search_locations)
    return roots


def fingerprint() -> str:
    """Return the SHA-256 (hex) of the code the tasks run (see the module docstring)."""
    h = hashlib.sha256()
    seen: set[Path] = set()
    for root in _roots():
        for path in sorted(root.rglob("*")):
            if path.suffix not in SOURCES or not path.is_file() or "__pycache__" in path.parts:
                continue
            path = path.resolve()
            if path in seen:  # a package inside another's folder
                continue
            seen.add(path)
            h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


class Store:
    """One JSON file per finished task under ``folder`` (see the module docstring).

    Invariant: a file is written whole or not at all (written to a temporary file, then
    renamed), so a run stopped mid-write leaves no half file.
    """

    def __init__(self, folder: Path, code: str | None = None) -> None:
        self.folder = Path(folder)
        self.code = fingerprint() if code is None else code

    def path(self, task: Task) -> Path:
        """The file of ``task``: its key made a file name, and a digest of its fields (two
        tasks with one key, say checked and not, get two files)."""
        safe = "".join(c if c.isalnum() or c in "-." else "_" for c in task.key)
        digest = hashlib.sha256(json.dumps(describe(task), sort_keys=True).encode())
        return self.folder / f"{safe}-{digest.hexdigest()[:12]}.json"

    def get(self, task: Task) -> dict[str, Any] | None:
        """Return ``task``'s stored result if the same code computed it, else None.

        Raises:
            StoreError: the file is there but is not a stored task.
        """
        path = self.path(task)
        if not path.is_file():
            return None
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            stored, code, result = data["task"], data["code"], data["run"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise StoreError(f"{path}: not a stored task ({type(e).__name__}: {e}); "
                             "delete it or run without --resume") from None
        if stored != describe(task) or code != self.code:
            return None
        return result

    def put(self, task: Task, result: dict[str, Any]) -> Path:
        """Store ``task``'s result (what ``tasks.run`` returned); return the file."""
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.path(task)
        text = json.dumps({"task": describe(task), "code": self.code, "run": result})
        fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=".task-", suffix=".json")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text + "\n")
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return path
