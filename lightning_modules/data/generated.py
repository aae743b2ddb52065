"""The built-in parallel corpus: two small artificial languages, generated offline and deterministically.

Neither side is real English or German; every content word is invented (drawn once from fixed syllable
inventories with a fixed lexicon seed, so the lexicon never changes with the corpus seed), and the function
words are invented too.  The *grammars* are modelled on English and German so that translating needs the
operations a real en->de system needs.  The mapping source -> target is a function (no noise): every
ambiguity in the source is resolved by something else in the same sentence.

Source, "English-like" (``en``)
    SVO in every clause; subject and object are told apart only by their *position*.  Articles ``tha``
    (definite), ``an`` (indefinite singular), bare plurals.  Prenominal adjectives.  Nouns mark plural
    (``-s``/``-es``); verbs do not agree with anything.  Past tense ``-ed``/``-d``, future ``wil V``,
    negation ``nat`` before the verb.  Invariant pronouns ``mi yu wi thei`` (no case).  Relative clauses and
    complement clauses with the invariant ``thet``; subordinate clauses with ``bikos ef altho wen``;
    coordination ``ond`` / ``, bat``; yes/no questions with the particle ``kwe``; ditransitives ``V X tu Y``.
    Noun-noun compounds are two words (``modifier head``).  Only the first word is capitalised; the only
    commas are after a fronted ``wen``/``ef``/``altho`` clause and before ``bat``.

Target, "German-like" (``de``)
    Three genders and two numbers on nouns (plural by suffix, many with umlaut: ``Kilump`` -> ``Kilümper``;
    dative plural adds ``-n``), three cases (nominative, accusative, dative) marked on the article, on the
    (postnominal, mirror-ordered) adjectives and on relative pronouns; the verb agrees with its subject in
    person and number.  Main clauses are verb-second: a fronted time adverb or a fronted subordinate clause
    puts the finite verb before the subject; questions are verb-first.  The perfect (``het``/``iss`` +
    participle) and the future (``wolt`` + infinitive) split the verb into a finite auxiliary in second
    position and a non-finite form at the clause end; separable verbs leave their particle there.
    Subordinate and relative clauses are verb-final (``..., wail dor Lapilz don Käch gerungt het``).  The
    middle field is ordered time adverb, dative, accusative, PP, manner adverb, negation ``nikt``.
    Ditransitives lose their preposition (dative object before accusative).  Case after ``inn opp unnor
    hintor`` depends on the verb (accusative of direction after motion verbs, else dative); ``inn/ann/bai``
    + dative ``dom`` contract to ``imm/amm/baim``.  Nouns are capitalised; compounds are one word
    (``puft pluk`` -> ``Greuchmawolk``) or hyphenated (``yimult spevomp`` -> ``Paudo-Tepind``: when the
    modifier ends in a vowel or the compound would exceed 12 letters).  Commas enclose relative clauses and
    precede subordinate clauses and ``abor``.

Context-dependent word choice: ambiguous source verbs (translation chosen by the object's class),
adjectives (animate vs inanimate noun), nouns (the class the verb or preposition selects), the preposition
``atte`` (``bai`` with a person or animal, ``ann`` with a place) and ``wen`` (``als`` with a past clause,
else ``wanne``).

Sizes: ~250 nouns (plus 150 compounds), ~110 verbs, 60 adjectives, 20 adverbs; about 850 source and
2,250 target word types in 50k pairs; 2-40 words a sentence (mean ~10.4, ~80% between 5 and 20).
A harder corpus: ``lexicon_scale`` k (``data.generated_lexicon_scale``) multiplies every content-word count,
grammar and sentence lengths unchanged, so each word is seen k times less often; k = 1 is the default corpus.
Bump :data:`GENERATOR_VERSION` whenever the output for a given seed changes (written corpora regenerate).

Public API: :func:`generate_pairs` and :func:`write_corpus`.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import os
import pathlib
import random
import re
from typing import Iterator, Optional

from ..atomic import write_atomic
from ..config import MAX_LEXICON_SCALE

__all__ = ["GENERATOR_VERSION", "generate_pairs", "generate_treebank", "write_corpus", "write_treebank"]

GENERATOR_VERSION = 2
SRC_LANG, TGT_LANG = "en", "de"
MIN_WORDS, MAX_WORDS = 2, 40
SPLITS = ("train", "valid", "test")
MANIFEST = "corpus.json"
_LEXICON_SEED = 20170612  # fixed: the languages do not depend on the corpus seed

# --------------------------------------------------------------------------------------------------------------
# Function words
# --------------------------------------------------------------------------------------------------------------

PRONOUNS = ("1sg", "2sg", "1pl", "3pl")
_S_PRON = {"1sg": "mi", "2sg": "yu", "1pl": "wi", "3pl": "thei"}
_T_PRON = {
    "nom": {"1sg": "ekk", "2sg": "dü", "1pl": "wai", "3pl": "zi"},
    "acc": {"1sg": "mekk", "2sg": "dekk", "1pl": "onz", "3pl": "zi"},
    "dat": {"1sg": "mer", "2sg": "dern", "1pl": "onz", "3pl": "zinen"},
}
# article / relative pronoun (definite), indefinite article, strong adjective endings: [case][gender or "pl"]
_DEF = {
    "nom": {"m": "dor", "f": "da", "n": "dat", "pl": "di"},
    "acc": {"m": "don", "f": "da", "n": "dat", "pl": "di"},
    "dat": {"m": "dom", "f": "dar", "n": "dom", "pl": "din"},
}
_INDEF = {
    "nom": {"m": "ain", "f": "aina", "n": "ain"},
    "acc": {"m": "ainon", "f": "aina", "n": "ain"},
    "dat": {"m": "ainom", "f": "ainar", "n": "ainom"},
}
_ADJ_END = {
    "nom": {"m": "er", "f": "e", "n": "es", "pl": "e"},
    "acc": {"m": "en", "f": "e", "n": "es", "pl": "e"},
    "dat": {"m": "em", "f": "er", "n": "em", "pl": "en"},
}
_HAVE = {"1sg": "heb", "2sg": "hest", "3sg": "het", "1pl": "hebben", "3pl": "hebben"}
_BE = {"1sg": "bim", "2sg": "bis", "3sg": "iss", "1pl": "sinn", "3pl": "sinn"}
_FUT = {"1sg": "wol", "2sg": "wolst", "3sg": "wolt", "1pl": "wollen", "3pl": "wollen"}
_CONTRACT = {"inn": "imm", "ann": "amm", "bai": "baim"}  # preposition + dative "dom"
_PARTICLES = ("ab", "ut", "fort", "hinn", "weder", "bij")  # separable verb particles

# source conjunction -> target conjunction ("wen" is context dependent, see _t_conj)
_S_CONJ = ("bikos", "ef", "altho", "wen")
_T_CONJ = {"bikos": "wail", "ef": "fals", "altho": "obwal"}


class _Prep:
    __slots__ = ("s", "t", "t_place", "case", "pool")

    def __init__(self, s: str, t: str, case: str, pool: str, t_place: Optional[str] = None) -> None:
        self.s, self.t, self.case, self.pool, self.t_place = s, t, case, pool, t_place


# case "two": accusative after motion verbs (direction), dative otherwise (location)
_PREPS = (
    _Prep("inna", "inn", "two", "pt"),
    _Prep("apon", "opp", "two", "pt"),
    _Prep("unda", "unnor", "two", "pt"),
    _Prep("bihin", "hintor", "two", "pt"),
    _Prep("nier", "nebbe", "dat", "pt"),
    _Prep("widh", "mitt", "dat", "at"),
    _Prep("fram", "fonn", "dat", "ap"),
    _Prep("fora", "füor", "acc", "anim"),
    _Prep("widhout", "ohnu", "acc", "at"),
    _Prep("atte", "bai", "dat", "ap", t_place="ann"),  # bai + animate, ann + place
)
_TWO_WAY = tuple(p for p in _PREPS if p.case == "two")

_S_FUNCTION = {
    "tha",
    "an",
    "nat",
    "wil",
    "kwe",
    "thet",
    "tu",
    "ond",
    "bat",
    *_S_PRON.values(),
    *_S_CONJ,
    *(p.s for p in _PREPS),
}
_T_FUNCTION = {
    "nikt",
    "datt",
    "ont",
    "abor",
    "als",
    "wanne",
    *_T_CONJ.values(),
    *_CONTRACT.values(),
    *_PARTICLES,
    *_HAVE.values(),
    *_BE.values(),
    *_FUT.values(),
    *(w for t in (_T_PRON, _DEF, _INDEF) for d in t.values() for w in d.values()),
    *(p.t for p in _PREPS),
    "ann",
}

# --------------------------------------------------------------------------------------------------------------
# Lexicon (built once, from a fixed seed)
# --------------------------------------------------------------------------------------------------------------

_S_ON = (
    "b",
    "d",
    "f",
    "g",
    "h",
    "k",
    "l",
    "m",
    "n",
    "p",
    "r",
    "s",
    "t",
    "v",
    "w",
    "y",
    "th",
    "sh",
    "ch",
    "bl",
    "br",
    "cl",
    "cr",
    "dr",
    "fl",
    "fr",
    "gl",
    "gr",
    "pl",
    "pr",
    "sl",
    "sm",
    "sn",
    "sp",
    "st",
    "sw",
    "tr",
    "wh",
)
_S_NUC = ("a", "e", "i", "o", "u", "a", "e", "i", "o", "u", "ee", "oo", "ai", "ea", "ou", "oa", "ay")
_S_CODA = ("", "", "n", "t", "d", "k", "ck", "ng", "m", "l", "r", "nd", "p", "sk", "ft", "mp", "lt", "rn")
_T_ON = (
    "b",
    "d",
    "f",
    "g",
    "h",
    "k",
    "l",
    "m",
    "n",
    "p",
    "r",
    "s",
    "t",
    "w",
    "z",
    "sch",
    "schl",
    "schm",
    "schw",
    "kn",
    "pf",
    "st",
    "sp",
    "tr",
    "gr",
    "br",
    "kl",
    "fr",
    "dr",
    "bl",
    "gl",
    "zw",
)
_T_NUC = ("a", "e", "i", "o", "u", "a", "e", "i", "o", "u", "ei", "au", "ie", "ä", "ö", "ü", "eu")
_T_CODA = (
    "",
    "n",
    "t",
    "ch",
    "ck",
    "ng",
    "rt",
    "lz",
    "nd",
    "rn",
    "ss",
    "ß",
    "ft",
    "cht",
    "lk",
    "mp",
    "rg",
    "lt",
    "nz",
    "rb",
)
_T_VOWELS = "aeiouäöü"


def _syllables(rng: random.Random, on, nuc, coda, n: int, final_coda: Optional[bool]) -> str:
    """n syllables; only the first may start with a consonant cluster or hold a diphthong."""
    parts = []
    for i in range(n):
        c = rng.choice(coda)
        if i == n - 1 and final_coda is not None:
            while bool(c) != final_coda:
                c = rng.choice(coda)
        elif i < n - 1 and rng.random() < 0.7:
            c = ""
        if i == 0:
            parts.append(rng.choice(on) + rng.choice(nuc) + c)
        else:
            parts.append(rng.choice(on[:16]) + rng.choice(nuc[:5]) + c)
    return "".join(parts)


def _umlaut(word: str) -> str:
    """Umlaut the last vowel of a (lower-case) stem where German would: a->ä, o->ö, u->ü, au->äu."""
    for i in range(len(word) - 1, -1, -1):
        c = word[i]
        if c == "u" and i and word[i - 1] == "a":
            return word[: i - 1] + "äu" + word[i + 1 :]
        if c == "u" and i and word[i - 1] == "e":
            return word
        if c in "aou":
            return word[:i] + {"a": "ä", "o": "ö", "u": "ü"}[c] + word[i + 1 :]
        if c in "eiäöü":
            return word
    return word


_ABLAUT = {
    "ei": "ie",
    "ie": "o",
    "i": "u",
    "e": "o",
    "a": "u",
    "o": "o",
    "u": "o",
    "au": "o",
    "eu": "o",
    "ä": "a",
    "ö": "o",
    "ü": "o",
}
_LAST_VOWEL = re.compile(r"(ei|ie|au|eu|[aeiouäöü])(?=[^aeiouäöü]*$)")


def _ablaut(stem: str) -> str:
    return _LAST_VOWEL.sub(lambda m: _ABLAUT[m.group(1)], stem, count=1)


def _cap(w: str) -> str:
    return w[:1].upper() + w[1:]


def _s_plural(w: str) -> str:
    return w + ("es" if w.endswith(("s", "sh", "ch", "x")) else "s")


def _s_past(w: str) -> str:
    return w + ("d" if w.endswith("e") else "ed")


class _Noun:
    __slots__ = ("s_sg", "s_pl", "t_sg", "t_pl", "t_dpl", "g", "cls", "anim", "amb", "compound")


class _Verb:
    __slots__ = ("s", "s_past", "frame", "obj", "motion", "aux", "pres", "pres_sub", "part", "inf", "sep", "amb")


class _Adj:
    __slots__ = ("s", "t_anim", "t_inan", "anim", "inan")


class _Adv:
    __slots__ = ("s", "t")

    def __init__(self, s: str, t: str) -> None:
        self.s, self.t = s, t


class _Lexicon:
    """All words of both languages, with the indices the generator samples from."""

    def __init__(self, seed: int = _LEXICON_SEED, scale: int = 1) -> None:
        """``scale`` multiplies every content-word count (ambiguous words and compounds included); scale 1 is
        the lexicon of GENERATOR_VERSION 2 word for word, since its draws are the first ones made."""
        if not isinstance(scale, int) or isinstance(scale, bool) or not 1 <= scale <= MAX_LEXICON_SCALE:
            raise ValueError(f"lexicon scale must be an int in [1, {MAX_LEXICON_SCALE}], got {scale!r}")
        rng = random.Random(seed)
        self.s_taken: set[str] = set(_S_FUNCTION)
        self.t_taken: set[str] = set(_T_FUNCTION)
        self._rng = rng
        classes = {"person": 12, "animal": 12, "food": 12, "thing": 20, "place": 10}
        self.nouns: dict[str, list[_Noun]] = {c: [self._noun(c) for _ in range(k * scale)] for c, k in classes.items()}
        # ambiguous source nouns: one source word, two senses of different coarse classes
        for c1, c2 in scale * (
            ("animal", "thing"),
            ("animal", "thing"),
            ("food", "thing"),
            ("food", "thing"),
            ("place", "thing"),
            ("place", "thing"),
            ("food", "place"),
            ("person", "thing"),
        ):
            a = self._noun(c1)
            b = self._noun(c2, s_stem=a.s_sg)
            a.amb = b.amb = True
            self.nouns[c1].append(a)
            self.nouns[c2].append(b)
        # compounds: source "modifier head", target one word or hyphenated; class and gender of the head
        self.compounds: dict[str, list[_Noun]] = {"food": [], "thing": [], "place": []}
        mods = [n for c in ("food", "thing", "place", "animal") for n in self.nouns[c] if not n.amb]
        seen = set()
        while sum(map(len, self.compounds.values())) < 40 * scale:
            head_cls = rng.choice(("thing", "thing", "place", "food"))
            head = rng.choice([n for n in self.nouns[head_cls] if not n.amb])
            mod = rng.choice(mods)
            if mod is head or (mod.s_sg, head.s_sg) in seen:
                continue
            seen.add((mod.s_sg, head.s_sg))
            self.compounds[head_cls].append(self._compound(mod, head))
        # verbs
        self.verbs: dict[str, list[_Verb]] = {"intr": [], "tr": [], "ditr": [], "clause": []}
        for _ in range(8 * scale):
            self.verbs["intr"].append(self._verb("intr"))
        for _ in range(4 * scale):
            self.verbs["intr"].append(self._verb("intr", motion=True))
        for obj, k in (("anim", 6), ("food", 4), ("thing", 6), ("place", 3)):
            for _ in range(k * scale):
                self.verbs["tr"].append(self._verb("tr", obj=obj))
        for o1, o2 in scale * (
            ("food", "thing"),
            ("food", "thing"),
            ("anim", "thing"),
            ("anim", "thing"),
            ("place", "thing"),
            ("anim", "food"),
            ("place", "food"),
            ("anim", "place"),
        ):
            a = self._verb("tr", obj=o1)
            b = self._verb("tr", obj=o2, s_stem=a.s)
            a.amb = b.amb = True
            self.verbs["tr"] += [a, b]
        for _ in range(3 * scale):
            self.verbs["ditr"].append(self._verb("ditr", obj="ft"))
        for _ in range(3 * scale):
            self.verbs["clause"].append(self._verb("clause"))
        # adjectives: for any noun, animate only, inanimate only, ambiguous (two translations)
        self.adjs_anim: list[_Adj] = []
        self.adjs_inan: list[_Adj] = []
        for kind, k in (("any", 10), ("anim", 5), ("inan", 5), ("amb", 4)):
            for _ in range(k * scale):
                a = _Adj()
                a.s = self._s_word(rng.choice((1, 2, 2)))
                a.t_anim = self._t_word(rng.choice((1, 2)), final_coda=True)
                a.t_inan = self._t_word(rng.choice((1, 2)), final_coda=True) if kind == "amb" else a.t_anim
                a.anim, a.inan = kind != "inan", kind != "anim"
                if a.anim:
                    self.adjs_anim.append(a)
                if a.inan:
                    self.adjs_inan.append(a)
        self.time_advs = [_Adv(self._s_word(2), self._t_word(2)) for _ in range(5 * scale)]
        self.manner_advs = [
            _Adv(self._s_word(rng.choice((1, 2))) + "li", self._t_word(1) + "lik") for _ in range(5 * scale)
        ]
        # pools the generator samples nouns from: (base nouns, compounds); multi-class pools hold no
        # ambiguous nouns, so the slot always determines which sense an ambiguous source noun has
        n = self.nouns
        groups = {
            "anim": ("person", "animal"),
            "person": ("person",),
            "food": ("food",),
            "thing": ("thing",),
            "place": ("place",),
            "animal": ("animal",),
            "ft": ("food", "thing"),
            "pt": ("place", "thing"),
            "at": ("person", "animal", "thing"),
            "ap": ("person", "animal", "place"),
        }
        self.pools: dict[str, tuple[list[_Noun], list[_Noun]]] = {}
        for key, cls in groups.items():
            multi = len({"anim" if c in ("person", "animal") else c for c in cls}) > 1
            base = [x for c in cls for x in n[c] if not (multi and x.amb)]
            comps = [x for c in cls for x in self.compounds.get(c, ())]
            self.pools[key] = (base, comps)
            self.pools[key + "!"] = ([x for x in base if not x.amb], comps)  # for ambiguous verbs
        self.verbs_by_obj: dict[str, list[_Verb]] = {}
        for v in self.verbs["tr"]:
            self.verbs_by_obj.setdefault(v.obj, []).append(v)
            if not v.amb:
                self.verbs_by_obj.setdefault(v.obj + "!", []).append(v)
        self.subj_verbs = self.verbs["intr"] + self.verbs["tr"]
        del self._rng

    # -- word makers -------------------------------------------------------------------------------------------
    def _s_word(self, syl: int, forms=lambda w: (w,)) -> str:
        while True:
            w = _syllables(self._rng, _S_ON, _S_NUC, _S_CODA, syl, None)
            fs = forms(w)
            if len(w) >= 3 and not w.endswith(("s", "x", "d")) and not any(f in self.s_taken for f in fs):
                self.s_taken.update(fs)
                return w

    def _t_word(self, syl: int, final_coda: Optional[bool] = None) -> str:
        while True:
            w = _syllables(self._rng, _T_ON, _T_NUC, _T_CODA, syl, final_coda)
            if len(w) >= 3 and w not in self.t_taken:
                self.t_taken.add(w)
                return w

    def _noun(self, cls: str, s_stem: Optional[str] = None) -> _Noun:
        rng = self._rng
        x = _Noun()
        x.s_sg = s_stem if s_stem is not None else self._s_word(rng.choice((1, 2, 2)), lambda w: (w, _s_plural(w)))
        x.s_pl = _s_plural(x.s_sg)
        stem = self._t_word(rng.choice((1, 2, 2)))
        if stem[-1] in "ae":
            g, pl = "f", stem + "n"
        elif stem[-1] in _T_VOWELS:
            g, pl = rng.choice("mn"), stem + "s"
        else:
            g = rng.choices("mnf", (0.45, 0.35, 0.2))[0]
            if g == "m":
                pl = (_umlaut(stem) if rng.random() < 0.4 else stem) + "e"
            elif g == "n":
                pl = (_umlaut(stem) if rng.random() < 0.5 else stem) + "er"
            else:
                pl = stem + "en"
        x.t_sg, x.t_pl = _cap(stem), _cap(pl)
        x.t_dpl = x.t_pl if pl.endswith(("n", "s")) else x.t_pl + "n"
        x.g, x.cls, x.anim, x.amb, x.compound = g, cls, cls in ("person", "animal"), False, False
        return x

    def _compound(self, mod: _Noun, head: _Noun) -> _Noun:
        x = _Noun()
        x.s_sg, x.s_pl = f"{mod.s_sg} {head.s_sg}", f"{mod.s_sg} {head.s_pl}"
        if mod.t_sg[-1] in _T_VOWELS or len(mod.t_sg) + len(head.t_sg) > 12:  # hyphenated: Kafe-Tassa
            x.t_sg, x.t_pl, x.t_dpl = (f"{mod.t_sg}-{w}" for w in (head.t_sg, head.t_pl, head.t_dpl))
        else:  # one word: Hausdor
            x.t_sg, x.t_pl, x.t_dpl = (mod.t_sg + w.lower() for w in (head.t_sg, head.t_pl, head.t_dpl))
        x.g, x.cls, x.anim, x.amb, x.compound = head.g, head.cls, head.anim, False, True
        return x

    def _verb(self, frame: str, obj: Optional[str] = None, motion: bool = False, s_stem: Optional[str] = None) -> _Verb:
        rng = self._rng
        v = _Verb()
        v.s = s_stem if s_stem is not None else self._s_word(rng.choice((1, 1, 2)), lambda w: (w, _s_past(w)))
        v.s_past = _s_past(v.s)
        v.frame, v.obj, v.motion, v.amb = frame, obj, motion, False
        v.aux = "be" if motion else "have"
        stem = self._t_word(rng.choice((1, 1, 2)), final_coda=True)
        strong = rng.random() < 0.35
        v.sep = rng.choice(_PARTICLES) if frame in ("intr", "tr") and rng.random() < 0.2 else ""
        st3 = _umlaut(stem) if strong else stem
        v.pres = {
            "1sg": stem + "e",
            "2sg": st3 + ("t" if stem.endswith(("s", "ß", "z")) else "st"),
            "3sg": st3 + ("et" if stem.endswith(("t", "d")) and not strong else "t"),
            "1pl": stem + "en",
            "3pl": stem + "en",
        }
        v.pres_sub = {k: v.sep + f for k, f in v.pres.items()}
        v.inf = v.sep + stem + "en"
        weak_end = "et" if stem.endswith(("t", "d")) else "t"
        v.part = v.sep + "ge" + (_ablaut(stem) + "en" if strong else stem + weak_end)
        return v


@functools.lru_cache(maxsize=None)
def _lexicon(scale: int = 1) -> _Lexicon:
    return _Lexicon(scale=scale)


_LEX = _lexicon(1)


class _Draws(random.Random):
    """The random stream a corpus is drawn from, carrying the lexicon whose words it draws."""

    def __init__(self, seed: int, lexicon_scale: int = 1) -> None:
        self.lex = _lexicon(lexicon_scale)
        super().__init__(seed)


# --------------------------------------------------------------------------------------------------------------
# Sentence structures
# --------------------------------------------------------------------------------------------------------------


class _NP:
    __slots__ = ("noun", "pron", "pl", "det", "adjs", "rel")

    def __init__(
        self,
        noun: Optional[_Noun] = None,
        pron: Optional[str] = None,
        pl: bool = False,
        det: str = "def",
        adjs: tuple = (),
        rel: Optional["_Clause"] = None,
    ) -> None:
        self.noun, self.pron, self.pl, self.det, self.adjs, self.rel = noun, pron, pl, det, adjs, rel


class _Clause:
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


def _gen_np(rng: random.Random, key: str, pron_p: float = 0.0) -> _NP:
    if pron_p and rng.random() < pron_p:
        return _NP(pron=rng.choice(PRONOUNS))
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
    return _NP(noun, None, pl, det, adjs)


def _tense(rng: random.Random) -> str:
    r = rng.random()
    return "pres" if r < 0.45 else "past" if r < 0.8 else "fut"


def _gen_pp(rng: random.Random, verb: _Verb):
    prep = rng.choice(_TWO_WAY) if verb.motion and rng.random() < 0.7 else rng.choice(_PREPS)
    return prep, _gen_np(rng, prep.pool, pron_p=0.08 if prep.pool in ("anim", "at", "ap") else 0.0)


def _gen_rel(rng: random.Random, head: _Noun) -> _Clause:
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
        cl = _Clause(None, verb, obj)
    else:
        verb = rng.choice(objverbs)
        cl = _Clause(_gen_np(rng, "anim", 0.15), verb, None)
    cl.tense = _tense(rng)
    cl.neg = rng.random() < 0.08
    if rng.random() < (0.3 if verb.frame == "intr" else 0.12):
        cl.pp = _gen_pp(rng, verb)
    return cl


def _gen_clause(
    rng: random.Random, tail_free: bool = True, clausal: bool = True, front_ok: bool = True, simple: bool = False
) -> _Clause:
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
    cl = _Clause(subj, verb, tense=_tense(rng))
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


# --------------------------------------------------------------------------------------------------------------
# Realisation
# --------------------------------------------------------------------------------------------------------------


def _s_np(np: _NP, out: list) -> None:
    if np.pron:
        out.append(_S_PRON[np.pron])
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


def _s_clause(cl: _Clause, out: list) -> None:
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


def _agr(np: _NP) -> str:
    return np.pron or ("3pl" if np.pl else "3sg")


def _t_np(np: _NP, case: str, out: list) -> None:
    if np.pron:
        out.append(_T_PRON[case][np.pron])
        return
    n = np.noun
    key = "pl" if np.pl else n.g
    if np.det == "def":
        out.append(_DEF[case][key])
    elif np.det == "indef":
        out.append(_INDEF[case][n.g])
    out.append((n.t_dpl if case == "dat" else n.t_pl) if np.pl else n.t_sg)
    if np.adjs:
        end = _ADJ_END[case][key]
        for a in reversed(np.adjs):  # postnominal, mirror order
            out.append((a.t_anim if n.anim else a.t_inan) + end)
    if np.rel is not None:
        rel = np.rel
        out.append(",")
        if rel.subj is None:
            out.append(_DEF["nom"][key])
            _t_final(rel, "3pl" if np.pl else "3sg", out)
        else:
            out.append(_DEF["acc"][key])
            _t_final(rel, _agr(rel.subj), out)
        out.append(",")


def _t_pp(pp, verb: _Verb, out: list) -> None:
    prep, np = pp
    case = prep.case if prep.case != "two" else ("acc" if verb.motion else "dat")
    word = prep.t if (prep.t_place is None or np.pron or np.noun.anim) else prep.t_place
    if word in _CONTRACT and case == "dat" and np.pron is None and np.det == "def" and not np.pl and np.noun.g != "f":
        tmp: list = []
        _t_np(np, case, tmp)
        out.append(_CONTRACT[word])
        out.extend(tmp[1:])
    else:
        out.append(word)
        _t_np(np, case, out)


def _t_middle(cl: _Clause, out: list) -> None:
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


def _t_v2(cl: _Clause, agr: str) -> tuple[str, list]:
    """(finite verb, right bracket) of a verb-second or verb-first clause."""
    v = cl.verb
    if cl.tense == "pres":
        return v.pres[agr], ([v.sep] if v.sep else [])
    if cl.tense == "past":
        return (_BE if v.aux == "be" else _HAVE)[agr], [v.part]
    return _FUT[agr], [v.inf]


def _t_final(cl: _Clause, agr: str, out: list) -> None:
    """Subject (if any), middle field, then the verb cluster: verb-final subordinate / relative clause."""
    if cl.subj is not None:
        _t_np(cl.subj, "nom", out)
    _t_middle(cl, out)
    v = cl.verb
    if cl.tense == "pres":
        out.append(v.pres_sub[agr])
    elif cl.tense == "past":
        out += (v.part, (_BE if v.aux == "be" else _HAVE)[agr])
    else:
        out += (v.inf, _FUT[agr])


def _t_main(cl: _Clause, out: list, inverted: bool = False, question: bool = False) -> None:
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


def _t_conj(conj: str, sub: _Clause) -> str:
    if conj == "wen":
        return "als" if sub.tense == "past" else "wanne"
    return _T_CONJ[conj]


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


def _realise(kind: str, a: _Clause, b: Optional[_Clause] = None, conj: str = "") -> tuple[str, str]:
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


def _gen_plan(rng: random.Random) -> tuple:
    """A sentence's structure: the arguments of ``_realise`` (and of ``_tree_of``)."""
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
            rng.choice(_S_CONJ),
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


