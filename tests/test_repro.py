"""``patton repro`` (``patton.eval``): figure arithmetic, the runner, micro and Fig. 9 end to
end on small configurations, the files it writes, and its errors.

Fig. 7 and Fig. 8 measure with ``patton.eval.cost``; here fakes with exactly its
``RunCost.as_dict()`` shape stand in for its functions (monkeypatched), so the arithmetic is
checked on numbers whose answers are known.
"""

from __future__ import annotations

import importlib.util
import json
import math
import sys

import pytest
from patton.eval import cost, paper, report, runner, tasks
from patton.eval import repro as repro_lib
from patton.eval.assumptions import PAPER as PAPER_ASSUMPTIONS
from patton.eval.figures import FIGURES, NAMES, common, fig7, fig8, fig9, micro
from patton.eval.figures import tasks as plan_tasks
from patton.eval.plan import FULL, QUICK
from patton.eval.repro import reproduce, without_wall_times, write
from patton.eval.tasks import CostTask, FragmentationTask, HitTask, ValueWriteTask

from patton.cli import main
from patton.cli.repro import main as repro_main

PARTS = ("k_write", "v_write", "qk", "sv")

#: Per runtime: (seconds of each of the four parts, recompute seconds); joules are twice as
#: many, plus one joule of recompute more for the baselines (so the energy ratios differ).
SECONDS = {"patton": ((1.0, 1.0, 1.0, 1.0), 0.0),
           "neupims": ((2.0, 2.0, 4.0, 4.0), 5.0),
           "pimphony": ((1.0, 2.0, 2.0, 2.0), 1.0),
           "attacc": ((1.0, 1.0, 2.0, 2.0), 2.0),
           "blockpim": ((1.0, 3.0, 1.0, 1.0), 0.0),
           "patton-wo-cz": ((1.0, 5.0, 1.0, 1.0), 0.0)}


def fake_cost(model: str, runtime: str, frontend: str = "shared",
              components: bool = True) -> dict:
    """A ``RunCost.as_dict()``; opt-6.7b costs 1.5x everything but PATTON's. A part's energy
    is a quarter activations and three quarters standby (``components``: recorded)."""
    parts, recompute = SECONDS[runtime]
    scale = 1.0 if runtime == "patton" or model != "opt-6.7b" else 1.5
    scale *= 0.5 if frontend == "per_channel" else 1.0
    out = {"parts": {p: {"cycles": int(s * scale * 2e9), "energy_pj": 2e12 * s * scale,
                         "seconds": s * scale, "joules": 2 * s * scale}
                     for p, s in zip(PARTS, parts, strict=True)},
           "recompute_seconds": recompute * scale,
           "recompute_joules": (2 * recompute + (runtime != "patton")) * scale,
           "hit_rate": 0.5, "steps": 10, "violations": 0, "checked_programs": 4,
           "wall_seconds": 0.1, "decode_tokens": 1234 if runtime != "pimphony" else 987,
           "prefill_tokens": 5000}
    if components:
        for part in out["parts"].values():
            part["energy_components_joules"] = {"act": part["joules"] / 4,
                                                "standby": part["joules"] * 3 / 4}
    out["latency_seconds"] = sum(p["seconds"] for p in out["parts"].values()) + \
        out["recompute_seconds"]
    out["energy_joules"] = sum(p["joules"] for p in out["parts"].values()) + \
        out["recompute_joules"]
    return out


def runs_for(models, runtimes, frontend="shared", **fake):
    """model -> runtime -> fake cost (what ``common.results`` selects for a record)."""
    return {m: {r: fake_cost(m, r, frontend, **fake) for r in runtimes} for m in models}


def fig8_runs(models, frontends=("shared", "per_channel"), **fake):
    return {f: runs_for(models, ("patton", "patton-wo-cz", "blockpim"), f, **fake)
            for f in frontends}


# ------------------------------------------------------------------------ arithmetic


def test_geomean_and_ratio():
    assert common.geomean([4.0, 1.0]) == pytest.approx(2.0)
    assert common.geomean([2.0, None]) is None
    assert common.ratio(1.0, 0.0) is None
    with pytest.raises(ValueError):
        common.geomean([])
    with pytest.raises(ValueError):
        common.geomean([1.0, 0.0])
    # the paper's overall figures are the geometric means of its four per-baseline ones
    for key in ("speedup", "energy_gain"):
        four = [fig7.PAPER[key][b] for b in paper.BASELINES]
        assert common.geomean(four) == pytest.approx(fig7.PAPER[key]["all"], abs=0.005)


