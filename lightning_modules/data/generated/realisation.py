"""A sentence's structure written out: the source side in English-like order, the target side with German-like
case, agreement, verb-second and verb-final order, contractions and commas."""

from __future__ import annotations

from typing import Optional

from .function_words import ADJ_END, BE, CONTRACT, DEF, FUT, HAVE, INDEF, S_PRON, T_CONJ, T_PRON
from .lexicon import Verb
from .sentences import NP, Clause


def _s_np(np: NP, out: list) -> None:
    if np.pron:
        out.append(S_PRON[np.pron])
        return
    if np.det == "def":
        out.append("tha")
    elif np.det == "indef":
        out.append("an")
    for a in np.adjs:
        out.append(a.s)
    out.append(np.noun.s_pl if np.pl else np.noun.s_sg)
    if np.rel is not None:
        out.append("thet")
        _s_clause(np.rel, out)


def _s_clause(cl: Clause, out: list) -> None:
    if cl.tadv is not None and cl.front:
        out.append(cl.tadv.s)
    if cl.subj is not None:
        _s_np(cl.subj, out)
    if cl.neg:
        out.append("nat")
    v = cl.verb
    if cl.tense == "past":
        out.append(v.s_past)
    elif cl.tense == "fut":
        out += ("wil", v.s)
    else:
        out.append(v.s)
    if cl.obj is not None:
        _s_np(cl.obj, out)
    if cl.iobj is not None:
        out.append("tu")
        _s_np(cl.iobj, out)
    if cl.pp is not None:
        out.append(cl.pp[0].s)
        _s_np(cl.pp[1], out)
    if cl.madv is not None:
        out.append(cl.madv.s)
    if cl.tadv is not None and not cl.front:
        out.append(cl.tadv.s)
    if cl.comp is not None:
        out.append("thet")
        _s_clause(cl.comp, out)


def _agr(np: NP) -> str:
    return np.pron or ("3pl" if np.pl else "3sg")


def _t_np(np: NP, case: str, out: list) -> None:
    if np.pron:
        out.append(T_PRON[case][np.pron])
        return
    n = np.noun
    key = "pl" if np.pl else n.g
    if np.det == "def":
        out.append(DEF[case][key])
    elif np.det == "indef":
        out.append(INDEF[case][n.g])
    out.append((n.t_dpl if case == "dat" else n.t_pl) if np.pl else n.t_sg)
    if np.adjs:
        end = ADJ_END[case][key]
        for a in reversed(np.adjs):  # postnominal, mirror order
            out.append((a.t_anim if n.anim else a.t_inan) + end)
    if np.rel is not None:
        rel = np.rel
        out.append(",")
        if rel.subj is None:
            out.append(DEF["nom"][key])
            _t_final(rel, "3pl" if np.pl else "3sg", out)
        else:
            out.append(DEF["acc"][key])
            _t_final(rel, _agr(rel.subj), out)
        out.append(",")


def _t_pp(pp, verb: Verb, out: list) -> None:
    prep, np = pp
    case = prep.case if prep.case != "two" else ("acc" if verb.motion else "dat")
    word = prep.t if (prep.t_place is None or np.pron or np.noun.anim) else prep.t_place
    if word in CONTRACT and case == "dat" and np.pron is None and np.det == "def" and not np.pl and np.noun.g != "f":
        tmp: list = []
        _t_np(np, case, tmp)
        out.append(CONTRACT[word])
        out.extend(tmp[1:])
    else:
        out.append(word)
        _t_np(np, case, out)


def _t_middle(cl: Clause, out: list) -> None:
    if cl.tadv is not None and not cl.front:
        out.append(cl.tadv.t)
    if cl.iobj is not None:
        _t_np(cl.iobj, "dat", out)
    if cl.obj is not None:
        _t_np(cl.obj, "acc", out)
    if cl.pp is not None:
        _t_pp(cl.pp, cl.verb, out)
    if cl.madv is not None:
        out.append(cl.madv.t)
    if cl.neg:
        out.append("nikt")


def _t_v2(cl: Clause, agr: str) -> tuple[str, list]:
    """(finite verb, right bracket) of a verb-second or verb-first clause."""
    v = cl.verb
    if cl.tense == "pres":
        return v.pres[agr], ([v.sep] if v.sep else [])
    if cl.tense == "past":
        return (BE if v.aux == "be" else HAVE)[agr], [v.part]
    return FUT[agr], [v.inf]


def _t_final(cl: Clause, agr: str, out: list) -> None:
    """Subject (if any), middle field, then the verb cluster: verb-final subordinate / relative clause."""
    if cl.subj is not None:
        _t_np(cl.subj, "nom", out)
    _t_middle(cl, out)
    v = cl.verb
    if cl.tense == "pres":
        out.append(v.pres_sub[agr])
    elif cl.tense == "past":
        out += (v.part, (BE if v.aux == "be" else HAVE)[agr])
    else:
        out += (v.inf, FUT[agr])


def _t_main(cl: Clause, out: list, inverted: bool = False, question: bool = False) -> None:
    agr = _agr(cl.subj)
    fin, right = _t_v2(cl, agr)
    if cl.tadv is not None and cl.front:
        out.append(cl.tadv.t)
        inverted = True
    if inverted or question:
        out.append(fin)
        _t_np(cl.subj, "nom", out)
    else:
        _t_np(cl.subj, "nom", out)
        out.append(fin)
    _t_middle(cl, out)
    out.extend(right)
    if cl.comp is not None:
        out += (",", "datt")
        _t_final(cl.comp, _agr(cl.comp.subj), out)


def _t_conj(conj: str, sub: Clause) -> str:
    if conj == "wen":
        return "als" if sub.tense == "past" else "wanne"
    return T_CONJ[conj]


def _finish(tokens: list, end: str) -> str:
    out: list = []
    for t in tokens:
        if t == "," and (not out or out[-1] == ","):
            continue
        out.append(t)
    while out and out[-1] == ",":
        out.pop()
    s = " ".join(out).replace(" ,", ",") + end
    return s[:1].upper() + s[1:]


def realise(kind: str, a: Clause, b: Optional[Clause] = None, conj: str = "") -> tuple[str, str]:
    """Source and target sentence for a sentence type: ``main``, ``question``, ``sub`` (main + conj + b),
    ``front`` (conj + b, main), ``coord`` (main + ond/bat + b)."""
    s: list = []
    t: list = []
    end = "."
    if kind == "main":
        _s_clause(a, s)
        _t_main(a, t)
    elif kind == "question":
        s.append("kwe")
        _s_clause(a, s)
        _t_main(a, t, question=True)
        end = "?"
    elif kind == "sub":
        _s_clause(a, s)
        s.append(conj)
        _s_clause(b, s)
        _t_main(a, t)
        t += (",", _t_conj(conj, b))
        _t_final(b, _agr(b.subj), t)
    elif kind == "front":
        s.append(conj)
        _s_clause(b, s)
        s.append(",")
        _s_clause(a, s)
        t.append(_t_conj(conj, b))
        _t_final(b, _agr(b.subj), t)
        t.append(",")
        _t_main(a, t, inverted=True)
    elif kind == "coord":
        _s_clause(a, s)
        s += (",", "bat") if conj == "bat" else ("ond",)
        _s_clause(b, s)
        _t_main(a, t)
        t += (",", "abor") if conj == "bat" else ("ont",)
        _t_main(b, t)
    else:
        raise ValueError(f"unknown sentence kind {kind!r}")
    return _finish(s, end), _finish(t, end)
