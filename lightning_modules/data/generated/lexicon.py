"""The content words of both languages, drawn once from fixed syllable inventories with a fixed seed (so the
languages never change with the corpus seed), and the random stream a corpus is drawn from."""

from __future__ import annotations

import functools
import random
import re
from typing import Optional

from ...config import MAX_LEXICON_SCALE
from .function_words import PARTICLES, S_FUNCTION, T_FUNCTION

_LEXICON_SEED = 20170612  # fixed: the languages do not depend on the corpus seed

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


class Noun:
    __slots__ = ("s_sg", "s_pl", "t_sg", "t_pl", "t_dpl", "g", "cls", "anim", "amb", "compound")


class Verb:
    __slots__ = ("s", "s_past", "frame", "obj", "motion", "aux", "pres", "pres_sub", "part", "inf", "sep", "amb")


class Adj:
    __slots__ = ("s", "t_anim", "t_inan", "anim", "inan")


class Adv:
    __slots__ = ("s", "t")

    def __init__(self, s: str, t: str) -> None:
        self.s, self.t = s, t


class Lexicon:
    """All words of both languages, with the indices the generator samples from."""

    def __init__(self, seed: int = _LEXICON_SEED, scale: int = 1) -> None:
        """``scale`` multiplies every content-word count (ambiguous words and compounds included); scale 1 is
        the lexicon of GENERATOR_VERSION 2 word for word, since its draws are the first ones made."""
        if not isinstance(scale, int) or isinstance(scale, bool) or not 1 <= scale <= MAX_LEXICON_SCALE:
            raise ValueError(f"lexicon scale must be an int in [1, {MAX_LEXICON_SCALE}], got {scale!r}")
        rng = random.Random(seed)
        self.s_taken: set[str] = set(S_FUNCTION)
        self.t_taken: set[str] = set(T_FUNCTION)
        self._rng = rng
        classes = {"person": 12, "animal": 12, "food": 12, "thing": 20, "place": 10}
        self.nouns: dict[str, list[Noun]] = {c: [self._noun(c) for _ in range(k * scale)] for c, k in classes.items()}
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
        self.compounds: dict[str, list[Noun]] = {"food": [], "thing": [], "place": []}
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
        self.verbs: dict[str, list[Verb]] = {"intr": [], "tr": [], "ditr": [], "clause": []}
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
        self.adjs_anim: list[Adj] = []
        self.adjs_inan: list[Adj] = []
        for kind, k in (("any", 10), ("anim", 5), ("inan", 5), ("amb", 4)):
            for _ in range(k * scale):
                a = Adj()
                a.s = self._s_word(rng.choice((1, 2, 2)))
                a.t_anim = self._t_word(rng.choice((1, 2)), final_coda=True)
                a.t_inan = self._t_word(rng.choice((1, 2)), final_coda=True) if kind == "amb" else a.t_anim
                a.anim, a.inan = kind != "inan", kind != "anim"
                if a.anim:
                    self.adjs_anim.append(a)
                if a.inan:
                    self.adjs_inan.append(a)
        self.time_advs = [Adv(self._s_word(2), self._t_word(2)) for _ in range(5 * scale)]
        self.manner_advs = [
            Adv(self._s_word(rng.choice((1, 2))) + "li", self._t_word(1) + "lik") for _ in range(5 * scale)
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
        self.pools: dict[str, tuple[list[Noun], list[Noun]]] = {}
        for key, cls in groups.items():
            multi = len({"anim" if c in ("person", "animal") else c for c in cls}) > 1
            base = [x for c in cls for x in n[c] if not (multi and x.amb)]
            comps = [x for c in cls for x in self.compounds.get(c, ())]
            self.pools[key] = (base, comps)
            self.pools[key + "!"] = ([x for x in base if not x.amb], comps)  # for ambiguous verbs
        self.verbs_by_obj: dict[str, list[Verb]] = {}
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

    def _noun(self, cls: str, s_stem: Optional[str] = None) -> Noun:
        rng = self._rng
        x = Noun()
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

    def _compound(self, mod: Noun, head: Noun) -> Noun:
        x = Noun()
        x.s_sg, x.s_pl = f"{mod.s_sg} {head.s_sg}", f"{mod.s_sg} {head.s_pl}"
        if mod.t_sg[-1] in _T_VOWELS or len(mod.t_sg) + len(head.t_sg) > 12:  # hyphenated: Kafe-Tassa
            x.t_sg, x.t_pl, x.t_dpl = (f"{mod.t_sg}-{w}" for w in (head.t_sg, head.t_pl, head.t_dpl))
        else:  # one word: Hausdor
            x.t_sg, x.t_pl, x.t_dpl = (mod.t_sg + w.lower() for w in (head.t_sg, head.t_pl, head.t_dpl))
        x.g, x.cls, x.anim, x.amb, x.compound = head.g, head.cls, head.anim, False, True
        return x

    def _verb(self, frame: str, obj: Optional[str] = None, motion: bool = False, s_stem: Optional[str] = None) -> Verb:
        rng = self._rng
        v = Verb()
        v.s = s_stem if s_stem is not None else self._s_word(rng.choice((1, 1, 2)), lambda w: (w, _s_past(w)))
        v.s_past = _s_past(v.s)
        v.frame, v.obj, v.motion, v.amb = frame, obj, motion, False
        v.aux = "be" if motion else "have"
        stem = self._t_word(rng.choice((1, 1, 2)), final_coda=True)
        strong = rng.random() < 0.35
        v.sep = rng.choice(PARTICLES) if frame in ("intr", "tr") and rng.random() < 0.2 else ""
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
def lexicon(scale: int = 1) -> Lexicon:
    return Lexicon(scale=scale)


class Draws(random.Random):
    """The random stream a corpus is drawn from, carrying the lexicon whose words it draws."""

    def __init__(self, seed: int, lexicon_scale: int = 1) -> None:
        self.lex = lexicon(lexicon_scale)
        super().__init__(seed)