def test_fig7_normalises_to_patton_and_takes_geometric_means():
    models = ("llama3-8b", "opt-6.7b")
    rec = fig7.record(runs_for(models, ("patton", *paper.BASELINES)), models)
    assert set(rec["speedup"]) == set(rec["energy_gain"]) == {*paper.BASELINES, "all"}
    assert all(isinstance(v, float) for v in (*rec["speedup"].values(),
                                              *rec["energy_gain"].values()))
    # neupims: 12 s of parts + 5 s recompute over PATTON's 4 s; x1.5 on opt-6.7b
    assert rec["per_model"]["llama3-8b"]["speedup"]["neupims"] == pytest.approx(17 / 4)
    assert rec["speedup"]["neupims"] == pytest.approx(math.sqrt(17 / 4 * 17 * 1.5 / 4))
    # energy: 24 J + 11 J over 8 J
    assert rec["per_model"]["llama3-8b"]["energy_gain"]["neupims"] == pytest.approx(35 / 8)
    assert rec["speedup"]["all"] == pytest.approx(
        common.geomean(rec["speedup"][b] for b in paper.BASELINES))
    lat = rec["per_model"]["opt-6.7b"]["latency"]
    assert lat["patton"]["total"] == pytest.approx(1.0)
    assert sum(lat["patton"][k] for k in common.STACK) == pytest.approx(1.0)
    assert lat["neupims"]["recompute"] == pytest.approx(5 * 1.5 / 4)
    assert sum(lat["attacc"][k] for k in common.STACK) == pytest.approx(lat["attacc"]["total"])
    # PIM attention energy only: neupims 24 J of parts over PATTON's 8 J
    comps = rec["per_model"]["llama3-8b"]["energy_components"]
    assert sum(comps["neupims"].values()) == pytest.approx(24 / 8)
    assert comps["patton"] == pytest.approx({"act": 0.25, "standby": 0.75})
    assert rec["assumptions"] == PAPER_ASSUMPTIONS.as_dict()
    # the results a record is derived from are the scale's tasks under its assumptions
    scale = QUICK.with_(models=models)
    pairs = [(t, fake_cost(t.model, t.runtime)) for t in fig7.tasks(scale)]
    assert fig7.derive(pairs, scale)["speedup"] == pytest.approx(rec["speedup"])
    with pytest.raises(ValueError, match="no result for attacc"):
        fig7.derive([p for p in pairs if p[0].runtime != "attacc"], scale)
    other = scale.with_(assumptions=PAPER_ASSUMPTIONS.with_(timing="aimsim-0f28a07"))
    with pytest.raises(ValueError, match="no result for patton, neupims"):
        fig7.derive(pairs, other)


def test_fig8_is_attention_only_per_front_end():
    models = ("llama3-8b", "opt-6.7b")
    rec = fig8.record(fig8_runs(models), models)
    for f in ("shared", "per_channel"):
        assert set(rec[f]) == set(fig8.PAPER[f])
        r = rec[f]
        # parts only: PATTON 4 s vs wo-CZ 8 s (llama) and 12 s (opt): 1 - sqrt(4/8 * 4/12)
        assert r["latency_reduction_vs_wo_cz"] == pytest.approx(1 - math.sqrt(1 / 2 * 1 / 3))
        assert r["energy_reduction_vs_wo_cz"] == pytest.approx(1 - math.sqrt(1 / 2 * 1 / 3))
        assert r["value_write_speedup_vs_wo_cz"] == pytest.approx(math.sqrt(5 * 7.5))
        assert r["latency_reduction_vs_blockpim"] == pytest.approx(
            1 - math.sqrt(4 / 6 * 4 / 9))
        assert 0 < r["energy_reduction_vs_blockpim"] < 1
    d = rec["per_model"]["shared"]["llama3-8b"]["latency"]
    assert d["patton"]["total"] == pytest.approx(1.0) and "recompute" not in d["patton"]
    # attention energy by component, over PATTON's attention energy
    m = rec["per_model"]["shared"]["opt-6.7b"]
    comps = m["energy_components"]
    assert set(comps) == {"patton", "patton-wo-cz", "blockpim"}
    for r, split in comps.items():
        assert split["act"] == pytest.approx(split["standby"] / 3)
        assert sum(split.values()) == pytest.approx(m["energy"][r]["total"]), r
    assert sum(comps["patton"].values()) == pytest.approx(1.0)
    # a result that does not split its energy: no components, the rest unchanged
    bare = fig8.record({**fig8_runs(models), **fig8_runs(models, ("shared",),
                                                         components=False)}, models)
    assert "energy_components" not in bare["per_model"]["shared"]["opt-6.7b"]
    assert bare["shared"] == rec["shared"]