def _gen_sentence(rng: random.Random) -> tuple[str, str]:
    return _realise(*_gen_plan(rng))


def _iter_plans(rng: random.Random) -> Iterator[tuple[tuple, tuple[str, str]]]:
    """(structure, (source, target)) of the sentences whose both sides have MIN_WORDS..MAX_WORDS words."""
    while True:
        plan = _gen_plan(rng)
        src, tgt = _realise(*plan)
        ns, nt = src.count(" ") + 1, tgt.count(" ") + 1
        if MIN_WORDS <= ns <= MAX_WORDS and MIN_WORDS <= nt <= MAX_WORDS:
            yield plan, (src, tgt)


def _iter_pairs(rng: random.Random) -> Iterator[tuple[str, str]]:
    return (pair for _, pair in _iter_plans(rng))


# --------------------------------------------------------------------------------------------------------------
# The built-in treebank: the source language's sentences with their gold constituency trees
# --------------------------------------------------------------------------------------------------------------
# Each tree is built from the same structures the source sentence is realised from, so its words are the
# sentence's (with punctuation split off as its own token, as in the Penn Treebank) and its brackets are what the
# generator meant. Labels and tags follow the Penn Treebank's: S, SQ, SBAR, NP, VP, PP, ADVP, WHNP; DT, JJ, NN,
# NNS, PRP, VBP, VBD, VB, MD, RB, IN, TO, WDT, CC, UH and the punctuation tags , . ?


