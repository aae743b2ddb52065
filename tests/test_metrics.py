import math

import pytest
import sacrebleu

from lightning_modules.metrics import score_translations, split_compounds, tokenize_for_bleu


def test_split_compounds_splits_every_hyphen():
    assert split_compounds("Haus-Tür-Schloss") == "Haus ##AT##-##AT## Tür ##AT##-##AT## Schloss"
    assert split_compounds("a-b-c-d") == "a ##AT##-##AT## b ##AT##-##AT## c ##AT##-##AT## d"
    # Hyphens next to a space or at the ends are not compound hyphens.
    assert split_compounds("a - b -c d-") == "a - b -c d-"


def test_tokenize_for_bleu_moses_no_escape():
    assert (
        tokenize_for_bleu("Das Haus-Tür-Schloss ist kaputt.")
        == "Das Haus ##AT##-##AT## Tür ##AT##-##AT## Schloss ist kaputt ."
    )
    assert tokenize_for_bleu('Tom & Jerry sagen: "Nein"!') == 'Tom & Jerry sagen : " Nein " !'  # escape=False


def test_identical_is_100():
    lines = ["Das Haus-Tür-Schloss ist kaputt.", "Wir gehen heute, glaube ich, nicht ins Kino!"]
    scores = score_translations(lines, lines)
    assert scores["bleu"] == pytest.approx(100.0)
    assert scores["bleu_tok"] == pytest.approx(100.0)
    assert scores["chrf"] == pytest.approx(100.0)


def test_tokenized_bleu_known_value_and_compound_split_direction():
    hyp, ref = ["Das Haus-Tür-Schloss ist kaputt."], ["Das Haus-Tür-Schlüssel ist kaputt."]
    scores = score_translations(hyp, ref)
    # 9 tokens each after splitting (Das Haus @ Tür @ Schloss ist kaputt .), only "Schloss" differs:
    # n-gram precisions 8/9, 6/8, 4/7, 2/6, brevity penalty 1.
    expected = 100 * math.exp((math.log(8 / 9) + math.log(6 / 8) + math.log(4 / 7) + math.log(2 / 6)) / 4)
    assert scores["bleu_tok"] == pytest.approx(expected, abs=1e-9)
    # Without the split the compound is one wrong token (precisions 4/5, 2/4, 1/3, 0/2): a lower score.
    unsplit = sacrebleu.corpus_bleu(
        ["Das Haus-Tür-Schloss ist kaputt ."], [["Das Haus-Tür-Schlüssel ist kaputt ."]], tokenize="none"
    )
    assert unsplit.counts == [4, 2, 1, 0]
    assert unsplit.score < scores["bleu_tok"] - 10


def test_sacrebleu_matches_corpus_bleu_and_signatures():
    hyps = ["The cat sat on the mat.", "A dog barked loudly at night", "Hello world!"]
    refs = ["The cat sat on a mat.", "The dog barked loudly at night.", "Hello, world!"]
    scores = score_translations(hyps, refs, target_lang="en")
    assert scores["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs]).score, abs=1e-9)
    assert scores["chrf"] == pytest.approx(sacrebleu.corpus_chrf(hyps, [refs]).score, abs=1e-9)
    assert "tok:13a" in scores["sacrebleu_signature"]
    assert "nrefs:1" in scores["sacrebleu_signature"]
    assert "tok:none" in scores["bleu_tok_signature"]
    assert 0 < scores["bleu"] < 100 and 0 < scores["bleu_tok"] < 100


def test_length_mismatch_raises():
    with pytest.raises(ValueError, match="one reference per line"):
        score_translations(["a"], ["a", "b"])
