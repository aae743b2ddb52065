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

Public API: :func:`generate_pairs`, :func:`write_corpus`, :func:`generate_treebank` and :func:`write_treebank`.
The package reads top to bottom as the generator works: function_words.py, lexicon.py (content words),
sentences.py (a sentence's structure), realisation.py (both sides written out), trees.py (the source side's
gold tree) and corpus.py (splits and files).
"""

from __future__ import annotations

from .corpus import GENERATOR_VERSION, generate_pairs, generate_treebank, write_corpus, write_treebank

__all__ = ["GENERATOR_VERSION", "generate_pairs", "generate_treebank", "write_corpus", "write_treebank"]