def test_fig9_and_micro_records():
    hits = []
    for load, base in (("normal", 0.8), ("pressure", 0.6)):
        for i, r in enumerate(("gpu", "patton", "patton-no-o2v")):
            hits.append((HitTask(r, load, 10), {
                "hit_rate": base - 0.1 * i, "steps": 10, "requests": 3, "preemptions": 0,
                "complete": False, "live_context_tokens": {"mean": 5.0, "max": 100 + i},
                "capacity": {"tokens": 1000}, "usage": {"stranded_mean": 1.0},
                "refusals": 0}))
    rec = fig9.record(hits)
    assert rec["normal"] == pytest.approx({"gpu": 0.8, "patton": 0.7, "patton-no-o2v": 0.6})
    live = rec["pressure_live_tokens"]
    assert live == 100 and isinstance(live, int)  # the GPU reference's
    assert set(rec) >= set(fig9.PAPER)
    frag = {"latency": 2.0, "energy": 1.5, "one_run": {}, "fragmented": {}}
    vw = {k: {"activations": 1, "cycles": 1, "energy_nj": 1.0} for k in
          ("cz", "no_cz_mem", "no_cz_abk")}
    vw["no_cz_mem_over_cz"] = {"activations": 12.8, "cycles": 1.0, "energy_nj": 1.4}
    vw["no_cz_abk_over_cz"] = {"activations": 12.8, "cycles": 0.2, "energy_nj": 0.65}
    m = micro.record([(FragmentationTask(), frag), (ValueWriteTask(), vw)])
    assert set(m) >= set(micro.PAPER)
    assert (m["cz_activation_reduction"], m["fragmentation_latency"],
            m["fragmentation_energy"]) == (12.8, 2.0, 1.5)


# ------------------------------------------------------------------------ plan


def test_plan_sizes_and_shared_tasks():
    assert FULL.steps > 10_000 and FULL.models == paper.MODELS and not FULL.check
    assert QUICK.steps == 100 and QUICK.models == ("llama3-8b", "opt-6.7b") and QUICK.check
    fig7, fig8 = plan_tasks("fig7", FULL), plan_tasks("fig8", FULL)
    assert len(fig7) == 4 * 5 and len(fig8) == 2 * 4 * 3
    assert len(set(fig7) | set(fig8)) == 20 + 4 + 12  # Fig. 8's shared PATTON/BlockPIM are 7's
    t = next(t for t in fig7 if t.model == "opt-6.7b")
    # the paper's context limit, 2,048, but for NeuPIMs, which holds 1,024 tokens of a
    # 32-KV-head model in its one channel; with context=common every OPT run is at 1,024
    assert (t.clients, t.pool, t.max_model_len) == (8, 16, 2048)
    assert {t.runtime: t.max_model_len for t in fig7 if t.model == "opt-6.7b"} == {
        "patton": 2048, "neupims": 1024, "pimphony": 2048, "attacc": 2048, "blockpim": 2048}
    common_ctx = FULL.with_(assumptions=PAPER_ASSUMPTIONS.with_(context="common"))
    assert {t.max_model_len for t in plan_tasks("fig7", common_ctx)
            if t.model == "opt-6.7b"} == {1024}
    assert {t.max_model_len for t in fig7 if t.model == "llama3-8b"} == {2048}
    # every cost task carries the headline assumptions; wo-CZ its write command
    assert {(t.timing, t.gpu, t.standby) for t in fig7} == {("aimsim-2eb1ee0", "calibrated",
                                                             "cent")}
    assert {t.token_op for t in fig8 if t.runtime == "patton-wo-cz"} == {"mem"}
    assert {t.token_op for t in fig8 if t.runtime != "patton-wo-cz"} == {None}
    hits = plan_tasks("fig9", FULL)
    assert {(t.load, t.pool) for t in hits} == {("normal", 64), ("pressure", 96),
                                                ("light", 32), ("overload", 512)}
    assert all(t.clients == 32 for t in hits)
    assert sorted((t.load, t.runtime) for t in hits if t.num_blocks == fig9.UNLIMITED) == [
        (load, "gpu") for load in ("light", "normal", "overload", "pressure")]
    assert sum(t.num_blocks is None for t in hits) == 4 * 3
    with pytest.raises(ValueError, match="unknown figure"):
        plan_tasks("fig10", FULL)


