"""`ablate table`: tables built from fake run records (no training), their layout, statistics and bytes."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Optional

import pytest

from ablations.records import run_folder, write_atomic, write_config, write_json
from ablations.report.collect import RunRecord, Selection, selecting
from ablations.report.render import escape_tex
from ablations.report.table3 import build_table, describe_hardware_mix, write_table
from ablations.sweep import RunSpec, expand, load_sweep, scales_for

SWEEP = """\
name: mini
description: "Mini sweep: 100% test_rows & #1"
seeds: [0, 1]
base: {N: 2, d_model: 32, d_ff: 64, h: 4, d_k: 8, d_v: 8, P_drop: 0.1, eps_ls: 0.1, positional: sinusoidal, train_steps: 1000}
rows:
  - {id: base, group: base, overrides: {}, paper: {ppl: 4.92, bleu: 25.8, params_m: 65}}
  - {id: A1, group: A, overrides: {h: 1, d_k: 32, d_v: 32}, paper: {ppl: 5.29, bleu: 24.9, params_m: null}}
  - {id: A2, group: A, overrides: {h: 2, d_k: 16, d_v: 16}, paper: {ppl: 5.00, bleu: 25.5}}
  - {id: C_1, group: C, overrides: {N: 1}, paper: {ppl: 6.11, bleu: 23.7, params_m: 36}}
  - {id: D1, group: D, overrides: {P_drop: 0.0}, paper: {ppl: 5.77, bleu: 24.6}}
"""
SCALES = """\
tiny:
  description: "test preset"
  width_divisor: 2
  steps_scale: 0.1
  settings: {{data.dataset: dir, data.path: "{corpus}", data.vocab_size: 100, data.batch_tokens: 256,
              data.max_tokens: 64, model.max_positions: 64}}
