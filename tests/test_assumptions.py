"""The evaluation's assumptions (``patton.eval.assumptions``) and the sensitivity figure
(``patton.eval.figures.sensitivity``): the paper configuration, how a task carries its
assumptions, and the rows, distances and closest combination derived from known results."""

from __future__ import annotations

import math

import pytest
from patton.eval.assumptions import AXES, PAPER, Assumptions, describe, parse
from patton.eval.figures import common, sensitivity
from patton.eval.plan import FULL, QUICK
from patton.eval.tasks import CostTask
from patton.eval.tasks import describe as describe_task

from patton.cli import main


def test_the_paper_configuration_is_every_axis_paper_value():
    assert PAPER == Assumptions()
    assert PAPER.as_dict() == {name: a.paper for name, a in AXES.items() if not a.opt_in}
    assert {a.name for a in AXES.values() if a.varied and not a.opt_in} == {
        "frontend", "timing", "wo_cz_write", "standby", "context", "gpu"}
    assert [a.name for a in AXES.values() if a.opt_in] == ["device_ext"]
    assert all(a.decided_by for a in AXES.values())
    assert FULL.assumptions == QUICK.assumptions == PAPER


def test_parse_and_its_errors():
    a = parse(["timing=aimsim-0f28a07", "gpu=analytic"])
    assert a.differs(PAPER) == ["timing", "gpu"] and a.frontend == "shared"
    for items, message in ((["timing"], "axis=value"), (["gpu=h100"], "gpu='h100': not one"),
                           (["speed=fast"], "unknown assumption 'speed'"),
                           (["gpu=analytic", "gpu=calibrated"], "names 'gpu' twice")):
        with pytest.raises(ValueError, match=message):
            parse(items)
    with pytest.raises(ValueError, match="not one of"):
        Assumptions(standby="none")


def test_a_cost_task_carries_its_assumptions():
    a = PAPER.with_(wo_cz_write="abk", standby="per_channel", context="common")
    t = common.cost_task(QUICK, "opt-6.7b", "patton-wo-cz", a)
    assert (t.token_op, t.standby, t.timing, t.gpu, t.max_model_len) == (
        "abk", "per_channel", "aimsim-2eb1ee0", "calibrated", 1024)
    assert common.cost_task(QUICK, "opt-6.7b", "patton", a).token_op is None
    assert common.context_limit("opt-6.7b", "patton", "paper") == 2048
    assert common.context_limit("opt-6.7b", "neupims", "paper") == 1024
    assert common.context_limit("llama3-8b", "neupims", "common") == 2048


def _fake(task: CostTask) -> dict:
    """A cost whose every figure depends on the assumptions in known ways: the timing profile
    scales every part, ``mem`` writes make wo-CZ's Value writes 4x, ``cent`` standby
    halves the baselines' energy, ``common`` context halves OPT's NeuPIMs time."""
    s = 2.0 if task.timing == "aimsim-0f28a07" else 1.0
    v = 4.0 if task.token_op == "mem" else 1.0
    base = 1.0 if task.runtime.startswith("patton") else 2.0
    if task.runtime == "neupims" and task.max_model_len == 1024 and task.model == "opt-6.7b":
        base = 1.0
    baseline = not task.runtime.startswith("patton")
    joules = base * (0.5 if task.standby == "cent" and baseline else 1.0)
    parts = {p: {"seconds": s * base * (v if p == "v_write" else 1.0), "joules": joules}
             for p in common.PARTS}
    return {"parts": parts, "recompute_seconds": 0.5 if task.gpu == "analytic" else 0.25,
            "recompute_joules": 0.0, "checked_programs": 3, "violations": 0, "mismatches": 0}


