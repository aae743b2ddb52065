"""`ablate table`'s plots, Table 2 and dashboard from fake records: deterministic bytes, gaps never drawn as zeros."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
from test_tables import BAD, GOOD, done, write_project, write_run

from ablations.records import write_atomic
from ablations.report import write_outputs
from ablations.report.collect import read_curves
from ablations.report.plots import draw_delta_bleu, draw_dev_ppl, pyplot, table_curves
from ablations.report.table2 import PAPER, SUSTAINED_FILE, paper_method_flops, papers_runs_counted
from ablations.report.table3 import build_table, verdict_cell
from ablations.sweep import expand, load_sweep, scales_for

SWEEP = """\
name: two
description: "base, one variation, big"
seeds: [0, 1]
base: {N: 2, d_model: 32, d_ff: 64, h: 4, d_k: 8, d_v: 8, P_drop: 0.1, eps_ls: 0.1, positional: sinusoidal, train_steps: 1000}
rows:
  - {id: base, group: base, overrides: {}, paper: {ppl: 4.92, bleu: 25.8, params_m: 65}}
  - {id: A1, group: A, overrides: {h: 1, d_k: 32, d_v: 32}, paper: {ppl: 5.29, bleu: 24.9, params_m: null}}
  - {id: D1, group: D, overrides: {P_drop: 0.0}, paper: {ppl: 5.77, bleu: 24.6}}
  - {id: big, group: big, overrides: {d_model: 64, d_ff: 128, P_drop: 0.3}, paper: {ppl: 4.33, bleu: 26.4, params_m: 213}}
