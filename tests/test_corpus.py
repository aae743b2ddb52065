"""The built-in corpus generator: determinism, shape, the translation phenomena, and the on-disk writer."""

from __future__ import annotations

import json
import os
import re
import time

import pytest

from lightning_modules.data.generated import generate_pairs, write_corpus
from lightning_modules.data.generated.corpus import GENERATOR_VERSION, derive_seed, generate_treebank
from lightning_modules.data.generated.function_words import BE, FUT, HAVE, PREPS
from lightning_modules.data.generated.lexicon import lexicon
from lightning_modules.data.generated.realisation import realise
from lightning_modules.data.generated.sentences import NP, Clause

N = 4000  # pairs for the statistical checks (~0.1 s)


@pytest.fixture(scope="module")
def pairs():
    return generate_pairs(N, 99)


# -- helpers -------------------------------------------------------------------------------------------------------

LEX = lexicon(1)
FINITE = (
    {f for vs in LEX.verbs.values() for v in vs for f in (*v.pres.values(), *v.pres_sub.values())}
    | set(HAVE.values())
    | set(BE.values())
    | set(FUT.values())
)
FINITE_V2 = (
    {f for vs in LEX.verbs.values() for v in vs for f in v.pres.values()}
    | set(HAVE.values())
    | set(BE.values())
    | set(FUT.values())
)
TIME_ADV_SRC = {a.s[:1].upper() + a.s[1:] for a in LEX.time_advs}  # sentence-initial


def words(s: str) -> list[str]:
    return re.findall(r"[^\s,.?]+", s)


def bag(s: str) -> list[str]:
    return sorted(words(s.lower()))


def noun(cls: str, gender: str, k: int = 0):
    return [n for n in LEX.nouns[cls] if n.g == gender and not n.amb][k]


def verb(frame: str, obj=None, motion=None, k: int = 0, sep=False):
    vs = [
        v
        for v in LEX.verbs[frame]
        if (obj is None or v.obj == obj) and not v.amb and (motion is None or v.motion == motion) and bool(v.sep) == sep
    ]
    return vs[k]


def svo(subj, v, obj, **kw):
    return realise("main", Clause(subj, v, obj, **kw))


# -- determinism and shape -----------------------------------------------------------------------------------------


def test_deterministic_from_seed():
    a = generate_pairs(300, 7)
    assert a == generate_pairs(300, 7)
    assert a != generate_pairs(300, 8)
    assert generate_pairs(50, 7) == a[:50]  # a prefix of the same stream
    assert generate_pairs(0, 7) == []


def test_no_global_random_state():
    import random

    random.seed(0)
    before = random.random()
    random.seed(0)
    generate_pairs(100, 3)
    assert random.random() == before


def test_lengths(pairs):
    src_len = [len(s.split()) for s, _ in pairs]
    tgt_len = [len(t.split()) for _, t in pairs]
    assert min(src_len) >= 2 and min(tgt_len) >= 2
    assert max(src_len) <= 40 and max(tgt_len) <= 40
    assert max(src_len) >= 25  # long sentences exist
    assert min(src_len) == 2  # and very short ones
    mid = sum(5 <= n <= 20 for n in src_len) / len(src_len)
    assert mid > 0.7, mid
    assert 8 <= sum(src_len) / len(src_len) <= 14


def test_source_determines_target():
    seen = {}
    for s, t in generate_pairs(8000, 5):
        assert seen.setdefault(s, t) == t, s


def test_vocabulary_size(pairs):
    src = {w for s, _ in pairs for w in words(s)}
    tgt = {w for _, t in pairs for w in words(t)}
    assert 300 <= len(src) <= 2500 and 300 <= len(tgt) <= 3000
    assert len(tgt) > len(src)  # the target inflects


def test_speed():
    t0 = time.perf_counter()
    generate_pairs(10_000, 1)
    assert time.perf_counter() - t0 < 5.0


