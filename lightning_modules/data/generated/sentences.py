"""A sentence's structure, drawn from the lexicon: clauses, noun phrases and the sentence types. Both sides
are realised from it (realisation.py), and so is the source side's gold tree (trees.py)."""

from __future__ import annotations

import random
from typing import Optional

from .function_words import PREPS, PRONOUNS, S_CONJ, TWO_WAY
from .lexicon import Noun, Verb


class NP:
    __slots__ = ("noun", "pron", "pl", "det", "adjs", "rel")

    def __init__(
        self,
        noun: Optional[Noun] = None,
        pron: Optional[str] = None,
        pl: bool = False,
        det: str = "def",
        adjs: tuple = (),
        rel: Optional["Clause"] = None,
    ) -> None:
        self.noun, self.pron, self.pl, self.det, self.adjs, self.rel = noun, pron, pl, det, adjs, rel


class Clause:
    """One clause; a relative clause has ``subj`` or ``obj`` set to None (the gap)."""

    __slots__ = ("subj", "verb", "obj", "iobj", "pp", "tense", "neg", "tadv", "front", "madv", "comp")

    def __init__(
        self,
        subj,
        verb,
        obj=None,
        iobj=None,
        pp=None,
        tense="pres",
        neg=False,
        tadv=None,
        front=False,
        madv=None,
        comp=None,
    ) -> None:
        self.subj, self.verb, self.obj, self.iobj, self.pp = subj, verb, obj, iobj, pp
        self.tense, self.neg, self.tadv, self.front, self.madv, self.comp = tense, neg, tadv, front, madv, comp


def _gen_np(rng: random.Random, key: str, pron_p: float = 0.0) -> NP:
    if pron_p and rng.random() < pron_p:
        return NP(pron=rng.choice(PRONOUNS))
    base, comps = rng.lex.pools[key]
    noun = rng.choice(comps) if comps and rng.random() < 0.12 else rng.choice(base)
    r = rng.random()
    pl = r < 0.3
    if pl:
        det = "def" if rng.random() < 0.6 else "bare"
    else:
        det = "def" if rng.random() < 0.7 else "indef"
    r = rng.random()
    if r < 0.62:
        adjs = ()
    else:
        pool = rng.lex.adjs_anim if noun.anim else rng.lex.adjs_inan
        adjs = (rng.choice(pool),) if r < 0.9 else tuple(rng.sample(pool, 2))
    return NP(noun, None, pl, det, adjs)


def _tense(rng: random.Random) -> str:
    r = rng.random()
    return "pres" if r < 0.45 else "past" if r < 0.8 else "fut"


def _gen_pp(rng: random.Random, verb: Verb):
    prep = rng.choice(TWO_WAY) if verb.motion and rng.random() < 0.7 else rng.choice(PREPS)
    return prep, _gen_np(rng, prep.pool, pron_p=0.08 if prep.pool in ("anim", "at", "ap") else 0.0)


def _gen_rel(rng: random.Random, head: Noun) -> Clause:
    """A relative clause on ``head``: subject gap (heads that can be subjects) or object gap."""
    key = "anim" if head.anim else head.cls
    if head.amb:
        key += "!"
    objverbs = rng.lex.verbs_by_obj.get(key)
    if head.anim and (not objverbs or rng.random() < 0.6):
        verb = rng.choice(rng.lex.subj_verbs)
        obj = None
        if verb.frame == "tr":
            obj = _gen_np(rng, verb.obj + "!" if verb.amb else verb.obj, 0.06 if verb.obj == "anim" else 0.0)
        cl = Clause(None, verb, obj)
    else:
        verb = rng.choice(objverbs)
        cl = Clause(_gen_np(rng, "anim", 0.15), verb, None)
    cl.tense = _tense(rng)
    cl.neg = rng.random() < 0.08
    if rng.random() < (0.3 if verb.frame == "intr" else 0.12):
        cl.pp = _gen_pp(rng, verb)
    return cl


def _gen_clause(
    rng: random.Random, tail_free: bool = True, clausal: bool = True, front_ok: bool = True, simple: bool = False
) -> Clause:
    """A finite clause.  ``tail_free``: nothing follows it, so its last noun phrase may take a relative clause."""
    r = rng.random()
    if simple or r < 0.3:
        frame = "intr"
    elif r < 0.8 or (not clausal and r >= 0.88):
        frame = "tr"
    elif r < 0.88:
        frame = "ditr"
    else:
        frame = "clause"
    verb = rng.choice(rng.lex.verbs[frame])
    subj = _gen_np(rng, "person" if frame in ("ditr", "clause") else "anim", 0.15)
    cl = Clause(subj, verb, tense=_tense(rng))
    if simple:
        if subj.pron is None:
            subj.adjs, subj.det = (), ("bare" if subj.pl and rng.random() < 0.5 else "def")
        return cl
    if frame == "tr":
        cl.obj = _gen_np(rng, verb.obj + "!" if verb.amb else verb.obj, 0.06 if verb.obj == "anim" else 0.0)
    elif frame == "ditr":
        cl.obj = _gen_np(rng, "ft")
        cl.iobj = _gen_np(rng, "anim", 0.1)
    cl.neg = rng.random() < 0.1
    if frame != "clause":
        if rng.random() < {"intr": 0.6 if verb.motion else 0.35, "tr": 0.2, "ditr": 0.1}[frame]:
            cl.pp = _gen_pp(rng, verb)
        if rng.random() < 0.08:
            cl.madv = rng.choice(rng.lex.manner_advs)
    if rng.random() < 0.15:
        front = front_ok and (frame == "clause" or rng.random() < 0.5)
        if front or frame != "clause":
            cl.tadv, cl.front = rng.choice(rng.lex.time_advs), front
    if frame == "clause":
        cl.comp = _gen_clause(rng, tail_free, clausal=False, front_ok=False)
    # relative clauses: on the subject, or on the clause's last noun phrase when nothing follows it
    if subj.pron is None and rng.random() < 0.12:
        subj.rel = _gen_rel(rng, subj.noun)
    elif tail_free and frame != "clause" and cl.madv is None and (cl.tadv is None or cl.front) and rng.random() < 0.14:
        last = cl.pp[1] if cl.pp else cl.iobj or cl.obj
        if last is not None and last.pron is None:
            last.rel = _gen_rel(rng, last.noun)
    return cl


def gen_plan(rng: random.Random) -> tuple:
    """A sentence's structure: the arguments of ``realise`` (and of ``tree_of``)."""
    r = rng.random()
    if r < 0.07:
        return ("main", _gen_clause(rng, simple=True))
    if r < 0.57:
        return ("main", _gen_clause(rng))
    if r < 0.67:
        return ("question", _gen_clause(rng, front_ok=False))
    if r < 0.80:
        return (
            "sub",
            _gen_clause(rng, tail_free=False, clausal=False),
            _gen_clause(rng, clausal=False, front_ok=False),
            rng.choice(S_CONJ),
        )
    if r < 0.87:
        return (
            "front",
            _gen_clause(rng, front_ok=False),
            _gen_clause(rng, clausal=False, front_ok=False),
            rng.choice(("wen", "ef", "altho")),
        )
    return (
        "coord",
        _gen_clause(rng, tail_free=False, clausal=False),
        _gen_clause(rng),
        rng.choice(("ond", "ond", "bat")),
    )
