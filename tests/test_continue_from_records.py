"""A sweep continued on a fresh clone takes the committed records under results/records/ and trains 0 of them."""

from __future__ import annotations

import json
from pathlib import Path

from ablations import cli

ROOT = Path(__file__).resolve().parent.parent


def test_a_sweep_takes_the_published_records_and_trains_none_of_them(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)  # --published defaults to results/, as a user in the clone types it
    args = ["sweep", "sweeps/table3.yaml", "--scale", "tiny", "--rows", "base,E", "--seeds", "2"]
    assert cli.main([*args, "--out", str(tmp_path), "--dry-run"]) == 0
    assert "4 pending run(s) will take the record of a done run" in capsys.readouterr().out
    assert cli.main([*args, "--out", str(tmp_path), "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert "4 runs, 0 launched here; 4 done" in out
    assert out.count("reuses the finished run results/records/") == 4
    folders = sorted((tmp_path / "table3" / "tiny").iterdir())
    assert len(folders) == 4
    for folder in folders:
        record = json.loads((folder / "metrics.json").read_text())
        assert record["status"] == "done" and record["reused_from"]  # a chain names the original run
        assert (folder / "logs").is_dir() and not (folder / "checkpoints").exists()
    assert cli.main([*args, "--out", str(tmp_path / "own"), "--no-reuse", "--dry-run"]) == 0
    assert "will take the record" not in capsys.readouterr().out