# ------------------------------------------------------------------------ end to end


@pytest.fixture
def fake_run_cost(monkeypatch):
    """Fakes of ``patton.eval.cost``'s functions (the real ones' interface)."""
    calls = []

    class RunCost:
        def __init__(self, d):
            self.d = d

        def as_dict(self):
            return self.d

    def reference(conversations, model, *, steps, clients, pool, max_model_len):
        assert conversations and steps > 0 and max_model_len == 2048
        return ("reference", model.name)

    def measure(conversations, model, runtime, *, steps, frontend="shared", clients, pool,
                max_model_len=2048, reference=None, check=False, on_step=None,
                replay=False, timing=PAPER_ASSUMPTIONS.timing, gpu="analytic",
                standby="per_channel", token_op=None, device_ext="aim"):
        assert timing == PAPER_ASSUMPTIONS.timing and device_ext == "aim"
        assert token_op == (PAPER_ASSUMPTIONS.wo_cz_write if runtime == "patton-wo-cz"
                            else None)
        if replay:  # the checked side run
            calls.append((model.name, runtime, frontend, "replay"))
            return RunCost(fake_cost(model.name, runtime, frontend))
        assert reference == ("reference", model.name)
        calls.append((model.name, runtime, frontend, check))
        return RunCost(fake_cost(model.name, runtime, frontend))

    def measure_many(conversations, models, runtime, *, steps, frontends, clients, pool,
                     max_model_len=2048, references=None, on_step=None, timings, gpus,
                     standbys, token_op, device_ext):
        assert device_ext == "aim"
        assert [r for r in references] == [("reference", m.name) for m in models]
        calls.append((tuple(m.name for m in models), runtime, tuple(frontends), "pass"))
        out = {}
        for m in models:
            for f in frontends:
                calls.append((m.name, runtime, f, False))
                for t in timings:
                    for g in gpus:
                        for b in standbys:
                            out[cost.CostKey(m.name, f, t, g, b)] = RunCost(
                                fake_cost(m.name, runtime, f))
        return out

    monkeypatch.setattr(cost, "reference", reference)
    monkeypatch.setattr(cost, "measure", measure)
    monkeypatch.setattr(cost, "measure_many", measure_many)
    return calls


SMALL = QUICK.with_(steps=60, conversations=40, models=("llama3-8b",),
                    fig8_models=("llama3-8b",), value_write_requests=4,
                    value_write_steps=16)


def test_fig7_fig8_through_the_runner_with_a_fake_run_cost(fake_run_cost):
    records = reproduce(["fig7", "fig8"], SMALL, workers=1)
    # Fig. 8's shared PATTON and BlockPIM runs are Fig. 7's: 5 + 1 + 3 tasks, not 5 + 6,
    # each an unchecked cost run and a replayed side run
    runs = [c for c in fake_run_cost if c[-1] is False]
    together = [c for c in fake_run_cost if c[-1] == "pass"]
    assert len(runs) == 9 and len(fake_run_cost) == 18 + len(together)
    # PATTON, PATTON-wo-CZ and BlockPIM each serve both front ends in one run
    assert sorted(c[1] for c in together) == ["blockpim", "patton", "patton-wo-cz"]
    assert all(c[2] == ("shared", "per_channel") for c in together)
    assert sorted(c[:3] for c in runs) == sorted(c[:3] for c in fake_run_cost
                                                 if c[-1] == "replay")
    assert records["fig7"]["speedup"]["neupims"] == pytest.approx(17 / 4)
    assert records["fig8"]["per_channel"]["value_write_speedup_vs_wo_cz"] == pytest.approx(5)


