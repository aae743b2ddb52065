"""Every table committed under results/ is what its committed records give: rebuilt on its own from the header's
Command line, in a folder holding only copies of its inputs, it comes out byte for byte the same."""

from __future__ import annotations

import difflib
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
from ablations.report import readme as readme_views

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


def test_the_readme_quotes_the_published_tables_as_they_are():
    """The README's glance, per-row tables and quoted notes are copies of the tables (ablations/report/readme.py):
    a run landing, or a table rebuilt by changed code, must not leave them behind. `make readme` rewrites them."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    stale = list(difflib.unified_diff(readme.splitlines(), readme_views.synced(readme, published).splitlines()))
    assert not stale, "README.md differs from results/ (run `make readme`):\n" + "\n".join(stale[:40])


def test_the_readmes_glance_has_every_row_of_table3():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split(readme_views.GLANCE_HEADING, 1)[1].split("\n### ", 1)[0]
    rows = [readme_views.cells(line) for line in section.splitlines() if line.startswith("| ")][1:]
    tiny = {entry["row"]: entry for entry in published("table3_tiny")["statistics"]}
    assert [row[0] for row in rows] == list(tiny)
    for row_id, effect, *_ in rows:
        assert effect == ("large" if tiny[row_id]["judged_on"] else "small"), row_id


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
        named = readme_views.SECTION_STEM.search(heading)
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
            header = readme_views.cells(lines[0])
            if readme_views.is_row_table(header):
                rows = [readme_views.cells(line) for line in lines[2:]]
                quoted = [line[len("> - ") :] for line in body.splitlines() if line.startswith("> - ")]
                found.append(ReadmeTable(named.group(1), heading, header, rows, quoted))
                break
    return tuple(found)


def test_the_readmes_per_row_tables_have_the_published_tables_rows():
    """Every per-row table shows its table's rows in its order, and quotes the table's verdict count."""
    tables = readme_row_tables()
    assert {table.stem for table in tables} >= {
        "table3_tiny",
        "table3_converged",
        "table3_converged_train-precision-bf16-mixed",
    }
    for stem, _, _, rows, quoted in tables:
        keys = [column["key"] for column in published(stem)["columns"]]
        table_rows = [values[keys.index("row")] for values in published(stem)["rows"]]
        assert [row[0] for row in rows if row[0] != "base"] == [r for r in table_rows if r != "base"], stem
        assert any(line.startswith("Verdicts:") for line in quoted), f"{stem}: the README quotes no verdict count"


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