"""
WORDS = "der die das haus katze hund sieht einen grossen kleinen roten baum im garten und wald".split()
REFERENCES = [" ".join(WORDS[(7 * i + 3 * j) % len(WORDS)] for j in range(8)) for i in range(60)]
GOOD = REFERENCES
BAD = [" ".join(line.split()[:3]) for line in REFERENCES]


def write_corpus(directory: Path) -> None:
    for split in ("train", "valid", "test"):
        write_atomic(directory / f"{split}.en", "".join(f"sentence {i}\n" for i in range(len(REFERENCES))))
        write_atomic(directory / f"{split}.de", "".join(line + "\n" for line in REFERENCES))


def write_run(runs: Path, spec: RunSpec, status: str, hypotheses: Optional[list[str]] = None, **metrics) -> Path:
    meta = {"sweep": spec.sweep, "row": spec.row, "group": spec.group, "scale": spec.scale, "run_id": spec.run_id}
    folder = run_folder(runs, meta, spec.config)
    write_config(folder, spec.config, meta)
    write_json(folder / "metrics.json", {"status": status, "seed": spec.seed, **metrics})
    write_atomic(folder / "logs" / "attempt-1" / "metrics.csv", "step,train/loss\n10,5.0\n")
    (folder / "checkpoints").mkdir()
    (folder / "checkpoints" / "last.ckpt").write_bytes(b"weights")
    if hypotheses is not None:
        write_atomic(folder / "dev.hyp", "\n".join(hypotheses) + "\n")
        write_atomic(folder / "test.hyp", "\n".join(hypotheses) + "\n")
    return folder


def done(bleu: float, ppl: float) -> dict:
    return {
        "dev_bleu": bleu,
        "dev_bleu_tok": bleu + 1,
        "dev_ppl": ppl,
        "params": 1_234_567,
        "steps": 100,
        "train_tokens_per_second": 5000.0,
        "wall_seconds": 90.0,
        "device": "cpu",
        "sacrebleu_signature": "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0",
    }


def write_project(root: Path, name: str, sweep_text: str) -> dict[tuple[str, int], RunSpec]:
    """A corpus, `sweeps/<name>.yaml` and its scales under root; the tiny scale's runs by (row, seed)."""
    write_corpus(root / "corpus")
    (root / "sweeps").mkdir()
    (root / "sweeps" / f"{name}.yaml").write_text(sweep_text, encoding="utf-8")
    (root / "sweeps" / "scales.yaml").write_text(SCALES.format(corpus=root / "corpus"), encoding="utf-8")
    sweep = load_sweep(root / "sweeps" / f"{name}.yaml")
    return {(s.row, s.seed): s for s in expand(sweep, scales_for(sweep.path)["tiny"])}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A sweep, its scales and a corpus in tmp_path, and runs of every kind: done, running, failed, missing."""
    specs = write_project(tmp_path, "mini", SWEEP)
    runs = tmp_path / "runs"
    write_run(runs, specs["base", 0], "done", BAD, **done(20.0, 5.0))
    write_run(runs, specs["base", 1], "done", BAD, **done(22.0, 5.4))
    write_run(runs, specs["A1", 0], "done", GOOD, **done(24.0, 4.5))
    write_run(runs, specs["A1", 1], "done", GOOD, **done(25.0, 4.7))
    write_run(runs, specs["A2", 0], "done", BAD, **done(20.0, 5.2))
    write_run(runs, specs["A2", 1], "running")
    write_run(runs, specs["C_1", 0], "failed", error="boom")
    return tmp_path


def make(project: Path, out: str = "results"):
    table = build_table(project / "sweeps" / "mini.yaml", "tiny", runs=project / "runs", out=project / out)
    return table, write_table(table, project / out)


def make_selected(project: Path, rows: list[str]):
    """The table of only these rows (and base), as `ablate table --rows` builds it."""
    with selecting(Selection(rows=tuple(rows))):
        return make(project, out="selected")


def markdown_rows(text: str) -> dict[str, dict[str, str]]:
    """Row id -> {column label: cell} of the Markdown table."""
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    labels = [cell.strip() for cell in lines[0].strip("|").split(" | ")]
    rows = [dict(zip(labels, (cell.strip() for cell in line[2:-2].split(" | ")))) for line in lines[1:]]
    return {row["row"]: row for row in rows}


def test_rows_in_sweep_order_with_blank_cells_where_equal_to_base(project):
    table, _ = make(project)
    rows = markdown_rows((project / "results" / "mini_tiny.md").read_text(encoding="utf-8"))
    assert list(rows) == ["base", "A1", "A2", "C_1", "D1"]
    assert [rows[r][""] for r in rows] == ["base", "A", "", "C", "D"]  # the group names its first row
    base, a1, c1 = rows["base"], rows["A1"], rows["C_1"]
    assert [
        base[k] for k in ("N", "d_model", "d_ff", "h", "d_k", "d_v", "P_drop", "ε_ls", "positional", "train steps")
    ] == [
        "2",
        "32",
        "64",
        "4",
        "8",
        "8",
        "0.1",
        "0.1",
        "sinusoidal",
        "1K",
    ]  # paper units, not the scale's halved widths
    assert [a1[k] for k in ("N", "d_model", "h", "d_k", "d_v", "P_drop", "positional", "train steps")] == [
        "",
        "",
        "1",
        "32",
        "32",
        "",
        "",
        "",
    ]
    assert (c1["N"], c1["h"], c1["d_k"]) == ("1", "", "")
    assert table.extra_columns == ()


def test_mean_std_and_deltas_against_base(project):
    table, _ = make(project)
    base, a2 = table.rows[0], table.rows[2]
    assert base.stats["dev_bleu"].mean == pytest.approx(21.0)
    assert base.stats["dev_bleu"].std == pytest.approx(math.sqrt(2))
    assert a2.stats["dev_bleu"].std is None and a2.stats["dev_bleu"].n == 1
    rows = markdown_rows((project / "results" / "mini_tiny.md").read_text(encoding="utf-8"))
    assert (rows["base"]["BLEU (dev)"], rows["base"]["PPL (dev)"]) == ("21.0 ± 1.4", "5.20 ± 0.28")
    assert (rows["A1"]["BLEU (dev)"], rows["A1"]["BLEU tok (dev)"]) == ("24.5 ± 0.7", "25.5 ± 0.7")
    assert (rows["A1"]["Δ BLEU"], rows["A1"]["Δ PPL"]) == ("+3.5", "-0.60")
    assert (rows["A1"]["paper Δ BLEU"], rows["A1"]["paper Δ PPL"]) == ("-0.9", "+0.37")
    # Δ pairs seeds: A2's seed 0 against base's seed 0 (both 20.0), so base's seed 1 (22.0) does not shift it; the
    # difference of the means, -1.0, is what the table said before it sat Δ at the centre of its interval.
    assert (rows["A2"]["BLEU (dev)"], rows["A2"]["Δ BLEU"], rows["A2"]["seeds"]) == ("20.0", "+0.0", "1/2 (s1 running)")
    assert (rows["base"]["Δ BLEU"], rows["base"]["paper Δ BLEU"], rows["base"]["verdict"]) == ("", "", "")
    assert (rows["base"]["paper params (M)"], rows["A1"]["paper params (M)"], rows["base"]["params (M)"]) == (
        "65",
        "",
        "1.2",
    )
    assert (rows["base"]["steps"], rows["base"]["tokens/s"], rows["base"]["wall (min)"]) == ("100", "5000", "1.5")


def test_ppl_cells_carry_the_decimals_that_show_each_rows_spread(tmp_path):
    """Near PPL 1 (base at converged_4x: 1.085 ± 0.001) two decimals printed every Δ as +0.00 and every interval as
    [-0.00, +0.00]; a row that spreads widely keeps two, and a row of one seed takes base's."""
    specs = write_project(tmp_path, "mini", SWEEP)
    runs = tmp_path / "runs"
    for seed, ppl in enumerate([(1.0851, 1.0873, 5.0), (1.0863, 1.0881, 5.6)]):
        for row, value in zip(("base", "A1", "A2"), ppl):
            write_run(runs, specs[row, seed], "done", **done(97.0, value))
    write_run(runs, specs["D1", 0], "done", **done(97.0, 1.0901))  # one seed: no spread of its own
    table, _ = make(tmp_path)
    rows = markdown_rows((tmp_path / "results" / "mini_tiny.md").read_text(encoding="utf-8"))
    assert rows["base"]["PPL (dev)"] == "1.0857 ± 0.0008"
    assert (rows["A1"]["PPL (dev)"], rows["A1"]["Δ PPL"]) == ("1.0877 ± 0.0006", "+0.0020")
    assert rows["A1"]["Δ PPL 95 % CI"] == "[-0.0005, +0.0045]"
    assert (rows["A2"]["PPL (dev)"], rows["A2"]["Δ PPL"]) == ("5.30 ± 0.42", "+4.21")
    assert (rows["D1"]["PPL (dev)"], rows["D1"]["Δ PPL"]) == ("1.0901", "+0.0050")  # base's spread, base's decimals
    assert "its std over seeds or its Δ interval's half-width" in "".join(table.notes)


