"""Finished tasks kept on disk, so a long ``patton repro`` can be resumed (``--resume``).

A :class:`Store` is a folder (``OUT/tasks/``) with one JSON file per finished task: the task's
description (``tasks.describe``), the fingerprint of the code that ran it, what ``tasks.run``
returned and a digest of those three. The runner puts every task in the store as soon as it
finishes, so an interrupted run (a failure, ^C, a lost machine) keeps what it had done; with
``--resume`` the next run takes those results instead of running the tasks again.

A stored result is taken only when everything about it checks (:meth:`Store.look`):

* the file reads as one strict JSON object of this format (:data:`FORMAT`);
* its ``digest`` is the SHA-256 of its task, code and run as canonical JSON, so any change to
  the content after it was written (a damaged disk block, a hand edit) is seen;
* its task is the task asked for and its code is the current fingerprint (a SHA-256 over the
  source of every ``patton`` package: Python files, the cycle kernel's C and the packaged
  data), so any change to the code invalidates every stored result;
* its own checks passed (:func:`failed_checks`: no verify violation, no attention mismatch).

Anything else is a :class:`Lookup` with a ``reason``: the caller runs the task again and says
why. Writes are whole or absent (:func:`patton.sim.textfile.write_atomic`), and
:meth:`Store.lock` keeps a second run off a folder in use.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import importlib.util
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from patton.eval.tasks import Task, TaskError, describe, failed_checks
from patton.sim.jsontext import json_value
from patton.sim.textfile import MAX_DOCUMENT, ReadError, write_atomic

__all__ = ["FORMAT", "Lookup", "Store", "StoreBusy", "StoreError", "digest", "fingerprint"]

#: The packages whose source makes up the fingerprint.
PACKAGES = ("patton", "patton.sim", "patton.serving", "patton.hw", "patton.runtime",
            "patton.tb", "patton.eval")
#: Kinds of files whose content makes up the fingerprint.
SOURCES = (".py", ".c", ".json", ".jsonl")
#: The ``format`` field of a stored task (files without it, or with another, are not taken).
FORMAT = "patton-task/2"
#: The lock file of a store's folder.
LOCK = ".lock"


class StoreError(TaskError):
    """A store folder that cannot be used (its message names the folder)."""


class StoreBusy(StoreError):
    """Another process holds the store's lock (another run on the same ``--out``)."""


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


def digest(task: dict[str, Any], code: str, run: Any) -> str:
    """The SHA-256 (hex) of a stored task's content: ``task``, ``code`` and ``run`` as
    canonical JSON (sorted keys, no spaces; Python's float repr, which reads back exactly)."""
    text = json.dumps({"task": task, "code": code, "run": run}, sort_keys=True,
                      separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


@dataclasses.dataclass(frozen=True)
class Lookup:
    """What a store holds for one task.

    Invariant: at most one of ``result`` and ``reason`` is set; neither means there is no file
    (the task has not run). ``result`` is what ``tasks.run`` returned, every check passed;
    ``reason`` says why the file is not taken (the task must run again).
    """

    path: Path
    result: dict[str, Any] | None = None
    reason: str | None = None


class Store:
    """One JSON file per finished task under ``folder`` (see the module docstring).

    Invariant: a file is written whole or not at all (:func:`write_atomic`), so a run stopped
    mid-write leaves no half file; a file is taken back only as it was written.
    """

    def __init__(self, folder: Path, code: str | None = None) -> None:
        self.folder = Path(folder)
        self.code = fingerprint() if code is None else code

    def path(self, task: Task) -> Path:
        """The file of ``task``: its key made a file name, and a digest of its fields (two
        tasks with one key, say checked and not, get two files)."""
        safe = "".join(c if c.isalnum() or c in "-." else "_" for c in task.key)
        fields = hashlib.sha256(json.dumps(describe(task), sort_keys=True).encode())
        return self.folder / f"{safe}-{fields.hexdigest()[:12]}.json"

    def look(self, task: Task) -> Lookup:
        """Return what the store holds for ``task`` (see :class:`Lookup`); never raises for
        a file's content: what cannot be taken is a ``reason``."""
        path = self.path(task)
        try:
            with open(path, "rb") as f:
                raw = f.read(MAX_DOCUMENT + 1)
        except FileNotFoundError:
            return Lookup(path)
        except OSError as e:
            return Lookup(path, reason=f"cannot be read ({e.strerror or e})")
        found = self._read(task, raw)
        if isinstance(found, str):
            return Lookup(path, reason=found)
        return Lookup(path, result=found)

    def _read(self, task: Task, raw: bytes) -> dict[str, Any] | str:
        """``task``'s result from the stored bytes ``raw``, or why they are not that result
        from this code."""
        if len(raw) > MAX_DOCUMENT:
            return f"not a stored task (larger than {MAX_DOCUMENT:,} bytes)"
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            return "not a stored task (not UTF-8 text)"
        try:
            data = json_value(text, "stored task", None)
        except ReadError as e:
            return f"not a stored task ({e.reason})"
        fields = {"format", "task", "code", "run", "digest"}
        if not isinstance(data, dict) or set(data) != fields:
            return (f"not a stored task (expected one object with the fields "
                    f"{', '.join(sorted(fields))})")
        if data["format"] != FORMAT:
            return f"not a stored task of this format ({data['format']!r}, expected {FORMAT})"
        if data["digest"] != digest(data["task"], data["code"], data["run"]):
            return "its content does not match its digest (damaged or edited)"
        if data["code"] != self.code:
            return "computed by other code"
        if data["task"] != describe(task):
            return "another task's result"
        run = data["run"]
        if (not isinstance(run, dict) or run.get("task") != data["task"]
                or not isinstance(run.get("result"), dict)
                or not isinstance(run.get("wall_seconds"), (int, float))):
            return "not a task's result (expected task, result and wall_seconds)"
        failed = failed_checks(run["result"])
        if failed:
            return f"its checks failed ({failed})"
        return run

    def get(self, task: Task) -> dict[str, Any] | None:
        """Return ``task``'s stored result if :meth:`look` takes it, else None."""
        return self.look(task).result

    def put(self, task: Task, result: dict[str, Any]) -> Path:
        """Store ``task``'s result (what ``tasks.run`` returned); return the file."""
        self.folder.mkdir(parents=True, exist_ok=True)
        described = describe(task)
        data = {"format": FORMAT, "task": described, "code": self.code, "run": result,
                "digest": digest(described, self.code, result)}
        return write_atomic(self.path(task), json.dumps(data) + "\n")

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the folder's lock (an ``flock`` on ``folder/.lock``, released when the
        process ends however it ends) while the block runs.

        Raises:
            StoreBusy: another process holds it; the message names the folder and that
                process.
            StoreError: the folder cannot be made or locked.
        """
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.folder / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise StoreError(f"{self.folder}: cannot lock ({e.strerror or e})") from None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 64, 0).decode("ascii", "replace").strip() or "?"
                raise StoreBusy(f"{self.folder}: in use by another run (process {holder}); "
                                "wait for it to finish or use another --out") from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            try:
                yield
            finally:
                os.ftruncate(fd, 0)
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
