"""Benchmark scripts whose logic goes beyond printing: they still compute what they say."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cz_bound_leaves_out_only_the_cz_segments(capsys):
    bound = _load("fig8_cz_bound")
    assert bound.main(["--steps", "12", "--workers", "1", "--json"]) == 0
    runs = {(r["frontend"], r["name"]): r for r in json.loads(capsys.readouterr().out)}
    for f in ("shared", "per_channel"):
        full, unread = runs[f, "patton"], runs[f, "patton, CZ reads left out"]
        # the same writes and QK^T; SV without the CZ segments is strictly cheaper
        for part in ("k_write", "v_write", "qk"):
            assert unread["seconds"][part] == full["seconds"][part], (f, part)
        assert 0 < unread["seconds"]["sv"] < full["seconds"]["sv"]
        assert 0 < unread["joules"]["sv"] < full["joules"]["sv"]
        assert runs[f, "patton-wo-cz"]["seconds"]["v_write"] > 0


def test_cz_bound_rejects_bad_counts(capsys):
    bound = _load("fig8_cz_bound")
    assert bound.main(["--steps", "0"]) == 2
    assert "must be positive" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bound.main(["--steps", "x"])