def test_a_resumed_runs_wall_is_its_whole_work_not_its_last_attempt(project):
    """A record's wall_seconds are its last attempt's; train_seconds carry over a resume from the checkpoint."""
    folder = next((project / "runs").glob("*/*/A2-s0-*"))
    write_json(
        folder / "metrics.json", {"status": "done", "seed": 0, **done(20.0, 5.2), "attempts": 2, "train_seconds": 600.0}
    )
    make(project)
    rows = markdown_rows((project / "results" / "mini_tiny.md").read_text(encoding="utf-8"))
    assert rows["A2"]["wall (min)"] == "10.0"  # not the last attempt's 1.5


def test_missing_and_failed_runs_are_named_never_zero(project):
    table, _ = make(project)
    rows = markdown_rows((project / "results" / "mini_tiny.md").read_text(encoding="utf-8"))
    assert (rows["C_1"]["BLEU (dev)"], rows["C_1"]["seeds"]) == ("failed/missing", "0/2 (s0 failed, s1 missing)")
    assert (rows["D1"]["PPL (dev)"], rows["D1"]["seeds"]) == ("missing", "0/2 (s0 missing, s1 missing)")
    assert rows["D1"]["Δ BLEU"] == rows["D1"]["params (M)"] == rows["D1"]["steps"] == ""
    csv_rows = (project / "results" / "mini_tiny.csv").read_text(encoding="utf-8").splitlines()
    header, c1 = csv_rows[0].split(","), dict(zip(csv_rows[0].split(","), csv_rows[4].split(",")))
    assert header[:3] == ["group", "row", "N"] and c1["row"] == "C_1"
    assert (c1["status"], c1["dev_bleu"], c1["seeds_done"], c1["N"], c1["h"]) == ("failed/missing", "", "0", "1", "4")
    assert dict(table.header)["Runs"] == "5 done, 1 failed, 3 missing, 1 running"


