"""The held-out split: colour-shape combinations never seen in training.

Six ``(colour, shape)`` pairs, two per shape and each of a different colour, are held out.
Every colour still appears in training with at least two shapes and every shape with six
colours, so a model can only draw, say, an orange triangle by composing "orange" and
"triangle" learnt apart. The ``"train"`` split never names (or draws) a held-out pair; the
``"heldout"`` split names at least one in every caption.
"""

from __future__ import annotations

import numpy as np

from models.shapes.captions import RELATIONS, ObjectSpec, ParsedCaption, compose_caption
from models.shapes.vocab import COLOURS, POSITIONS, SHAPES, SIZES

SPLITS: tuple[str, ...] = ("train", "heldout")
HELDOUT_PAIRS: frozenset[tuple[str, str]] = frozenset(
    {
        ("magenta", "circle"),
        ("blue", "circle"),
        ("cyan", "square"),
        ("white", "square"),
        ("orange", "triangle"),
        ("green", "triangle"),
    }
)
ALL_PAIRS: tuple[tuple[str, str], ...] = tuple((c, s) for c in COLOURS for s in SHAPES)
TRAIN_PAIRS: tuple[tuple[str, str], ...] = tuple(p for p in ALL_PAIRS if p not in HELDOUT_PAIRS)

#: Template families and how often each is drawn.
FAMILIES: dict[str, float] = {"single": 0.3, "several": 0.25, "count": 0.2, "relation": 0.25}


def check_split(split: str) -> str:
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")
    return split


def _maybe(rng: np.random.Generator, p: float, values: tuple[str, ...]) -> str | None:
    return str(values[rng.integers(len(values))]) if rng.random() < p else None


def _draw_pairs(rng: np.random.Generator, split: str, k: int) -> list[tuple[str, str]]:
    """``k`` distinct pairs allowed in ``split`` (at least one held out for "heldout")."""
    pool = TRAIN_PAIRS if split == "train" else ALL_PAIRS
    while True:
        picks = [pool[i] for i in rng.choice(len(pool), size=k, replace=False)]
        if split == "train" or any(p in HELDOUT_PAIRS for p in picks):
            return picks


def sample_caption(
    rng: np.random.Generator, split: str = "train", *, family: str | None = None
) -> ParsedCaption:
    """Draw a template family (or take ``family``) and fill it with attributes of ``split``."""
    check_split(split)
    if family is None:
        names = tuple(FAMILIES)
        family = names[rng.choice(len(names), p=np.array(list(FAMILIES.values())))]
    elif family not in FAMILIES:
        raise ValueError(f"unknown template family {family!r}; expected one of {tuple(FAMILIES)}")
    if family == "single":
        ((colour, shape),) = _draw_pairs(rng, split, 1)
        spec = ObjectSpec(
            colour, shape, size=_maybe(rng, 0.5, SIZES), position=_maybe(rng, 0.5, POSITIONS)
        )
        return ParsedCaption((spec,))
    if family == "several":
        k = 2 if rng.random() < 0.6 else 3
        pairs = _draw_pairs(rng, split, k)
        return ParsedCaption(
            tuple(ObjectSpec(c, s, size=_maybe(rng, 0.3, SIZES)) for c, s in pairs)
        )
    if family == "count":
        number = 2 if rng.random() < 0.5 else 3
        extra = number == 2 and rng.random() < 0.5
        pairs = _draw_pairs(rng, split, 2 if extra else 1)
        specs = [ObjectSpec(*pairs[0], count=number, size=_maybe(rng, 0.25, SIZES))]
        if extra:
            specs.append(ObjectSpec(*pairs[1], size=_maybe(rng, 0.3, SIZES)))
        return ParsedCaption(tuple(specs))
    pairs = _draw_pairs(rng, split, 2)
    relation = RELATIONS[rng.integers(len(RELATIONS))]
    pair = tuple(ObjectSpec(c, s, size=_maybe(rng, 0.3, SIZES)) for c, s in pairs)
    return ParsedCaption(pair, relation)


#: Seed stream of :func:`eval_prompts` per split (the held-out list predates the option).
_PROMPT_STREAMS: dict[str, int] = {"heldout": 0x5EED, "train": 0x7EA1}


def eval_prompts(n: int = 200, seed: int = 0, split: str = "heldout") -> list[str]:
    """``n`` distinct captions of ``split``, the same for the same ``(n, seed, split)``.

    ``"heldout"`` (the default) is what ``benchmarks/dit_eval.py`` judges: every caption
    names a colour-shape pair never seen in training. ``"train"`` draws captions the
    model may have seen, to measure how much of the gap is composition. The list for a
    smaller ``n`` is a prefix of the list for a larger one.
    """
    check_split(split)
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    rng = np.random.default_rng([seed, _PROMPT_STREAMS[split]])
    prompts: dict[str, None] = {}
    while len(prompts) < n:
        prompts[compose_caption(sample_caption(rng, split))] = None
    return list(prompts)
