"""TextToImage: loading, seeds, guidance, negative prompts, errors; the generate CLI."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from models.diffusion import classifier_free_guidance
from models.dit.model import DiT
from models.dit.pipeline import (
    DEFAULT_CHECKPOINT,
    TextToImage,
    agreement,
    within_bf16_tolerance,
)
from models.hub import WeightsNotFoundError
from models.text_encoder import HashedWordEncoder
from service.cli import main as cli_main

REPO_WEIGHTS = Path(__file__).resolve().parents[3] / "weights"
PROMPTS = ["a red circle", "two blue squares", "a small white triangle in the top left"]


pytestmark = pytest.mark.usefixtures("single_thread")


@pytest.fixture(scope="module")
def checkpoint(tiny_dit_checkpoint) -> Path:
    return tiny_dit_checkpoint


@pytest.fixture(scope="module")
def pipe(checkpoint) -> TextToImage:
    return TextToImage.from_checkpoint(checkpoint, default_steps=4)


def test_from_pretrained_searches_the_folders_in_order(checkpoint, tmp_path):
    pipe = TextToImage.from_pretrained([tmp_path, checkpoint.parent])
    assert pipe.source == str(checkpoint)
    assert isinstance(pipe.encoder, HashedWordEncoder)
    assert pipe.describe()["trained_steps"] == 7


def test_from_pretrained_names_the_missing_file(tmp_path):
    with pytest.raises(WeightsNotFoundError, match=DEFAULT_CHECKPOINT):
        TextToImage.from_pretrained([tmp_path])


def test_generate_shape_and_range(pipe):
    images = pipe.generate(PROMPTS, seeds=[0, 1, 2])
    assert images.shape == (3, 3, 32, 32) and images.dtype == torch.float32
    assert images.min() >= 0 and images.max() <= 1


def test_same_seed_same_image_whatever_the_batch(pipe):
    batch = pipe.generate(PROMPTS, seeds=[5, 6, 7])
    again = pipe.generate(PROMPTS, seeds=[5, 6, 7])
    assert torch.equal(batch, again)
    alone = pipe.generate(PROMPTS[1:2], seeds=[6])
    torch.testing.assert_close(alone[0], batch[1], rtol=1e-4, atol=1e-4)
    other = pipe.generate(PROMPTS[1:2], seeds=[8])
    assert not torch.allclose(other[0], batch[1])


@pytest.mark.parametrize("sampler", TextToImage.samplers)
def test_every_sampler_is_reproducible(pipe, sampler):
    a = pipe.generate(PROMPTS[:1], seeds=[3], sampler=sampler, steps=3)
    b = pipe.generate(PROMPTS[:1], seeds=[3], sampler=sampler, steps=3)
    assert torch.equal(a, b)


def test_no_sampler_means_the_default_one(pipe):
    default = pipe.generate(PROMPTS[:1], seeds=[4], steps=3)
    named = pipe.generate(PROMPTS[:1], seeds=[4], steps=3, sampler=pipe.default_sampler)
    assert torch.equal(default, named)
    other = next(name for name in pipe.samplers if name != pipe.default_sampler)
    assert not torch.equal(default, pipe.generate(PROMPTS[:1], seeds=[4], steps=3, sampler=other))


def test_guidance_one_ignores_the_negative_prompt(pipe):
    plain = pipe.generate(PROMPTS[:2], seeds=[1, 2], guidance_scale=1.0)
    negative = pipe.generate(
        PROMPTS[:2], seeds=[1, 2], guidance_scale=1.0, negative_prompts=["blue", None]
    )
    assert torch.equal(plain, negative)


def test_negative_prompt_replaces_the_null_condition_per_item(pipe):
    plain = pipe.generate(PROMPTS[:2], seeds=[1, 2], guidance_scale=4.0)
    negative = pipe.generate(
        PROMPTS[:2], seeds=[1, 2], guidance_scale=4.0, negative_prompts=["a blue square", None]
    )
    assert not torch.allclose(plain[0], negative[0])
    torch.testing.assert_close(plain[1], negative[1], rtol=1e-4, atol=1e-4)


def test_guidance_changes_the_image(pipe):
    weak = pipe.generate(PROMPTS[:1], seeds=[4], guidance_scale=1.0)
    strong = pipe.generate(PROMPTS[:1], seeds=[4], guidance_scale=6.0)
    assert not torch.allclose(weak, strong)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"prompts": []}, "prompt"),
        ({"seeds": [1, 2]}, "seeds"),
        ({"negative_prompts": [None, None]}, "negative"),
        ({"steps": 0}, "steps"),
        ({"steps": 1001}, "steps"),
        ({"guidance_scale": -1.0}, "guidance"),
        ({"sampler": "euler"}, "sampler"),
    ],
)
def test_generate_rejects_bad_arguments(pipe, kwargs, match):
    arguments = {"prompts": ["a red circle"], **kwargs}
    with pytest.raises(ValueError, match=match):
        pipe.generate(arguments.pop("prompts"), **arguments)


def test_describe_reports_defaults_and_samplers(pipe):
    info = pipe.describe()
    assert info["samplers"][0] == info["default_sampler"] == "ddpm"
    assert set(info["samplers"]) == {"ddpm", "ddim", "dpm++2m"}
    assert info["default_steps"] == 4 and info["config"]["width"] == 32


def test_generate_cli_writes_one_png_per_seed(checkpoint, tmp_path, capsys):
    args = ["generate", "a red circle", "-n", "2", "--seed", "10", "--steps", "2"]
    args += ["--checkpoint", str(checkpoint), "-o", str(tmp_path), "--negative", "blue"]
    assert cli_main(args) == 0
    written = sorted(tmp_path.glob("*.png"))
    assert [p.name for p in written] == ["seed10.png", "seed11.png"]
    assert Image.open(written[0]).size == (32, 32)
    assert str(written[0]) in capsys.readouterr().out
    named = tmp_path / "named"
    args[args.index("-o") + 1] = str(named)
    assert cli_main([*args, "--sampler", TextToImage.default_sampler]) == 0
    assert (named / "seed10.png").read_bytes() == written[0].read_bytes()


@pytest.mark.skipif(
    not (REPO_WEIGHTS / DEFAULT_CHECKPOINT).is_file(), reason="default checkpoint not trained yet"
)
def test_default_checkpoint_loads_and_generates():
    pipe = TextToImage.from_pretrained([REPO_WEIGHTS])
    assert pipe.describe()["text_encoder"] == "MiniLMEncoder"
    assert (REPO_WEIGHTS / DEFAULT_CHECKPOINT).stat().st_size < 25e6
    images = pipe.generate(["a red circle"], seeds=[0], steps=4)
    assert images.shape == (1, 3, 32, 32)
    assert torch.equal(images, pipe.generate(["a red circle"], seeds=[0], steps=4))


def test_one_object_prompts_are_drawn_the_same_with_or_without_planning(pipe):
    prompts = ["a red circle", "a small white triangle in the top left", "not in the grammar"]
    planned = pipe.generate(prompts, seeds=[1, 2, 3], plan_layout=True)
    plain = pipe.generate(prompts, seeds=[1, 2, 3], plan_layout=False)
    torch.testing.assert_close(planned, plain, rtol=1e-5, atol=1e-5)


def test_planned_regions_split_each_image_into_its_objects(pipe):
    prompts = ["a red circle", "a blue square to the left of a white circle", "three red squares"]
    regions = pipe.regions(prompts, [None, "green", None], [0, 1, 2], plan_layout=True)
    assert regions.owner.tolist() == [0, 1, 1, 2, 2, 2]
    # weights are a partition of unity per image; a region hides exactly the other objects
    totals = torch.zeros(3, 1, 32, 32).index_add_(0, regions.owner, regions.weight)
    torch.testing.assert_close(totals, torch.ones_like(totals))
    cells = (regions.weight == 1) & (regions.hide == 0)
    for m in range(1, 6):
        others = [k for k in range(6) if regions.owner[k] == regions.owner[m] and k != m]
        assert torch.equal(regions.hide[m].bool(), cells[others].any(dim=0))
    assert not regions.hide[0].any() and regions.weight[0].eq(1).all()
    # the negative prompt guides every region of its image; the null condition the rest
    cond, uncond = regions.cond
    assert len(cond) == len(uncond) == 6
    null = pipe.model.null_condition(1)
    assert torch.equal(uncond.pooled[0], null.pooled[0])
    assert not torch.equal(uncond.pooled[1], null.pooled[0])
    assert torch.equal(uncond.pooled[1], uncond.pooled[2])


def test_planning_changes_multi_object_images_and_keeps_seeds_reproducible(pipe):
    prompt = ["a blue square to the left of a white circle"]
    planned = pipe.generate(prompt, seeds=[3], plan_layout=True)
    assert not torch.allclose(planned, pipe.generate(prompt, seeds=[3], plan_layout=False))
    assert torch.equal(planned, pipe.generate(prompt, seeds=[3]))
    assert pipe.describe()["plan_layout"] is True


def test_generate_cli_can_turn_planning_off(checkpoint, pipe, tmp_path):
    prompt = "a blue square to the left of a white circle"
    args = ["generate", prompt, "--seed", "3", "--steps", "4", "--checkpoint", str(checkpoint)]
    for flag, plan_layout in (([], True), (["--no-plan-layout"], False)):
        folder = tmp_path / str(plan_layout)
        assert cli_main([*args, *flag, "-o", str(folder)]) == 0
        written = np.asarray(Image.open(folder / "seed3.png"))
        image = pipe.generate([prompt], seeds=[3], plan_layout=plan_layout)[0]
        expected = (image.permute(1, 2, 0) * 255).round().byte().numpy()
        np.testing.assert_array_equal(written, expected)


@pytest.mark.parametrize("plan_layout", [True, False])
def test_a_free_prompt_is_drawn_as_its_understood_caption(pipe, plan_layout):
    free = ["A big red circle, to the left of a tiny blue square.", "a red circle behind a dog"]
    grammar = ["a large red circle to the left of a small blue square", "a red circle and a dog"]
    assert [pipe.understand(p).caption for p in free] == grammar
    assert pipe.understand(free[1]).ignored == ("behind",)
    drawn = pipe.generate(free, seeds=[3, 4], plan_layout=plan_layout)
    assert torch.equal(drawn, pipe.generate(grammar, seeds=[3, 4], plan_layout=plan_layout))


def test_a_prompt_nothing_of_which_is_understood_is_drawn_as_it_is(pipe, monkeypatch):
    prompt = "big and blue"  # no thing named: nothing to read it onto
    assert pipe.understand(prompt).caption is None
    encoded: list[str] = []
    encode = pipe.encoder.encode
    monkeypatch.setattr(
        pipe.encoder, "encode", lambda texts: encoded.extend(texts) or encode(texts)
    )
    pipe.generate([prompt, "five red circles"], seeds=[0, 1], steps=1)
    assert encoded[:2] == [prompt, "a red circle"]


def test_the_network_runs_in_inference_mode(pipe):
    """``sample`` is the one layer that sets it: the worker and the samplers do not."""
    seen: list[bool] = []
    hook = pipe.model.register_forward_hook(
        lambda module, args, output: seen.append(torch.is_inference_mode_enabled())
    )
    try:
        pipe.generate(["a red circle"], seeds=[0], steps=2)
    finally:
        hook.remove()
    assert seen and all(seen)


def test_sample_uses_the_read_prompts_and_resolved_options_as_given(pipe, monkeypatch):
    """``generate`` = resolve the options, read each prompt, ``sample``; ``sample``
    itself reads no prompt."""
    prompts = ["a red circle and a dog", "two blue squares"]
    options = pipe.defaults.resolve(steps=2, guidance_scale=2.0, sampler="ddim")
    read = [pipe.understand(prompt) for prompt in prompts]
    reads: list[str] = []
    monkeypatch.setattr(pipe, "understand", lambda prompt: reads.append(prompt))
    sampled = pipe.sample(read, options, seeds=[3, 4])
    assert reads == []
    monkeypatch.undo()
    generated = pipe.generate(prompts, seeds=[3, 4], steps=2, guidance_scale=2.0, sampler="ddim")
    assert torch.equal(sampled, generated)


def test_sample_refuses_a_keyword_it_does_not_take(pipe):
    """``sample``'s keywords are :class:`~models.dit.options.SampleKeywords`' fields: a
    misspelt one is a ``TypeError``, not a silent default."""
    read = [pipe.understand("a red circle")]
    with pytest.raises(TypeError, match="'seed'"):
        pipe.sample(read, pipe.defaults.resolve(steps=1), seed=[3])


def test_generate_cli_says_what_it_understood_and_ignored(checkpoint, tmp_path, capsys):
    options = ["--seed", "1", "--steps", "2", "--checkpoint", str(checkpoint), "-o", str(tmp_path)]
    assert cli_main(["generate", "Two HUGE red squares in front of a kitten", *options]) == 0
    out, err = capsys.readouterr()
    assert out.split() == [str(tmp_path / "seed1.png")]
    assert err.splitlines() == [
        "understood: two large red squares and a kitten",
        "ignored: in front of",
        "not learned by this model: kitten (drawn as typed; the images will not show them)",
    ]
    assert cli_main(["generate", "a green", *options]) == 0
    assert capsys.readouterr().err.splitlines() == [
        "understood: nothing; drawn as typed",
        "ignored: green",
    ]


def test_batched_guidance_equals_two_forwards_with_unequal_token_lengths(pipe):
    # the conditional captions are longer than the null condition's one token: the
    # batched forward pads them, and the mask keeps every row as it was
    model: DiT = pipe.model
    cond = pipe.encoder.encode(["a big red circle left of a square", "a square"])
    uncond = model.null_condition(2)
    assert cond.tokens.shape[1] != uncond.tokens.shape[1]
    gen = torch.Generator().manual_seed(0)
    x, t = torch.randn(2, 3, 32, 32, generator=gen), torch.tensor([900, 200])
    with torch.no_grad():
        batched = classifier_free_guidance(model, 3.0)(x, t, (cond, uncond))
        eps_u, eps_c = model(x, t, uncond), model(x, t, cond)
    torch.testing.assert_close(batched, eps_u + 3.0 * (eps_c - eps_u), rtol=1e-4, atol=1e-5)


def test_precision_auto_is_float32_on_a_cpu_without_native_bf16(checkpoint, monkeypatch):
    from models import devices

    monkeypatch.setattr(devices, "_cpu_has_native_bf16", lambda: False)
    assert TextToImage.from_checkpoint(checkpoint).describe()["precision"] == "float32"
    forced = TextToImage.from_checkpoint(checkpoint, precision="bf16")
    assert forced.describe()["precision"] == "bfloat16"
    with pytest.raises(ValueError, match="precision"):
        TextToImage.from_checkpoint(checkpoint, precision="fp16")


@pytest.mark.skipif(
    not (REPO_WEIGHTS / DEFAULT_CHECKPOINT).is_file(), reason="default checkpoint not trained yet"
)
def test_bf16_autocast_images_stay_within_the_stated_tolerance_of_float32():
    fp32 = TextToImage.from_pretrained([REPO_WEIGHTS], precision="fp32")
    bf16 = TextToImage(fp32.model, fp32.encoder, precision="bf16")
    prompts, seeds = ["a red circle to the left of a blue square", "a green triangle"], [3, 4]
    measured = agreement(
        fp32.generate(prompts, seeds=seeds, steps=10), bf16.generate(prompts, seeds=seeds, steps=10)
    )
    assert measured["max_abs"] > 0  # bf16 really ran
    assert within_bf16_tolerance(measured), measured


def test_the_bf16_tolerance_counts_the_share_of_pixels_far_apart():
    reference = torch.zeros(1, 3, 10, 10)
    one_pixel = reference.clone()
    one_pixel[0, 0, 0, 0] = 0.9  # an edge pixel that flipped: 1 value in 300
    assert agreement(reference, one_pixel)["share_over_0.1"] == pytest.approx(1 / 300)
    assert not within_bf16_tolerance(agreement(reference, one_pixel))
    assert within_bf16_tolerance(agreement(reference, reference + 0.004))
    assert not within_bf16_tolerance(agreement(reference, reference + 0.006))


def test_warm_up_generates_once(pipe, monkeypatch):
    calls = []
    original = pipe.generate
    monkeypatch.setattr(pipe, "generate", lambda *a, **k: calls.append(k) or original(*a, **k))
    assert pipe.warm_up() > 0
    assert len(calls) == 1 and calls[0]["steps"] == 2


@pytest.mark.parametrize("sampler", ["ddpm", "dpm++2m"])
def test_sampling_reads_nothing_back_per_step(pipe, sampler):
    # every host read would be a GPU sync: their count must not grow with the steps
    from models.devices import HostReads

    counts = []
    for steps in (3, 6):
        with HostReads() as reads:
            pipe.generate(PROMPTS, seeds=[1, 2, 3], steps=steps, sampler=sampler)
        counts.append(reads.count)
    assert counts[0] == counts[1], counts


def test_a_64px_model_plans_on_its_own_canvas_with_each_captions_empty_canvas():
    """Things compositions hide the other cells behind white, shapes ones behind black
    (each world's empty canvas), on the 64 px grid; images come out at 64 px."""
    from models.dit.config import get_preset
    from models.dit.model import DiT
    from models.dit.pipeline import EMPTY_CANVAS, THINGS_CANVAS

    torch.manual_seed(0)
    model = DiT(get_preset("tiny64"))
    pipe64 = TextToImage(model, HashedWordEncoder(model.config.text_dim), default_steps=2)
    prompts = ["a cat to the left of a rocket", "two red squares", "a cat"]
    regions = pipe64.regions(prompts, [None] * 3, [0, 1, 2], plan_layout=True)
    assert regions.owner.tolist() == [0, 0, 1, 1, 2]
    assert regions.weight.shape[-2:] == (64, 64)
    assert regions.background.tolist() == [THINGS_CANVAS] * 2 + [EMPTY_CANVAS] * 2 + [THINGS_CANVAS]
    images = pipe64.generate(prompts, seeds=[0, 1, 2])
    assert images.shape == (3, 3, 64, 64) and pipe64.image_size == 64


def test_a_shapes_model_names_the_things_it_never_learned_and_still_draws_them(pipe):
    """The shapes world is closed (three shapes): every other thing is named in
    ``not_learned``, once each in prompt order, and the caption is drawn as before."""
    assert pipe.config.world == "shapes"
    read = pipe.understand("a grinning dog on a sofa and a cat")
    assert read.caption == "a grinning dog, a sofa and a cat"
    assert read.not_learned == ("grinning dog", "sofa", "cat")
    assert pipe.understand("a red cat, a blue cat and a sofa").not_learned == ("cat", "sofa")
    assert pipe.understand("a red circle above two blue squares").not_learned == ()
    assert pipe.understand("big and blue").not_learned == ()  # nothing understood
    drawn = pipe.generate(["a cat"], seeds=[5], steps=2)
    assert drawn.shape[0] == 1


def test_a_things_model_reads_what_an_object_is_openly():
    from models.dit.config import get_preset

    torch.manual_seed(0)
    model = DiT(get_preset("tiny64"))
    pipe64 = TextToImage(model, HashedWordEncoder(model.config.text_dim), default_steps=2)
    assert pipe64.config.world == "things"
    assert pipe64.understand("a kitty on a spaceship and a red circle").not_learned == ()


def test_what_a_prompt_asks_not_to_draw_becomes_its_negative_prompt(pipe):
    """ "no circles, just a square" draws the square guided away from circles: the same
    image as the square with "circle" as the negative prompt; a given one wins."""
    said = pipe.generate(["no circles, just a square"], seeds=[4])
    given = pipe.generate(["a square"], negative_prompts=["circle"], seeds=[4])
    torch.testing.assert_close(said, given)
    plain = pipe.generate(["a square"], seeds=[4])
    assert not torch.allclose(said, plain)
    overridden = pipe.generate(["no circles, just a square"], negative_prompts=["red"], seeds=[4])
    torch.testing.assert_close(
        overridden, pipe.generate(["a square"], negative_prompts=["red"], seeds=[4])
    )