def test_rows_carry_seed_paired_intervals_and_a_verdict_against_the_paper(project):
    table, _ = make(project)
    rows = markdown_rows((project / "results" / "mini_tiny.md").read_text(encoding="utf-8"))
    # A1: seeds 0 and 1 against base's: BLEU +4, +3; PPL -0.5, -0.7 (t-interval with one degree of freedom).
    a1 = next(r for r in table.rows if r.row.id == "A1")
    assert a1.evidence.bleu.seeds == (0, 1) and a1.evidence.bleu.mean == pytest.approx(3.5)
    half = 12.706204736174698 * math.sqrt(0.5) / math.sqrt(2)  # t_0.975(1) * sd / sqrt(n), sd of (4, 3)
    assert a1.evidence.bleu.ci == pytest.approx((3.5 - half, 3.5 + half))
    assert rows["A1"]["Δ BLEU 95 % CI"] == f"[{3.5 - half:+.1f}, {3.5 + half:+.1f}]"
    assert rows["A1"]["verdict"] == "unresolved (PPL)"  # the paper's large effect is on PPL; two seeds don't resolve it
    # A2 has one done seed: no interval, never evidence.
    assert rows["A2"]["Δ BLEU 95 % CI"] == "" and rows["A2"]["verdict"] == "unresolved, interim"  # s1 running
    assert any(note.startswith("Verdicts: unresolved") for note in table.notes)
    # the large effects' line names those that do not agree too, not only the count that does
    (large,) = [note for note in table.notes if note.startswith("Of the paper's")]
    assert "here: agrees 0 (none); unresolved " in large and "A1" in large.split("unresolved", 1)[1]
    assert not any(r.judgement and r.judgement.verdict in ("agrees", "disagrees") for r in table.rows)


def test_the_table_data_carries_verdicts_intervals_and_seeds(project):
    from ablations.report import write_outputs

    table, _ = make(project)
    write_outputs(table, project / "results")
    data = json.loads((project / "results" / "mini_tiny.json").read_text(encoding="utf-8"))
    stats = {entry["row"]: entry for entry in data["statistics"]}
    assert set(stats) == {"A1", "A2", "C_1", "D1"}
    assert stats["A1"]["seeds"] == [0, 1] and len(stats["A1"]["delta_bleu_ci"]) == 2
    assert stats["A1"]["verdict"] == "unresolved" and stats["A1"]["judged_on"] == "ppl"
    assert stats["A2"]["delta_ppl_ci"] is None and stats["A2"]["seeds"] == [0]
    # The interval is made of the seed-paired differences, and the JSON shows them, recomputable from its runs.
    dev = {(run["row"], run["seed"]): run["metrics"] for run in data["runs"] if run["status"] == "done"}
    for row in ("A1", "A2"):
        for metric in ("bleu", "ppl"):
            per_seed = stats[row][f"delta_{metric}_per_seed"]
            assert list(per_seed) == [str(seed) for seed in stats[row]["seeds"]]
            for seed, difference in per_seed.items():
                expected = dev[row, int(seed)][f"dev_{metric}"] - dev["base", int(seed)][f"dev_{metric}"]
                assert difference == pytest.approx(expected)
            assert sum(per_seed.values()) / len(per_seed) == pytest.approx(stats[row][f"delta_{metric}"])


