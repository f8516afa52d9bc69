"""Seeds: one range for the API, the CLI and the pipeline, and one way to draw a random one."""

from __future__ import annotations

import pytest

from models.diffusion import random as seeding
from models.diffusion.random import MAX_SEED, consecutive_seeds, random_seed
from service.cli import main as cli_main


def test_consecutive_seeds_count_up_from_the_first():
    assert consecutive_seeds(41, 3) == [41, 42, 43]
    assert consecutive_seeds(0, 1) == [0]


def test_consecutive_seeds_wrap_past_the_largest_seed_to_zero():
    assert consecutive_seeds(MAX_SEED - 1, 4) == [MAX_SEED - 1, MAX_SEED, 0, 1]


@pytest.mark.parametrize("draw", [0, MAX_SEED])
def test_a_random_first_seed_covers_the_whole_range(monkeypatch, draw):
    bounds = []

    def randbelow(bound: int) -> int:
        bounds.append(bound)
        return draw

    monkeypatch.setattr(seeding.secrets, "randbelow", randbelow)
    assert random_seed() == draw
    assert consecutive_seeds(None, 2) == [draw, (draw + 1) % (MAX_SEED + 1)]
    assert bounds == [MAX_SEED + 1, MAX_SEED + 1]


def test_random_seeds_lie_in_range():
    assert all(0 <= random_seed() <= MAX_SEED for _ in range(100))


@pytest.mark.parametrize(
    "first,count,match", [(-1, 1, "seed"), (MAX_SEED + 1, 1, "seed"), (0, 0, "count")]
)
def test_consecutive_seeds_reject_out_of_range_arguments(first, count, match):
    with pytest.raises(ValueError, match=match):
        consecutive_seeds(first, count)


@pytest.mark.parametrize("seed", ["-1", str(MAX_SEED + 1)])
def test_the_generate_cli_rejects_a_seed_out_of_range(seed):
    with pytest.raises(SystemExit, match=f"--seed: seed must be in \\[0, {MAX_SEED}\\]"):
        cli_main(
            ["generate", "a red circle", "--seed", seed, "--checkpoint", "missing.safetensors"]
        )
