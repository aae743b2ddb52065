"""Every table committed under results/ is what its committed records give: rebuilt on its own from the header's
Command line, in a folder holding only copies of its inputs, it comes out byte for byte the same."""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

import pytest

from ablations import cli

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "results"
TABLES = sorted(
    path for path in RESULTS.glob("*.json") if json.loads(path.read_text()).get("kind") == "ablate-sweep-table"
)
INPUTS = ("records", "sustained_flops.json")  # the run records, and the FLOP/s that Table 2's GPU-days are priced at
COMPARED = (".md", ".csv", ".tex", ".json")  # plots and the dashboard are views of these; PNG bytes vary by backend


def test_every_published_table_is_found():
    assert {"table3_tiny", "table3_converged", "positional_norm_tiny"} <= {path.stem for path in TABLES}


@pytest.mark.slow
@pytest.mark.parametrize("table", TABLES, ids=lambda path: path.stem)
def test_a_published_table_rebuilds_byte_for_byte_from_the_records_alone(table, tmp_path, monkeypatch):
    header = dict(json.loads(table.read_text())["header"])
    assert "Command" in header, f"{table.name}: no Command line; rebuild it with ablate table"
    argv = shlex.split(header["Command"])
    assert argv[:2] == ["ablate", "table"] and "--published" in argv, header["Command"]
    out = tmp_path / "results"
    for name in INPUTS:  # copies: the rebuild may publish records, never into the repository
        source = RESULTS / name
        shutil.copytree(source, out / name) if source.is_dir() else shutil.copy(source, out / name)
    monkeypatch.chdir(ROOT)  # the command names the sweep file as typed in the clone's root
    assert cli.main([*argv[1:], "--runs", str(tmp_path / "no-runs"), "--out", str(out)]) == 0
    written = [path for path in out.iterdir() if path.is_file() and path.suffix in COMPARED]
    assert any(path.name == table.name for path in written)
    for path in written:
        committed = RESULTS / path.name
        assert committed.exists(), f"{path.name}: rebuilt by {header['Command']!r} but not committed"
        assert path.read_bytes() == committed.read_bytes(), f"{path.name} differs from its rebuild"


GLANCE = {  # the README's columns of "Table 3's verdicts at a glance", each a published table
    "tiny (2 seeds)": "table3_tiny",
    "converged, bf16": "table3_converged_train-precision-bf16-mixed",
    "converged, fp32 (the preset)": "table3_converged",
}


def glance_cell(row: dict | None) -> str:
    if row is None or row.get("verdict") is None:
        return "no finished run"
    metric = f" ({row['judged_on'].upper()})" if row.get("judged_on") else ""
    seeds = len(row["seeds"])
    return f"{row['verdict']}{metric}, {seeds} seed{'' if seeds == 1 else 's'}"


def test_the_readmes_verdicts_at_a_glance_are_the_published_tables():
    """The README's summary of Table 3 is hand-copied from the tables: it must say what they say as runs land."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("### Table 3's verdicts at a glance", 1)[1].split("\n### ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("| ")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    assert header[:2] == ["row", "paper's effect"] and header[2:] == list(GLANCE)
    published = {
        column: {r["row"]: r for r in json.loads((RESULTS / f"{stem}.json").read_text())["statistics"]}
        for column, stem in GLANCE.items()
    }
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[1:]]
    assert [row[0] for row in rows] == list(published["tiny (2 seeds)"])
    for row_id, effect, *cells in rows:
        assert effect == ("large" if published["tiny (2 seeds)"][row_id]["judged_on"] else "small"), row_id
        for column, cell in zip(GLANCE, cells):
            assert cell == glance_cell(published[column].get(row_id)), (row_id, column)