def _b_np(np: _NP) -> str:
    if np.pron:
        return f"(NP (PRP {_S_PRON[np.pron]}))"
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


def _b_clause(cl: _Clause) -> str:
    """An S: fronted time adverb, subject (absent in a subject-gap relative clause) and the verb phrase."""
    parts = []
    if cl.tadv is not None and cl.front:
        parts.append(f"(ADVP (RB {cl.tadv.s}))")
    if cl.subj is not None:
        parts.append(_b_np(cl.subj))
    parts.append(_b_vp(cl))
    return f"(S {' '.join(parts)})"


def _b_vp(cl: _Clause) -> str:
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


def _tree_of(kind: str, a: _Clause, b: Optional[_Clause] = None, conj: str = "") -> str:
    """The bracketed tree of the sentence ``_realise(kind, a, b, conj)`` realises (source side)."""
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


# --------------------------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------------------------


def generate_pairs(n: int, seed: int, lexicon_scale: int = 1) -> list[tuple[str, str]]:
    """n (source, target) sentence pairs, deterministic from seed, with ``lexicon_scale`` times the content words."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    it = _iter_pairs(_Draws(seed, lexicon_scale))
    return [next(it) for _ in range(n)]


def _derive_seed(seed: int, split: str) -> int:
    # "ablations.corpus": the module's name before it moved here; it seeds every split, so it stays.
    digest = hashlib.sha256(f"ablations.corpus/{seed}/{split}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def _heldout(n: int, seed: int, split: str, seen: set, lexicon_scale: int) -> tuple[list, int]:
    """n pairs from the split's own stream whose source sentence is not in ``seen`` (then added to it)."""
    it = _iter_pairs(_Draws(_derive_seed(seed, split), lexicon_scale))
    pairs, rejected = [], 0
    while len(pairs) < n:
        src, tgt = next(it)
        if src in seen:
            rejected += 1
            continue
        seen.add(src)
        pairs.append((src, tgt))
    return pairs, rejected


