"""Token grounding: supervise where each object's words are attended (a training signal).

The denoising loss alone barely rewards word order: at high noise, where the layout is
decided, knowing that "a red circle to the left of a white square" puts red on the left
lowers the error of the predicted mean image only a little, and the model ignores it
(``benchmarks/dit_binding.py``). Following TokenCompose (Wang et al. 2024), the
renderer's exact object masks give a direct signal: the cross-attention of an object's
words (its size, colour and shape) should fall on the patches that object covers.

For a token ``j`` of object ``o`` with patch mask ``M_o`` (1 where the object touches a
patch) and the head-averaged cross-attention ``A[p, j]`` of patch ``p`` to token ``j``::

    L_token = mean over grounded tokens j and blocks of (1 - sum_p A[p, j] M_o[p] / sum_p A[p, j]) ** 2

Only the training step uses it; sampling is unchanged. Measured (README, "Why relations
fail"): at weight 0.02 it put the attention on the objects but did not teach word order,
and it lowered image quality; it is off by default.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from models.shapes.captions import ParsedCaption, compose_caption, object_phrase, parse_caption
from models.shapes.render import object_mask
from models.shapes.vocab import Scene

#: A character span ``[start, end)`` of a caption.
Span = tuple[int, int]


def phrase_word_spans(parsed: ParsedCaption) -> list[list[Span]]:
    """Character spans, in ``compose_caption(parsed)``, of each object's grounded words.

    The grounded words of an object phrase are its size, colour and shape (plural
    included); determiners, numbers and place words are not an object's pixels.

    Returns:
        One list of spans per ``parsed.objects`` entry, in order.
    """
    caption = compose_caption(parsed)
    cursor, spans = 0, []
    for spec in parsed.objects:
        phrase = object_phrase(spec)
        start = caption.index(phrase, cursor)
        cursor = start + len(phrase)
        grounded = {w for w in (spec.size, spec.colour) if w is not None}
        noun = spec.shape + ("s" if spec.count > 1 else "")
        words, offset = [], start
        for word in phrase.split(" "):
            if word in grounded or word == noun:
                words.append((offset, offset + len(word)))
            offset += len(word) + 1
        spans.append(words)
    return spans


def phrase_masks(scene: Scene, parsed: ParsedCaption, patch_size: int) -> Tensor:
    """Which patches each object phrase covers.

    ``layout`` lists a scene's objects phrase by phrase (``count`` of each), so the
    ``k``-th phrase owns the next ``count`` objects.

    Shape:
        ``(num_phrases, (32 / patch_size) ** 2)`` float32 in ``{0, 1}``, row-major
        patches as :func:`~models.dit.model.patchify` orders them.
    """
    counts = [spec.count for spec in parsed.objects]
    if sum(counts) != len(scene.objects):
        raise ValueError(
            f"the caption names {sum(counts)} objects, the scene holds {len(scene.objects)}"
        )
    masks, index = [], 0
    for count in counts:
        covered = np.zeros_like(object_mask(scene.objects[0]))
        for obj in scene.objects[index : index + count]:
            covered |= object_mask(obj)
        index += count
        size = covered.shape[0] // patch_size
        patches = covered.reshape(size, patch_size, size, patch_size).any(axis=(1, 3))
        masks.append(torch.from_numpy(patches.reshape(-1).astype(np.float32)))
    return torch.stack(masks)


def token_targets(
    token_spans: Sequence[Span | None],
    word_spans: Sequence[Sequence[Span]],
    masks: Tensor,
    length: int,
) -> tuple[Tensor, Tensor]:
    """Each token's target patch mask: the mask of the object whose grounded word it is in.

    Args:
        token_spans: the character span of every token of the caption (``None`` for
            special tokens), as the text encoder splits it.
        word_spans: :func:`phrase_word_spans` of the caption.
        masks: :func:`phrase_masks`, ``(num_phrases, T)``.
        length: the padded token length ``L`` of the batch.

    Returns:
        ``targets (L, T)`` and ``grounded (L,)`` bool (tokens inside a grounded word).
    """
    targets = torch.zeros(length, masks.shape[1])
    grounded = torch.zeros(length, dtype=torch.bool)
    for j, span in enumerate(token_spans[:length]):
        if span is None:
            continue
        for phrase, spans in enumerate(word_spans):
            if any(start <= span[0] and span[1] <= end for start, end in spans):
                targets[j], grounded[j] = masks[phrase], True
    return targets, grounded


def batch_targets(
    scenes: Sequence[Scene],
    token_spans: Sequence[Sequence[Span | None]],
    patch_size: int,
    length: int,
    *,
    exchange: bool = False,
) -> tuple[Tensor, Tensor]:
    """:func:`token_targets` of a batch of scenes, each read from its own caption.

    Args:
        scenes: the batch's scenes.
        token_spans: per scene, the encoder's token spans of its caption.
        patch_size: the model's patch side.
        length: the padded token length ``L``.
        exchange: give each phrase the masks in reverse order (for two-object captions,
            each object's words get the other object's patches: a contrast for probes).

    Returns:
        ``targets (B, L, T)`` and ``grounded (B, L)``.
    """
    targets, grounded = [], []
    for scene, spans in zip(scenes, token_spans, strict=True):
        parsed = parse_caption(scene.caption)
        masks = phrase_masks(scene, parsed, patch_size)
        target, mask = token_targets(
            spans, phrase_word_spans(parsed), masks.flip(0) if exchange else masks, length
        )
        targets.append(target)
        grounded.append(mask)
    return torch.stack(targets), torch.stack(grounded)


def grounding_loss(attention: Sequence[Tensor], targets: Tensor, grounded: Tensor) -> Tensor:
    """TokenCompose's token loss, averaged over grounded tokens and attention maps.

    Args:
        attention: per block, ``(B, T, L)`` cross-attention probabilities (each patch's
            row sums to 1 over the tokens), averaged over heads.
        targets: ``(B, L, T)`` patch masks; grounded: ``(B, L)`` bool.

    Returns:
        A scalar; 0 when no token is grounded.
    """
    weights = grounded.float()
    if not weights.any():
        return attention[0].sum() * 0.0
    losses = []
    for maps in attention:
        maps = maps.float().transpose(1, 2)  # (B, L, T)
        inside = (maps * targets).sum(-1)
        total = maps.sum(-1).clamp_min(1e-8)
        per_token = (1.0 - inside / total) ** 2  # (B, L)
        losses.append((per_token * weights).sum() / weights.sum())
    return torch.stack(losses).mean()
