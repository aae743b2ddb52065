"""A sweep continued on a fresh clone takes the committed records under results/records/ and trains 0 of them."""

from __future__ import annotations

from pathlib import Path

from ablations import cli

ROOT = Path(__file__).resolve().parent.parent


def test_a_sweep_takes_the_published_records_and_trains_none_of_them(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)  # --published defaults to results/, as a user in the clone types it
    args = ["sweep", "sweeps/table3.yaml", "--scale", "tiny", "--rows", "base,E", "--seeds", "2"]
    records = ROOT / "results" / "records" / "table3_tiny"
    published = {p: p.read_bytes() for p in records.rglob("*") if p.is_file()}
    assert cli.main([*args, "--out", str(tmp_path), "--dry-run"]) == 0
    assert "4 run(s) are published under results/records/" in capsys.readouterr().out
    assert cli.main([*args, "--out", str(tmp_path), "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert "4 runs, 0 launched here; 4 done" in out
    assert not (tmp_path / "table3").exists()  # nothing copied: the published records are the runs
    assert all(p.read_bytes() == data for p, data in published.items())  # and they are left as they were
    assert cli.main([*args, "--out", str(tmp_path / "own"), "--no-reuse", "--dry-run"]) == 0
    assert "published under" not in capsys.readouterr().out
