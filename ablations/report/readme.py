"""The README's copies of the published tables, kept equal to them: `python -m ablations.report.readme`.

The README's results quote three things from `results/<stem>.json`: "Table 3's verdicts at a glance" (one column
per published Table 3), each section's per-row table (a section whose heading names `results/<stem>.md`: the first
of its tables with a `row` column and a Δ column) and the notes it quotes as `> - ` lines. This module derives
every such cell and line (and a heading's `partial: N of its M runs`) from the table's JSON, so the README is a view of the records like the tables themselves:
`--check` (the default) prints what differs and exits 1, `--write` rewrites the README in place; tests/
test_published_tables.py fails while they differ. Everything else (prose, the `change` column, figures in
sentences) is the README's own and left as written; a cell already right is never reformatted.
"""

from __future__ import annotations

import argparse
import difflib
import functools
import itertools
import json
import re
import sys
from pathlib import Path
from typing import Callable, Optional, Sequence

from ..records import write_atomic

GLANCE_HEADING = "### Table 3's verdicts at a glance"
GLANCE = {  # its columns after `row` and `paper's effect`, each a published table
    "tiny (2 seeds)": "table3_tiny",
    "converged, bf16": "table3_converged_train-precision-bf16-mixed",
    "converged, fp32 (the preset)": "table3_converged",
    "converged_4x (base plateaus)": "table3_converged_4x",
}
SECTION_STEM = re.compile(r"`results/([\w.+-]+)\.md`")
PARTIAL = re.compile(r"partial: \d+ of its \d+ runs")
ALWAYS_QUOTED = "Interim,"  # a section quotes its table's interim note whenever the table has one


def cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def joined(row: Sequence[str]) -> str:
    return "| " + " | ".join(row) + " |"


def glance_cell(statistics: Optional[dict]) -> str:
    """A row's verdict as the glance prints it: `agrees (PPL), 3 seeds`, `unresolved, interim, 2 of 3 seeds`."""
    if statistics is None or statistics.get("verdict") is None:
        return "no finished run"
    metric = f" ({statistics['judged_on'].upper()})" if statistics.get("judged_on") else ""
    seeds = len(statistics["seeds"])
    if statistics.get("interim"):
        return f"{statistics['verdict']}{metric}, interim, {seeds} of {statistics['seeds_expected']} seeds"
    return f"{statistics['verdict']}{metric}, {seeds} seed{'' if seeds == 1 else 's'}"


def delta_cell(value: Optional[float], interval: Optional[list], printed: str, least_decimals: int) -> str:
    """A Δ with its 95 % interval at the precision the README chose (at least `least_decimals`): `+1.1 [-2.0, +4.2]`,
    or `+2.1 (1 seed)` where one seed gives no interval."""
    if value is None:
        return ""
    match = re.match(r"[+-]\d+\.(\d+)", printed)
    decimals = max(least_decimals, len(match.group(1)) if match else least_decimals)
    if interval is None:
        return f"{value:+.{decimals}f} (1 seed)"
    lo, hi = interval
    return f"{value:+.{decimals}f} [{lo:+.{decimals}f}, {hi:+.{decimals}f}]"


def holm_cell(p: Optional[float]) -> str:
    """A Holm-adjusted p-value to two significant digits; blank for a row outside the family or short of 2 seeds."""
    if p is None:
        return ""
    return "< 0.0001" if p < 0.0001 else f"{p:#.2g}"


def measured(cell: str) -> str:
    return "" if cell == "missing" else cell  # the README leaves a row with no finished run blank


# A README column: what it says, from the published table's row, the row's statistics and the cell as printed.
Column = Callable[[dict, dict, str], str]
COLUMNS: dict[str, Column] = {
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
    "Holm p": lambda row, stats, printed: holm_cell(stats.get("p_holm")),
    "seeds": lambda row, stats, printed: row["seeds"].split(" ")[0],
    "minutes per run": lambda row, stats, printed: row["wall_min"],
}


def is_row_table(header: Sequence[str]) -> bool:
    return header[:1] == ["row"] and any(cell.startswith("Δ ") for cell in header)


def glance_table(block: list[str], table: Callable[[str], dict]) -> list[str]:
    header = cells(block[0])
    if header[:2] != ["row", "paper's effect"] or header[2:] != list(GLANCE):
        raise ValueError(f"README: the glance's columns are {header}, expected row, paper's effect, {list(GLANCE)}")
    verdicts = [{entry["row"]: entry for entry in table(stem)["statistics"]} for stem in GLANCE.values()]
    out = block[:2]
    for line in block[2:]:
        row = cells(line)
        expected = [*row[:2], *(glance_cell(column.get(row[0])) for column in verdicts)]
        out.append(line if expected == row else joined(expected))
    return out


