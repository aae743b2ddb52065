"""`ablate table`'s selectors (those of `ablate sweep`), `--published` and `--partial`, from fake run records."""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import pytest
from test_tables import BAD, GOOD, SWEEP, done, write_project, write_run

from ablations.report import add_table_parser, describe_overrides
from ablations.sweep import expand, load_sweep, paper_units, scales_for

SETS = {"train.max_steps": 50}
STEM = "mini_tiny_train-max_steps-50"  # a table of runs trained with overrides is named after them


def table(project: Path, *extra: str) -> int:
    parser = argparse.ArgumentParser()
    add_table_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(
        ["table", str(project / "sweeps" / "mini.yaml"), "--scale", "tiny", "--runs", str(project / "runs")]
        + ["--out", str(project / "out"), *extra]
    )
    return args.handler(args)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """Every run of the mini sweep done, trained with `--set train.max_steps=50`."""
    write_project(tmp_path, "mini", SWEEP)
    sweep = load_sweep(tmp_path / "sweeps" / "mini.yaml")
    for spec in expand(sweep, scales_for(sweep.path)["tiny"], sets=SETS):
        write_run(tmp_path / "runs", spec, "done", GOOD if spec.row == "A1" else BAD, **done(20.0 + spec.seed, 5.0))
    return tmp_path


def test_the_sweeps_set_finds_its_runs(project, capsys):
    assert table(project) == 1  # without the --set, the runs of the sweep's own steps are missing
    err = capsys.readouterr().err
    assert "10 of 10 selected runs have no finished record" in err and "--partial" in err
    assert not (project / "out").exists()  # nothing written
    assert table(project, "--set", "train.max_steps=50") == 0
    markdown = (project / "out" / f"{STEM}.md").read_text(encoding="utf-8")
    assert "- **Runs**: 10 done\n" in markdown and "- **Selection**: --set train.max_steps=50" in markdown
    assert markdown.startswith("# mini at scale tiny with train.max_steps=50\n")
    assert "- **Overrides**: train.max_steps=50\n" in markdown
    settings = {"train.precision": "bf16-mixed"}
    assert (
        describe_overrides((("train.precision", "32-true"),), settings)
        == "train.precision=32-true (the preset's: bf16-mixed)"
    )


def test_a_table_of_runs_trained_with_overrides_never_replaces_the_presets_own(project):
    out = project / "out"
    out.mkdir()
    (out / "mini_tiny.md").write_text("the preset's table\n")
    assert table(project, "--set", "train.max_steps=50") == 0
    assert (out / "mini_tiny.md").read_text() == "the preset's table\n"
    written = {path.name for path in out.rglob("*") if path.is_file()}
    assert {f"{STEM}{suffix}" for suffix in (".md", ".csv", ".tex", ".json")} <= written
    plots = {name for name in written if name.endswith(".svg")}
    assert plots and all(name.startswith(f"{STEM}_") for name in plots)
    assert "mini_tiny.json" not in written and not any(name.startswith("mini_tiny_dev") for name in written)


def test_the_hyperparameter_cells_show_the_rows_as_their_runs_trained(project):
    """A `--set` that changes a hyperparameter changes its column, in the paper's units: a variant table never shows
    the sweep's value for what its runs did not train with."""
    assert table(project, "--set", "train.max_steps=50") == 0
    document = json.loads((project / "out" / f"{STEM}.json").read_text(encoding="utf-8"))
    steps = [key["key"] for key in document["columns"]].index("train_steps")
    assert {row[1]: row[steps] for row in document["rows"]} == {
        "base": "500",
        **dict.fromkeys(["A1", "A2", "C_1", "D1"], ""),
    }
    sweep = load_sweep(project / "sweeps" / "mini.yaml")
    tiny = scales_for(sweep.path)["tiny"]
    as_trained = paper_units(sweep, sweep.row("D1"), tiny, {"P_drop": 0.3, "model.d_model": 16, "train.max_steps": 50})
    assert (as_trained.model.P_drop, as_trained.model.d_model, as_trained.train.max_steps) == (0.3, 32, 500)
    assert paper_units(sweep, sweep.row("D1")).model.P_drop == 0.0
    with pytest.raises(ValueError, match="run units, so bringing them back needs the scale"):
        paper_units(sweep, sweep.row("D1"), sets={"P_drop": 0.3})