def test_micro_end_to_end(tmp_path, capsys):
    scale = SMALL.with_(assumptions=PAPER_ASSUMPTIONS.with_(timing="aimsim-0f28a07"))
    records = reproduce(["micro"], scale, workers=1)
    m = records["micro"]
    assert set(m) >= set(micro.PAPER)
    assert m["fragmentation_latency"] == pytest.approx(904 / 414)  # docs/runtime.md §6
    assert 1.2 < m["fragmentation_energy"] < 1.4
    # 4 requests share the CRS row: 16*128 / (16*64/4 + 128) = 5.33x fewer activations
    assert m["cz_activation_reduction"] == pytest.approx(2048 / (256 + 128), rel=0.02)
    files = write(records, tmp_path, command="patton repro micro", wall_seconds=1.0,
                  quick=True)
    md = (tmp_path / "repro.md").read_text()
    assert "12.60x" in md and "2.18x" in md and "1.34x" in md
    assert json.loads((tmp_path / "repro.json").read_text())["micro"]["fragmentation_latency"]
    assert [f.name for f in files] == ["repro.json", "repro.md"]  # micro has no plot
    # under 2eb1ee0's rules the controller's reordering turns some per-bank W MEMs of one
    # row into row hits: fewer activations without the Commit Zone, a smaller reduction
    other = reproduce(["micro"], SMALL, workers=1)["micro"]
    assert other["timing"] == "aimsim-2eb1ee0" and m["timing"] == "aimsim-0f28a07"
    assert 1 < other["cz_activation_reduction"] < m["cz_activation_reduction"]


def test_fig9_end_to_end_small():
    scale = SMALL.with_(fig9_steps=150, conversations=40)
    records = reproduce(["fig9"], scale, workers=1)
    rec = records["fig9"]
    assert set(rec["normal"]) == set(rec["pressure"]) == {"gpu", "patton", "patton-no-o2v",
                                                          "ceiling"}
    assert all(0.0 <= h <= 1.0 for load in ("normal", "pressure") for h in rec[load].values())
    # the perfect-cache ceiling: the GPU reference with a cache that never evicts
    for load in ("normal", "pressure"):
        assert max(rec[load][r] for r in fig9.RUNTIMES) <= rec[load]["ceiling"] <= 1, load
    assert set(rec["runs"]["pressure"]) == set(fig9.RUNTIMES)  # the ceiling run is not one
    assert rec["pressure_live_tokens"] > 0
    runs = rec["runs"]["pressure"]
    assert {r["pool"] for r in runs.values()} == {96} and runs["gpu"]["steps"] == 150
    assert runs["patton"]["capacity_tokens"] == 8128 * 16  # the 16 GiB device


def test_pool_and_progress_bars(capsys):
    got = runner.execute([FragmentationTask(fragments=2), FragmentationTask(fragments=4),
                          FragmentationTask(fragments=2)], workers=2, progress=True)
    assert got[0] == got[2] and got[0]["result"]["fragmented"]["cycles"] < \
        got[1]["result"]["fragmented"]["cycles"]
    assert got[1]["task"]["kind"] == "FragmentationTask"
    err = capsys.readouterr().err
    assert "micro fragmentation 2 on 32 ch" in err and "micro fragmentation 4" in err


def test_one_process_runs_same_shape_models_back_to_back(fake_run_cost):
    """The process keeps the cycle model's costs: Qwen3-8B's run of a runtime comes right
    before or after Llama-3-8B's (``tasks.affinity``), not in the figure's order."""
    reproduce(["fig7"], SMALL.with_(models=("llama3-8b", "qwen3-8b"), check=False),
              workers=1)
    runs = [c[:2] for c in fake_run_cost]
    assert len(runs) == 10
    for runtime in ("patton", *paper.BASELINES):
        i, j = runs.index(("llama3-8b", runtime)), runs.index(("qwen3-8b", runtime))
        assert abs(i - j) == 1, (runtime, runs)


def test_a_free_worker_takes_what_its_cache_holds_and_not_what_another_runs():
    ts = [CostTask(m, r, 100, 32, 64) for m in ("llama3-8b", "qwen3-8b")
          for r in ("patton", "blockpim")]
    left = runner._heaviest_first(ts)
    a = runner._pick(left, ts, (), ())
    b = runner._pick(left, ts, (), [tasks.affinity(ts[a])])
    assert ts[b].runtime != ts[a].runtime  # not the twin of the other worker's task
    c = runner._pick(left, ts, tasks.affinity(ts[a]), [tasks.affinity(ts[b])])
    assert (ts[c].runtime, ts[c].model) == (ts[a].runtime, "qwen3-8b")
    assert tasks.affinity(FragmentationTask()) == ()