def test_a_verdict_before_the_rows_seeds_have_all_finished_is_marked_interim(tmp_path):
    """A1 resolves on 2 of its 3 seeds: the table shows the look but names it interim in every format, since the
    verdict is the one on all the seeds fixed before training (stopping at the first look that passes inflates its
    error rate). A finished row with a failed seed is final, not interim."""
    from ablations.report import write_outputs

    specs = write_project(tmp_path, "mini", SWEEP.replace("seeds: [0, 1]", "seeds: [0, 1, 2]"))
    runs = tmp_path / "runs"
    for seed, (base_ppl, a1_ppl) in enumerate([(5.0, 5.5), (5.4, 5.901)]):
        write_run(runs, specs["base", seed], "done", **done(20.0, base_ppl))
        write_run(runs, specs["A1", seed], "done", **done(20.0, a1_ppl))
        write_run(runs, specs["A2", seed], "done", **done(20.0, base_ppl))
    write_run(runs, specs["base", 2], "done", **done(20.0, 5.2))
    write_run(runs, specs["A2", 2], "failed", error="boom")
    write_run(runs, specs["A1", 2], "running")
    table, _ = make(tmp_path)
    rows = markdown_rows((tmp_path / "results" / "mini_tiny.md").read_text(encoding="utf-8"))
    assert (rows["A1"]["verdict"], rows["A1"]["seeds"]) == ("agrees (PPL), interim", "2/3 (s2 running)")
    assert not rows["A2"]["verdict"].endswith("interim")  # its third seed failed: nothing left to wait for
    notes = "\n".join(table.notes)
    assert "agrees 1 (A1 interim)" in notes and "Interim, judged before all the seeds" in notes
    assert "A1 on 2 of 3" in notes and "A2 on" not in notes
    write_outputs(table, tmp_path / "results")
    stats = {row["row"]: row for row in json.loads((tmp_path / "results" / "mini_tiny.json").read_text())["statistics"]}
    assert (stats["A1"]["interim"], stats["A1"]["seeds"], stats["A1"]["seeds_expected"]) == (True, [0, 1], 3)
    assert (stats["A2"]["interim"], stats["A2"]["seeds_expected"]) == (False, 3)
    csv_lines = (tmp_path / "results" / "mini_tiny.csv").read_text(encoding="utf-8").splitlines()
    a1 = dict(zip(csv_lines[0].split(","), csv_lines[2].split(",")))
    assert (a1["row"], a1["verdict"], a1["interim"]) == ("A1", "agrees", "true")


def test_records_are_published_and_the_table_rebuilds_from_results_alone(project):
    (running,) = (project / "runs" / "mini" / "tiny").glob("A2-s1-*")
    shutil.rmtree(running)  # a running run is not published: rebuilt without runs/, it would read as missing
    table, paths = make(project)
    assert [p.name for p in paths] == ["mini_tiny.md", "mini_tiny.csv", "mini_tiny.tex"]
    first = {p.name: p.read_bytes() for p in paths}
    published = project / "results" / "records" / "mini_tiny"
    folders = sorted(p.name for p in published.iterdir() if p.is_dir())
    assert [f.split("-")[0] for f in folders] == ["A1", "A1", "A2", "C_1", "base", "base"]  # done and failed runs
    record = published / folders[0]
    assert sorted(p.name for p in record.iterdir()) == [
        "config.yaml",
        "curves-attempt-1.csv",
        "dev.hyp",
        "metrics.json",
        "test.hyp",
    ]
    inode = (record / "dev.hyp").stat().st_ino

    _, again = make(project)
    assert {p.name: p.read_bytes() for p in again} == first
    assert (record / "dev.hyp").stat().st_ino == inode  # identical records are not rewritten

    shutil.rmtree(project / "runs")
    shutil.rmtree(project / "corpus")
    _, rebuilt = make(project)
    assert {p.name: p.read_bytes() for p in rebuilt} == first


def test_header_states_provenance(project):
    make(project)
    text = (project / "results" / "mini_tiny.md").read_text(encoding="utf-8")
    assert "- **Scale**: tiny: test preset; widths ÷ 2, steps × 0.1" in text
    assert "- **Data**: dir (corpus), vocabulary 100" in text
    assert "- **Hardware**: cpu (CPU model not recorded): 5 runs" in text
    assert "- **Code commit**: unknown" in text
    assert r"nrefs:1\|case:mixed" in text


def test_the_hardware_line_counts_runs_per_machine_and_thread_count():
    def run(**metrics):
        return SimpleNamespace(metrics=metrics)

    epyc = {"device": "cpu", "cpu_model": "AMD EPYC"}
    runs = [run(**epyc, torch_threads=1), run(**epyc, torch_threads=2), run(**epyc, torch_threads=1), run()]
    runs.append(run(device="cuda", cpu_model="Xeon", torch_threads=16))  # a GPU run's CPU threads are not its speed
    assert describe_hardware_mix(runs) == (
        "cpu (AMD EPYC, 1 thread): 2 runs, cpu (AMD EPYC, 2 threads): 1 run, cuda (Xeon): 1 run"
    )
    assert describe_hardware_mix([run()]) == "not recorded"
    # A run resumed on another thread count trained on both: it is counted as neither, but as the two in order.
    two, one = {**epyc, "torch_threads": 2}, {**epyc, "torch_threads": 1}
    resumed = run(**one, attempt_workers=[two, two, one])
    same = run(**one, attempt_workers=[one, one])
    assert describe_hardware_mix([resumed, same]) == (
        "cpu (AMD EPYC, 1 thread): 1 run, cpu (AMD EPYC, 2 threads) then cpu (AMD EPYC, 1 thread): 1 run"
    )