def test_rows_and_seeds_select_as_sweep_does_base_always_in(project):
    assert table(project, "--set", "train.max_steps=50", "--rows", "A1,D1", "--seeds", "1") == 0
    markdown = (project / "out" / f"{STEM}.md").read_text(encoding="utf-8")
    rows = [line.split(" | ")[1] for line in markdown.splitlines() if line.startswith("| ") and " | " in line]
    assert [row for row in rows if row in ("base", "A1", "A2", "C_1", "D1")] == ["base", "A1", "D1"]
    assert "- **Runs**: 3 done\n" in markdown
    # the rows selected away are named, never counted among the verdicts
    verdicts = next(line for line in markdown.splitlines() if line.startswith("- Verdicts:"))
    assert "A2" not in verdicts and "C_1" not in verdicts
    absent = next(line for line in markdown.splitlines() if line.startswith("- Not in this table"))
    assert "A2" in absent and "A1" not in absent and "D1" not in absent


def test_partial_writes_the_table_with_the_gaps(project, capsys):
    shutil.rmtree(next((project / "runs" / "mini" / "tiny").glob("D1-s1-*")))
    assert table(project, "--set", "train.max_steps=50") == 1
    assert table(project, "--set", "train.max_steps=50", "--partial") == 0
    assert "1 missing" in (project / "out" / f"{STEM}.md").read_text(encoding="utf-8")
    assert "--partial: 1 of 10 selected runs have no finished record" in capsys.readouterr().err
    # a row with no finished run at all is named, and neither judged nor counted as unresolved
    for folder in (project / "runs" / "mini" / "tiny").glob("D1-s*-*"):
        shutil.rmtree(folder)
    assert table(project, "--set", "train.max_steps=50", "--partial") == 0
    lines = (project / "out" / f"{STEM}.md").read_text(encoding="utf-8").splitlines()
    assert "- No finished run yet, so not judged (and not counted): D1." in lines
    assert "D1" not in next(line for line in lines if line.startswith("- Verdicts:"))
    statistics = json.loads((project / "out" / f"{STEM}.json").read_text(encoding="utf-8"))["statistics"]
    assert next(row for row in statistics if row["row"] == "D1")["verdict"] is None


def test_a_verdict_without_a_diverged_seed_says_so(project):
    metrics = next((project / "runs" / "mini" / "tiny").glob("D1-s1-*")) / "metrics.json"
    record = json.loads(metrics.read_text(encoding="utf-8"))
    metrics.write_text(json.dumps({**record, "status": "diverged", "diverged_step": 7}), encoding="utf-8")
    assert table(project, "--set", "train.max_steps=50") == 0  # a diverged run is finished: no --partial needed
    lines = (project / "out" / f"{STEM}.md").read_text(encoding="utf-8").splitlines()
    note = next(line for line in lines if line.startswith("- Judged on their done seeds only"))
    assert note.endswith(": D1 (s1 diverged).")
    assert "1/2 (s1 diverged)" in next(line for line in lines if line.startswith("|") and " D1 |" in line)


def test_a_row_that_shares_no_seed_with_base_is_named_not_judged(project):
    runs = project / "runs" / "mini" / "tiny"
    for folder in (*runs.glob("base-s1-*"), *runs.glob("D1-s0-*")):  # base has only seed 0, D1 only seed 1
        shutil.rmtree(folder)
    assert table(project, "--set", "train.max_steps=50", "--partial") == 0
    lines = (project / "out" / f"{STEM}.md").read_text(encoding="utf-8").splitlines()
    assert "- Finished, but no seed in common with base's finished runs, so not judged: D1." in lines
    statistics = json.loads((project / "out" / f"{STEM}.json").read_text(encoding="utf-8"))["statistics"]
    assert next(row for row in statistics if row["row"] == "D1")["verdict"] is None


def test_published_records_only_with_published_and_counted(project, capsys):
    assert table(project, "--set", "train.max_steps=50") == 0  # publishes every record under out/records/
    shutil.rmtree(project / "runs")
    capsys.readouterr()
    assert table(project, "--set", "train.max_steps=50") == 1
    err = capsys.readouterr().err
    assert "10 of them are published records" in err and "add --published" in err
    assert table(project, "--set", "train.max_steps=50", "--published") == 0
    markdown = (project / "out" / f"{STEM}.md").read_text(encoding="utf-8")
    assert "- **Runs**: 10 done (10 from published records)\n" in markdown