def test_a_failing_task_is_named():
    with pytest.raises(tasks.TaskError, match="hits normal nonsense"):
        runner.execute([HitTask("nonsense", "normal", 5, conversations=4)], workers=1)


@pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                    reason="ray is not installed (pip install 'patton-testbench[ray]')")
def test_ray_local():
    got = runner.execute([FragmentationTask(fragments=2), FragmentationTask(fragments=8)],
                         ray="local")
    assert got[1]["result"]["latency"] == pytest.approx(904 / 414)


# ------------------------------------------------------------------------ files


def test_plots_and_markdown_have_the_papers_numbers(tmp_path, fake_run_cost):
    models = ("llama3-8b", "opt-6.7b")
    recs = {"fig7": fig7.record(runs_for(models, ("patton", *paper.BASELINES)), models),
            "fig8": fig8.record(fig8_runs(models), models)}
    hits = [(HitTask(r, load, 10), {"hit_rate": 0.5, "steps": 10, "requests": 3,
                                    "preemptions": 0, "complete": False,
                                    "live_context_tokens": {"mean": 5.0, "max": 9},
                                    "capacity": {"tokens": 100}, "usage": {}, "refusals": 0})
            for load in ("normal", "pressure") for r in ("gpu", "patton", "patton-no-o2v")]
    recs["fig9"] = fig9.record(hits)
    for p in (FIGURES[name].plot(rec, tmp_path / f"{name}.png") for name, rec in recs.items()):
        assert p.stat().st_size > 10_000 and p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = report.markdown(recs, command="patton repro all")
    for number in ("4.27x", "1.42x", "1.52x", "1.57x", "7.94x", "6.77x", "6.70x", "1.51x",
                   "1.95x", "4.83x", "13.00 %", "12.40 %", "5.00x", "22.70 %", "34.50 %",
                   "91.28 %", "87.86 %", "82.09 %", "30.30 %", "250,000"):
        assert number in md, number
    assert "| ours | paper | ratio |" in md and "**opt-6.7b**" in md
    assert "opt-6.7b, per_channel: attention energy by component" in md
    assert "| runtime | act | standby |" in md


# ------------------------------------------------------------------------ the command


