"""Synthetic corpus for the built-in tiny models, and held-out prompts drawn from it.

Everything here is generated from word lists with a seeded :class:`random.Random`, so the training
text and the example prompts are reproducible and need no downloads. There are four kinds of text:

``structured``
    An instruction naming a record type and its field values, then the record as one-line JSON
    with a fixed key order (four schemas, see :data:`SCHEMAS`). Nearly every output token is
    determined by the prompt, so a draft model agrees with the target on most of them.
``creative``
    Stories from a random grammar: the next word is genuinely uncertain, and characters introduced
    in the prompt recur, which a deeper model tracks better than a one-layer draft.
``summarization``
    A passage followed by a "summary" that is a near-copy of some of its sentences, so n-gram
    prompt lookup finds long matches.
``long_context``
    Several paragraphs of prose (600-900 tokens) followed by a structured request.

Use :func:`prompts` for evaluation prompts; they come from a random stream separate from the
training documents (:func:`training_documents`).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Any

#: Prompt categories accepted by :func:`prompts`.
CATEGORIES = ("structured", "creative", "summarization", "long_context")

FIRST_NAMES = (
    "Alice Bruno Clara David Elena Felix Grace Hugo Irene Jonas Karin Louis Maya Nadia Oscar Paula "
    "Quentin Rosa Samuel Tara Ulrich Vera Walter Xenia Yusuf Zoe Amir Bianca Carlos Dora Emil "
    "Fatima"
).split()
LAST_NAMES = (
    "Smith Martin Garcia Muller Rossi Novak Silva Dubois Jensen Kowalski Moreau Fischer Romano "
    "Ortega Larsen Weber "
    "Costa Petit Bauer Ricci Lopez Schmidt Nagy Horvat Lindberg Sato Tanaka Okafor Mensah Haddad "
    "Ibrahim Kaur"
).split()
CITIES = (
    "Lyon Oslo Porto Vienna Prague Dublin Lisbon Madrid Berlin Warsaw Zurich Geneva Milan Turin "
    "Seville Bergen "
    "Krakow Leeds Bristol Cork Ghent Bruges Utrecht Malmo Tampere Riga Tallinn Vilnius Sofia Split "
    "Bologna Nantes"
).split()
ITEMS = (
    "lamp chair desk kettle blender toaster mirror shelf rug pillow "
    "blanket vase clock radio speaker monitor keyboard mouse router printer"
).split()
TIERS = ("bronze", "silver", "gold", "platinum")
CLASSES = ("economy", "premium", "business", "first")
WINDS = ("calm", "light", "moderate", "strong")
SKY = ("clear", "cloudy", "foggy", "stormy", "sunny")

_ADJ = (
    "old young quiet bright tired brave small tall gentle clever silent grey golden hungry "
    "patient lonely curious restless proud careful"
).split()
_NOUN = (
    "baker fox sailor river teacher garden painter lantern farmer bridge dog merchant tower "
    "doctor forest child village soldier harbor poet"
).split()
_PLACE = (
    "market hill shore library square station orchard valley kitchen tavern field chapel road "
    "meadow cellar attic"
).split()
_VERB_I = (
    "waited slept laughed sang wandered listened rested paused smiled whispered watched trembled"
).split()
_VERB_T = (
    "found followed remembered carried painted called greeted watched helped noticed "
    "questioned thanked"
).split()
_ADV = "slowly quietly again softly alone together suddenly carefully happily twice".split()
_TIME = "morning evening night spring winter autumn summer dawn".split()
_OBJ = ("letter basket coin map key candle song story loaf rope stone feather ribbon box").split()
_CONNECT = ("Then", "Later", "After a while", "Meanwhile", "That night", "Soon", "At last")

# ---------------------------------------------------------------------------------------------
# Structured records
# ---------------------------------------------------------------------------------------------

#: JSON Schema (draft 2020-12) of each record type, keyed by schema name.
SCHEMAS: dict[str, dict[str, Any]] = {
    "person": {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "age": {"type": "integer"},
            "city": {"type": "string"},
            "member": {"type": "boolean"},
            "tier": {"enum": list(TIERS)},
        },
        "required": ["name", "age", "city", "member", "tier"],
        "additionalProperties": False,
    },
    "order": {
        "type": "object",
        "properties": {
            "order_id": {"type": "integer"},
            "customer": {"type": "string"},
            "item": {"type": "string"},
            "quantity": {"type": "integer"},
            "unit_price": {"type": "number"},
            "shipped": {"type": "boolean"},
            "date": {"type": "string"},
        },
        "required": ["order_id", "customer", "item", "quantity", "unit_price", "shipped", "date"],
        "additionalProperties": False,
    },
    "booking": {
        "type": "object",
        "properties": {
            "origin": {"type": "string"},
            "destination": {"type": "string"},
            "date": {"type": "string"},
            "passengers": {"type": "integer"},
            "class": {"enum": list(CLASSES)},
            "refundable": {"type": "boolean"},
        },
        "required": ["origin", "destination", "date", "passengers", "class", "refundable"],
        "additionalProperties": False,
    },
    "weather": {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "date": {"type": "string"},
            "high_c": {"type": "integer"},
            "low_c": {"type": "integer"},
            "sky": {"enum": list(SKY)},
            "rain": {"type": "boolean"},
            "wind": {"enum": list(WINDS)},
        },
        "required": ["city", "date", "high_c", "low_c", "sky", "rain", "wind"],
        "additionalProperties": False,
    },
}


def _yes(flag: object) -> str:
    return "yes" if flag else "no"


def _date(rng: random.Random) -> str:
    return f"{rng.randint(2019, 2026)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"


def _person(rng: random.Random) -> tuple[str, dict[str, Any]]:
    rec = {
        "name": f"{rng.choice(FIRST_NAMES)} {rng.choice(LAST_NAMES)}",
        "age": rng.randint(18, 90),
        "city": rng.choice(CITIES),
        "member": rng.random() < 0.5,
        "tier": rng.choice(TIERS),
    }
    head = rng.choice(
        (
            "Extract the person record as JSON:",
            "Return the person as JSON:",
            "Convert this person to a JSON record:",
        )
    )
    text = (
        f'{head} name "{rec["name"]}", age {rec["age"]}, city "{rec["city"]}", '
        f'member {_yes(rec["member"])}, tier "{rec["tier"]}" ->'
    )
    return text, rec


def _order(rng: random.Random) -> tuple[str, dict[str, Any]]:
    rec = {
        "order_id": rng.randint(1000, 9999),
        "customer": f"{rng.choice(FIRST_NAMES)} {rng.choice(LAST_NAMES)}",
        "item": rng.choice(ITEMS),
        "quantity": rng.randint(1, 9),
        "unit_price": round(rng.randint(100, 9999) / 100, 2),
        "shipped": rng.random() < 0.5,
        "date": _date(rng),
    }
    head = rng.choice(
        ("Parse this log line into a JSON order:", "Convert the order log entry to JSON:")
    )
    text = (
        f'{head} order_id={rec["order_id"]} customer="{rec["customer"]}" item={rec["item"]} '
        f"quantity={rec['quantity']} unit_price={rec['unit_price']} "
        f"shipped={_yes(rec['shipped'])} date={rec['date']} ->"
    )
    return text, rec


def _booking(rng: random.Random) -> tuple[str, dict[str, Any]]:
    origin, destination = rng.sample(CITIES, 2)
    rec = {
        "origin": origin,
        "destination": destination,
        "date": _date(rng),
        "passengers": rng.randint(1, 6),
        "class": rng.choice(CLASSES),
        "refundable": rng.random() < 0.5,
    }
    head = rng.choice(("Convert the booking to JSON:", "Extract the flight booking as JSON:"))
    text = (
        f"{head} from={origin} to={destination} date={rec['date']} "
        f"passengers={rec['passengers']} class={rec['class']} "
        f"refundable={_yes(rec['refundable'])} ->"
    )
    return text, rec


def _weather(rng: random.Random) -> tuple[str, dict[str, Any]]:
    low = rng.randint(-10, 22)
    rec = {
        "city": rng.choice(CITIES),
        "date": _date(rng),
        "high_c": low + rng.randint(2, 14),
        "low_c": low,
        "sky": rng.choice(SKY),
        "rain": rng.random() < 0.5,
        "wind": rng.choice(WINDS),
    }
    head = rng.choice(("Record the weather report as JSON:", "Extract the weather as JSON:"))
    text = (
        f"{head} {rec['city']} on {rec['date']}, high {rec['high_c']}, low {rec['low_c']}, "
        f"sky {rec['sky']}, rain {_yes(rec['rain'])}, wind {rec['wind']} ->"
    )
    return text, rec


_RECORDS: dict[str, Callable[[random.Random], tuple[str, dict[str, Any]]]] = {
    "person": _person,
    "order": _order,
    "booking": _booking,
    "weather": _weather,
}


def structured_example(rng: random.Random, schema: str | None = None) -> tuple[str, str]:
    """A structured prompt (ending where the JSON begins) and its completion (``" {...}"``)."""
    name = schema or rng.choice(tuple(_RECORDS))
    prompt, rec = _RECORDS[name](rng)
    return prompt, " " + json.dumps(rec)


def schema_of(prompt: str) -> str:
    """The name of the record schema a structured (or long-context) prompt asks for."""
    tail = prompt.rsplit("\n", 1)[-1]
    for word, name in (("person", "person"), ("order", "order"), ("booking", "booking")):
        if word in tail:
            return name
    return "weather"


# ---------------------------------------------------------------------------------------------
# Prose
# ---------------------------------------------------------------------------------------------


def _character(rng: random.Random) -> str:
    if rng.random() < 0.4:
        return rng.choice(FIRST_NAMES)
    return f"the {rng.choice(_ADJ)} {rng.choice(_NOUN)}"


def _cap(s: str) -> str:
    return s[:1].upper() + s[1:]


def _sentence(rng: random.Random, cast: list[str]) -> str:
    who = rng.choice(cast) if rng.random() < 0.75 else _character(rng)
    other = rng.choice([c for c in cast if c != who] or cast)
    form = rng.randrange(8)
    if form == 0:
        s = f"{who} {rng.choice(_VERB_I)} {rng.choice(_ADV)} near the {rng.choice(_PLACE)}"
    elif form == 1:
        s = f"{who} {rng.choice(_VERB_T)} {other} at the {rng.choice(_PLACE)}"
    elif form == 2:
        s = f"in the {rng.choice(_TIME)}, {who} {rng.choice(_VERB_I)} {rng.choice(_ADV)}"
    elif form == 3:
        s = f"{who} {rng.choice(_VERB_T)} the {rng.choice(_ADJ)} {rng.choice(_OBJ)}"
    elif form == 4:
        s = f"{who} gave {other} a {rng.choice(_OBJ)} and {rng.choice(_VERB_I)}"
    elif form == 5:
        s = f"nobody knew why {who} {rng.choice(_VERB_I)} in the {rng.choice(_PLACE)}"
    elif form == 6:
        s = (
            f"{rng.choice(_CONNECT).lower()}, {who} and {other} {rng.choice(_VERB_I)} "
            f"{rng.choice(_ADV)}"
        )
    else:
        s = f"{who} {rng.choice(_VERB_T)} the {rng.choice(_OBJ)} by the {rng.choice(_PLACE)}"
    return _cap(s) + "."


def _paragraph(rng: random.Random, cast: list[str], n: int) -> str:
    return " ".join(_sentence(rng, cast) for _ in range(n))


def _cast(rng: random.Random) -> list[str]:
    cast: list[str] = []
    while len(cast) < 2:
        c = _character(rng)
        if c not in cast:
            cast.append(c)
    return cast


def creative_example(rng: random.Random) -> tuple[str, str]:
    """A story request and a continuation from the random grammar."""
    cast = _cast(rng)
    head = rng.choice(
        (
            f"Write a short story about {cast[0]} and {cast[1]}.\nStory:",
            f"Tell a story in which {cast[0]} meets {cast[1]}.\nStory:",
            f"Continue the story.\n{_sentence(rng, cast)}",
        )
    )
    return head, " " + _paragraph(rng, cast, rng.randint(4, 8))


def _near_copy(rng: random.Random, sentence: str) -> str:
    """Drop or swap a word or two, keeping most of the sentence."""
    words = sentence.split()
    for _ in range(rng.randint(0, 2)):
        i = rng.randrange(len(words))
        w = words[i].rstrip(".,")
        if w in _ADJ:
            del words[i]
        elif w in _ADV:
            words[i] = words[i].replace(w, rng.choice(_ADV))
    return " ".join(words)


def summarization_example(rng: random.Random) -> tuple[str, str]:
    """A passage to summarize and a summary that near-copies some of its sentences."""
    cast = _cast(rng)
    sentences = [_sentence(rng, cast) for _ in range(rng.randint(4, 7))]
    picked = sorted(rng.sample(range(len(sentences)), k=min(len(sentences), rng.randint(2, 3))))
    summary = " ".join(_near_copy(rng, sentences[i]) for i in picked)
    head = rng.choice(("Summarize the passage.", "Write a short summary of the text."))
    return f"{head}\nPassage: {' '.join(sentences)}\nSummary:", " " + summary


def _long_prose(rng: random.Random, words: int) -> str:
    paragraphs: list[str] = []
    count = 0
    while count < words:
        p = _paragraph(rng, _cast(rng), rng.randint(4, 7))
        paragraphs.append(p)
        count += len(p.split())
    return "\n\n".join(paragraphs)


def long_context_example(rng: random.Random, words: int | None = None) -> tuple[str, str]:
    """Several paragraphs of prose then a structured request (about 600-900 tokens in all)."""
    prose = _long_prose(rng, words or rng.randint(280, 400))
    prompt, completion = structured_example(rng)
    return f"{prose}\n\n{prompt}", completion


_EXAMPLES: dict[str, Callable[[random.Random], tuple[str, str]]] = {
    "structured": structured_example,
    "creative": creative_example,
    "summarization": summarization_example,
    "long_context": long_context_example,
}

#: Share of each kind of document in the training corpus.
TRAINING_MIX = {"structured": 0.6, "creative": 0.18, "summarization": 0.18, "long_context": 0.04}


def _heldout_rng(category: str, seed: int) -> random.Random:
    """The held-out random stream of a category (the training corpus never draws from it)."""
    return random.Random(f"heldout/{category}/{seed}")


def examples(category: str, n: int, seed: int = 0) -> list[tuple[str, str]]:
    """``n`` held-out (prompt, reference completion) pairs of a category.

    Drawn from a random stream that the training corpus does not use, so a seed gives the same
    pairs on every machine.
    """
    if category not in _EXAMPLES:
        raise ValueError(f"unknown category {category!r}; expected one of {CATEGORIES}")
    rng = _heldout_rng(category, seed)
    return [_EXAMPLES[category](rng) for _ in range(n)]


def long_context_prompts(n: int, words: int, seed: int = 0) -> list[str]:
    """``n`` held-out long-context prompts with about ``words`` words of prose before the
    request (the training documents have 280-400)."""
    rng = _heldout_rng("long_context", seed)
    return [long_context_example(rng, words)[0] for _ in range(n)]


def prompts(category: str, n: int, seed: int = 0) -> list[str]:
    """``n`` held-out prompts of a category (``structured``, ``creative``, ``summarization``,
    ``long_context``), as a user would send them: a structured prompt ends where its JSON begins.
    """
    return [p for p, _ in examples(category, n, seed)]


def training_documents(n: int, seed: int = 0) -> list[str]:
    """``n`` training documents (prompt + completion), mixed as in :data:`TRAINING_MIX`."""
    rng = random.Random(f"train/{seed}")
    kinds = list(TRAINING_MIX)
    weights = [TRAINING_MIX[k] for k in kinds]
    docs = []
    for _ in range(n):
        kind = rng.choices(kinds, weights)[0]
        prompt, completion = _EXAMPLES[kind](rng)
        docs.append(prompt + completion)
    return docs
