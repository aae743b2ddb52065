"""The function words of both languages: pronouns, articles and their case endings, auxiliaries, conjunctions,
prepositions with the case they govern. Every content word is drawn by lexicon.py; these are fixed."""

from __future__ import annotations

from typing import Optional

PRONOUNS = ("1sg", "2sg", "1pl", "3pl")
S_PRON = {"1sg": "mi", "2sg": "yu", "1pl": "wi", "3pl": "thei"}
T_PRON = {
    "nom": {"1sg": "ekk", "2sg": "dü", "1pl": "wai", "3pl": "zi"},
    "acc": {"1sg": "mekk", "2sg": "dekk", "1pl": "onz", "3pl": "zi"},
    "dat": {"1sg": "mer", "2sg": "dern", "1pl": "onz", "3pl": "zinen"},
}
# article / relative pronoun (definite), indefinite article, strong adjective endings: [case][gender or "pl"]
DEF = {
    "nom": {"m": "dor", "f": "da", "n": "dat", "pl": "di"},
    "acc": {"m": "don", "f": "da", "n": "dat", "pl": "di"},
    "dat": {"m": "dom", "f": "dar", "n": "dom", "pl": "din"},
}
INDEF = {
    "nom": {"m": "ain", "f": "aina", "n": "ain"},
    "acc": {"m": "ainon", "f": "aina", "n": "ain"},
    "dat": {"m": "ainom", "f": "ainar", "n": "ainom"},
}
ADJ_END = {
    "nom": {"m": "er", "f": "e", "n": "es", "pl": "e"},
    "acc": {"m": "en", "f": "e", "n": "es", "pl": "e"},
    "dat": {"m": "em", "f": "er", "n": "em", "pl": "en"},
}
HAVE = {"1sg": "heb", "2sg": "hest", "3sg": "het", "1pl": "hebben", "3pl": "hebben"}
BE = {"1sg": "bim", "2sg": "bis", "3sg": "iss", "1pl": "sinn", "3pl": "sinn"}
FUT = {"1sg": "wol", "2sg": "wolst", "3sg": "wolt", "1pl": "wollen", "3pl": "wollen"}
CONTRACT = {"inn": "imm", "ann": "amm", "bai": "baim"}  # preposition + dative "dom"
PARTICLES = ("ab", "ut", "fort", "hinn", "weder", "bij")  # separable verb particles

# source conjunction -> target conjunction ("wen" is context dependent, see _t_conj)
S_CONJ = ("bikos", "ef", "altho", "wen")
T_CONJ = {"bikos": "wail", "ef": "fals", "altho": "obwal"}


class Prep:
    __slots__ = ("s", "t", "t_place", "case", "pool")

    def __init__(self, s: str, t: str, case: str, pool: str, t_place: Optional[str] = None) -> None:
        self.s, self.t, self.case, self.pool, self.t_place = s, t, case, pool, t_place


# case "two": accusative after motion verbs (direction), dative otherwise (location)
PREPS = (
    Prep("inna", "inn", "two", "pt"),
    Prep("apon", "opp", "two", "pt"),
    Prep("unda", "unnor", "two", "pt"),
    Prep("bihin", "hintor", "two", "pt"),
    Prep("nier", "nebbe", "dat", "pt"),
    Prep("widh", "mitt", "dat", "at"),
    Prep("fram", "fonn", "dat", "ap"),
    Prep("fora", "füor", "acc", "anim"),
    Prep("widhout", "ohnu", "acc", "at"),
    Prep("atte", "bai", "dat", "ap", t_place="ann"),  # bai + animate, ann + place
)
TWO_WAY = tuple(p for p in PREPS if p.case == "two")

S_FUNCTION = {
    "tha",
    "an",
    "nat",
    "wil",
    "kwe",
    "thet",
    "tu",
    "ond",
    "bat",
    *S_PRON.values(),
    *S_CONJ,
    *(p.s for p in PREPS),
}
T_FUNCTION = {
    "nikt",
    "datt",
    "ont",
    "abor",
    "als",
    "wanne",
    *T_CONJ.values(),
    *CONTRACT.values(),
    *PARTICLES,
    *HAVE.values(),
    *BE.values(),
    *FUT.values(),
    *(w for t in (T_PRON, DEF, INDEF) for d in t.values() for w in d.values()),
    *(p.t for p in PREPS),
    "ann",
}
