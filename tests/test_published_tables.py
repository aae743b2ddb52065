"""Every table committed under results/ is what its committed records give: rebuilt on its own from the header's
Command line, in a folder holding only copies of its inputs, it comes out byte for byte the same."""

from __future__ import annotations

import functools
import itertools
import json
import re
import shlex
import shutil
from pathlib import Path
from typing import NamedTuple

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


@functools.cache
def published(stem: str) -> dict:
    """results/<stem>.json, read once for all the README checks below."""
    return json.loads((RESULTS / f"{stem}.json").read_text())


GLANCE = {  # the README's columns of "Table 3's verdicts at a glance", each a published table
    "tiny (2 seeds)": "table3_tiny",
    "converged, bf16": "table3_converged_train-precision-bf16-mixed",
    "converged, fp32 (the preset)": "table3_converged",
    "converged_4x (base plateaus)": "table3_converged_4x",
}


def glance_cell(row: dict | None) -> str:
    if row is None or row.get("verdict") is None:
        return "no finished run"
    metric = f" ({row['judged_on'].upper()})" if row.get("judged_on") else ""
    seeds = len(row["seeds"])
    if row.get("interim"):
        return f"{row['verdict']}{metric}, interim, {seeds} of {row['seeds_expected']} seeds"
    return f"{row['verdict']}{metric}, {seeds} seed{'' if seeds == 1 else 's'}"