def test_unicode_and_punctuation(pairs):
    for s, t in pairs:
        for x in (s, t):
            assert x == x.strip() and "\n" not in x and "  " not in x
            assert x[-1] in ".?" and x[0].isupper()
            assert not re.search(r"\s[,.?]|,,|,[.?]", x)
        assert s[-1] == t[-1]  # questions stay questions
        assert not any(c.isupper() for c in s[1:])  # source: only the first letter is capitalised
        # source commas only after a fronted clause or before "bat"; the target uses more
        if "," in s:
            assert s.count(",") == 1 and (", bat " in s or s.split()[0] in ("Wen", "Ef", "Altho")), s
    assert any(c in "äöüß" for _, t in pairs for c in t)  # real UTF-8 beyond ASCII
    assert sum(t.count(",") for _, t in pairs) > 2 * sum(s.count(",") for s, _ in pairs)


# -- phenomena -----------------------------------------------------------------------------------------------------


def test_relative_clauses_present(pairs):
    rel = [(s, t) for s, t in pairs if " thet " in s]
    assert len(rel) / len(pairs) > 0.1
    # target: ", <relative pronoun> ..." with the clause's verb last before the closing comma or the end
    hits = 0
    for _, t in rel:
        for m in re.finditer(r", (dor|don|da|dat|di) ([^,.?]*)", t):
            clause = m.group(2).split()
            if clause and clause[-1] in FINITE:
                hits += 1
    assert hits > 0.3 * len(rel)


def test_subordinate_clause_is_verb_final(pairs):
    checked = 0
    for s, t in pairs:
        if " bikos " in s and " thet " not in s:
            sub = t.split(", wail ", 1)[1]
            assert sub[:-1].split()[-1] in FINITE, t
            checked += 1
    assert checked >= 30


def test_verb_second_after_fronted_adverb_and_clause(pairs):
    fronted = [(s, t) for s, t in pairs if s.split()[0] in TIME_ADV_SRC]
    assert len(fronted) >= 30
    for s, t in fronted:
        assert t.split()[1] in FINITE_V2, (s, t)
    clause_first = [(s, t) for s, t in pairs if s.split()[0] in ("Wen", "Ef", "Altho")]
    assert len(clause_first) >= 30
    for s, t in clause_first:
        if " thet " not in s:
            main = t.split(", ", 1)[1]
            assert main.split()[0] in FINITE_V2, (s, t)


def test_questions_are_verb_first(pairs):
    qs = [(s, t) for s, t in pairs if s.endswith("?")]
    assert len(qs) >= 100
    for s, t in qs:
        assert s.startswith("Kwe ")
        w = t.split()[0]
        assert w[:1].lower() + w[1:] in FINITE_V2, t


def test_compounds_joined_and_hyphenated(pairs):
    comps = [c for cs in LEX.compounds.values() for c in cs]
    hyph = [c for c in comps if "-" in c.t_sg]
    assert 0.2 < len(hyph) / len(comps) < 0.8
    src_two_words = [c for c in comps if len(c.s_sg.split()) == 2]
    assert len(src_two_words) == len(comps)
    tgt_text = " ".join(t for _, t in pairs)
    assert re.search(r"[A-ZÄÖÜ]\w+-[A-ZÄÖÜ]\w+", tgt_text)  # e.g. Kafe-Tassa
    one_word = {f for c in comps if "-" not in c.t_sg for f in (c.t_sg, c.t_pl, c.t_dpl)}
    assert sum(w in one_word for w in words(tgt_text)) > 20


def test_target_nouns_capitalised():
    for cls in LEX.nouns.values():
        for n in cls:
            assert n.t_sg[0].isupper() and n.t_pl[0].isupper() and n.s_sg.islower()
    x, y = noun("person", "m", 0), noun("thing", "f", 0)
    s, t = svo(NP(x), verb("tr", obj="thing"), NP(y))
    assert x.t_sg in t.split() and y.t_sg + "." in t.split()