def test_cli_json_is_one_object_keyed_by_figure(tmp_path, capsys, fake_run_cost, monkeypatch):
    monkeypatch.setattr("patton.cli.repro.QUICK", SMALL.with_(steps=30))
    code = main(["repro", "fig7", "--quick", "--workers", "1", "--out", str(tmp_path / "o"),
                 "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    data = json.loads(out)
    assert list(data) == ["assumptions", "axes", "gpu_model", "fig7"]
    assert set(data["fig7"]["speedup"]) == {*paper.BASELINES, "all"}
    assert data["assumptions"] == PAPER_ASSUMPTIONS.as_dict()
    assert {a["axis"] for a in data["axes"]} == set(PAPER_ASSUMPTIONS.as_dict())
    assert 0 < data["gpu_model"]["mean_rel_error"] <= data["gpu_model"]["max_rel_error"]
    assert {p.name for p in (tmp_path / "o").iterdir()} == {"repro.json", "repro.md",
                                                            "fig7.png", "tasks"}
    assert json.loads((tmp_path / "o" / "repro.json").read_text()) == data


def test_finished_tasks_are_kept_and_resumed(tmp_path, capsys, fake_run_cost, monkeypatch):
    monkeypatch.setattr("patton.cli.repro.QUICK", SMALL.with_(steps=30))
    argv = ["repro", "fig7", "--quick", "--workers", "1", "--out", str(tmp_path), "--json"]
    assert main(argv) == 0
    first = json.loads(capsys.readouterr().out)
    stored = sorted((tmp_path / "tasks").glob("*.json"))
    assert len(stored) == 5 and all(p.name.startswith("cost_llama3-8b_") for p in stored)
    md = (tmp_path / "repro.md").read_text(encoding="utf-8")
    assert "s of wall time)" in md and "fig7 5 (" in md  # the tasks' own time beside it
    calls = len(fake_run_cost)
    # --resume: nothing runs again, the same records
    assert main([*argv, "--resume"]) == 0
    out, err = capsys.readouterr()
    assert len(fake_run_cost) == calls and json.loads(out) == first  # stored: the same times
    assert "resume: 5 of 5 task results taken from" in err
    # without --resume every task runs again
    assert main(argv) == 0
    capsys.readouterr()
    assert len(fake_run_cost) == 2 * calls
    # other code: the stored results are not taken
    monkeypatch.setattr("patton.eval.store.fingerprint", lambda: "other code")
    assert main([*argv, "--resume"]) == 0
    assert "resume: 0 of 5" in capsys.readouterr().err
    assert len(fake_run_cost) == 3 * calls
    # a file that is not a stored task runs again, named (tests/test_repro_store.py)
    stored[0].write_text("{not json", encoding="utf-8")
    assert main([*argv, "--resume"]) == 0
    out, err = capsys.readouterr()
    assert without_wall_times(json.loads(out)) == without_wall_times(first)
    assert f"resume: {stored[0]}: not a stored task" in err


def test_store_keeps_a_task_whole_and_only_for_its_code(tmp_path):
    from patton.eval.store import Store, fingerprint

    assert fingerprint() == fingerprint() and len(fingerprint()) == 64
    store = Store(tmp_path / "t", code="abc")
    task = CostTask("llama3-8b", "patton", 10, 4, 8)
    checked = CostTask("llama3-8b", "patton", 10, 4, 8, check=True)  # the same key
    assert store.get(task) is None
    path = store.put(task, {"task": tasks.describe(task), "result": {"x": 1},
                            "wall_seconds": 0.5})
    assert store.path(checked) != path and store.get(checked) is None
    assert store.get(task)["result"] == {"x": 1}
    assert Store(tmp_path / "t", code="abd").get(task) is None
    assert [p.name for p in (tmp_path / "t").iterdir()] == [path.name]  # no temporary left


def test_fig7_on_the_per_channel_front_end(tmp_path, capsys, fake_run_cost, monkeypatch):
    monkeypatch.setattr("patton.cli.repro.QUICK", SMALL.with_(steps=30))
    code = main(["repro", "fig7", "--quick", "--workers", "1", "--out", str(tmp_path),
                 "--frontend", "per-channel", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    rec = json.loads(out)["fig7"]
    # every cost run went to the per-channel decoder (fake costs halve there: same ratios)
    assert {c[2] for c in fake_run_cost} == {"per_channel"}
    assert rec["frontend"] == "per_channel"
    assert rec["per_model"]["llama3-8b"]["absolute"]["patton"]["seconds"] == pytest.approx(2)
    md = (tmp_path / "repro.md").read_text()
    assert "front end: **per_channel**" in md and "--frontend per-channel" in md
    # the work each runtime did in the same steps is in the record and the table
    assert rec["per_model"]["llama3-8b"]["absolute"]["pimphony"]["decode_tokens"] == 987
    assert "| decode tokens |" in md and "| 987 |" in md and "| 1,234 |" in md


@pytest.mark.parametrize("argv, message", [
    (["fig10"], "invalid choice"),
    (["micro", "--workers", "0"], "--workers: must be 1..256"),
    (["micro", "--steps", "x"], "--steps"),
    (["micro", "--ray", " "], "--ray needs an address"),
    (["fig7", "--frontend", "both"], "invalid choice"),
])
def test_bad_options_exit_2(argv, message, capsys, tmp_path):
    with pytest.raises(SystemExit) as e:
        code = main(["repro", *argv, "--out", str(tmp_path)])
        raise SystemExit(code)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_unwritable_out_is_an_error_before_anything_runs(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("patton.cli.repro.reproduce", lambda *a, **k: pytest.fail("ran"))
    afile = tmp_path / "file"
    afile.write_text("x")
    for out, message in ((afile, "exists and is not a folder"),
                         (afile / "sub", "cannot write there")):
        assert repro_main(["repro", "micro", "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert message in err and str(out) in err and "Traceback" not in err


def test_ray_without_ray_is_an_error_before_anything_runs(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("patton.cli.repro.reproduce", lambda *a, **k: pytest.fail("ran"))
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "ray" else real(name, *a))
    assert main(["repro", "micro", "--ray", "local", "--out", str(tmp_path)]) == 2
    assert "pip install 'patton-testbench[ray]'" in capsys.readouterr().err


def test_every_figure_is_a_verb():
    assert NAMES == ("fig7", "fig8", "fig9", "micro", "sensitivity")
    from patton.cli import parser

    verb = next(a for a in parser()._subparsers._group_actions[0].choices["repro"]._actions
                if a.dest == "figure")
    assert verb.type.names == (*NAMES, "all")  # options.Choice: one spelling per value


def test_passes_group_what_one_run_serves():
    """Front ends, timing profiles, GPU models, standby accountings and models of one
    attention shape share a run; other runtimes, write commands, context limits, step counts
    and shapes do not; the order of first appearance is kept."""
    t = [CostTask("opt-6.7b", "patton", 100, 8, 16, frontend="shared"),
         CostTask("llama3-8b", "patton", 100, 32, 64),
         CostTask("qwen1.5-7b", "patton", 100, 8, 16, frontend="per_channel"),
         CostTask("opt-6.7b", "blockpim", 100, 8, 16),
         FragmentationTask(),
         CostTask("opt-6.7b", "patton", 200, 8, 16),
         CostTask("qwen1.5-7b", "patton", 100, 8, 16, frontend="shared"),
         CostTask("opt-6.7b", "patton", 100, 8, 16, timing="aimsim-2eb1ee0", gpu="calibrated",
                  standby="cent"),
         CostTask("opt-6.7b", "patton", 100, 8, 16, max_model_len=1024),
         CostTask("opt-6.7b", "patton-wo-cz", 100, 8, 16, token_op="mem"),
         CostTask("opt-6.7b", "patton-wo-cz", 100, 8, 16, token_op="abk")]
    units = tasks.passes(t)
    assert units == [tasks.CostPass((t[0], t[2], t[6], t[7])), t[1], t[3], t[4], t[5], t[8],
                     t[9], t[10]]
    assert units[0].key == ("cost opt-6.7b+qwen1.5-7b patton shared 0f28a07+per_channel "
                            "0f28a07+shared 2eb1ee0 2048 100")
    assert tasks.affinity(units[0])[0] == ("per_channel aimsim-0f28a07+shared aimsim-0f28a07+"
                                           "shared aimsim-2eb1ee0")


def test_a_new_figure_is_one_module_and_one_registry_line(tmp_path, capsys, monkeypatch):
    """A figure module defining its ``FIGURE``, named in the registry: ``patton repro`` runs
    its tasks, derives its record, writes its markdown and plot, prints its summary."""
    import importlib.util

    import patton.eval.figures as figures

    import patton.cli.repro

    source = tmp_path / "toy.py"
    source.write_text('''
from patton.eval.figures.figure import Figure
from patton.eval.tasks import FragmentationTask


def plot(rec, path):
    path.write_bytes(b"png")
    return path


FIGURE = Figure(
    name="toy", title="Toy: fragmentation in two", source="nowhere", paper={"latency": 1.5},
    tasks=lambda scale: [FragmentationTask(fragments=2)],
    derive=lambda pairs, scale: {"latency": pairs[0][1]["latency"]},
    summary=lambda rec: f"latency {rec['latency']:.2f}x (paper 1.5x)",
    markdown=lambda rec: [f"| latency | {rec['latency']:.2f}x |"], plot=plot)
''')
    spec = importlib.util.spec_from_file_location("patton.eval.figures.toy", source)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setitem(sys.modules, "patton.eval.figures.toy", module)
    registry = figures._registry(*NAMES, "toy")  # the one line
    monkeypatch.setattr(figures, "FIGURES", registry)
    monkeypatch.setattr(repro_lib, "FIGURES", registry)
    monkeypatch.setattr(report, "FIGURES", registry)
    monkeypatch.setattr(patton.cli.repro, "FIGURES", registry)
    monkeypatch.setattr(patton.cli.repro, "NAMES", tuple(registry))
    assert main(["repro", "toy", "--workers", "1", "--out", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert "toy         latency 1.17x (paper 1.5x)" in out
    assert json.loads((tmp_path / "o" / "repro.json").read_text())["toy"]["latency"] == \
        pytest.approx(1.17, abs=0.005)
    md = (tmp_path / "o" / "repro.md").read_text()
    assert "## Toy: fragmentation in two" in md and "Paper: nowhere" in md
    assert (tmp_path / "o" / "toy.png").read_bytes() == b"png"
    with pytest.raises(ImportError, match="not a Figure of a new name"):
        figures._registry("fig7", "fig7")
