"""Table 4: sweeps/table4.yaml expands in the paper's units, parses are scored with their repairs counted, and
`ablate table` writes Table 4's layout from fabricated records, byte for byte again from the same records."""

from __future__ import annotations

import argparse
import csv
import json
import math
from pathlib import Path

import pytest

from ablations.records import run_folder, write_atomic, write_config, write_json
from ablations.report import add_table_parser
from ablations.report.dashboard import read_table_data
from ablations.search.spec import load_search
from ablations.sweep import expand, load_sweep, scale_named, scales_path
from lightning_modules.parsing.score import score_parses
from lightning_modules.parsing.trees import read_tree

ROOT = Path(__file__).resolve().parent.parent
TABLE4 = ROOT / "sweeps" / "table4.yaml"
GOLD = [
    read_tree("(S (NP (DT the) (NN cat)) (VP (VBZ sleeps) (ADVP (RB now))) (. .))"),
    read_tree("(S (NP (PRP it)) (VP (VBD rained)) (. .))"),
]


def test_table4_expands_in_the_papers_units_at_its_own_scales(tmp_path):
    sweep = load_sweep(TABLE4)
    assert scales_path(TABLE4) == ROOT / "sweeps" / "table4_scales.yaml"  # the sweep's `scales:`, not scales.yaml
    specs = expand(sweep, scale_named(TABLE4, "tiny"))
    assert [(s.row, s.seed) for s in specs] == [("wsj-only", 0), ("wsj-only", 1), ("wsj-only", 2)]
    assert len({s.run_id for s in specs}) == 3 and expand(sweep, scale_named(TABLE4, "tiny")) == specs  # pure
    config = specs[0].config
    assert (config.model.N, config.model.d_model, config.model.d_ff, config.model.h) == (4, 128, 256, 8)
    assert (config.eval.beam_size, config.eval.length_penalty, config.eval.max_len_offset) == (21, 0.3, 300)
    assert (config.model.P_drop, config.model.attention_dropout, config.train.lr_scale) == (0.2, 0.2, 1.0)
    assert config.data.dataset == "treebank" and config.data.task == "parsing" and config.train.max_steps == 1200
    assert sweep.rows[0].paper.f1 == 91.3
    with pytest.raises(ValueError, match="data.path = None: expected a directory of bracketed trees"):
        expand(sweep, scale_named(TABLE4, "wsj"))  # the WSJ is the user's: --data DIR
    (wsj,) = expand(sweep, scale_named(TABLE4, "wsj"), seeds=[0], sets={"data.path": str(tmp_path)})
    assert (wsj.config.model.d_model, wsj.config.data.dataset, wsj.config.data.vocab_size) == (1024, "ptb", 16000)
    (read,) = expand(sweep, scale_named(TABLE4, "tiny"), seeds=[0], sets={"data.path": str(tmp_path)})
    assert read.config.data.dataset == "ptb"  # --data at tiny reads a PTB directory instead of the built-in one


def test_the_table4_search_tunes_what_the_paper_tuned_on_dev_f1():
    search = load_search(ROOT / "sweeps" / "search_table4_tiny.yaml")
    assert search.metric == "dev_f1" and search.direction == "maximize" and search.monitor == "dev/f1"
    assert {p.target for p in search.params} == {
        "model.P_drop",
        "model.attention_dropout",
        "train.lr_scale",
        "eval.beam_size",
    }


def test_parses_are_scored_with_every_repair_counted():
    outputs = ["(S (NP XX XX )NP (VP XX (ADVP XX )ADVP )VP XX )S", "(S (NP XX )NP (VP XX )VP"]
    scores = score_parses(outputs, GOLD)
    assert scores["invalid"] == 1 and scores["repairs"]["closed_at_end"] == 1 and scores["repairs"]["leaves_added"] == 1
    assert (scores["f1"], scores["sentences"], scores["evalb_errors"]) == (100.0, 2, 0) and scores["exact"] == 2
    wrong = score_parses(["(S (NP XX XX XX XX XX )NP )S", "(S XX XX XX )S"], GOLD)
    # Matched: the two S brackets, of 2 + 1 output and 4 + 3 gold brackets (the periods are not in any span).
    assert wrong["invalid"] == 0 and wrong["f1"] == pytest.approx(100 * 2 * 2 / (3 + 7))
    with pytest.raises(ValueError, match="2 gold trees"):
        score_parses(outputs[:1], GOLD)


