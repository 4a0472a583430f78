"""The documentation site (``docs/conf.py``): every page is in a table of contents, the API
reference documents every export, and Sphinx builds the site with warnings as errors.

The build needs the ``docs`` extra (``pip install -e '.[docs]'``); without it the build test is
skipped on a developer's machine and fails under CI.
"""

from __future__ import annotations

import html
import importlib
import importlib.util
import os
import re
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
#: A MyST ``toctree`` fence: its option lines (``:caption: ...``), then one page per line.
_TOCTREE = re.compile(r"^```\{toctree\}\n(.*?)^```$", re.S | re.M)
#: The API page's directive that documents one package's ``__all__`` (``docs/conf.py``).
_EXPORTS = re.compile(r"^\.\. exports:: (\S+)$", re.M)
#: The packages the docs site needs to build (the ``docs`` extra).
SITE_MODULES = ("sphinx", "myst_parser", "furo")


def _toctree_entries() -> dict[str, str]:
    """Each page a toctree lists (``docs/NAME.md`` as ``NAME``), by the page that lists it."""
    entries = {}
    for page in sorted(DOCS.glob("*.md")):
        for block in _TOCTREE.findall(page.read_text()):
            for line in block.splitlines():
                if line.strip() and not line.startswith(":"):
                    entries[line.strip()] = page.name
    return entries


def _exported_packages() -> list[str]:
    """The project's top-level packages (``pyproject.toml``) that export an API (``__all__``)."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    names = pyproject["tool"]["setuptools"]["package-dir"]
    return [name for name in names if hasattr(importlib.import_module(name), "__all__")]


def test_every_page_is_in_a_toctree():
    pages = {page.stem for page in DOCS.glob("*.md")} - {"index"}
    entries = _toctree_entries()
    assert sorted(pages - set(entries)) == [], "docs pages in no toctree (docs/index.md)"
    assert {name: by for name, by in entries.items() if name not in pages} == {}, \
        "toctree entries naming no docs page"


def test_the_api_page_documents_every_export():
    packages = _exported_packages()
    assert {"patton.sim", "patton.runtime", "patton.hw", "patton.tb"} <= set(packages)
    documented = _EXPORTS.findall((DOCS / "api.md").read_text())
    assert sorted(documented) == sorted(packages), "docs/api.md: one `.. exports::` a package"
    undocumented = []
    for name in packages:
        package = importlib.import_module(name)
        for export in package.__all__:
            value = getattr(package, export)
            doc = (value.__doc__ or "").strip()
            # a dataclass without a docstring gets its signature as one: Name(field, ...)
            if callable(value) and (not doc or doc.startswith(f"{export}(")):
                undocumented.append(f"{name}.{export}")
    assert undocumented == [], "exports without a docstring"


def _site_modules_missing() -> list[str]:
    return [name for name in SITE_MODULES if importlib.util.find_spec(name) is None]


def test_the_site_builds_without_warnings(tmp_path):
    missing = _site_modules_missing()
    if missing:
        reason = f"{', '.join(missing)} not installed: pip install -e '.[docs]'"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
         str(DOCS), str(tmp_path / "html"), "-d", str(tmp_path / "doctrees")],
        capture_output=True, text=True, cwd=ROOT, timeout=600)
    seconds = time.monotonic() - started
    assert done.returncode == 0, f"sphinx failed ({seconds:.0f} s):\n{done.stderr}{done.stdout}"
    pages = {page.stem for page in DOCS.glob("*.md")}
    assert {page.stem for page in (tmp_path / "html").glob("*.html")} >= pages
    api = html.unescape((tmp_path / "html" / "api.html").read_text())
    described = set(re.findall(r'<dt class="sig [^"]*" id="([^"]+)"', api))
    missing_exports = [f"{name}.{export}" for name in _exported_packages()
                       for export in importlib.import_module(name).__all__
                       if f"{name}.{export}" not in described]
    assert missing_exports == [], "exports the API page does not describe"