"""
CURVES = "dev/bleu,dev/ppl,step,train/loss\n,,9,7.5\n,,19,6.0\n20.5,9.0,49,\n,,59,4.0\n24.0,6.5,99,\n"


def cost_metrics(bleu: float, ppl: float) -> dict:
    return {
        **done(bleu, ppl),
        "test_bleu": bleu - 1,
        "test_bleu_tok": bleu,
        "train_tokens": 1000,
        "train_seconds": 60.0,
        "cpu_model": "Test CPU",
        "torch_threads": 2,
    }


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """base (2 seeds, curves), A1 (one done, one failed), D1 missing, big (one done): every case a plot meets."""
    specs = write_project(tmp_path, "two", SWEEP)
    runs = tmp_path / "runs"
    for seed, bleu in ((0, 20.0), (1, 22.0)):
        folder = write_run(runs, specs["base", seed], "done", BAD, **cost_metrics(bleu, 5.0))
        write_atomic(folder / "logs" / "attempt-1" / "metrics.csv", CURVES)
    folder = write_run(
        runs,
        specs["A1", 0],
        "done",
        GOOD,
        **cost_metrics(25.0, 4.5),
        wandb_url="https://wandb.ai/team/attention-ablations/runs/abc123",
    )
    write_atomic(folder / "logs" / "attempt-1" / "metrics.csv", CURVES)
    write_run(runs, specs["A1", 1], "failed", error="boom")
    write_run(runs, specs["big", 0], "done", GOOD, **cost_metrics(26.0, 4.0))
    return tmp_path


def build(project: Path, out: str = "results"):
    table = build_table(project / "sweeps" / "two.yaml", "tiny", runs=project / "runs", out=project / out)
    return table, write_outputs(table, project / out)


def test_every_output_rebuilds_byte_for_byte(project):
    _, paths = build(project)
    names = {path.relative_to(project / "results").as_posix() for path in paths}
    assert {
        "plots/two_tiny_delta_bleu.png",
        "plots/two_tiny_dev_ppl.svg",
        "plots/two_tiny_params_bleu.svg",
        "table2_tiny.md",
        "table2_tiny.csv",
        "table2_tiny.tex",
        "two_tiny.json",
        "index.html",
    } <= names
    before = {path: path.read_bytes() for path in paths}
    for path in paths:
        if path.suffix in (".png", ".svg", ".html", ".json"):
            path.unlink()  # rebuilt from nothing, not kept because unchanged
    _, again = build(project)
    assert again == paths
    assert {path: path.read_bytes() for path in again} == before
    svg = (project / "results" / "plots" / "two_tiny_dev_ppl.svg").read_text(encoding="utf-8")
    assert "<dc:date>" not in svg and "Matplotlib v" not in svg  # nothing that changes with the clock or version
    assert b"Software" not in (project / "results" / "plots" / "two_tiny_dev_ppl.png").read_bytes()


def test_rows_without_a_done_run_are_labelled_never_drawn_as_zero(project):
    table, _ = build(project)
    plt = pyplot()
    figure = draw_delta_bleu(plt, table)
    ours = figure.axes[0]
    labels = {tick.get_text(): tick.get_position()[1] for tick in ours.get_yticklabels()}
    assert list(labels) == ["A1", "D1", "big"]
    bars = {round(patch.get_y() + patch.get_height() / 2): patch.get_width() for patch in ours.patches}
    assert bars[labels["A1"]] == pytest.approx(25.0 - 20.0)  # A1's one done seed against base's same seed
    assert labels["D1"] not in bars  # no bar of height zero for a missing row
    notes = {round(text.get_position()[1]): text.get_text().strip() for text in ours.texts}
    assert notes[labels["D1"]] == "missing"
    verdicts = figure.axes[2]  # big's seed 1 is missing: its verdict on seed 0 is a look on the way, and says so
    assert [tick.get_text() for tick in verdicts.get_yticklabels()] == [
        "unresolved (PPL)",
        "",
        "unresolved (PPL), interim",
    ]
    plt.close(figure)


def test_each_row_draws_its_seed_interval_and_verdict_and_a_wide_interval_is_cut_at_the_edge(project):
    sweep = load_sweep(project / "sweeps" / "two.yaml")
    specs = {(s.row, s.seed): s for s in expand(sweep, scales_for(sweep.path)["tiny"])}
    runs = project / "runs"
    shutil.rmtree(next(runs.rglob("A1-s1-*")))  # seed 1 of A1 failed in the fixture; here it is done
    write_run(runs, specs["A1", 1], "done", GOOD, **cost_metrics(26.0, 4.4))  # A1 − base: +5.0 and +4.0
    write_run(runs, specs["big", 1], "done", GOOD, **cost_metrics(2.0, 9.0))  # big − base: +6.0 and −20.0
    table, _ = build(project)
    plt = pyplot()
    figure = draw_delta_bleu(plt, table)
    ours, paper, verdicts = figure.axes
    ticks = {tick.get_text(): tick.get_position()[1] for tick in ours.get_yticklabels()}
    a1 = table.rows[1].evidence.bleu.ci
    assert a1 == pytest.approx((4.5 - 12.706 * 0.5, 4.5 + 12.706 * 0.5), abs=1e-3)
    lines = {
        round(line.get_ydata()[0]): line
        for line in ours.lines
        if line.get_linestyle() != "None" and len(line.get_xdata()) == 2
    }
    low, high = ours.get_xlim()
    assert tuple(lines[ticks["A1"]].get_xdata()) == pytest.approx(a1)  # within the widened axis: drawn whole
    big_line = lines[ticks["big"]].get_xdata()
    assert (big_line[0], big_line[1]) == pytest.approx((low, high))  # t(1) × 13 BLEU: wider than the axis, cut
    arrows = {line.get_marker() for line in ours.lines if round(line.get_ydata()[0]) == ticks["big"]}
    assert {"<", ">"} <= arrows
    assert [tick.get_text() for tick in verdicts.get_yticklabels()] == [verdict_cell(table.rows[i]) for i in (1, 2, 3)]
    plt.close(figure)


def test_curves_join_attempts_and_skip_the_final_evaluation(tmp_path):
    write_atomic(tmp_path / "curves-attempt-1.csv", "dev/ppl,step,train/loss\n,10,5.0\n9.0,20,\n,30,4.0\n")
    write_atomic(tmp_path / "curves-attempt-2.csv", "dev/ppl,step,train/loss\n,30,3.9\n6.0,40,\n")
    write_atomic(tmp_path / "curves-attempt-2-final.csv", "dev/ppl,step\n5.5,0\n")
    curves = read_curves(tmp_path)
    assert curves["dev/ppl"] == [(20, 9.0), (40, 6.0)]
    assert curves["train/loss"] == [(10, 5.0), (30, 3.9)]  # the resumed attempt's value for a repeated step
    assert curves["dev/bleu"] == []
    assert read_curves(None) == {"dev/ppl": [], "dev/bleu": [], "dev/f1": [], "train/loss": []}


# --------------------------------------------------------------------------------------------------------------
# Table 2
# --------------------------------------------------------------------------------------------------------------


def test_the_papers_method_gives_the_papers_figures():
    for row, paper in PAPER.items():
        assert paper_method_flops(paper.seconds, paper.devices, 9.5e12) == pytest.approx(paper.cost, rel=0.01), row
    with pytest.raises(ValueError, match="devices = 0"):
        paper_method_flops(10.0, 0, 1e9)


def test_the_papers_runs_counted_by_our_rule_are_computed_from_the_sweep():
    # README: the counted rule gives 9.4·10¹⁷ (base) and 9.6·10¹⁸ (big), 29 % and 42 % of the P100's rate.
    note = papers_runs_counted(load_sweep(Path(__file__).parents[1] / "sweeps" / "table3.yaml"))
    assert note.startswith(
        "Paper cost counted by the same rule: base 9.4e17 and big 9.6e18 (63M and 214M parameters, "
        "2.5e9 and 7.5e9 target tokens)"
    )
    assert note.endswith("assume about 29 % and 42 % of the P100's 9.5 TFLOPS.")


def test_table2_columns_from_records(project):
    build(project)
    text = (project / "results" / "table2_tiny.md").read_text(encoding="utf-8")
    rows = {
        line.split(" | ")[0].strip("| "): line.split(" | ")
        for line in text.splitlines()
        if line.startswith("| Transformer")
    }
    base = rows["Transformer (base)"]
    assert base[1:6] == ["20.0", "21.0", "27.3", "100", "1.0"]  # test BLEU means of the two seeds, 60 s of training
    assert base[6] == ""  # no sustained FLOP/s recorded for this CPU: blank, and a note says so
    assert "no sustained FLOP/s recorded for cpu:Test CPU" in text
    write_atomic(
        project / "results" / SUSTAINED_FILE, json.dumps({"cpu:Test CPU": {"flops_per_second": 1e9, "method": "test"}})
    )
    build(project)
    text = (project / "results" / "table2_tiny.md").read_text(encoding="utf-8")
    base = next(line.split(" | ") for line in text.splitlines() if line.startswith("| Transformer (base)"))
    assert base[6] == "1.20e11"  # 60 s × 2 threads × 1e9 FLOP/s
    csv_text = (project / "results" / "table2_tiny.csv").read_text(encoding="utf-8")
    assert "base,done,2/2,20.0000,21.0000,27.3,100,60.0,2,Test CPU (thread),1.0000e+09,1.2000e+11" in csv_text


def test_a_sweep_without_base_and_big_writes_no_table2(project, tmp_path):
    text = SWEEP.rsplit("  - {id: big", 1)[0]
    (project / "sweeps" / "two.yaml").write_text(text, encoding="utf-8")
    build(project)
    assert not (project / "results" / "table2_tiny.md").exists()


# --------------------------------------------------------------------------------------------------------------
# The dashboard
# --------------------------------------------------------------------------------------------------------------


def dashboard_data(index: Path) -> list[dict]:
    text = index.read_text(encoding="utf-8")
    start = text.index('<script type="application/json" id="dashboard-data">') + len(
        '<script type="application/json" id="dashboard-data">'
    )
    return json.loads(text[start : text.index("</script>", start)].replace("<\\/", "</"))


def test_dashboard_has_every_run_its_config_difference_and_wandb_link(project):
    build(project)
    index = project / "results" / "index.html"
    (table,) = dashboard_data(index)
    runs = {(run["row"], run["seed"]): run for run in table["runs"]}
    assert set(runs) == {(row, seed) for row in ("base", "A1", "D1", "big") for seed in (0, 1)}
    assert runs["A1", 0]["config_diff"] == [["model.h", "4", "1"], ["model.d_k", "4", "16"], ["model.d_v", "4", "16"]]
    assert runs["base", 1]["config_diff"] == []  # the same seed's base: only the seed would differ
    assert runs["A1", 0]["wandb_url"] == "https://wandb.ai/team/attention-ablations/runs/abc123"
    assert runs["base", 0]["wandb_url"] is None
    assert (runs["A1", 1]["status"], runs["D1", 0]["status"]) == ("failed", "missing")
    assert runs["D1", 0]["record"] is None and runs["D1", 0]["curves"] == {}
    assert runs["base", 0]["curves"]["dev/ppl"] == [[49, 9.0], [99, 6.5]]
    assert (project / "results" / runs["A1", 1]["record"] / "metrics.json").is_file()
    html = index.read_text(encoding="utf-8")
    for kind in ("delta_bleu", "dev_ppl", "params_bleu"):
        assert f'src="plots/two_tiny_{kind}.svg"' in html
    assert 'id="table2-tiny"' in html
    # Offline: no script, style or image from elsewhere.
    assert "<link" not in html and 'src="http' not in html and "@import" not in html


def test_dashboard_covers_every_table_in_the_results_folder(project):
    build(project)
    other = SWEEP.replace("name: two", "name: other")
    (project / "sweeps" / "other.yaml").write_text(other, encoding="utf-8")
    table = build_table(project / "sweeps" / "other.yaml", "tiny", runs=project / "runs", out=project / "results")
    write_outputs(table, project / "results")
    ids = [table["id"] for table in dashboard_data(project / "results" / "index.html")]
    assert ids == ["other_tiny", "two_tiny"]


CHROMIUM = Path("/usr/bin/chromium")


@pytest.mark.slow
@pytest.mark.skipif(
    not CHROMIUM.exists(), reason="Debian's chromium is not installed (apt-get install chromium); .ci/run installs it"
)
def test_dashboard_renders_in_a_headless_browser(project, tmp_path):
    import re
    import subprocess

    build(project)
    index = project / "results" / "index.html"
    profile = tmp_path / "chromium-profile"
    result = subprocess.run(
        [
            str(CHROMIUM),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            f"--user-data-dir={profile}",
            "--virtual-time-budget=5000",
            "--dump-dom",
            index.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    dom = result.stdout
    assert result.returncode == 0 and dom, result.stderr[-2000:]
    status = re.search(r'<p id="render-status"[^>]*>', dom).group(0)
    assert 'data-runs="8"' in status  # the per-run sections were built by the page's script
    assert 'data-images="3"' in status and 'data-images-loaded="3"' in status  # every plot loaded from disk
    assert len(re.findall(r'<details class="run"', dom)) == 8
    assert dom.count('class="config-diff"') >= 3  # A1's two seeds and big's run differ from base
    assert 'class="wandb"' in dom and "polyline" in dom  # a wandb link and a drawn curve
    assert '<td class="l">D1</td>' in dom  # the sweep table as an HTML table
    assert 'id="table2-tiny"' in dom and '<td class="l">big</td>' in dom  # and Table 2


def test_dev_ppl_draws_the_rows_of_bases_group_and_short_runs_final_point(tmp_path):
    text = SWEEP.replace(
        "  - {id: A1,", "  - {id: pre, group: base, overrides: {P_drop: 0.2}, paper: {bleu: 25.0}}\n  - {id: A1,"
    )
    specs = write_project(tmp_path, "two", text)
    runs = tmp_path / "runs"
    folder = write_run(runs, specs["base", 0], "done", BAD, **cost_metrics(20.0, 5.0))
    write_atomic(folder / "logs" / "attempt-1" / "metrics.csv", CURVES)
    write_run(runs, specs["pre", 0], "done", GOOD, **cost_metrics(21.0, 7.0))  # no dev point: shorter than val_every
    table, _ = build(tmp_path)
    figure = draw_dev_ppl(pyplot(), table, table_curves(table))
    (axis,) = [axis for axis in figure.axes if axis.get_title() == "group base"]
    lines = {line.get_label(): line for line in axis.get_lines()}
    assert list(lines["pre"].get_xdata()) == [100] and list(lines["pre"].get_ydata()) == [7.0]
    assert list(lines["base"].get_xdata()) == [49, 99]  # base dashed beside its group's other rows


def test_a_tables_overrides_are_in_each_plots_title(project):
    """A variant's plots (runs trained with `--set`) must not read as the preset's: each title names the overrides."""
    table, _ = build(project)
    variant = dataclasses.replace(table, overrides=(("model.P_drop", "0.1"),))
    plt = pyplot()
    curves = table_curves(table)
    for draw in (draw_delta_bleu, lambda plt, table: draw_dev_ppl(plt, table, curves)):
        preset, varied = draw(plt, table), draw(plt, variant)
        assert preset.get_suptitle().startswith("two at tiny: ")
        assert varied.get_suptitle().startswith("two at tiny with model.P_drop=0.1: ")
        plt.close(preset)
        plt.close(varied)
