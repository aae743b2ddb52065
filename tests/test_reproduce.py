"""`ablate reproduce`: today's code retrains a recorded run's first steps as the record says they went."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pytest

from ablations import cli, reproduce
from ablations.report.collect import read_curves

ROOT = Path(__file__).resolve().parent.parent
RECORDS = ROOT / "results" / "records"
TINY_BASE = RECORDS / "table3_tiny" / "base-s0-148de9d69b65"  # trained before the native dropout noise (207d384)
CONVERGED_C1 = RECORDS / "table3_converged" / "C1-s0-2d12764f6d61"  # fp32, the table the sweeps continue


def test_the_verdict_is_identical_same_run_or_differs_by_the_relative_tolerance():
    recorded = [(9, 8.0), (19, 7.0), (29, 6.0)]
    assert reproduce.compare(recorded, recorded, 1e-3).verdict == "identical"
    drifted = [(9, 8.0), (19, 7.0 * (1 + 5e-4)), (29, 6.0)]
    assert reproduce.compare(recorded, drifted, 1e-3).verdict == "same run"
    assert reproduce.compare(recorded, drifted, 1e-4).verdict == "differs"
    assert reproduce.compare(recorded, [(9, float("nan"))], 1e-3).verdict == "differs"
    only_common = reproduce.compare(recorded, [(19, 7.0), (39, 1.0)], 1e-3)
    assert only_common.steps == (19,) and only_common.verdict == "identical"
    with pytest.raises(ValueError, match="logged no training loss at a common step"):
        reproduce.compare(recorded, [(39, 1.0)], 1e-3)


def test_a_run_folder_s_logs_read_as_its_published_curves(tmp_path):
    """A run folder (logs/attempt-N/metrics.csv) and its published record (curves-attempt-N.csv) are one curve."""
    run = tmp_path / "run"
    for published in sorted(TINY_BASE.glob("curves-*.csv")):
        attempt = published.stem.removeprefix("curves-")
        (run / "logs" / attempt).mkdir(parents=True)
        shutil.copy(published, run / "logs" / attempt / "metrics.csv")
    assert read_curves(run) == read_curves(TINY_BASE)
    assert len(read_curves(run)["train/loss"]) > 10


def test_the_command_prints_each_step_and_exits_1_when_the_run_differs(tmp_path, monkeypatch, capsys):
    recorded = reproduce.recorded_loss(TINY_BASE, 40)
    assert [step for step, _ in recorded] == [9, 19, 29, 39]
    monkeypatch.setattr(reproduce, "retrain", lambda config, steps, threads, workdir: recorded)
    assert cli.main(["reproduce", str(TINY_BASE), "--steps", "40"]) == 0
    out = capsys.readouterr().out
    assert "verdict: identical" in out and "commit aba99bd" in out
    assert [line.split()[0] for line in out.splitlines() if line.endswith("  0.0e+00")] == ["9", "19", "29", "39"]
    off = [(step, value * 1.01 if step == 29 else value) for step, value in recorded]
    monkeypatch.setattr(reproduce, "retrain", lambda config, steps, threads, workdir: off)
    assert cli.main(["reproduce", str(TINY_BASE), "--steps", "40"]) == 1
    assert "verdict: differs (largest relative difference 1.0e-02" in capsys.readouterr().out


def test_what_cannot_be_replayed_is_refused_before_training(tmp_path, capsys):
    assert cli.main(["reproduce", str(tmp_path)]) == 2
    assert f"{tmp_path}: no config.yaml" in capsys.readouterr().err
    assert cli.main(["reproduce", str(TINY_BASE), "--steps", "5"]) == 2
    assert "no training loss logged before step 5; --steps must reach the first (10)" in capsys.readouterr().err
    assert cli.main(["reproduce", str(TINY_BASE), "--rtol", "0"]) == 2
    assert "expected a positive number of steps and tolerance" in capsys.readouterr().err


@pytest.mark.slow
def test_today_s_code_trains_a_converged_record_as_recorded(tmp_path, monkeypatch):
    """The sweeps continue the converged table from its committed records by run id: that is sound only while this
    code still trains those runs as they were trained. It writes nowhere but a temporary folder, deleted after."""
    published = {path: path.read_bytes() for path in CONVERGED_C1.rglob("*")}
    (tmp_path / "cwd").mkdir()
    (tmp_path / "tmp").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    comparison, metrics = reproduce.reproduce(CONVERGED_C1, steps=20)
    assert metrics["status"] == "done" and comparison.steps == (9, 19)
    assert comparison.verdict in ("identical", "same run"), comparison
    assert not any((tmp_path / "cwd").iterdir()) and not list((tmp_path / "tmp").glob("ablate-reproduce-*"))
    assert {path: path.read_bytes() for path in CONVERGED_C1.rglob("*")} == published


def with_native_kernels(record: Path, destination: Path, on: bool) -> Path:
    """A copy of a published record whose metrics.json says the native kernels were `on` (or off)."""
    shutil.copytree(record, destination)
    metrics = json.loads((destination / "metrics.json").read_text())
    (destination / "metrics.json").write_text(json.dumps({**metrics, "native_kernels": on}))
    return destination


def test_a_record_replays_with_the_native_kernels_on_or_off_as_it_says(tmp_path, monkeypatch, capsys):
    from lightning_modules import native

    seen = []
    monkeypatch.setattr(
        reproduce, "retrain", lambda config, steps, threads, workdir: seen.append(native.enabled) or [(9, 1.0)]
    )
    off = with_native_kernels(TINY_BASE, tmp_path / "off", False)
    assert cli.main(["reproduce", str(off), "--steps", "10"]) == 1
    assert "native kernels off)" in capsys.readouterr().out and seen == [False]
    before = native.enabled
    with native.switched(False):  # the record's word beats the environment's
        reproduce.reproduce(with_native_kernels(TINY_BASE, tmp_path / "on", True), steps=10)
        assert native.enabled is False
    assert seen == [False, True] and native.enabled is before
    with native.switched(False):  # a record that does not say: as ATTENTION_NATIVE_KERNELS says
        reproduce.reproduce(TINY_BASE, steps=10)
    assert seen == [False, True, False]


def test_records_say_whether_the_native_kernels_drew_their_dropout_masks():
    from ablations.provenance import hardware
    from lightning_modules import native

    assert hardware()["native_kernels"] is native.available()
    with native.switched(False):
        assert hardware()["native_kernels"] is False


@pytest.mark.slow
def test_the_tiny_records_replay_with_torch_s_dropout_and_not_with_the_native_masks(tmp_path):
    """The tiny records were trained before the native dropout noise (207d384), with torch's dropout: a copy that
    says so (`native_kernels: false`) is retrained with its dropout masks drawn again, to float rounding: `identical`
    on the AVX-512 AMD EPYC where this was first checked, 7e-7 relative at most on an AVX2-only one (4 December
    2026), whose kernels round differently. With the native masks the same seed trains another run: 1.8e-3 apart by
    step 9, far past rounding."""
    from lightning_modules import native

    torch_dropout, _ = reproduce.reproduce(with_native_kernels(TINY_BASE, tmp_path / "off", False), steps=20)
    assert max(torch_dropout.relative) < 1e-5, torch_dropout
    if native.available():
        native_masks, _ = reproduce.reproduce(with_native_kernels(TINY_BASE, tmp_path / "on", True), steps=20)
        assert max(native_masks.relative) > 1e-4, native_masks
