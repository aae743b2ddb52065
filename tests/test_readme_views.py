"""ablations/report/readme.py: the README's quoted cells and notes follow the published tables, and nothing else moves."""

from __future__ import annotations

import json

import pytest

from ablations.report import readme as readme_views

KEYS = ["row", "dev_ppl", "dev_bleu", "paper_delta_ppl", "paper_delta_bleu", "verdict", "seeds", "wall_min"]


def table(a1_seeds: int, interim_note: bool) -> dict:
    """results/<stem>.json as `ablate table` writes it, cut to what the README quotes: base and A1, C5 untrained."""
    seeds = list(range(a1_seeds))
    a1 = {"row": "A1", "verdict": "disagrees", "judged_on": "ppl", "seeds": seeds, "seeds_expected": 3}
    a1 |= {"interim": a1_seeds < 3, "delta_bleu": -0.335, "delta_bleu_ci": [-1.163, 0.493]}
    a1 |= {"delta_ppl": -0.00589, "delta_ppl_ci": [-0.00734, -0.00444]}
    rows = [
        ["base", "1.085 ± 0.001", "97.3 ± 0.2", "", "", "", "3/3", "89.6"],
        ["A1", "1.079 ± 0.001", "97.1 ± 0.4", "+0.37", "-0.9", "disagrees (PPL)", f"{a1_seeds}/3", "66.0"],
        ["C5", "missing", "missing", "-0.57", "+0.9", "", "0/3 (s0 missing, s1 missing, s2 missing)", ""],
    ]
    notes = ["Δ BLEU is sacreBLEU.", "Δ PPL is per piece.", f"Verdicts: disagrees 1 (A1{' interim' * (a1_seeds < 3)})."]
    if interim_note:
        notes.append(f"Interim, judged before all the seeds their scale fixes had finished: A1 on {a1_seeds} of 3.")
    notes.append("Plateau: within ±2 %.")
    header = [["Runs", f"{3 + a1_seeds} done, {6 - a1_seeds} missing"]]
    return {
        "header": header,
        "columns": [{"key": key} for key in KEYS],
        "rows": rows,
        "statistics": [a1],
        "notes": notes,
    }


GLANCE_HEADER = "| row | paper's effect | " + " | ".join(readme_views.GLANCE) + " |"


def readme(a1_cells: str, quoted: list[str], glance_a1: str) -> str:
    return "\n".join(
        [
            "# A project",
            "",
            readme_views.GLANCE_HEADING,
            "",
            GLANCE_HEADER,
            "|---|---|---|---|---|---|",
            f"| A1 | large | {glance_a1} |",
            "",
            "### Table 3 at a scale (`results/t.md`; partial: 6 of its 9 runs, A1 on 3)",
            "",
            "| row | change | dev BLEU | Δ PPL [95 % CI] | verdict | seeds |",
            "|---|---|---|---|---|---|",
            "| base |  | 97.3 ± 0.2 |  |  | 3/3 |",
            f"| A1 | h 1 | {a1_cells} |",
            "| C5 | d_model 1024 |  |  |  | 0/3 |",
            "",
            *[f"> - {line}" for line in quoted],
            "",
            "Prose that quotes nothing | with a pipe inside.",
            "",
        ]
    )


def tables(a1_seeds: int = 3, interim_note: bool = False):
    published = table(a1_seeds, interim_note)
    return lambda stem: published


CURRENT_GLANCE = " | ".join(["disagrees (PPL), 3 seeds"] * len(readme_views.GLANCE))


def test_an_up_to_date_readme_comes_back_byte_for_byte():
    text = readme(
        "97.1 ± 0.4 | -0.0059 [-0.0073, -0.0044] | disagrees (PPL) | 3/3",
        ["Verdicts: disagrees 1 (A1).", "Plateau: within ±2 %."],
        CURRENT_GLANCE,
    )
    assert readme_views.synced(text, tables()) == text  # 4 decimals, the README's choice, kept


def test_stale_cells_glance_and_notes_are_rewritten_and_prose_is_left_alone():
    stale = readme(
        "96.0 ± 0.9 | -0.01 [-0.02, +0.00] | disagrees (PPL), interim | 2/3",
        ["Verdicts: disagrees 1 (A1 interim).", "Interim, judged before: A1 on 2 of 3.", "Plateau: within ±2 %."],
        " | ".join(["disagrees (PPL), interim, 2 of 3 seeds"] * len(readme_views.GLANCE)),
    )
    lines = readme_views.synced(stale, tables()).split("\n")
    assert "| A1 | h 1 | 97.1 ± 0.4 | -0.01 [-0.01, -0.00] | disagrees (PPL) | 3/3 |" in lines
    assert f"| A1 | large | {CURRENT_GLANCE} |" in lines
    quoted = [line for line in lines if line.startswith("> - ")]
    assert quoted == ["> - Verdicts: disagrees 1 (A1).", "> - Plateau: within ±2 %."]  # the interim note is gone
    assert "Prose that quotes nothing | with a pipe inside." in lines