def test_the_readmes_verdicts_at_a_glance_are_the_published_tables():
    """The README's summary of Table 3 is hand-copied from the tables: it must say what they say as runs land."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("### Table 3's verdicts at a glance", 1)[1].split("\n### ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("| ")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    assert header[:2] == ["row", "paper's effect"] and header[2:] == list(GLANCE)
    verdicts = {column: {r["row"]: r for r in published(stem)["statistics"]} for column, stem in GLANCE.items()}
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[1:]]
    assert [row[0] for row in rows] == list(verdicts["tiny (2 seeds)"])
    for row_id, effect, *cells in rows:
        assert effect == ("large" if verdicts["tiny (2 seeds)"][row_id]["judged_on"] else "small"), row_id
        for column, cell in zip(GLANCE, cells):
            assert cell == glance_cell(verdicts[column].get(row_id)), (row_id, column)


class ReadmeTable(NamedTuple):
    stem: str  # the published table its section names: results/<stem>.md
    heading: str
    header: list[str]
    rows: list[list[str]]
    quoted: list[str]  # the lines the section quotes from the table's notes, as `> - `


@functools.cache
def readme_row_tables() -> tuple[ReadmeTable, ...]:
    """Every per-row table of the README's results.

    A section qualifies when its heading names `results/<stem>.md` and one of its tables has a `row` column and a
    Δ column; the tables of the glance and of parameter counts are checked elsewhere or have no Δ.
    """
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    found = []
    for section in readme.split("\n### ")[1:]:
        heading, _, body = section.partition("\n")
        named = re.search(r"`results/([\w.+-]+)\.md`", heading)
        if named is None:
            continue
        body = body.split("\n## ", 1)[0]
        # Tables are runs of `|` lines (header, `|---|` rule, rows); the per-row one is the first with a `row` column
        # and a Δ column (a probe's curve points, say, have rows of their own).
        blocks = [
            list(lines)
            for is_table, lines in itertools.groupby(body.splitlines(), lambda line: line.startswith("|"))
            if is_table
        ]
        for lines in blocks:
            header = [cell.strip() for cell in lines[0].strip("|").split("|")]
            if header[:1] == ["row"] and any(cell.startswith("Δ ") for cell in header):
                rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]]
                quoted = [line[len("> - ") :] for line in body.splitlines() if line.startswith("> - ")]
                found.append(ReadmeTable(named.group(1), heading, header, rows, quoted))
                break
    return tuple(found)


def delta_cell(value: float | None, interval: list[float] | None, printed: str, least_decimals: int) -> str:
    """A Δ with its 95 % interval as the README prints it, at the precision the README chose (at least
    `least_decimals`): `+1.1 [-2.0, +4.2]`, or `+2.1 (1 seed)` where one seed gives no interval."""
    if value is None:
        return ""
    match = re.match(r"[+-]\d+\.(\d+)", printed)
    decimals = max(least_decimals, len(match.group(1)) if match else least_decimals)
    if interval is None:
        return f"{value:+.{decimals}f} (1 seed)"
    lo, hi = interval
    return f"{value:+.{decimals}f} [{lo:+.{decimals}f}, {hi:+.{decimals}f}]"


def measured(cell: str) -> str:
    return "" if cell == "missing" else cell  # the README leaves a row with no finished run blank


README_COLUMNS = {  # a README column: what it must say, from the published table's row and its statistics
    "dev BLEU": lambda row, stats, printed: measured(row["dev_bleu"]),
    "dev PPL": lambda row, stats, printed: measured(row["dev_ppl"]),
    "Δ BLEU [95 % CI]": lambda row, stats, printed: delta_cell(
        stats.get("delta_bleu"), stats.get("delta_bleu_ci"), printed, 1
    ),
    "Δ PPL [95 % CI]": lambda row, stats, printed: delta_cell(
        stats.get("delta_ppl"), stats.get("delta_ppl_ci"), printed, 2
    ),
    "paper Δ BLEU / Δ PPL": lambda row, stats, printed: (
        f"{row['paper_delta_bleu']} / {row['paper_delta_ppl']}" if row["paper_delta_bleu"] else ""
    ),
    "verdict": lambda row, stats, printed: row["verdict"],
    "seeds": lambda row, stats, printed: row["seeds"].split(" ")[0],
    "minutes per run": lambda row, stats, printed: row["wall_min"],
}


def test_the_readmes_per_row_tables_are_the_published_tables():
    """The README's per-row results are hand-copied from the tables: every figure must be the table's, at the
    precision printed, so that a run landing (or a table rebuilt by changed code) cannot leave the README behind."""
    tables = readme_row_tables()
    assert {table.stem for table in tables} >= {
        "table3_tiny",
        "table3_converged",
        "table3_converged_train-precision-bf16-mixed",
    }
    for stem, _, header, rows, _ in tables:
        table = published(stem)
        keys = [column["key"] for column in table["columns"]]
        table_rows = {values[keys.index("row")]: dict(zip(keys, values)) for values in table["rows"]}
        statistics = {entry["row"]: entry for entry in table["statistics"]}
        assert [row[0] for row in rows if row[0] != "base"] == [r for r in table_rows if r != "base"], stem
        for cells in rows:
            row_id = cells[0]
            for column, printed in zip(header[1:], cells[1:]):
                if column in README_COLUMNS:
                    expected = README_COLUMNS[column](table_rows[row_id], statistics.get(row_id, {}), printed)
                    assert printed == expected, (stem, row_id, column)


def test_the_readmes_quoted_verdict_counts_are_the_published_tables_notes():
    """Each per-row table's section quotes its table's verdict count as `> - Verdicts: ...`; every quoted line must
    be one of the table's notes, word for word."""
    for stem, _, _, _, quoted in readme_row_tables():
        notes = published(stem)["notes"]
        assert any(line.startswith("Verdicts:") for line in quoted), f"{stem}: the README quotes no verdict count"
        for line in quoted:
            assert line in notes, (stem, line)


def test_a_readme_section_calls_its_table_partial_exactly_when_runs_are_missing():
    """A heading that says `partial: N of its M runs` must give the table's own count; a table with runs missing must
    say partial in its heading (never a partial table without saying so)."""
    for stem, heading, *_ in readme_row_tables():
        runs = dict(published(stem)["header"])["Runs"]
        done, missing = (int(n) for n in re.match(r"(\d+) done(?:, (\d+) missing)?", runs).groups(default="0"))
        assert ("partial" in heading) == (missing > 0), (stem, runs)
        counted = re.search(r"partial: (\d+) of its (\d+) runs", heading)
        if counted:
            assert (int(counted.group(1)), int(counted.group(2))) == (done, done + missing), (stem, runs)