def test_agreement_across_relative_clause():
    """The main verb agrees with a subject the relative clause separates it from; article, adjective and
    relative pronoun agree in gender, number and case."""
    head = noun("person", "m", 1)
    v_main = verb("intr", motion=False)
    adj = LEX.adjs_anim[0]
    out = {}
    for pl in (False, True):
        rel = Clause(None, verb("tr", obj="thing"), NP(noun("thing", "n", 0)))
        subj = NP(head, pl=pl, adjs=(adj,), rel=rel)
        out[pl] = svo(subj, v_main, None)
    (s_sg, t_sg), (s_pl, t_pl) = out[False], out[True]
    assert s_sg.split()[-1] == s_pl.split()[-1]  # the source verb does not agree
    assert t_sg.split()[-1] == v_main.pres["3sg"] + "." and t_pl.split()[-1] == v_main.pres["3pl"] + "."
    assert t_sg.startswith(f"Dor {head.t_sg} {adj.t_anim}er, dor ")
    assert t_pl.startswith(f"Di {head.t_pl} {adj.t_anim}e, di ")


def test_tense_brackets_and_separable_particles():
    v = verb("tr", obj="food", sep=True)
    x, y = noun("person", "m", 0), next(n for n in LEX.nouns["food"] if not n.amb)
    _, pres = svo(NP(x), v, NP(y), neg=True)
    assert pres.split()[2] == v.pres["3sg"] and pres.endswith(f"nikt {v.sep}.")
    _, past = svo(NP(x), v, NP(y), tense="past")
    assert past.split()[2] == "het" and past.endswith(f" {v.part}.")
    _, fut = svo(NP(x), v, NP(y), tense="fut")
    assert fut.split()[2] == "wolt" and fut.endswith(f" {v.inf}.")


def test_word_choice_depends_on_context():
    # an ambiguous source verb: the object's class picks the target verb
    by_src = {}
    for v in LEX.verbs["tr"]:
        if v.amb:
            by_src.setdefault(v.s, []).append(v)
    assert len(by_src) >= 5
    a, b = next(iter(by_src.values()))
    pool = lambda key: [n for n in LEX.pools[key + "!"][0]]  # noqa: E731
    subj = NP(noun("person", "m", 0))
    sa, ta = svo(subj, a, NP(pool(a.obj)[0]))
    sb, tb = svo(subj, b, NP(pool(b.obj)[0]))
    assert sa.split()[2] == sb.split()[2] and ta.split()[2] != tb.split()[2]
    # two-way prepositions: accusative of direction after a motion verb, dative (contracted) otherwise
    inna = next(p for p in PREPS if p.s == "inna")
    place = noun("place", "m", 0)
    _, t_go = svo(subj, verb("intr", motion=True), None, pp=(inna, NP(place)))
    _, t_be = svo(subj, verb("intr", motion=False), None, pp=(inna, NP(place)))
    assert f"inn don {place.t_sg}." in t_go and f"imm {place.t_sg}." in t_be
    # an ambiguous adjective: animate and inanimate nouns take different translations
    amb = [x for x in LEX.adjs_anim if x.inan and x.t_anim != x.t_inan]
    assert amb
    # "wen": "als" with a past clause, "wanne" otherwise
    c1 = Clause(NP(pron="1sg"), verb("intr"))
    for tense, conj in (("past", "als"), ("pres", "wanne")):
        c2 = Clause(NP(pron="3pl"), verb("intr", k=1), tense=tense)
        assert realise("front", c1, c2, "wen")[1].startswith(conj.capitalize() + " ")


def test_ditransitive_reorders():
    giver, thing, person = noun("person", "m", 0), noun("thing", "n", 0), noun("person", "f", 0)
    v = LEX.verbs["ditr"][0]
    s, t = svo(NP(giver), v, NP(thing), iobj=NP(person))
    assert s.split()[5:8] == ["tu", "tha", person.s_sg + "."]
    assert t.split()[3:5] == ["dar", person.t_sg] and t.split()[5:7] == ["dat", thing.t_sg + "."]