def test_sensitivity_rows_and_closest_from_known_results(tmp_path):
    scale = QUICK.with_(sensitivity_steps=50)
    tasks = sensitivity.tasks(scale)
    assert all(isinstance(t, CostTask) and t.steps in (50, 100) for t in tasks)
    # at the headline's 100 steps only the pricing axes vary: one serving run per runtime
    full = [t for t in tasks if t.steps == 100]
    assert {(t.gpu, t.standby) for t in full} == {("calibrated", "cent"),
                                                  ("analytic", "cent"),
                                                  ("calibrated", "per_channel")}
    assert {(t.frontend, t.timing, t.max_model_len > 1024 or t.runtime == "neupims")
            for t in full} == {("shared", "aimsim-2eb1ee0", True)}
    assert len(set(tasks)) == len(tasks)
    rec = sensitivity.derive([(t, _fake(t)) for t in tasks], scale)
    rows = rec["rows"]
    assert [(r["axis"], r["value"]) for r in rows] == [("none", "paper configuration")] + [
        (a.name, v) for a in AXES.values() if not a.opt_in for v in a.values if v != a.paper]
    by = {(r["axis"], r["value"]): r for r in rows}
    base = rows[0]
    # wo-CZ's Value writes by WR_ABK are 4x faster than by W MEM: the speedup falls 4x
    assert by["wo_cz_write", "abk"]["fig8_value_write_speedup"] == pytest.approx(
        base["fig8_value_write_speedup"] / 4)
    assert by["wo_cz_write", "abk"]["fig7_speedup_all"] == base["fig7_speedup_all"]
    # per-channel standby doubles the baselines' energy
    assert by["standby", "per_channel"]["fig7_energy_gain_all"] == pytest.approx(
        2 * base["fig7_energy_gain_all"])
    for r in rows:
        assert r["checked_programs"] > 0 and r["violations"] == r["mismatches"] == 0
        assert r["distance"] == pytest.approx(sensitivity.distance(r))
    assert rec["combinations"] == 2 ** 6
    closest = rec["closest"]
    assert closest["distance"] <= min(r["distance"] for r in rows)
    assert set(rec) >= set(sensitivity.PAPER)
    one = {k: 1.0 for k in sensitivity.HEADLINES}
    one.update(fig8_latency_reduction=0.0, fig8_energy_reduction=0.0)
    expected = sum(abs(math.log(1.0 / (1 / (1 - p) if kind == "%" else p)))
                   for (k, kind), p in zip(sensitivity.HEADLINES.items(),
                                           sensitivity.PAPER.values(), strict=True)) / 5
    assert sensitivity.distance(one) == pytest.approx(expected)
    heads = rec["at_headline_steps"]
    assert heads["steps"] == 100 and [(r["axis"], r["value"]) for r in heads["rows"]] == [
        ("none", "paper configuration"), ("gpu", "analytic"), ("standby", "per_channel")]
    g = heads["rows"][1]
    assert g["fig7_speedup_all"] != heads["rows"][0]["fig7_speedup_all"]  # recompute 2x
    assert g["fig8_latency_reduction"] == heads["rows"][0]["fig8_latency_reduction"]
    md = "\n".join(sensitivity.markdown(rec))
    assert "| wo_cz_write | abk |" in md and "Closest of the 64 combinations" in md
    png = sensitivity.plot(rec, tmp_path / "sensitivity.png")
    assert png.stat().st_size > 10_000 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_an_opt_in_axis_shows_only_where_asked_for():
    """The device extension set is a what-if: absent from records at its paper value, from the
    axes' table and from the combinations unless named; named, it adds rows on both front
    ends, whose PATTON runs use the extension and whose baselines share the default runs."""
    wr16 = PAPER.with_(device_ext="aim+wr16")
    assert "device_ext" not in PAPER.as_dict() and wr16.as_dict()["device_ext"] == "aim+wr16"
    assert "device_ext" not in [a["axis"] for a in describe()]
    assert [a["axis"] for a in describe(("device_ext",))][-1] == "device_ext"
    for runtime in ("patton", "patton-no-o2v"):  # the variants with a Commit Zone
        assert common.cost_task(QUICK, "llama3-8b", runtime, wr16).device_ext == "aim+wr16"
    for runtime in ("patton-wo-cz", "attacc", "blockpim"):
        assert common.cost_task(QUICK, "llama3-8b", runtime, wr16).device_ext == "aim"
    abk = wr16.with_(wo_cz_write="abk")  # wo-CZ's all-bank writes leave rows open on wr16
    assert common.cost_task(QUICK, "llama3-8b", "patton-wo-cz", abk).device_ext == "aim+wr16"
    plain = QUICK.with_(sensitivity_steps=50)
    scale = plain.with_(what_if=("device_ext",))
    added = set(sensitivity.tasks(scale)) - set(sensitivity.tasks(plain))
    assert {(t.runtime, t.device_ext) for t in added} == {("patton", "aim+wr16")}
    assert {t.frontend for t in added} == {"shared", "per_channel"}
    assert all("device_ext" not in describe_task(t) for t in sensitivity.tasks(plain))
    assert describe_task(next(iter(added)))["device_ext"] == "aim+wr16"
    rec = sensitivity.derive([(t, _fake(t)) for t in sensitivity.tasks(scale)], scale)
    assert [(r["axis"], r["value"]) for r in rec["rows"][-2:]] == [
        ("device_ext", "aim+wr16"), ("device_ext", "aim+wr16, frontend=per_channel")]
    assert rec["combinations"] == 2 ** 6
    with pytest.raises(ValueError, match="not an opt-in axis"):
        sensitivity.tasks(plain.with_(what_if=("gpu",)))