def row_table(block: list[str], stem: str, table: dict) -> list[str]:
    keys = [column["key"] for column in table["columns"]]
    rows = {values[keys.index("row")]: dict(zip(keys, values)) for values in table["rows"]}
    statistics = {entry["row"]: entry for entry in table["statistics"]}
    header = cells(block[0])
    out = block[:2]
    for line in block[2:]:
        row = cells(line)
        if len(row) != len(header):
            raise ValueError(
                f"README: row {row[0]!r} of the {stem} section has {len(row)} cells, its header {len(header)}"
            )
        if row[0] not in rows:
            raise ValueError(f"README: row {row[0]!r} of the {stem} section is not in results/{stem}.json")
        expected = [row[0]] + [
            COLUMNS[column](rows[row[0]], statistics.get(row[0], {}), printed) if column in COLUMNS else printed
            for column, printed in zip(header[1:], row[1:])
        ]
        out.append(line if expected == row else joined(expected))
    return out


def note_key(note: str, notes: Sequence[str]) -> str:
    """What names a note across rebuilds: its first word (`Verdicts:`, `Spearman`, `Interim,`), or its first two
    where the first is shared (`Δ BLEU`, `Δ PPL`)."""
    words = note.split()
    shared = sum(other.split()[:1] == words[:1] for other in notes) > 1
    return " ".join(words[:2] if shared else words[:1])


def quoted_notes(block: list[str], stem: str, notes: Sequence[str]) -> list[str]:
    """The table's notes that the section quotes, as they read now and in the table's order; the interim note comes
    and goes with the table's interim rows."""
    keys = {note_key(line[len("> - ") :], notes) for line in block}
    current = {note_key(note, notes) for note in notes}
    gone = sorted(key for key in keys - current if key != ALWAYS_QUOTED)
    if gone:
        raise ValueError(f"README: the {stem} section quotes notes {gone} that results/{stem}.json no longer has")
    keys.add(ALWAYS_QUOTED)
    return [f"> - {note}" for note in notes if note_key(note, notes) in keys]


def counted_heading(heading: str, table: dict) -> str:
    """A heading's `partial: N of its M runs` as the table's Runs line counts them (`12 done, 3 missing`)."""
    runs = dict(table["header"]).get("Runs", "")
    counts = re.match(r"(\d+) done(?:, (\d+) missing)?", runs)
    if counts is None:
        return heading
    done, missing = (int(n) for n in counts.groups(default="0"))
    return PARTIAL.sub(f"partial: {done} of its {done + missing} runs", heading)


def synced(readme: str, table: Callable[[str], dict]) -> str:
    """The README with every quoted cell and note as `table(stem)` (results/<stem>.json, parsed) says."""
    out: list[str] = []
    stem: Optional[str] = None
    in_glance = row_table_seen = False
    groups = itertools.groupby(
        readme.split("\n"), lambda line: "table" if line.startswith("|") else "quote" if line.startswith("> - ") else ""
    )
    for kind, lines in groups:
        block = list(lines)
        if kind == "":
            for index, line in enumerate(block):
                if line.startswith("## ") or line.startswith("### "):
                    named = SECTION_STEM.search(line) if line.startswith("### ") else None
                    stem, in_glance, row_table_seen = named and named.group(1), line == GLANCE_HEADING, False
                    if stem and PARTIAL.search(line):
                        block[index] = counted_heading(line, table(stem))
        elif kind == "table" and in_glance:
            block = glance_table(block, table)
        elif kind == "table" and stem and not row_table_seen and is_row_table(cells(block[0])):
            block, row_table_seen = row_table(block, stem, table(stem)), True
        elif kind == "quote" and stem:
            block = quoted_notes(block, stem, table(stem)["notes"])
        out.extend(block)
    return "\n".join(out)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ablations.report.readme", description=__doc__.split("\n")[0])
    parser.add_argument("--readme", type=Path, default=Path("README.md"))
    parser.add_argument("--results", type=Path, default=Path("results"))
    parser.add_argument("--write", action="store_true", help="rewrite the README in place (default: only check)")
    args = parser.parse_args(argv)
    readme = args.readme.read_text(encoding="utf-8")
    try:
        # each table is asked for by its heading, row table and quoted notes (and the glance): read it once
        table = functools.cache(lambda stem: json.loads((args.results / f"{stem}.json").read_text()))
        expected = synced(readme, table)
    except (ValueError, FileNotFoundError) as error:
        print(error, file=sys.stderr)
        return 2
    if expected == readme:
        print(f"{args.readme}: every quoted table cell and note is the published tables'")
        return 0
    diff = list(
        difflib.unified_diff(readme.splitlines(), expected.splitlines(), str(args.readme), "results", lineterm="")
    )
    changed = sum(line.startswith("+") and not line.startswith("+++") for line in diff)
    if args.write:
        write_atomic(args.readme, expected)  # a kill mid-write leaves the old README, never half of one
        print(f"{args.readme}: {changed} lines rewritten from {args.results}/")
        return 0
    print("\n".join(diff))
    print(f"{args.readme}: {changed} lines differ from the published tables; --write rewrites them", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