def test_word_order_matters():
    """Permutations of the same source words translate differently; the target differs even as a bag of
    words, so a model that ignores source order cannot get both right."""
    x, y = noun("person", "m", 0), noun("person", "m", 1)
    v = verb("tr", obj="anim")
    s1, t1 = svo(NP(x), v, NP(y))
    s2, t2 = svo(NP(y), v, NP(x))
    assert bag(s1) == bag(s2)
    assert t1 != t2
    assert f"don {y.t_sg}" in t1 and f"don {x.t_sg}" in t2  # case follows the role, not the word
    f = noun("animal", "f", 0)
    s1, t1 = svo(NP(x), v, NP(f))
    s2, t2 = svo(NP(f), v, NP(x))
    assert bag(s1) == bag(s2)
    assert bag(t1) != bag(t2)
    # adjective attachment and pronoun case are positional too
    big = LEX.adjs_anim[1]
    s1, t1 = svo(NP(x, adjs=(big,)), v, NP(y))
    s2, t2 = svo(NP(x), v, NP(y, adjs=(big,)))
    assert bag(s1) == bag(s2) and t1.split()[2] != t2.split()[2]
    s1, t1 = svo(NP(pron="1sg"), v, NP(pron="2sg"))
    s2, t2 = svo(NP(pron="2sg"), v, NP(pron="1sg"))
    assert bag(s1) == bag(s2)
    assert t1.split()[0] == "Ekk" and t1.split()[-1] == "dekk." and t2.split()[0] == "Dü" and t2.split()[-1] == "mekk."


# -- write_corpus --------------------------------------------------------------------------------------------------


def _read(path):
    data = path.read_bytes()
    text = data.decode("utf-8")  # strict: valid UTF-8
    assert "\r" not in text and text.endswith("\n")
    lines = text.split("\n")[:-1]
    assert all(line.strip() for line in lines)
    return lines


def test_write_corpus(tmp_path):
    out = write_corpus(tmp_path / "c", train_pairs=600, seed=3, dev_pairs=60, test_pairs=40)
    assert out == tmp_path / "c"
    counts = {}
    for split in ("train", "valid", "test"):
        en, de = _read(out / f"{split}.en"), _read(out / f"{split}.de")
        assert len(en) == len(de)
        counts[split] = len(en)
    assert counts == {"train": 600, "valid": 60, "test": 40}
    train = set(_read(out / "train.en"))
    valid, test = _read(out / "valid.en"), _read(out / "test.en")
    assert not train & set(valid) and not train & set(test) and not set(valid) & set(test)
    assert len(set(valid)) == len(valid)
    manifest = json.loads((out / "corpus.json").read_text(encoding="utf-8"))
    assert manifest["params"]["seed"] == 3 and manifest["params"]["version"] == GENERATOR_VERSION
    assert manifest["files"]["train.de"] == 600
    assert not [p.name for p in out.iterdir() if p.name.endswith(".tmp")]
    # the train split is a deterministic stream of its own, distinct from valid/test
    assert _read(out / "train.en") == [s for s, _ in generate_pairs(600, derive_seed(3, "train"))]


def test_write_corpus_idempotent(tmp_path):
    out = write_corpus(tmp_path, train_pairs=200, seed=1, dev_pairs=20, test_pairs=20)
    stamps = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    time.sleep(0.02)
    write_corpus(tmp_path, train_pairs=200, seed=1, dev_pairs=20, test_pairs=20)
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == stamps
    # other parameters: regenerated
    write_corpus(tmp_path, train_pairs=150, seed=1, dev_pairs=20, test_pairs=20)
    assert len(_read(out / "train.en")) == 150
    # a missing or corrupt manifest (a crash midway) means: regenerate
    (out / "corpus.json").unlink()
    write_corpus(tmp_path, train_pairs=150, seed=1, dev_pairs=20, test_pairs=20)
    assert (out / "corpus.json").exists()
    (out / "corpus.json").write_text("{not json", encoding="utf-8")
    write_corpus(tmp_path, train_pairs=150, seed=1, dev_pairs=20, test_pairs=20)
    assert json.loads((out / "corpus.json").read_text())["params"]["train_pairs"] == 150
    # a missing data file with an intact manifest is regenerated too
    os.remove(out / "test.de")
    write_corpus(tmp_path, train_pairs=150, seed=1, dev_pairs=20, test_pairs=20)
    assert len(_read(out / "test.de")) == 20