def _written_already(manifest: pathlib.Path, params: dict, files: list[pathlib.Path]) -> bool:
    """Whether ``manifest`` records exactly ``params`` and every file exists; if not, any manifest is removed first,
    so that a crash while the files are rewritten never leaves a manifest describing other files."""
    if not manifest.exists():
        return False
    try:
        old = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        old = None
    if isinstance(old, dict) and old.get("params") == params and all(f.is_file() for f in files):
        return True
    manifest.unlink()  # invalidate before touching any file
    return False


def write_corpus(
    directory: str | os.PathLike,
    train_pairs: int = 50_000,
    seed: int = 1234,
    dev_pairs: int = 1000,
    test_pairs: int = 1000,
    lexicon_scale: int = 1,
) -> pathlib.Path:
    """Write train.en/train.de/valid.en/valid.de/test.en/test.de (one sentence per line, UTF-8, '\\n').

    Each file is written to a temporary file and moved into place with ``os.replace``; the manifest
    ``corpus.json`` (parameters, generator version, statistics) is written last, and any older manifest is
    removed first, so a crash midway never leaves a manifest describing other files.  When the manifest
    already records identical parameters (and the files exist) nothing is regenerated.

    Train, valid and test come from independent streams derived from ``seed``; a valid/test pair whose
    source sentence occurs in train (or earlier in valid/test) is skipped and the next one drawn, so the
    held-out sets never repeat a training sentence; the manifest counts the skips.
    """
    for name, value in (("train_pairs", train_pairs), ("dev_pairs", dev_pairs), ("test_pairs", test_pairs)):
        if not isinstance(value, int) or value < (1 if name == "train_pairs" else 0):
            raise ValueError(
                f"{name} must be a {'positive' if name == 'train_pairs' else 'non-negative'} int, got {value!r}"
            )
    path = pathlib.Path(directory).expanduser()
    path.mkdir(parents=True, exist_ok=True)
    # "ablations.corpus": the old module name, kept so that corpora already written stay valid.
    params = {
        "generator": "ablations.corpus",
        "version": GENERATOR_VERSION,
        "seed": seed,
        "train_pairs": train_pairs,
        "dev_pairs": dev_pairs,
        "test_pairs": test_pairs,
        "src_lang": SRC_LANG,
        "tgt_lang": TGT_LANG,
    }
    if lexicon_scale != 1:  # absent at 1, so corpora written before the knob existed stay valid
        params["lexicon_scale"] = lexicon_scale
    files = [path / f"{split}.{lang}" for split in SPLITS for lang in (SRC_LANG, TGT_LANG)]
    manifest = path / MANIFEST
    if _written_already(manifest, params, files):
        return path

    train = generate_pairs(train_pairs, _derive_seed(seed, "train"), lexicon_scale)
    seen = {s for s, _ in train}
    valid, valid_rejected = _heldout(dev_pairs, seed, "valid", seen, lexicon_scale)
    test, test_rejected = _heldout(test_pairs, seed, "test", seen, lexicon_scale)
    splits = {"train": train, "valid": valid, "test": test}
    for split, pairs in splits.items():
        for side, lang in enumerate((SRC_LANG, TGT_LANG)):
            write_atomic(path / f"{split}.{lang}", "".join(p[side] + "\n" for p in pairs))
    info = {
        "params": params,
        "files": {f"{split}.{lang}": len(pairs) for split, pairs in splits.items() for lang in (SRC_LANG, TGT_LANG)},
        "heldout_skipped_as_duplicates": {"valid": valid_rejected, "test": test_rejected},
        "stats": _stats(train),
    }
    write_atomic(manifest, json.dumps(info, indent=2, ensure_ascii=False) + "\n")
    return path


