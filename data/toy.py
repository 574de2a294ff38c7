"""Embedded offline toy corpus: English -> German-like parallel sentences.

The generator is written from scratch: a closed lexicon (36 nouns, 24 transitive, 8 intransitive
and 5 clause-taking verbs, 15 adjectives, time adverbs, prepositions, numerals) and a small grammar
whose German side is real (if simplified) German. Every structure has exactly one English and one
German rendering, so the translation task is fully learnable, but it needs word-order information.

Grammar (``Sentence`` -> ``Unit`` -> ``Clause`` -> ``NP``):

* ``NP``: determiner (the, a/an, this/these, my, our, no, a numeral two..twelve, or none for a bare
  plural), 0-2 adjectives, a noun in singular or plural, optionally a genitive ``of``-NP
  ("the house of the old man" -> "das Haus des alten Mannes") and/or a prepositional modifier.
  German articles inflect for gender (m/f/n), number and case (nominative subject, accusative or
  dative object depending on the verb, dative after mit/von/in/auf/unter/hinter, accusative after
  für/ohne/durch, genitive for ``of``); "in dem" and "von dem" contract to "im" and "vom".
  Adjectives take the weak endings after der/dieser (and after ein-words in the plural), the mixed
  endings after ein/mein/unser/kein in the singular, and the strong endings without an article
  (numerals and bare plurals): "der große Hund", "einen großen Hund", "drei große Hunde".
  Masculine and neuter nouns take -s/-es in the genitive singular, plurals -n in the dative.
* ``Clause``: subject NP, verb agreeing in number with it, object NP (transitive verbs) or a
  ``that``-clause (verbs of saying/thinking: "says that ..." -> "sagt, dass ..."), an optional
  adverbial PP and an optional time adverb. Main clauses are verb-second: a fronted time adverb
  inverts subject and verb ("today the dog sees the cat" -> "heute sieht der Hund die Katze"); a
  sentence-final English time adverb goes right after the finite verb in German. Subordinate
  clauses (after weil/wenn/obwohl/während/bevor/dass) are verb-final.
* ``Unit``: a main clause with an optional adverbial subordinate clause, either after it
  ("..., weil der Hund die Katze sieht") or fronted, which puts the German main-clause verb first
  ("Wenn der Hund schläft, sieht die Katze den Vogel.").
* ``Sentence``: units coordinated with "and"/"und" or "but"/"aber", so sentences can get long.

Punctuation: the first word is capitalised and every sentence ends with "."; German puts a comma
before every subordinate clause, after a fronted one, before "aber", and before "und" when the
preceding unit ends in a subordinate clause; English puts one after a fronted subordinate clause
and before "but". English nouns are lower case, German nouns capitalised. Sentence length is the
number of whitespace-separated English words (``en_length``).

``toy_corpus`` draws the splits test_long (25-40 words, strictly longer than any train sentence),
test, validation (3-24 words) and then train (3-24 words) from per-split ``random.Random``
generators seeded from ``seed``; English sentences are unique across and within all splits.
``python -m data.toy --out DIR [--seed N]`` writes ``DIR/{split}.en`` and ``DIR/{split}.de``.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path
from typing import NamedTuple

import datasets

from common.errors import DataError

SPLIT_LENGTHS: dict[str, tuple[int, int]] = {
    "train": (3, 24),
    "validation": (3, 24),
    "test": (3, 24),
    "test_long": (25, 40),
}
FEATURES = datasets.Features({"translation": datasets.Translation(languages=["de", "en"])})

CASES = ("nom", "acc", "dat", "gen")


# --------------------------------------------------------------------------------------- lexicon
class Noun(NamedTuple):
    en: str
    en_pl: str
    de: str
    de_pl: str
    gender: str  # "m", "f" or "n"
    de_gen: str  # genitive singular


class Verb(NamedTuple):
    en: str  # 3rd person singular present
    en_pl: str  # 3rd person plural present
    de: str
    de_pl: str
    case: str  # case of the object: "acc", "dat", or "" for intransitive / clause-taking verbs


class Adjective(NamedTuple):
    en: str
    de: str  # stem the endings are added to


class Preposition(NamedTuple):
    en: str
    de: str
    case: str


class Phrase(NamedTuple):
    en: tuple[str, ...]
    de: tuple[str, ...]


def _noun(en: str, en_pl: str, de: str, de_pl: str, gender: str, de_gen: str = "") -> Noun:
    return Noun(en, en_pl, de, de_pl, gender, de_gen or de)


NOUNS: dict[str, Noun] = {
    n.en: n
    for n in (
        _noun("dog", "dogs", "Hund", "Hunde", "m", "Hundes"),
        _noun("man", "men", "Mann", "Männer", "m", "Mannes"),
        _noun("teacher", "teachers", "Lehrer", "Lehrer", "m", "Lehrers"),
        _noun("doctor", "doctors", "Arzt", "Ärzte", "m", "Arztes"),
        _noun("friend", "friends", "Freund", "Freunde", "m", "Freundes"),
        _noun("father", "fathers", "Vater", "Väter", "m", "Vaters"),
        _noun("uncle", "uncles", "Onkel", "Onkel", "m", "Onkels"),
        _noun("bird", "birds", "Vogel", "Vögel", "m", "Vogels"),
        _noun("tree", "trees", "Baum", "Bäume", "m", "Baumes"),
        _noun("table", "tables", "Tisch", "Tische", "m", "Tisches"),
        _noun("garden", "gardens", "Garten", "Gärten", "m", "Gartens"),
        _noun("king", "kings", "König", "Könige", "m", "Königs"),
        _noun("apple", "apples", "Apfel", "Äpfel", "m", "Apfels"),
        _noun("letter", "letters", "Brief", "Briefe", "m", "Briefes"),
        _noun("ball", "balls", "Ball", "Bälle", "m", "Balles"),
        _noun("cat", "cats", "Katze", "Katzen", "f"),
        _noun("woman", "women", "Frau", "Frauen", "f"),
        _noun("mother", "mothers", "Mutter", "Mütter", "f"),
        _noun("sister", "sisters", "Schwester", "Schwestern", "f"),
        _noun("queen", "queens", "Königin", "Königinnen", "f"),
        _noun("mouse", "mice", "Maus", "Mäuse", "f"),
        _noun("city", "cities", "Stadt", "Städte", "f"),
        _noun("door", "doors", "Tür", "Türen", "f"),
        _noun("flower", "flowers", "Blume", "Blumen", "f"),
        _noun("street", "streets", "Straße", "Straßen", "f"),
        _noun("school", "schools", "Schule", "Schulen", "f"),
        _noun("lamp", "lamps", "Lampe", "Lampen", "f"),
        _noun("house", "houses", "Haus", "Häuser", "n", "Hauses"),
        _noun("child", "children", "Kind", "Kinder", "n", "Kindes"),
        _noun("girl", "girls", "Mädchen", "Mädchen", "n", "Mädchens"),
        _noun("book", "books", "Buch", "Bücher", "n", "Buches"),
        _noun("car", "cars", "Auto", "Autos", "n", "Autos"),
        _noun("horse", "horses", "Pferd", "Pferde", "n", "Pferdes"),
        _noun("window", "windows", "Fenster", "Fenster", "n", "Fensters"),
        _noun("ship", "ships", "Schiff", "Schiffe", "n", "Schiffes"),
        _noun("picture", "pictures", "Bild", "Bilder", "n", "Bildes"),
        _noun("bed", "beds", "Bett", "Betten", "n", "Bettes"),
    )
}

TRANSITIVE: dict[str, Verb] = {
    v.en: v
    for v in (
        Verb("sees", "see", "sieht", "sehen", "acc"),
        Verb("likes", "like", "mag", "mögen", "acc"),
        Verb("finds", "find", "findet", "finden", "acc"),
        Verb("has", "have", "hat", "haben", "acc"),
        Verb("buys", "buy", "kauft", "kaufen", "acc"),
        Verb("hears", "hear", "hört", "hören", "acc"),
        Verb("visits", "visit", "besucht", "besuchen", "acc"),
        Verb("carries", "carry", "trägt", "tragen", "acc"),
        Verb("paints", "paint", "malt", "malen", "acc"),
        Verb("loves", "love", "liebt", "lieben", "acc"),
        Verb("knows", "know", "kennt", "kennen", "acc"),
        Verb("washes", "wash", "wäscht", "waschen", "acc"),
        Verb("draws", "draw", "zeichnet", "zeichnen", "acc"),
        Verb("catches", "catch", "fängt", "fangen", "acc"),
        Verb("meets", "meet", "trifft", "treffen", "acc"),
        Verb("brings", "bring", "bringt", "bringen", "acc"),
        Verb("holds", "hold", "hält", "halten", "acc"),
        Verb("needs", "need", "braucht", "brauchen", "acc"),
        Verb("builds", "build", "baut", "bauen", "acc"),
        Verb("sells", "sell", "verkauft", "verkaufen", "acc"),
        Verb("reads", "read", "liest", "lesen", "acc"),
        Verb("helps", "help", "hilft", "helfen", "dat"),
        Verb("thanks", "thank", "dankt", "danken", "dat"),
        Verb("follows", "follow", "folgt", "folgen", "dat"),
    )
}

INTRANSITIVE: dict[str, Verb] = {
    v.en: v
    for v in (
        Verb("sleeps", "sleep", "schläft", "schlafen", ""),
        Verb("runs", "run", "läuft", "laufen", ""),
        Verb("sings", "sing", "singt", "singen", ""),
        Verb("laughs", "laugh", "lacht", "lachen", ""),
        Verb("waits", "wait", "wartet", "warten", ""),
        Verb("works", "work", "arbeitet", "arbeiten", ""),
        Verb("swims", "swim", "schwimmt", "schwimmen", ""),
        Verb("dances", "dance", "tanzt", "tanzen", ""),
    )
}

CLAUSE_VERBS: dict[str, Verb] = {
    v.en: v
    for v in (
        Verb("says", "say", "sagt", "sagen", ""),
        Verb("thinks", "think", "denkt", "denken", ""),
        Verb("believes", "believe", "glaubt", "glauben", ""),
        Verb("hopes", "hope", "hofft", "hoffen", ""),
        Verb("knows", "know", "weiß", "wissen", ""),
    )
}

ADJECTIVES: dict[str, Adjective] = {
    a.en: a
    for a in (
        Adjective("big", "groß"),
        Adjective("small", "klein"),
        Adjective("old", "alt"),
        Adjective("young", "jung"),
        Adjective("new", "neu"),
        Adjective("red", "rot"),
        Adjective("green", "grün"),
        Adjective("black", "schwarz"),
        Adjective("white", "weiß"),
        Adjective("beautiful", "schön"),
        Adjective("tired", "müd"),
        Adjective("happy", "glücklich"),
        Adjective("fast", "schnell"),
        Adjective("clever", "klug"),
        Adjective("friendly", "freundlich"),
    )
}

PREPOSITIONS: dict[str, Preposition] = {
    p.en: p
    for p in (
        Preposition("with", "mit", "dat"),
        Preposition("from", "von", "dat"),
        Preposition("in", "in", "dat"),
        Preposition("on", "auf", "dat"),
        Preposition("under", "unter", "dat"),
        Preposition("behind", "hinter", "dat"),
        Preposition("for", "für", "acc"),
        Preposition("without", "ohne", "acc"),
        Preposition("through", "durch", "acc"),
    )
}
NP_PREPOSITIONS = ("with", "from", "in", "on", "under", "behind", "without")
CONTRACTIONS = {"in": "im", "von": "vom"}  # preposition + "dem"

TIMES: dict[str, Phrase] = {
    en: Phrase(tuple(en.split()), tuple(de.split()))
    for en, de in (
        ("today", "heute"),
        ("now", "jetzt"),
        ("tomorrow", "morgen"),
        ("sometimes", "manchmal"),
        ("often", "oft"),
        ("in the morning", "am Morgen"),
        ("in the evening", "am Abend"),
        ("at night", "in der Nacht"),
        ("on Sunday", "am Sonntag"),
        ("on Monday", "am Montag"),
    )
}

SUBORDINATORS = {
    "because": "weil",
    "when": "wenn",
    "although": "obwohl",
    "while": "während",
    "before": "bevor",
}
COORDINATORS = {"and": "und", "but": "aber"}

NUMERALS = {
    "two": "zwei",
    "three": "drei",
    "four": "vier",
    "five": "fünf",
    "six": "sechs",
    "seven": "sieben",
    "eight": "acht",
    "nine": "neun",
    "ten": "zehn",
    "eleven": "elf",
    "twelve": "zwölf",
}

# Determiners: "the"/"this" take weak adjective endings, the ein-words "a"/"my"/"our"/"no" mixed
# ones (weak in the plural), numerals and the bare plural ("") strong ones.
_DEFINITE = {
    "m": ("der", "den", "dem", "des"),
    "f": ("die", "die", "der", "der"),
    "n": ("das", "das", "dem", "des"),
    "p": ("die", "die", "den", "der"),
}
_DIES = {"m": ("er", "en", "em", "es"), "f": ("e", "e", "er", "er"), "n": ("es", "es", "em", "es")}
_DIES["p"] = _DIES["f"][:2] + ("en", "er")
_EIN = {"m": ("", "en", "em", "es"), "f": ("e", "e", "er", "er"), "n": ("", "", "em", "es")}
_EIN["p"] = ("e", "e", "en", "er")
_WEAK = {
    "m": ("e", "en", "en", "en"),
    "f": ("e", "e", "en", "en"),
    "n": ("e", "e", "en", "en"),
    "p": ("en", "en", "en", "en"),
}
_MIXED = {"m": ("er", "en", "en", "en"), "f": ("e", "e", "en", "en"), "n": ("es", "es", "en", "en")}
_MIXED["p"] = _WEAK["p"]
_STRONG_PLURAL = ("e", "e", "en", "er")
_EIN_WORDS = {"a": "ein", "my": "mein", "our": "unser", "no": "kein"}


def _build_determiners() -> dict[tuple[str, str, str], tuple[str, str]]:
    """(English determiner, gender or "p", case) -> (German article, adjective ending)."""
    table: dict[tuple[str, str, str], tuple[str, str]] = {}
    for g in "mfnp":
        for i, case in enumerate(CASES):
            table["the", g, case] = (_DEFINITE[g][i], _WEAK[g][i])
            table["this", g, case] = ("dies" + _DIES[g][i], _WEAK[g][i])
            for en, stem in _EIN_WORDS.items():
                if en != "a" or g != "p":
                    table[en, g, case] = (stem + _EIN[g][i], _MIXED[g][i])
    for i, case in enumerate(CASES):
        table["", "p", case] = ("", _STRONG_PLURAL[i])
        for en, de in NUMERALS.items():
            table[en, "p", case] = (de, _STRONG_PLURAL[i])
    return table


_DE_DET = _build_determiners()


def _noun_forms(n: Noun) -> dict[tuple[bool, str], str]:
    """German case forms of a noun, keyed by (plural, case)."""
    dat_pl = n.de_pl if n.de_pl.endswith(("n", "s")) else n.de_pl + "n"
    forms = {(False, c): n.de for c in CASES}
    forms[False, "gen"] = n.de_gen
    forms.update({(True, c): n.de_pl for c in CASES})
    forms[True, "dat"] = dat_pl
    return forms


_DE_NOUN = {key: _noun_forms(n) for key, n in NOUNS.items()}


# ------------------------------------------------------------------------------------ structures
class NP(NamedTuple):
    noun: str  # English singular noun (key of NOUNS)
    det: str = "the"  # the, a, this, my, our, no, a numeral (plural), or "" (bare plural)
    plural: bool = False
    adjs: tuple[str, ...] = ()
    of: NP | None = None  # genitive modifier: "of the man" -> "des Mannes"
    pp: PP | None = None  # prepositional modifier: "with the ball" -> "mit dem Ball"


class PP(NamedTuple):
    prep: str  # English preposition (key of PREPOSITIONS)
    np: NP


class Clause(NamedTuple):
    subj: NP
    verb: str  # English 3rd person singular (key of TRANSITIVE/INTRANSITIVE, or CLAUSE_VERBS)
    obj: NP | None = None
    pp: PP | None = None  # adverbial PP
    time: str | None = None  # key of TIMES
    front: bool = False  # time adverb fronted (main clauses only: German verb-second inversion)
    that: Clause | None = None  # complement of a clause verb: "says that ..." -> "sagt, dass ..."


class Unit(NamedTuple):
    main: Clause
    conj: str | None = None  # key of SUBORDINATORS
    sub: Clause | None = None
    sub_first: bool = False  # subordinate clause before the main clause


class Sentence(NamedTuple):
    units: tuple[Unit, ...]
    links: tuple[str, ...] = ()  # keys of COORDINATORS between consecutive units


# ------------------------------------------------------------------------------------- rendering
def _np_en(np: NP, out: list[str]) -> None:
    noun = NOUNS[np.noun]
    det = np.det
    if det == "a":
        first = np.adjs[0] if np.adjs else noun.en
        out.append("an" if first[0] in "aeiou" else "a")
    elif det == "this":
        out.append("these" if np.plural else "this")
    elif det:
        out.append(det)
    out.extend(np.adjs)
    out.append(noun.en_pl if np.plural else noun.en)
    if np.of is not None:
        out.append("of")
        _np_en(np.of, out)
    if np.pp is not None:
        out.append(np.pp.prep)
        _np_en(np.pp.np, out)


def _np_de(np: NP, case: str, out: list[str]) -> None:
    article, ending = _DE_DET[np.det, "p" if np.plural else NOUNS[np.noun].gender, case]
    if article:
        out.append(article)
    for adj in np.adjs:
        out.append(ADJECTIVES[adj].de + ending)
    out.append(_DE_NOUN[np.noun][np.plural, case])
    if np.of is not None:
        _np_de(np.of, "gen", out)
    if np.pp is not None:
        _pp_de(np.pp, out)


def _pp_de(pp: PP, out: list[str]) -> None:
    prep = PREPOSITIONS[pp.prep]
    out.append(prep.de)
    start = len(out)
    _np_de(pp.np, prep.case, out)
    if out[start] == "dem" and prep.de in CONTRACTIONS:
        out[start - 1 : start + 1] = [CONTRACTIONS[prep.de]]


def _verb(c: Clause) -> Verb:
    if c.that is not None:
        return CLAUSE_VERBS[c.verb]
    return TRANSITIVE[c.verb] if c.obj is not None else INTRANSITIVE[c.verb]


def _clause_en(c: Clause, out: list[str]) -> None:
    time = TIMES[c.time].en if c.time else ()
    front = c.front and c.time is not None
    if front:
        out.extend(time)
    _np_en(c.subj, out)
    verb = _verb(c)
    out.append(verb.en_pl if c.subj.plural else verb.en)
    if c.obj is not None:
        _np_en(c.obj, out)
    if c.pp is not None:
        out.append(c.pp.prep)
        _np_en(c.pp.np, out)
    if not front:
        out.extend(time)
    if c.that is not None:
        out.append("that")
        _clause_en(c.that, out)


def _clause_de(c: Clause, order: str, out: list[str]) -> None:
    """German clause; order is "v2" (main clause), "v1" (after a fronted clause) or "final"."""
    verb = _verb(c)
    finite = verb.de_pl if c.subj.plural else verb.de
    time = TIMES[c.time].de if c.time else ()
    if order == "final":
        _np_de(c.subj, "nom", out)
        out.extend(time)
    elif order == "v2" and c.front and c.time is not None:
        out.extend(time)
        out.append(finite)
        _np_de(c.subj, "nom", out)
    else:
        if order == "v2":
            _np_de(c.subj, "nom", out)
            out.append(finite)
        else:
            out.append(finite)
            _np_de(c.subj, "nom", out)
        out.extend(time)
    if c.obj is not None:
        _np_de(c.obj, verb.case, out)
    if c.pp is not None:
        _pp_de(c.pp, out)
    if order == "final":
        out.append(finite)
    if c.that is not None:
        out[-1] += ","
        out.append("dass")
        _clause_de(c.that, "final", out)


def _unit_en(u: Unit, out: list[str]) -> None:
    if u.sub is None:
        _clause_en(u.main, out)
    elif u.sub_first:
        out.append(u.conj)
        _clause_en(u.sub, out)
        out[-1] += ","
        _clause_en(u.main, out)
    else:
        _clause_en(u.main, out)
        out.append(u.conj)
        _clause_en(u.sub, out)


def _unit_de(u: Unit, out: list[str]) -> None:
    if u.sub is None:
        _clause_de(u.main, "v2", out)
    elif u.sub_first:
        if u.main.front and u.main.time is not None:
            raise ValueError("a main clause after a fronted subordinate clause cannot front time")
        out.append(SUBORDINATORS[u.conj])
        _clause_de(u.sub, "final", out)
        out[-1] += ","
        _clause_de(u.main, "v1", out)
    else:
        _clause_de(u.main, "v2", out)
        out[-1] += ","
        out.append(SUBORDINATORS[u.conj])
        _clause_de(u.sub, "final", out)


def _ends_in_subclause(u: Unit) -> bool:
    return (u.sub is not None and not u.sub_first) or u.main.that is not None


def _finish(words: list[str]) -> str:
    words[0] = words[0][:1].upper() + words[0][1:]
    return " ".join(words) + "."


def render_en(sentence: Sentence) -> str:
    """Render a sentence structure to English."""
    out: list[str] = []
    for i, unit in enumerate(sentence.units):
        if i:
            link = sentence.links[i - 1]
            if link == "but":
                out[-1] += ","
            out.append(link)
        _unit_en(unit, out)
    return _finish(out)


def render_de(sentence: Sentence) -> str:
    """Render a sentence structure to German."""
    out: list[str] = []
    for i, unit in enumerate(sentence.units):
        if i:
            link = sentence.links[i - 1]
            if link == "but" or _ends_in_subclause(sentence.units[i - 1]):
                out[-1] += ","
            out.append(COORDINATORS[link])
        _unit_de(unit, out)
    return _finish(out)


def render(sentence: Sentence) -> tuple[str, str]:
    """Render a sentence structure to its (English, German) pair."""
    return render_en(sentence), render_de(sentence)


def en_length(text: str) -> int:
    """Length of an English sentence in whitespace-separated words."""
    return len(text.split())


# -------------------------------------------------------------------------------------- sampling
_NOUN_KEYS = tuple(NOUNS)
_TRANSITIVE_KEYS = tuple(TRANSITIVE)
_INTRANSITIVE_KEYS = tuple(INTRANSITIVE)
_CLAUSE_VERB_KEYS = tuple(CLAUSE_VERBS)
_ADJ_KEYS = tuple(ADJECTIVES)
_PREP_KEYS = tuple(PREPOSITIONS)
_TIME_KEYS = tuple(TIMES)
_SUB_KEYS = tuple(SUBORDINATORS)
_NUMERAL_KEYS = tuple(NUMERALS)
_GENITIVE_DETS = ("the", "the", "the", "a", "a", "this", "my", "our")
# cumulative probabilities of the head determiners: the, a, this, my, our, no, numeral, bare
_DET_CDF = ((0.36, "the"), (0.56, "a"), (0.62, "this"), (0.69, "my"), (0.73, "our"), (0.78, "no"))


def _pick(rng: random.Random, seq: tuple[str, ...]) -> str:
    """A uniform random element of seq (faster than Random.choice)."""
    return seq[int(rng.random() * len(seq))]


def _sample_np(rng: random.Random, rich: float, modifiers: bool) -> NP:
    r = rng.random()
    for threshold, det in _DET_CDF:
        if r < threshold:
            plural = det != "a" and rng.random() < 0.3
            break
    else:
        det, plural = (_pick(rng, _NUMERAL_KEYS) if r < 0.91 else ""), True
    r = rng.random()
    if r < 0.08 + 0.2 * rich:
        adjs = (_pick(rng, _ADJ_KEYS), _pick(rng, _ADJ_KEYS))
        if adjs[0] == adjs[1]:
            adjs = adjs[:1]
    elif r < 0.4 + 0.3 * rich:
        adjs = (_pick(rng, _ADJ_KEYS),)
    else:
        adjs = ()
    of = pp = None
    if modifiers:
        if rng.random() < 0.04 + 0.16 * rich:
            gen_det = _pick(rng, _GENITIVE_DETS)
            of = NP(
                _pick(rng, _NOUN_KEYS),
                gen_det,
                gen_det != "a" and rng.random() < 0.25,
                (_pick(rng, _ADJ_KEYS),) if rng.random() < 0.3 else (),
            )
        if rng.random() < 0.04 + 0.16 * rich:
            pp = PP(_pick(rng, NP_PREPOSITIONS), _sample_np(rng, rich, False))
    return NP(_pick(rng, _NOUN_KEYS), det, plural, adjs, of, pp)


def _sample_clause(
    rng: random.Random, budget: int, rich: float, front_ok: bool
) -> tuple[Clause, int]:
    """A random clause using at most `budget` clauses (itself plus a `that` complement)."""
    subj = _sample_np(rng, rich, True)
    time = _pick(rng, _TIME_KEYS) if rng.random() < 0.1 + 0.2 * rich else None
    if budget >= 2 and rng.random() < 0.25:
        that, used = _sample_clause(rng, budget - 1, rich, False)
        if not front_ok:
            time = None
        verb = _pick(rng, _CLAUSE_VERB_KEYS)
        return Clause(subj, verb, that=that, time=time, front=time is not None), used + 1
    front = front_ok and time is not None and rng.random() < 0.5
    pp = None
    if rng.random() < 0.12 + 0.3 * rich:
        pp = PP(_pick(rng, _PREP_KEYS), _sample_np(rng, rich, False))
    if rng.random() < 0.8:
        obj = _sample_np(rng, rich, True)
        return Clause(subj, _pick(rng, _TRANSITIVE_KEYS), obj, pp, time, front), 1
    return Clause(subj, _pick(rng, _INTRANSITIVE_KEYS), None, pp, time, front), 1


def sample_sentence(rng: random.Random, n_clauses: int, rich: float = 0.5) -> Sentence:
    """A random sentence structure with `n_clauses` clauses; `rich` in [0, 1] adds modifiers."""
    units: list[Unit] = []
    remaining = n_clauses
    while remaining > 0:
        has_sub = remaining >= 2 and rng.random() < 0.5
        sub_first = has_sub and not units and rng.random() < 0.35
        main, used = _sample_clause(rng, min(remaining - int(has_sub), 2), rich, not sub_first)
        remaining -= used
        if has_sub:
            sub, used = _sample_clause(rng, min(remaining, 2), rich, False)
            remaining -= used
            units.append(Unit(main, _pick(rng, _SUB_KEYS), sub, sub_first))
        else:
            units.append(Unit(main))
    links = tuple("and" if rng.random() < 0.7 else "but" for _ in units[1:])
    return Sentence(tuple(units), links)


def generate_pair(rng: random.Random, min_words: int = 3, max_words: int = 24) -> tuple[str, str]:
    """A random (English, German) pair whose English has min_words..max_words words."""
    low = max(1, min_words // 9)
    span = max(low, -(-max_words // 6)) - low + 1
    while True:
        r = rng.random()
        n_clauses = low + int(span * r * r)
        sentence = sample_sentence(rng, n_clauses, rng.random())
        en = render_en(sentence)
        if min_words <= en_length(en) <= max_words:
            return en, render_de(sentence)


# ------------------------------------------------------------------------------------ the corpus
def generate_split(
    rng: random.Random, size: int, min_words: int, max_words: int, seen: set[str]
) -> list[tuple[str, str]]:
    """`size` pairs whose English is not in `seen` (which is updated) and within the lengths."""
    pairs: list[tuple[str, str]] = []
    attempts = 0
    while len(pairs) < size:
        attempts += 1
        if attempts > 20 * size + 1000:
            raise RuntimeError(f"cannot draw {size} distinct sentences of {min_words}-{max_words}")
        en, de = generate_pair(rng, min_words, max_words)
        if en not in seen:
            seen.add(en)
            pairs.append((en, de))
    return pairs


def toy_pairs(
    seed: int = 0,
    train_size: int = 100_000,
    validation_size: int = 500,
    test_size: int = 500,
    test_long_size: int = 500,
) -> dict[str, list[tuple[str, str]]]:
    """The toy corpus as plain (English, German) pairs per split."""
    sizes = {
        "test_long": test_long_size,
        "test": test_size,
        "validation": validation_size,
        "train": train_size,
    }
    for split, size in sizes.items():  # a negative size would draw nothing, and say nothing
        least = 1 if split in ("train", "validation") else 0
        if isinstance(size, bool) or not isinstance(size, int) or size < least:
            raise DataError(f"data.corpus.{split}_size={size}: pass a whole number >= {least}")
    seen: set[str] = set()
    pairs = {}
    for split, size in sizes.items():
        rng = random.Random(f"pe-nmt-toy/{seed}/{split}")
        pairs[split] = generate_split(rng, size, *SPLIT_LENGTHS[split], seen)
    return {split: pairs[split] for split in SPLIT_LENGTHS}


def toy_corpus(
    seed: int = 0,
    train_size: int = 100_000,
    validation_size: int = 500,
    test_size: int = 500,
    test_long_size: int = 500,
) -> datasets.DatasetDict:
    """The toy En->De corpus: splits train/validation/test/test_long, column `translation {en, de}`.

    The features are those of wmt/wmt14 "de-en"; the data is deterministic in all arguments.
    """
    pairs = toy_pairs(seed, train_size, validation_size, test_size, test_long_size)
    return datasets.DatasetDict(
        {
            split: datasets.Dataset.from_dict(
                {"translation": [{"de": de, "en": en} for en, de in split_pairs]},
                features=FEATURES,
            )
            for split, split_pairs in pairs.items()
        }
    )


def main(out_dir: str | Path, seed: int = 0, **sizes: int) -> None:
    """Write DIR/{split}.en and DIR/{split}.de, one sentence a line (sizes as for toy_corpus)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for split, split_pairs in toy_pairs(seed, **sizes).items():
        for index, lang in enumerate(("en", "de")):
            text = "".join(pair[index] + "\n" for pair in split_pairs)
            (out / f"{split}.{lang}").write_text(text, encoding="utf-8")


def _parse_argv(argv: list[str]) -> tuple[str, int]:
    """Parse `--out DIR [--seed N]`."""
    options = dict(zip(argv[::2], argv[1::2], strict=False))
    if len(argv) % 2 or "--out" not in options or set(options) - {"--out", "--seed"}:
        raise SystemExit("usage: python -m data.toy --out DIR [--seed N]")
    return options["--out"], int(options.get("--seed", "0"))


if __name__ == "__main__":
    main(*_parse_argv(sys.argv[1:]))