def test_write_corpus_same_content_for_same_seed(tmp_path):
    a = write_corpus(tmp_path / "a", train_pairs=100, seed=9, dev_pairs=10, test_pairs=10)
    b = write_corpus(tmp_path / "b", train_pairs=100, seed=9, dev_pairs=10, test_pairs=10)
    for name in ("train.en", "train.de", "valid.de", "test.en"):
        assert (a / name).read_bytes() == (b / name).read_bytes()


def test_write_corpus_rejects_bad_sizes(tmp_path):
    with pytest.raises(ValueError):
        write_corpus(tmp_path, train_pairs=0)
    with pytest.raises(ValueError):
        write_corpus(tmp_path, train_pairs=10, dev_pairs=-1)


# -- the lexicon-size knob -----------------------------------------------------------------------------------------


def test_lexicon_scale_one_is_the_published_corpus():
    # Digests of generator version 2 before the knob existed: the default corpus (and every record trained on it)
    # must not move when harder corpora are asked for.
    import hashlib

    def digest(items):
        return hashlib.sha256("".join(a + "\t" + b + "\n" for a, b in items).encode()).hexdigest()

    assert digest(generate_pairs(2000, 7)) == "1fe3cb575241defb7b90d63580daebd664b4cbc5071641dc13ad60e54fe10eab"
    assert digest(generate_treebank(500, 7)) == "2b7cead9390fcc29903fd08effa5513fb81d198d3ede66a6b02cc51ff50ba3c7"


@pytest.mark.parametrize("scale", [2, 8])
def test_lexicon_scale_multiplies_the_content_words(scale):
    small, big = lexicon(1), lexicon(scale)
    assert {c: len(ns) for c, ns in big.nouns.items()} == {c: scale * len(ns) for c, ns in small.nouns.items()}
    assert {f: len(vs) for f, vs in big.verbs.items()} == {f: scale * len(vs) for f, vs in small.verbs.items()}
    assert len(big.adjs_anim) == scale * len(small.adjs_anim) and len(big.time_advs) == scale * len(small.time_advs)
    assert sum(map(len, big.compounds.values())) == scale * sum(map(len, small.compounds.values()))
    # the source words are all distinct (no accidental ambiguity beyond the designed one)
    singular = [n.s_sg for ns in big.nouns.values() for n in ns if not n.amb]
    assert len(singular) == len(set(singular))
    # more words, seen less often: the corpus' source vocabulary grows
    types = lambda ps: len({w for s, _ in ps for w in words(s.lower())})  # noqa: E731
    assert types(generate_pairs(3000, 5, scale)) > 1.3 * types(generate_pairs(3000, 5))


def test_lexicon_scale_rejects_bad_values(tmp_path):
    from lightning_modules.config import DataConfig

    for bad in (0, 17, 2.0, True):
        with pytest.raises(ValueError, match="generated_lexicon_scale"):
            DataConfig(generated_lexicon_scale=bad)
        with pytest.raises(ValueError, match="lexicon scale"):
            generate_pairs(1, 1, bad)


def test_write_corpus_records_a_lexicon_scale_only_when_raised(tmp_path):
    plain = write_corpus(tmp_path / "a", train_pairs=50, seed=2, dev_pairs=5, test_pairs=5)
    hard = write_corpus(tmp_path / "b", train_pairs=50, seed=2, dev_pairs=5, test_pairs=5, lexicon_scale=4)
    assert "lexicon_scale" not in json.loads((plain / "corpus.json").read_text())["params"]
    assert json.loads((hard / "corpus.json").read_text())["params"]["lexicon_scale"] == 4
    assert (plain / "train.en").read_bytes() != (hard / "train.en").read_bytes()


def test_lexicon_scale_keeps_run_ids_and_has_its_own_cache_dir():
    from lightning_modules.config import DataConfig, RunConfig
    from lightning_modules.data.datasets import generated_corpus_dir

    base = RunConfig()
    assert RunConfig(data=DataConfig(generated_lexicon_scale=1)).run_id() == base.run_id()
    assert RunConfig(data=DataConfig(generated_lexicon_scale=4)).run_id() != base.run_id()
    assert generated_corpus_dir(DataConfig(generated_lexicon_scale=4)).name.endswith("-lexicon4")
    assert generated_corpus_dir(DataConfig()).name == "generated-50000-1234"
