"""Generated English-like documents of our own, for examples, tests and the data benchmark:
no corpus is downloaded. Seeded, so the same arguments always give the same documents, with a
share of exact copies, near copies and junk for the filters and dedup to find.

    python -m node.data.synthetic --documents 2000 --out corpus.jsonl
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Iterator
from pathlib import Path

ADJECTIVES = [
    "quiet",
    "bright",
    "old",
    "young",
    "green",
    "distant",
    "careful",
    "sudden",
    "gentle",
    "heavy",
    "narrow",
    "ancient",
    "wooden",
    "silver",
    "patient",
    "curious",
    "broken",
    "hidden",
    "golden",
    "northern",
    "rapid",
    "modest",
    "steady",
]
NOUNS = [
    "river",
    "engine",
    "garden",
    "teacher",
    "market",
    "harbour",
    "library",
    "signal",
    "village",
    "forest",
    "bridge",
    "lantern",
    "farmer",
    "museum",
    "orchard",
    "window",
    "compass",
    "kitchen",
    "mountain",
    "student",
    "ledger",
    "valley",
    "station",
    "painter",
    "island",
    "council",
    "machine",
    "story",
]
VERBS = [
    "follows",
    "repairs",
    "watches",
    "builds",
    "carries",
    "measures",
    "paints",
    "remembers",
    "crosses",
    "opens",
    "studies",
    "guards",
    "finds",
    "describes",
    "shapes",
    "joins",
    "counts",
    "visits",
]
PLACES = [
    "the coast",
    "the old quarter",
    "the northern hills",
    "the railway yard",
    "the town square",
    "the lake shore",
    "the east gate",
    "the upper valley",
    "the market street",
    "the quiet harbour",
]
CONNECTIVES = ("Then", "Later", "Meanwhile", "At dawn", "In spring", "By evening", "Still")


def sentence(rng: random.Random) -> str:
    subject = f"the {rng.choice(ADJECTIVES)} {rng.choice(NOUNS)}"
    thing = f"the {rng.choice(ADJECTIVES)} {rng.choice(NOUNS)}"
    text = f"{subject} {rng.choice(VERBS)} {thing} near {rng.choice(PLACES)}"
    if rng.random() < 0.3:
        text = f"{rng.choice(CONNECTIVES)} {text}"
    return text[0].upper() + text[1:] + "."


def document(rng: random.Random) -> str:
    return " ".join(sentence(rng) for _ in range(rng.randint(3, 12)))


def junk(rng: random.Random) -> str:
    """Text a quality filter should drop: a table of numbers, or one line over and over."""
    if rng.random() < 0.5:
        return " ".join(f"{rng.randint(0, 99999)}|{rng.random():.4f}" for _ in range(30))
    line = sentence(rng)
    return "\n".join([line] * rng.randint(6, 12))


def near_copy(rng: random.Random, text: str) -> str:
    """`text` with one word in fifty changed: a near duplicate for MinHash."""
    words = text.split(" ")
    for _ in range(max(1, len(words) // 50)):
        words[rng.randrange(len(words))] = rng.choice(NOUNS)
    return " ".join(words)


def documents(
    count: int,
    seed: int = 0,
    duplicates: float = 0.0,
    near_duplicates: float = 0.0,
    junk_share: float = 0.0,
    memory: int = 1000,
) -> Iterator[str]:
    """`count` documents; each is, with the given probabilities, an exact copy or a near copy
    of one of the last `memory` fresh documents, or junk; otherwise fresh text."""
    rng = random.Random(seed)
    recent: list[str] = []
    for _ in range(count):
        roll = rng.random()
        if recent and roll < duplicates:
            yield rng.choice(recent)
        elif recent and roll < duplicates + near_duplicates:
            yield near_copy(rng, rng.choice(recent))
        elif roll < duplicates + near_duplicates + junk_share:
            yield junk(rng)
        else:
            text = document(rng)
            recent.append(text)
            if len(recent) > memory:
                recent.pop(rng.randrange(len(recent)))
            yield text


def write_jsonl(path: Path, texts: Iterator[str], field: str = "text") -> int:
    """Write one JSON object per line; returns the bytes written."""
    size = 0
    with path.open("w") as f:
        for text in texts:
            line = json.dumps({field: text}) + "\n"
            f.write(line)
            size += len(line)
    return size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, default=2000, help="how many documents")
    parser.add_argument("--seed", type=int, default=0, help="generator seed")
    parser.add_argument("--duplicates", type=float, default=0.05, help="share of exact copies")
    parser.add_argument("--near", type=float, default=0.05, help="share of near copies")
    parser.add_argument("--junk", type=float, default=0.05, help="share of junk documents")
    parser.add_argument("--out", type=Path, required=True, help="JSONL file to write")
    args = parser.parse_args()
    texts = documents(args.documents, args.seed, args.duplicates, args.near, args.junk)
    size = write_jsonl(args.out, texts)
    print(f"{args.documents} documents, {size} bytes written to {args.out}")


if __name__ == "__main__":
    main()
