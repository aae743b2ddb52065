"""The source sentence's gold constituency tree, built from the same structure the sentence is realised from."""

from __future__ import annotations

import re
from typing import Optional

from .function_words import S_PRON
from .sentences import NP, Clause

# Each tree is built from the same structures the source sentence is realised from, so its words are the
# sentence's (with punctuation split off as its own token, as in the Penn Treebank) and its brackets are what the
# generator meant. Labels and tags follow the Penn Treebank's: S, SQ, SBAR, NP, VP, PP, ADVP, WHNP; DT, JJ, NN,
# NNS, PRP, VBP, VBD, VB, MD, RB, IN, TO, WDT, CC, UH and the punctuation tags , . ?


def _b_np(np: NP) -> str:
    if np.pron:
        return f"(NP (PRP {S_PRON[np.pron]}))"
    words = []
    if np.det == "def":
        words.append("(DT tha)")
    elif np.det == "indef":
        words.append("(DT an)")
    words += [f"(JJ {a.s})" for a in np.adjs]
    noun = np.noun.s_pl if np.pl else np.noun.s_sg
    *modifiers, head = noun.split(" ")  # a compound is two words: modifier (singular) and head
    words += [f"(NN {m})" for m in modifiers] + [f"({'NNS' if np.pl else 'NN'} {head})"]
    phrase = f"(NP {' '.join(words)})"
    if np.rel is None:
        return phrase
    return f"(NP {phrase} (SBAR (WHNP (WDT thet)) {_b_clause(np.rel)}))"


def _b_clause(cl: Clause) -> str:
    """An S: fronted time adverb, subject (absent in a subject-gap relative clause) and the verb phrase."""
    parts = []
    if cl.tadv is not None and cl.front:
        parts.append(f"(ADVP (RB {cl.tadv.s}))")
    if cl.subj is not None:
        parts.append(_b_np(cl.subj))
    parts.append(_b_vp(cl))
    return f"(S {' '.join(parts)})"


def _b_vp(cl: Clause) -> str:
    v = cl.verb
    inner = [f"(VBD {v.s_past})" if cl.tense == "past" else f"({'VB' if cl.tense == 'fut' else 'VBP'} {v.s})"]
    if cl.obj is not None:
        inner.append(_b_np(cl.obj))
    if cl.iobj is not None:
        inner.append(f"(PP (TO tu) {_b_np(cl.iobj)})")
    if cl.pp is not None:
        inner.append(f"(PP (IN {cl.pp[0].s}) {_b_np(cl.pp[1])})")
    if cl.madv is not None:
        inner.append(f"(ADVP (RB {cl.madv.s}))")
    if cl.tadv is not None and not cl.front:
        inner.append(f"(ADVP (RB {cl.tadv.s}))")
    if cl.comp is not None:
        inner.append(f"(SBAR (IN thet) {_b_clause(cl.comp)})")
    vp = f"(VP {' '.join(inner)})"
    if cl.tense == "fut":
        vp = f"(VP (MD wil) {vp})"
    return f"(VP (RB nat) {vp})" if cl.neg else vp


def _b_children(s: str) -> str:
    """The children of an (S ...) bracket string, to be spliced into another S."""
    assert s.startswith("(S ") and s.endswith(")")
    return s[3:-1]


def tree_of(kind: str, a: Clause, b: Optional[Clause] = None, conj: str = "") -> str:
    """The bracketed tree of the sentence ``realise(kind, a, b, conj)`` realises (source side)."""
    if kind == "main":
        tree = f"(S {_b_children(_b_clause(a))} (. .))"
    elif kind == "question":
        tree = f"(SQ (UH kwe) {_b_children(_b_clause(a))} (. ?))"
    elif kind == "sub":
        tree = f"(S {_b_children(_b_clause(a))} (SBAR (IN {conj}) {_b_clause(b)}) (. .))"
    elif kind == "front":
        tree = f"(S (SBAR (IN {conj}) {_b_clause(b)}) (, ,) {_b_children(_b_clause(a))} (. .))"
    elif kind == "coord":
        joint = "(, ,) (CC bat)" if conj == "bat" else "(CC ond)"
        tree = f"(S {_b_clause(a)} {joint} {_b_clause(b)} (. .))"
    else:
        raise ValueError(f"unknown sentence kind {kind!r}")
    return _capitalise_first_word(tree)


def _capitalise_first_word(tree: str) -> str:
    """The sentence's first word capitalised, as ``_finish`` does for the sentence."""
    match = re.search(r"\(([^\s()]+) ([^\s()]+)\)", tree)
    word = match.group(2)
    return tree[: match.start(2)] + word[:1].upper() + word[1:] + tree[match.end(2) :]