def test_a_record_trained_by_several_commits_names_each_in_the_header():
    def record(metrics, meta=None):
        return RunRecord(spec=None, status="done", metrics=metrics, meta=meta or {}, folder=None)

    assert record({"commit": "old1234, new5678"}).commits == ("old1234", "new5678")
    assert record({"commit": "abc+dirty"}).commits == ("abc+dirty",)
    assert record({}, {"commit": "meta111"}).commits == ("meta111",)
    assert record({"commit": None}).commits == ()


def test_latex_is_booktabs_and_escaped(project):
    assert escape_tex("a_b 50% R&D #1 {x} ~ ^") == r"a\_b 50\% R\&D \#1 \{x\} \textasciitilde{} \textasciicircum{}"
    make(project)
    tex = (project / "results" / "mini_tiny.tex").read_text(encoding="utf-8")
    for command in (r"\toprule", r"\midrule", r"\bottomrule", r"\begin{tabular}", r"\end{table}"):
        assert command in tex
    assert r"Mini sweep: 100\% test\_rows \& \#1" in tex
    assert "\nC & C\\_1 & 1 & " in tex
    assert "21.0 $\\pm$ 1.4" in tex and "±" not in tex


def test_a_contrasts_ppl_carries_the_decimals_that_show_its_interval():
    """Near PPL 1 contrasts differ by thousandths: three fixed decimals printed +0.001 [-0.000, +0.002]."""
    from ablations.report.contrasts import ContrastResult, cells
    from ablations.report.stats import PairedDelta
    from ablations.sweep import Contrast

    def contrast(ppl_ci, seeds=(0, 1, 2)):
        ppl = PairedDelta(0.0012, ppl_ci, None, seeds)
        return ContrastResult(Contrast("A1", "A2"), PairedDelta(0.1, (0.0, 0.2), None, seeds), ppl, "differs", None)

    assert cells(contrast((0.0004, 0.0020)))[3:5] == ["+0.0012", "[+0.0004, +0.0020]"]
    assert cells(contrast((-3.0, 3.0)))[3:5] == ["+0.00", "[-3.00, +3.00]"]
    assert cells(contrast(None, seeds=(0,)))[3] == "+0.001"  # one seed: no interval to size from


def test_a_named_reference_row_is_what_every_delta_is_against(project):
    """positional_norm's first row, sin-post, does not train at the CPU widths; its Δ are against sin-pre."""
    sweep = project / "sweeps" / "mini.yaml"
    sweep.write_text(SWEEP.replace("seeds: [0, 1]", "seeds: [0, 1]\nreference: A1"), encoding="utf-8")
    table, _ = make(project)
    assert table.base.row.id == "A1"
    rows = markdown_rows((project / "results" / "mini_tiny.md").read_text(encoding="utf-8"))
    assert (rows["base"]["Δ BLEU"], rows["base"]["Δ PPL"], rows["A1"]["Δ BLEU"]) == ("-3.5", "+0.60", "")
    assert (rows["base"]["h"], rows["A1"]["h"]) == ("4", "1")  # blank cells are the reference's values
    assert "a blank cell is A1's value" in "\n".join(table.notes)


