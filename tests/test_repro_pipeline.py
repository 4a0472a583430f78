"""``patton repro all --quick`` end to end on the real cost of a serving run (no fakes).

Every figure's quick configurations: Fig. 7's ten (Llama-3-8B and OPT-6.7B, PATTON and the
four baselines) and Fig. 8's (PATTON, PATTON-wo-CZ and BlockPIM on both front ends), each a
real serving run costed on the cycle model with its replayed side run (every program
verified, attention bit-exact on the functional model); Fig. 9's hit-rate runs; the
microbenchmarks; the sensitivity (every combination of the assumptions' values, each run's
side run checked); through the real runner (two worker processes), figures, plots and tables.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from patton.eval.assumptions import AXES, PAPER
from patton.eval.figures import sensitivity
from patton.eval.repro import without_wall_times

from patton.cli import main

#: The records of ``patton repro all --quick`` (wall times left out).
GOLDEN = Path(__file__).resolve().parent / "data" / "repro" / "quick.json"


@pytest.mark.slow
def test_quick_all_end_to_end(tmp_path, capsys):
    out = tmp_path / "repro"
    code = main(["repro", "all", "--quick", "--workers", "2", "--json", "--no-progress",
                 "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    records = json.loads(capsys.readouterr().out)
    assert records == json.loads((out / "repro.json").read_text())
    # every figure exactly as recorded (tests/data/repro/README.md says how), wall times aside
    assert without_wall_times(records) == json.loads(GOLDEN.read_text())
    fig7 = records["fig7"]
    for key in ("neupims", "pimphony", "attacc", "blockpim", "all"):
        assert fig7["speedup"][key] > 0 and fig7["energy_gain"][key] > 0
    assert set(fig7["per_model"]) == {"llama3-8b", "opt-6.7b"}
    for model, detail in fig7["per_model"].items():
        assert set(detail["absolute"]) == {"patton", "neupims", "pimphony", "attacc",
                                           "blockpim"}
        for runtime, r in detail["absolute"].items():
            assert r["steps"] == 100 and r["seconds"] > 0, (model, runtime)
    for front in ("shared", "per_channel"):
        assert set(records["fig8"][front]) >= {"latency_reduction_vs_wo_cz",
                                               "value_write_speedup_vs_wo_cz"}
    assert set(records["fig9"]) >= {"normal", "pressure", "pressure_live_tokens"}
    for load in ("normal", "pressure"):  # no runtime above the load's perfect-cache ceiling
        hits = records["fig9"][load]
        assert 0 < hits["gpu"] <= hits["ceiling"] <= 1, load
    assert records["micro"]["fragmentation_latency"] > 1
    # the assumptions the figures ran under, the GPU model's calibration
    assert records["assumptions"] == PAPER.as_dict() == fig7["assumptions"]
    # an opt-in axis (the device extension set) only where a run asks for it
    assert [a["axis"] for a in records["axes"]] == [a for a in AXES if not AXES[a].opt_in]
    gpu = records["gpu_model"]
    assert gpu["source"] and gpu["points"] > 5000
    assert 0 < gpu["mean_rel_error"] <= gpu["max_rel_error"] < 1
    # the sensitivity: a row for every other value of every axis but the opt-in ones, each
    # verified
    sens = records["sensitivity"]
    assert [(r["axis"], r["value"]) for r in sens["rows"][1:]] == [
        (a.name, v) for a in AXES.values() if not a.opt_in for v in a.values if v != a.paper]
    for row in [*sens["rows"], *sens["at_headline_steps"]["rows"], sens["closest"]]:
        assert row["checked_programs"] > 0 and row["violations"] == row["mismatches"] == 0
        assert all(row[k] is not None for k in sensitivity.HEADLINES), row
    assert sens["rows"][0]["fig7_speedup_all"] == pytest.approx(fig7["speedup"]["all"])
    assert sens["combinations"] == 64 and sens["closest"]["distance"] <= min(
        r["distance"] for r in sens["rows"])
    # every cost configuration's side run: programs verified, attention bit-exact
    costs = [json.loads(f.read_text())["run"] for f in (out / "tasks").glob("cost_*.json")]
    assert len(costs) > 10 + 4  # Fig. 7, Fig. 8's wo-CZ and per-channel runs, sensitivity
    for run in costs:
        result = run["result"]
        assert result["checked_programs"] > 0, run["task"]
        assert result["violations"] == 0 and result["mismatches"] == 0, run["task"]
    for name in ("fig7.png", "fig8.png", "fig9.png", "sensitivity.png"):
        assert (out / name).stat().st_size > 0
    assert "4.27" in (out / "repro.md").read_text()
