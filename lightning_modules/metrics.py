"""Corpus-level translation scores: sacreBLEU, the paper's tokenized BLEU, chrF.

* `bleu`: sacreBLEU on detokenized text (13a tokenizer, mixed case), the reproducible number.
* `bleu_tok`: the number the paper reports (tensor2tensor's `get_ende_bleu.sh`): Moses punctuation
  normalisation and Moses tokenizer (no XML escaping) on hypothesis and reference, hyphenated compounds
  split as `a ##AT##-##AT## b`, then BLEU on the whitespace tokens (`tokenize="none"`). Unlike the Perl
  one-liner `s{(\\S)-(\\S)}{...}g`, every hyphen of `a-b-c` is split (see `split_compounds`).
* `chrf`: sacreBLEU chrF2 (character 6-grams, beta 2).

All scores are 0-100 and computed from corpus statistics, never averaged over sentences. The sacreBLEU
signatures do not name the test set or the language pair: record those next to the scores.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Sequence

from sacrebleu.metrics import BLEU, CHRF
from sacremoses import MosesPunctNormalizer, MosesTokenizer

# A hyphen with a non-space character on both sides. Lookarounds do not consume the neighbours, so one pass
# splits every hyphen of "a-b-c" (a consuming `(\S)-(\S)` would skip the second one). Applying a consuming
# pattern until a fixed point would never stop: the inserted "##AT##-##AT##" itself matches it.
_COMPOUND_HYPHEN = re.compile(r"(?<=\S)-(?=\S)")
_COMPOUND_SPLIT = " ##AT##-##AT## "


def split_compounds(text: str) -> str:
    """'Haus-Tür-Schloss' -> 'Haus ##AT##-##AT## Tür ##AT##-##AT## Schloss' (every hyphen between non-spaces)."""
    return _COMPOUND_HYPHEN.sub(_COMPOUND_SPLIT, text)


@lru_cache(maxsize=None)
def _moses(lang: str) -> tuple[MosesPunctNormalizer, MosesTokenizer]:
    """One normalizer and tokenizer per language (building them compiles many regexes)."""
    return MosesPunctNormalizer(lang=lang), MosesTokenizer(lang=lang)


def tokenize_for_bleu(text: str, lang: str = "de") -> str:
    """The paper's pre-processing of one line: Moses normalise, Moses tokenize (escape=False), split compounds."""
    normalizer, tokenizer = _moses(lang)
    tokens = tokenizer.tokenize(normalizer.normalize(text), escape=False, return_str=True)
    return " ".join(split_compounds(tokens).split())


def score_translations(hypotheses: Sequence[str], references: Sequence[str], target_lang: str = "de") -> dict:
    """Corpus scores of detokenized hypotheses against one detokenized reference per line.

    Returns `bleu`, `sacrebleu_signature`, `bleu_tok`, `bleu_tok_signature` and `chrf` (all scores 0-100).
    """
    hypotheses, references = list(hypotheses), list(references)
    if len(hypotheses) != len(references):
        raise ValueError(
            f"{len(hypotheses)} hypotheses but {len(references)} references: expected one reference per line"
        )
    if not hypotheses:
        raise ValueError("no hypotheses to score")

    bleu = BLEU(tokenize="13a")
    bleu_score = bleu.corpus_score(hypotheses, [references])

    tok_hyps = [tokenize_for_bleu(line, target_lang) for line in hypotheses]
    tok_refs = [tokenize_for_bleu(line, target_lang) for line in references]
    bleu_tok = BLEU(tokenize="none", force=True)  # force: the input is tokenized on purpose
    bleu_tok_score = bleu_tok.corpus_score(tok_hyps, [tok_refs])

    chrf = CHRF()
    chrf_score = chrf.corpus_score(hypotheses, [references])

    return {
        "bleu": float(bleu_score.score),
        "sacrebleu_signature": str(bleu.get_signature()),
        "bleu_tok": float(bleu_tok_score.score),
        "bleu_tok_signature": f"moses-norm+tok:{target_lang}|compound-split|" + str(bleu_tok.get_signature()),
        "chrf": float(chrf_score.score),
    }