def test_contrasts_are_seed_paired_between_two_rows_in_every_format(project):
    from ablations.report import write_outputs

    sweep = project / "sweeps" / "mini.yaml"
    contrasts = "contrasts:\n  - {row: A1, against: A2}\n  - {row: A2, against: D1}\n"
    sweep.write_text(SWEEP.replace("rows:\n", contrasts + "rows:\n"), encoding="utf-8")
    specs = {(s.row, s.seed): s for s in expand(load_sweep(sweep), scales_for(sweep)["tiny"])}
    (running,) = (project / "runs" / "mini" / "tiny").glob("A2-s1-*")
    shutil.rmtree(running)
    write_run(project / "runs", specs["A2", 1], "done", BAD, **done(21.0, 5.0))
    table, _ = make(project)
    result, unmeasured = table.contrasts
    assert unmeasured.bleu.seeds == () and unmeasured.bleu.mean is None  # D1 has no done run
    # A1 − A2, seed by seed: BLEU 24 − 20, 25 − 21 (+4, +4); PPL 4.5 − 5.2, 4.7 − 5.0 (−0.7, −0.3).
    assert result.bleu.seeds == (0, 1) and result.bleu.mean == pytest.approx(4.0) and result.bleu.ci == (4.0, 4.0)
    assert result.ppl.mean == pytest.approx(-0.5) and result.reading == "differs"
    text = (project / "results" / "mini_tiny.md").read_text(encoding="utf-8")
    assert "| A1 − A2 | +4.0 | [+4.0, +4.0] | -0.50 |" in text  # PPL to the decimals its interval (±2.5) needs
    assert "| A2 − D1 |  |  |  |  | not measured | none shared |" in text
    table, _ = make_selected(project, ["A1", "A2"])
    assert [c.contrast.label for c in table.contrasts] == ["A1 − A2"]
    assert "Not in this table: A2 − D1." in table.notes[-1]
    write_outputs(table, project / "results")
    data = json.loads((project / "results" / "mini_tiny.json").read_text(encoding="utf-8"))
    (entry,) = data["contrasts"]
    assert (entry["row"], entry["against"], entry["seeds"], entry["reading"]) == ("A1", "A2", [0, 1], "differs")
    assert entry["delta_ppl_ci"][0] < -0.5 < entry["delta_ppl_ci"][1]
    assert entry["delta_bleu_per_seed"] == {"0": pytest.approx(4.0), "1": pytest.approx(4.0)}
    assert entry["delta_ppl_per_seed"] == {"0": pytest.approx(-0.7), "1": pytest.approx(-0.3)}
    assert escape_tex("Contrast A1 − A2: Δ BLEU +4.0") in (project / "results" / "mini_tiny.tex").read_text(
        encoding="utf-8"
    )
    assert "A1 − A2" in (project / "results" / "index.html").read_text(encoding="utf-8")


def test_extra_columns_for_fields_that_vary(project):
    sweep = project / "sweeps" / "mini.yaml"
    sweep.write_text(SWEEP + "  - {id: N1, group: N, overrides: {norm_placement: pre}}\n", encoding="utf-8")
    table, _ = make(project)
    assert table.extra_columns == ("model.norm_placement",)
    rows = markdown_rows((project / "results" / "mini_tiny.md").read_text(encoding="utf-8"))
    assert (rows["base"]["norm_placement"], rows["A1"]["norm_placement"], rows["N1"]["norm_placement"]) == (
        "post",
        "",
        "pre",
    )


def test_command_line(project, capsys):
    from ablations.cli import build_parser

    args = build_parser().parse_args(
        [
            "table",
            str(project / "sweeps" / "mini.yaml"),
            "--scale",
            "tiny",
            "--runs",
            str(project / "runs"),
            "--out",
            str(project / "out"),
            "--partial",
        ]
    )
    assert args.handler(args) == 0
    assert (project / "out" / "mini_tiny.tex").is_file()
    assert "5 done" in capsys.readouterr().out
    command = dict(json.loads((project / "out" / "mini_tiny.json").read_text())["header"])["Command"]
    assert command == f"ablate table {project / 'sweeps' / 'mini.yaml'} --scale tiny --partial"  # no --runs, --out
    with pytest.raises(ValueError, match="unknown; scales: tiny"):
        build_table(project / "sweeps" / "mini.yaml", "huge", runs=project / "runs", out=project / "out")


def test_plateau_change_reads_the_last_fifth_of_the_budget():
    from ablations.report.convergence import plateau_change

    curve = [(250, 40.0), (500, 10.0), (750, 5.0), (800, 4.0), (900, 3.9), (1000, 3.96)]
    assert plateau_change(curve, 1000) == pytest.approx(-0.01)  # from step 800 (4.0) to the end (3.96)
    assert plateau_change(curve[3:], 1000) == pytest.approx(-0.01)
    assert plateau_change([(900, 3.0), (1000, 2.9)], 1000) is None  # no evaluation before the last fifth
    assert plateau_change(curve[:3], 750) == pytest.approx(-0.5)  # still learning: 10.0 -> 5.0


