"""Is word order readable from MiniLM's token states, linearly or only through a nonlinearity?

For relation captions ("a red circle to the left of a white square"), each object's
colour token is labelled 1 when that object is the left / upper one of the relation
(the first object of "left of" / "above", the second of "right of" / "below"), else 0.
A linear classifier and a one-hidden-layer MLP are fit on the token states of 80% of
the captions and scored on the rest.

The DiT's cross-attention keys are linear in these states (plus a position per token
index); where the linear probe falls short of the MLP, the keys cannot carry "I am the
left object" and the model cannot place relation objects by attending to them. That is
what ``DiTConfig.text_mlp`` is for.

    .venv/bin/python benchmarks/text_order_probe.py
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from models.dit.grounding import phrase_word_spans  # noqa: E402
from models.shapes import compose_caption, parse_caption, sample_caption  # noqa: E402

#: Relations whose first object is the left / upper one.
LEADING = ("left of", "above")


def colour_token_features(encoder, captions: list[str]) -> tuple[Tensor, Tensor]:
    """Mean state of each object's colour word pieces ``(2N, E)`` and the labels ``(2N,)``."""
    cond = encoder.encode(captions)
    features, labels = [], []
    for i, (caption, spans) in enumerate(zip(captions, encoder.token_spans(captions), strict=True)):
        parsed = parse_caption(caption)
        for k, (spec, words) in enumerate(
            zip(parsed.objects, phrase_word_spans(parsed), strict=True)
        ):
            start, end = next(s for s in words if caption[s[0] : s[1]] == spec.colour)
            pieces = [j for j, s in enumerate(spans) if s and start <= s[0] and s[1] <= end]
            features.append(cond.tokens[i, pieces].mean(0))
            labels.append(float((parsed.relation in LEADING) == (k == 0)))
    return torch.stack(features), torch.tensor(labels)


def fit_and_score(
    model: torch.nn.Module, x: Tensor, y: Tensor, split: int, steps: int
) -> tuple[float, float]:
    """Full-batch Adam on the logistic loss; accuracy on the fit part and the held part."""
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, weight_decay=1e-4)
    for _ in range(steps):
        optimizer.zero_grad()
        logits = model(x[:split]).squeeze(-1)
        torch.nn.functional.binary_cross_entropy_with_logits(logits, y[:split]).backward()
        optimizer.step()
    with torch.no_grad():
        correct = (model(x).squeeze(-1) > 0).float() == y
    return float(correct[:split].float().mean()), float(correct[split:].float().mean())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--captions", type=int, default=3000, help="relation captions drawn")
    parser.add_argument("--steps", type=int, default=1500, help="optimisation steps per probe")
    parser.add_argument("--hidden", type=int, default=256, help="MLP hidden width")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.captions < 10 or args.steps < 1 or args.hidden < 1:
        parser.error("--captions must be >= 10, --steps and --hidden >= 1")

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from models.text_encoder import MiniLMEncoder

    rng = np.random.default_rng([args.seed, 0x0DE])
    drawn = (
        compose_caption(sample_caption(rng, "train", family="relation"))
        for _ in range(args.captions)
    )
    captions = list(dict.fromkeys(drawn))
    x, y = colour_token_features(MiniLMEncoder(), captions)
    split = int(0.8 * len(captions)) * 2  # both objects of a caption on the same side
    x = (x - x[:split].mean(0)) / (x[:split].std(0) + 1e-6)
    print(f"{len(captions)} distinct relation captions, {len(y)} colour tokens; fit on 80%")
    print(f"{'probe':>8} {'fit acc':>8} {'held acc':>9}")
    torch.manual_seed(args.seed)
    probes = {
        "linear": torch.nn.Linear(x.shape[1], 1),
        "mlp": torch.nn.Sequential(
            torch.nn.Linear(x.shape[1], args.hidden),
            torch.nn.GELU(),
            torch.nn.Linear(args.hidden, 1),
        ),
    }
    for name, model in probes.items():
        fit, held = fit_and_score(model, x, y, split, args.steps)
        print(f"{name:>8} {fit:8.3f} {held:9.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