def test_a_headings_count_of_runs_is_the_tables():
    text = readme("97.1 ± 0.4 | -0.006 [-0.007, -0.004] | disagrees (PPL) | 2/3", ["Verdicts: x."], CURRENT_GLANCE)
    lines = readme_views.synced(text.replace("A1 on 3)", "A1 on 2)"), tables(2, True)).split("\n")
    assert "### Table 3 at a scale (`results/t.md`; partial: 5 of its 9 runs, A1 on 2)" in lines  # the rest is prose


def test_an_interim_note_is_quoted_while_the_table_has_one():
    text = readme("97.1 ± 0.4 | -0.006 [-0.007, -0.004] | disagrees (PPL) | 3/3", ["Verdicts: x."], CURRENT_GLANCE)
    quoted = [line for line in readme_views.synced(text, tables(2, True)).split("\n") if line.startswith("> - ")]
    assert quoted == [
        "> - Verdicts: disagrees 1 (A1 interim).",
        "> - Interim, judged before all the seeds their scale fixes had finished: A1 on 2 of 3.",
    ]


def test_a_quoted_note_the_table_no_longer_has_is_an_error_naming_it():
    text = readme("97.1 ± 0.4 | -0.006 [-0.007, -0.004] | disagrees (PPL) | 3/3", ["Spearman: +1."], CURRENT_GLANCE)
    with pytest.raises(ValueError, match=r"t section quotes notes \['Spearman:'\]"):
        readme_views.synced(text, tables())


def test_a_row_the_table_does_not_have_is_an_error_naming_it():
    text = readme("x | y | z | w", ["Verdicts: x."], CURRENT_GLANCE).replace("| C5 |", "| C9 |")
    with pytest.raises(ValueError, match="row 'C9' of the t section"):
        readme_views.synced(text, tables())


def test_holm_p_has_two_significant_digits_and_is_blank_outside_the_family():
    assert [readme_views.holm_cell(p) for p in (None, 0.0054799, 0.011668, 0.1035, 0.000455, 0.00002)] == [
        "",
        "0.0055",
        "0.012",
        "0.10",
        "0.00046",
        "< 0.0001",
    ]


def test_a_row_with_a_cell_too_few_is_an_error_naming_it():
    text = readme("97.1 ± 0.4 | -0.006 [-0.007, -0.004] | 3/3", ["Verdicts: x."], CURRENT_GLANCE)
    with pytest.raises(ValueError, match="row 'A1' of the t section has 5 cells, its header 6"):
        readme_views.synced(text, tables())


def test_the_glance_must_have_the_published_tables_columns():
    text = readme("x | y | z | w", ["Verdicts: x."], CURRENT_GLANCE).replace("| tiny (2 seeds) |", "| tiny |")
    with pytest.raises(ValueError, match="the glance's columns"):
        readme_views.synced(text, tables())


def test_the_command_checks_by_default_and_writes_only_when_asked(tmp_path, capsys):
    stale = readme("96.0 ± 0.9 | -0.006 [-0.007, -0.004] | disagrees (PPL) | 3/3", ["Verdicts: x."], CURRENT_GLANCE)
    path = tmp_path / "README.md"
    path.write_text(stale, encoding="utf-8")
    (tmp_path / "results").mkdir()
    published = table(3, False)
    for stem in {*readme_views.GLANCE.values(), "t"}:
        (tmp_path / "results" / f"{stem}.json").write_text(json.dumps(published))
    argv = ["--readme", str(path), "--results", str(tmp_path / "results")]
    assert readme_views.main(argv) == 1
    assert "+| A1 | h 1 | 97.1 ± 0.4 |" in capsys.readouterr().out
    assert path.read_text(encoding="utf-8") == stale
    assert readme_views.main([*argv, "--write"]) == 0
    assert readme_views.main(argv) == 0
    assert "| A1 | h 1 | 97.1 ± 0.4 | -0.006 [-0.007, -0.004] | disagrees (PPL) | 3/3 |" in path.read_text()