def test_the_notes_say_whose_ppl_delta_changed_sign_after_80_percent_of_the_budget(tmp_path):
    """A row ahead of base at 80 % of the steps and behind it at the end (a fast starter) is named."""
    specs = write_project(tmp_path, "mini", SWEEP)
    runs = tmp_path / "runs"
    curves = {  # dev PPL at steps 40, 80 (80 % of the 100 steps) and 100, per (row, seed)
        ("base", 0): (9.0, 6.0, 5.0),
        ("base", 1): (9.5, 6.2, 5.4),
        ("A1", 0): (7.0, 5.5, 5.2),  # ahead at step 80 (-0.5), behind at the end (+0.2)
        ("A1", 1): (7.5, 5.8, 5.6),
        ("A2", 0): (9.9, 6.5, 5.2),  # behind throughout
        ("A2", 1): (9.9, 6.6, 5.5),
    }
    for (row, seed), ppl in curves.items():
        folder = write_run(runs, specs[row, seed], "done", BAD, **done(20.0, ppl[-1]))
        lines = "".join(f"{value},{step}\n" for step, value in zip((40, 80, 100), ppl))
        write_atomic(folder / "logs" / "attempt-1" / "metrics.csv", "dev/ppl,step\n" + lines)
    table, _ = make(tmp_path)
    (line,) = [note for note in table.notes if note.startswith("Earlier in training")]
    assert line == (
        "Earlier in training: at 80 % of each run's steps, the mean Δ PPL had its final sign in 1 of 2 rows; "
        "it flipped in A1 (-0.45 then +0.20)."
    )


def test_the_notes_and_the_data_name_a_run_that_never_learned_and_keep_it_in_the_statistics(tmp_path):
    """A seed that finished without learning (dev BLEU under 1) is named with its final and best dev PPL, and stays
    in the row's mean: dropping it after seeing it would choose the result."""
    from ablations.report.table3 import row_statistics

    specs = write_project(tmp_path, "mini", SWEEP)
    runs = tmp_path / "runs"
    write_run(runs, specs["base", 0], "done", BAD, **done(20.0, 5.0))
    write_run(runs, specs["base", 1], "done", BAD, **done(22.0, 5.4))
    write_run(runs, specs["A1", 0], "done", BAD, **done(21.0, 5.1))
    stuck = write_run(runs, specs["A1", 1], "done", BAD, **done(0.3, 24.1))
    write_atomic(stuck / "logs" / "attempt-1" / "metrics.csv", "dev/ppl,step\n30.0,40\n10.7,80\n24.1,100\n")
    write_run(runs, specs["A2", 0], "done", BAD, **{**done(0.0, 9.0), "dev_ppl": None})
    table, _ = make(tmp_path)
    (line,) = [note for note in table.notes if note.startswith("Did not learn")]
    assert line.startswith(
        "Did not learn (final dev BLEU under 1): A1 s1 (dev BLEU 0.3, dev PPL 24.10; best dev PPL 10.70), A2 s0 "
        "(dev BLEU 0.0). These runs stay in the means"
    )
    a1 = next(result for result in table.rows if result.row.id == "A1")
    assert a1.stats["dev_bleu"].mean == pytest.approx(10.65)
    by_row = {entry["row"]: entry for entry in row_statistics(table)}
    assert by_row["A1"]["seeds_not_learned"] == [1]
    assert by_row["A2"]["seeds_not_learned"] == [0]
    assert by_row["D1"]["seeds_not_learned"] == []
    # a failed seed is no seed spread: no seeds-to-resolve figure is planned from it
    assert by_row["A1"]["verdict"] == "unresolved"
    assert by_row["A1"]["seeds_to_resolve"]["seeds"] is None
    assert by_row["A1"]["seeds_to_resolve"]["why"] == "seed 1 did not learn, so its spread is not seed noise"
    (plan,) = [note for note in table.notes if note.startswith("Seeds to resolve")]
    assert "A1: seed 1 did not learn" in plan


def test_no_note_when_every_run_learned(project):
    table, _ = make(project)
    assert not [note for note in table.notes if note.startswith("Did not learn")]
