"""``patton repro --quick`` end to end on the real cost of a serving run (no fakes).

Fig. 7's ten quick configurations (Llama-3-8B and OPT-6.7B, PATTON and the four baselines),
each a real serving run costed on the cycle model, through the real runner (two worker
processes), figures, plots and tables, cut to 10 steps and without the replayed side runs to
keep CI short: ``tests/test_run_cost.py`` replays every runtime bit-exact and verified, and
``docs/evaluation.md`` gives the whole ``--quick`` run's time.
"""

from __future__ import annotations

import json

from patton.cli import main


def test_quick_fig7_end_to_end(tmp_path, capsys):
    out = tmp_path / "repro"
    code = main(["repro", "fig7", "--quick", "--steps", "10", "--no-check", "--workers", "2",
                 "--json", "--no-progress", "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    record = json.loads(capsys.readouterr().out)["fig7"]
    for key in ("neupims", "pimphony", "attacc", "blockpim", "all"):
        assert record["speedup"][key] > 0 and record["energy_gain"][key] > 0
    assert json.loads((out / "repro.json").read_text())["fig7"]["speedup"] == \
        record["speedup"]
    assert set(record["per_model"]) == {"llama3-8b", "opt-6.7b"}
    for model, detail in record["per_model"].items():
        assert set(detail["absolute"]) == {"patton", "neupims", "pimphony", "attacc",
                                           "blockpim"}
        for runtime, r in detail["absolute"].items():
            assert r["steps"] == 10 and r["seconds"] > 0, (model, runtime)
            assert r["checked_programs"] == 0  # --no-check: no side run
    assert (out / "fig7.png").stat().st_size > 0 and "4.27" in (out / "repro.md").read_text()
