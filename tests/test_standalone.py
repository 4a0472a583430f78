"""The repository stands on its own: nothing in it reads the planning folder beside it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from conftest import OUTSIDE, TRACES

ROOT = Path(__file__).resolve().parents[1]


def test_reading_outside_the_repository_fails():
    with pytest.raises(PermissionError, match="must not read"):
        open(OUTSIDE + "DESIGN.md")  # refused whether or not the file exists


def test_no_file_in_the_repository_points_outside():
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    offenders = []
    sibling = "shar" + "ed"  # spelled in parts, so that this file does not name it either
    names = ("../" + sibling, sibling + "/reference", "PATTON_" + sibling.upper(),
             f'"{sibling}" /')
    for name in sorted(tracked):
        path = ROOT / name
        if path.suffix not in (".py", ".toml", ".cfg", ".v", ".json", ".md", "") \
                or not path.is_file():
            continue
        text = path.read_text(errors="replace")
        if any(s in text for s in names):
            offenders.append(name)
    assert offenders == [], offenders


def test_public_traces_are_in_the_repository():
    names = sorted(p.stem for p in TRACES.glob("*.trace"))
    assert len(names) == 15 and (TRACES / "reference.json").is_file()