_WORD = re.compile(r"[^\s,.?]+")


def _stats(pairs: list) -> dict:
    """Sentence lengths (whitespace words) and word-type counts (punctuation split off, case kept) per side."""
    out = {}
    for side, lang in enumerate((SRC_LANG, TGT_LANG)):
        lengths = [p[side].count(" ") + 1 for p in pairs]
        types = {w for p in pairs for w in _WORD.findall(p[side])}
        out[lang] = {
            "mean_words": round(sum(lengths) / max(len(lengths), 1), 2),
            "min_words": min(lengths, default=0),
            "max_words": max(lengths, default=0),
            "word_types": len(types),
        }
    return out


def generate_treebank(n: int, seed: int) -> list[tuple[str, str]]:
    """n (sentence, bracketed gold tree) of the source language, deterministic from seed: the sentences
    ``generate_pairs(n, seed)`` has as sources, tokenised as the tree's words (punctuation split off)."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    trees = [_tree_of(*plan) for plan, _ in itertools.islice(_iter_plans(_Draws(seed)), n)]
    return [(" ".join(_TREE_WORD.findall(tree)), tree) for tree in trees]


_TREE_WORD = re.compile(r"\([^\s()]+ ([^\s()]+)\)")
TREEBANK_SPLITS = {"train": "train", "valid": "valid", "test": "test"}


def write_treebank(
    directory: str | os.PathLike,
    train_trees: int = 20_000,
    seed: int = 1234,
    dev_trees: int = 1000,
    test_trees: int = 1000,
) -> pathlib.Path:
    """Write {train,valid,test}.tree (one bracketed tree per line, Penn Treebank style) and treebank.json.

    Train, valid and test come from streams derived from ``seed`` (not the translation corpus's); a held-out tree
    whose sentence is in train or earlier is skipped, as ``write_corpus`` does. Unchanged parameters: nothing is
    rewritten.
    """
    path = pathlib.Path(directory).expanduser()
    path.mkdir(parents=True, exist_ok=True)
    params = {
        "generator": "lightning_modules.data.generated",
        "version": GENERATOR_VERSION,
        "seed": seed,
        "train_trees": train_trees,
        "dev_trees": dev_trees,
        "test_trees": test_trees,
    }
    manifest = path / "treebank.json"
    files = [path / f"{split}.tree" for split in TREEBANK_SPLITS]
    if _written_already(manifest, params, files):
        return path
    seen: set = set()
    counts = {}
    for split, n in (("train", train_trees), ("valid", dev_trees), ("test", test_trees)):
        stream = generate_treebank(3 * n + 100 if split != "train" else n, _derive_seed(seed, f"treebank-{split}"))
        kept = []
        for sentence, tree in stream:
            if split != "train" and sentence in seen:
                continue
            seen.add(sentence)
            kept.append(tree)
            if len(kept) == n:
                break
        if len(kept) < n:
            raise ValueError(f"treebank {split}: only {len(kept)} distinct sentences of {n}")
        write_atomic(path / f"{split}.tree", "".join(tree + "\n" for tree in kept))
        counts[f"{split}.tree"] = len(kept)
    write_atomic(manifest, json.dumps({"params": params, "files": counts}, indent=2) + "\n")
    return path