def test_assume_on_the_command_line(tmp_path, capsys):
    for argv, message in ((["--assume", "frontend=shared", "--frontend", "per-channel"],
                           "--frontend and --assume frontend=... both given"),
                          (["--assume", "device-ext=aim", "--device-ext", "aim+wr16"],
                           "--device-ext and --assume device-ext=... both given"),
                          (["--assume", "device_ext=aim", "--device-ext", "aim+wr16"],
                           "--device-ext and --assume device-ext=... both given"),
                          (["--what-if", "device-ext", "--what-if", "device_ext"],
                           "--what-if names an axis twice")):
        assert main(["repro", "micro", "--out", str(tmp_path), *argv]) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err
    # an axis or value that is none is a usage error listing them, as the command spells them
    for argv, message in ((["--assume", "gpu=h100"],
                           "gpu: invalid value 'h100' (choose from 'calibrated', 'analytic')"),
                          (["--assume", "wo_cz=abk"], "unknown axis 'wo_cz' in 'wo_cz=abk' "
                                                      "(choose from 'frontend', 'timing', "
                                                      "'wo-cz-write', 'cz-read',"),
                          (["--assume", "gpu"], "takes AXIS=VALUE, got 'gpu'"),
                          (["--what-if", "gpu"], "invalid choice: 'gpu' (choose from "
                                                 "'device-ext')")):
        with pytest.raises(SystemExit) as usage:
            main(["repro", "micro", "--out", str(tmp_path), *argv])
        err = capsys.readouterr().err
        assert usage.value.code == 2 and message in err and "Traceback" not in err, err


def test_assume_takes_either_spelling_as_the_same_assumption():
    """``--assume wo-cz-write=abk`` (the command line's spelling) and ``wo_cz_write=abk`` (the
    records') are the same assumption; the second with a note."""
    from patton.cli import parser

    def assumed(*argv: str) -> list[str]:
        return parser().parse_args(["repro", "micro", *argv]).assume

    assert assumed("--assume", "wo-cz-write=abk", "--assume", "frontend=per-channel") == [
        "wo_cz_write=abk", "frontend=per_channel"]
    assert parse(assumed("--assume", "standby=per-channel")) == PAPER.with_(
        standby="per_channel")


def test_the_old_spelling_is_noted(capsys):
    from patton.cli import parser

    args = parser().parse_args(["repro", "micro", "--assume", "wo_cz_write=abk",
                                "--assume", "standby=per_channel", "--what-if", "device_ext"])
    assert args.assume == ["wo_cz_write=abk", "standby=per_channel"]
    assert args.what_if == ["device_ext"]
    assert capsys.readouterr().err.splitlines() == [
        "note: wo_cz_write is spelled wo-cz-write", "note: per_channel is spelled per-channel",
        "note: device_ext is spelled device-ext"]


def test_the_docs_table_lists_every_axis_as_the_code_does():
    from pathlib import Path

    text = (Path(__file__).parents[1] / "docs" / "evaluation.md").read_text(encoding="utf-8")
    for a in AXES.values():
        values = ", ".join(f"`{v}`" for v in a.values)
        assert f"| `{a.name}` | {values} | **`{a.paper}`** | {a.decided_by} |" in text, a.name