def fabricate(runs: Path, f1s: dict[int, float]) -> None:
    sweep = load_sweep(TABLE4)
    for spec in expand(sweep, scale_named(TABLE4, "tiny")):
        meta = {"sweep": spec.sweep, "row": spec.row, "group": spec.group, "scale": spec.scale, "run_id": spec.run_id}
        folder = run_folder(runs, meta, spec.config)
        write_config(folder, spec.config, meta)
        if spec.seed not in f1s:
            write_json(folder / "metrics.json", {"status": "failed", "seed": spec.seed, "reason": "killed"})
            continue
        f1 = f1s[spec.seed]
        metrics = {
            "status": "done",
            "seed": spec.seed,
            "test_f1": f1,
            "dev_f1": f1 + 1,
            "test_precision": f1 + 0.5,
            "test_recall": f1 - 0.5,
            "test_exact": 100 + spec.seed,
            "test_invalid": 10 * (spec.seed + 1),
            "test_repairs": {"closed_at_end": spec.seed + 1, "leaves_added": 2, "wrapped": 0},
            "test_sentences": 1000,
            "parse_signature": "evalb:COLLINS.prm|labelled|micro|repair:trees.from_target",
            "steps": 1200,
            "wall_seconds": 600.0,
            "device": "cpu",
        }
        write_json(folder / "metrics.json", metrics)
        write_atomic(folder / "logs" / "attempt-1" / "metrics.csv", "step,dev/f1,train/loss\n250,40.0,\n260,,1.5\n")
        write_atomic(folder / "test.hyp", "(S XX )S\n")


def table(tmp_path: Path, *extra: str) -> int:
    parser = argparse.ArgumentParser()
    add_table_parser(parser.add_subparsers())
    args = parser.parse_args(
        ["table", str(TABLE4), "--scale", "tiny", "--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "out")]
        + list(extra)
    )
    return args.handler(args)


def test_table4_from_fabricated_records_beside_the_papers_rows(tmp_path):
    fabricate(tmp_path / "runs", {0: 80.0, 1: 82.0, 2: 84.0})
    assert table(tmp_path) == 0
    out = tmp_path / "out"
    markdown = (out / "table4_tiny.md").read_text()
    row = next(line for line in markdown.splitlines() if "| wsj-only |" in line)
    half = 2.0 * 4.302652729911275 / math.sqrt(3)  # t(0.975, 2) * sd / sqrt(n)
    assert "| 91.3 | wsj-only | 82.0 ± 2.0 | " in row and f"[{82 - half:.1f}, {82 + half:.1f}]" in row
    assert "s0 80.0, s1 82.0, s2 84.0" in row and "| 20.0 |" in row and "| 3/3 |" in row  # invalid: mean count
    assert "| Dyer et al. (2016) | generative | 93.3 | paper only |" in markdown
    assert "not runnable here: ~17M sentences" in markdown
    assert "repairs of the test outputs, summed over 3 seeds: closed at end 6, leaves added 6." in markdown
    assert "beam 21, α 0.3, maximum output length = input + 300 word pieces (at most 255" in markdown
    assert "the test split's 1,000 sentences" in markdown and "treebank-40000-1234" in markdown
    lines = list(csv.DictReader((out / "table4_tiny.csv").read_text().splitlines()))
    assert (lines[0]["status"], lines[0]["test_f1"], lines[0]["test_f1_std"]) == ("done", "82.0000", "2.0000")
    assert lines[0]["test_f1_per_seed"] == "s0:80.0000 s1:82.0000 s2:84.0000" and len(lines) == 1 + 12
    assert (out / "table4_tiny.tex").read_text().count(r"\midrule") == 1
    (data,) = [d for d in read_table_data(out) if d["id"] == "table4_tiny"]
    assert data["plots"] == [] and len(data["runs"]) == 3 and data["runs"][0]["curves"]["dev/f1"] == [[250, 40.0]]
    assert "table4_tiny" in (out / "index.html").read_text()
    published = sorted(p.name for p in (out / "records" / "table4_tiny").iterdir())
    assert len(published) == 3 and all(name.startswith("wsj-only-s") for name in published)

    # The same records give the same bytes; so do the published records alone (the header then counts them).
    def files():
        return {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}

    before = files()
    assert table(tmp_path) == 0 and files() == before
    (tmp_path / "runs").rename(tmp_path / "gone")
    assert table(tmp_path, "--published") == 0
    published_once = files()
    assert "3 done (3 from published records)" in published_once["table4_tiny.md"].decode()
    assert table(tmp_path, "--published") == 0 and files() == published_once
    assert json.loads((out / "table4_tiny.json").read_text())["statistics"][0]["seeds"] == [0, 1, 2]


def test_a_failed_seed_is_named_and_left_out(tmp_path):
    fabricate(tmp_path / "runs", {0: 80.0, 2: 84.0})
    assert table(tmp_path) == 0
    row = next(line for line in (tmp_path / "out" / "table4_tiny.md").read_text().splitlines() if "wsj-only" in line)
    assert "82.0 ± 2.8" in row and "2/3 (s1 failed)" in row and "s0 80.0, s2 84.0" in row
