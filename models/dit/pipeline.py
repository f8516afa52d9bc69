"""``TextToImage``: prompts in, RGB images out at the model's size (64 px for the
everyday-things model, 32 px for the shapes one): what the service and the CLI call."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Unpack

import numpy as np
import torch
from torch import Tensor

from models.control import StepControl, converted_images
from models.devices import autocast_dtype, to_device, to_host
from models.diffusion import (
    SAMPLERS,
    Regions,
    classifier_free_guidance,
    epsilon_model,
    generators_from_seeds,
    get_sampler,
    get_schedule,
    randn,
    random_seed,
    regional_denoiser,
)
from models.dit.checkpoint import load_dit, read_metadata
from models.dit.model import DiT
from models.dit.options import GenerateDefaults, GenerateOptions, SampleKeywords
from models.hub import resolve
from models.shapes.captions import parse_caption
from models.shapes.planner import plan_regions
from models.shapes.understand import Understanding, understand
from models.shapes.vocab import SHAPES
from models.text_encoder import MiniLMEncoder, TextCondition, TextEncoder, build_text_encoder

#: The checkpoint ``from_pretrained`` looks for, trained by ``atelier train-dit``.
DEFAULT_CHECKPOINT = "dit-shapes32.safetensors"
#: Ancestral DDPM: on the shapes32 checkpoint it beats the deterministic samplers at the
#: same step count (benchmarks/dit_eval.py --sampler), as stochastic sampling corrects
#: some of an imperfect denoiser's errors; DPM-Solver++(2M) stays the fast ODE option.
DEFAULT_SAMPLER = "ddpm"
#: Stream of the layout planner's generator, beside each image's seed.
PLAN_STREAM = 0x1A70
#: The clean value of the shapes world's empty (black) canvas in the model's ``[-1, 1]``.
EMPTY_CANVAS = -1.0
#: The canvas a planned composition of everyday things is drawn on: white, the commonest
#: of the things world's light backgrounds (models/things/scenes.py).
THINGS_CANVAS = 1.0
#: How far bfloat16-autocast images may stray from float32 ones (:func:`agreement`, in
#: ``[0, 1]`` pixel units): the mean difference, and the share of pixel values more than
#: 0.1 apart. A largest difference would not do: a pixel on a shape's edge may flip (0.98
#: in the run below) while the image looks the same. Measured on the CPU with the shapes32
#: checkpoint, 8 prompts, 25 DDPM steps (``benchmarks/gpu_check.py --device cpu
#: --sections dit``): mean 0.00075, share 0.00004; the GPU check measures CUDA against it.
BF16_TOLERANCE = {"mean_abs": 0.005, "share_over_0.1": 0.001}
#: What a model of each data world learned to draw, where that is a closed list: the
#: shapes world's three shapes. The things world reads what an object is openly (MiniLM
#: puts "kitty" near "cat"), so it has no list to check a prompt against.
LEARNED_THINGS: dict[str, frozenset[str] | None] = {"shapes": frozenset(SHAPES), "things": None}


def _as_picture(x0: Tensor) -> Tensor:
    """A sampler's estimate of the clean images, ``[-1, 1]``, as pictures in ``[0, 1]``
    (what a step control's ``show`` hook is given)."""
    return ((x0.float() + 1) / 2).clamp(0, 1)


def agreement(reference: Tensor, other: Tensor) -> dict[str, float]:
    """How close two batches of images in ``[0, 1]`` are: the largest and the mean
    absolute difference, and the share of values more than 0.1 apart."""
    difference = (reference.float() - other.float()).abs()
    return {
        "max_abs": float(difference.max()),
        "mean_abs": float(difference.mean()),
        "share_over_0.1": float((difference > 0.1).float().mean()),
    }


def within_bf16_tolerance(measured: dict[str, float]) -> bool:
    """Whether an :func:`agreement` meets :data:`BF16_TOLERANCE`."""
    return all(measured[key] <= bound for key, bound in BF16_TOLERANCE.items())


def canvas_of(caption: str) -> float:
    """The empty canvas that hidden pixels show while a caption's planned regions are
    denoised: black (:data:`EMPTY_CANVAS`) when every object it names is a shape of the
    shapes world, whose scenes are all on black, else white (:data:`THINGS_CANVAS`)."""
    try:
        things = {spec.thing for spec in parse_caption(caption).objects}
    except ValueError:
        return THINGS_CANVAS
    return EMPTY_CANVAS if things <= set(SHAPES) else THINGS_CANVAS


class TextToImage:
    """Text-to-image sampling with a trained DiT, classifier-free guidance and seeds.

    Args:
        model: the denoiser (eval mode).
        encoder: the text encoder it was trained with.
        device: where sampling runs.
        default_steps: model evaluations when ``steps`` is not given.
        default_guidance_scale: CFG scale when ``guidance_scale`` is not given.
        source: where the weights came from (for :meth:`describe`).
        plan_layout: the default of :meth:`generate`'s ``plan_layout``.
        precision: ``"auto"`` samples under bfloat16 autocast where the device runs it
            natively (CUDA compute capability 8.0+, CPUs with AVX512-BF16/AMX) and in
            float32 elsewhere; ``"bf16"`` / ``"fp32"`` force one
            (:func:`models.devices.autocast_dtype`). On the CPU, bf16 images stay within
            ``BF16_TOLERANCE`` of float32 ones (``tests/models/dit/test_dit_pipeline.py``).

    Sampling on CUDA queues every step without waiting for the GPU: noise from per-image
    generators on the device, the schedule copied there once, guidance in one batched
    forward, inputs copied from page-locked memory; the one sync is reading the images
    back (``benchmarks/gpu_check.py`` counts syncs per step).
    """

    #: Sampler names; the first is the default.
    samplers: tuple[str, ...] = (DEFAULT_SAMPLER, *(n for n in SAMPLERS if n != DEFAULT_SAMPLER))
    default_sampler = DEFAULT_SAMPLER

    def __init__(
        self,
        model: DiT,
        encoder: TextEncoder,
        *,
        device: torch.device | str = "cpu",
        default_steps: int = 25,
        default_guidance_scale: float = 4.0,
        source: str | None = None,
        info: dict[str, Any] | None = None,
        plan_layout: bool = True,
        precision: str = "auto",
    ) -> None:
        self.device = torch.device(device)
        self.precision = precision
        self.autocast = autocast_dtype(self.device, precision)
        self.model = model.to(self.device).eval()
        self.encoder = encoder
        self.config = model.config
        self.alpha_bar = get_schedule(self.config.schedule, self.config.num_timesteps)
        self.denoiser = epsilon_model(self.model, self.alpha_bar, self.config.prediction)
        self.defaults = GenerateDefaults(
            steps=default_steps,
            guidance_scale=default_guidance_scale,
            sampler=self.default_sampler,
            plan_layout=plan_layout,
            samplers=self.samplers,
            max_steps=self.config.num_timesteps,
        )
        self.source = source
        self.info = info or {}

    @property
    def image_size(self) -> int:
        """Side of the square images :meth:`generate` returns, in pixels (the DiT's native size)."""
        return self.config.image_size

    @classmethod
    def from_checkpoint(
        cls, path: str | Path, *, device: torch.device | str = "cpu", **kwargs: Any
    ) -> TextToImage:
        """Load a ``.safetensors`` written by ``atelier train-dit``."""
        config, info = read_metadata(path)
        model = load_dit(path, device=device)
        trained_with = info.get("text_encoder", MiniLMEncoder.name)
        encoder = build_text_encoder(trained_with, config.text_dim, str(device))
        return cls(model, encoder, device=device, source=str(path), info=info, **kwargs)

    @classmethod
    def from_pretrained(
        cls,
        search_path: Sequence[str | Path],
        *,
        device: torch.device | str = "cpu",
        filename: str = DEFAULT_CHECKPOINT,
        **kwargs: Any,
    ) -> TextToImage:
        """Load ``filename`` from the first folder of ``search_path`` that holds it
        (:func:`models.hub.resolve`, as for every weights file).

        Raises:
            WeightsNotFoundError: no folder holds the checkpoint.
        """
        path = resolve(filename, [Path(folder) for folder in search_path])
        return cls.from_checkpoint(path, device=device, **kwargs)

    def generate(
        self,
        prompts: list[str],
        *,
        negative_prompts: list[str | None] | None = None,
        steps: int | None = None,
        guidance_scale: float | None = None,
        seeds: list[int] | None = None,
        sampler: str | None = None,
        plan_layout: bool | None = None,
        control: StepControl | None = None,
    ) -> Tensor:
        """Sample one image per prompt: resolve the options (:attr:`defaults`), read each
        prompt (:meth:`understand`), then :meth:`sample`.

        Args:
            prompts: the captions, one image each.
            steps: model evaluations per image.
            guidance_scale: CFG scale ``w`` (1: conditional only).
            sampler: one of :attr:`samplers`.
            plan_layout: see :meth:`sample`.

            Each of these four left ``None`` takes the model's default (:attr:`defaults`).
            negative_prompts, seeds, control: as :meth:`sample`.

        Raises:
            ValueError: options out of range (:meth:`GenerateDefaults.resolve`), or as
                :meth:`sample`.
        """
        options = self.defaults.resolve(
            steps=steps, guidance_scale=guidance_scale, sampler=sampler, plan_layout=plan_layout
        )
        return self.sample(
            [self.understand(prompt) for prompt in prompts],
            options,
            negative_prompts=negative_prompts,
            seeds=seeds,
            control=control,
        )

    @torch.inference_mode()
    def sample(
        self,
        prompts: Sequence[Understanding],
        options: GenerateOptions,
        **keywords: Unpack[SampleKeywords],
    ) -> Tensor:
        """Sample one image per read prompt with resolved options; the one entry point
        that runs the network (under ``torch.inference_mode``).

        Args:
            prompts: per image, what :meth:`understand` read from its prompt; what was
                understood is drawn, in the caption grammar the model was trained on (a
                prompt of which nothing was understood is drawn as it is).
            options: from ``defaults.resolve`` (:class:`GenerateOptions`), used as given.
                With ``options.plan_layout``, a caption naming several objects is split
                into one-object prompts at planned grid cells and each cell is denoised
                under its own prompt (:func:`~models.shapes.planner.plan_regions`,
                :func:`~models.diffusion.guidance.regional_denoiser`); other prompts are
                drawn in one piece.
            negative_prompts: per prompt, a caption whose prediction replaces the null
                condition in guidance; ``None`` takes what the prompt itself asked not
                to draw (:attr:`Understanding.negative`, "no circles, just a square"),
                else keeps the null condition.
            seeds: per prompt; the same seed gives the same image whatever the batch.
                Random when ``None``.
            control: asked before each sampler step which images are still wanted
                (:class:`~models.control.StepControl`); the others stop there, and the
                kept ones come out as they would have without it. Its ``show`` hook, if
                any (:data:`~models.control.ShowImages`), is shown the sampler's estimate
                of the clean images after each step but the last.

        Returns:
            ``(N, 3, H, W)`` float32 in ``[0, 1]`` on the CPU; with ``control``, only the
            images it kept, in order.

        Raises:
            ValueError: no prompt, or as many negative prompts or seeds as prompts.
        """
        if unknown := keywords.keys() - SampleKeywords.__annotations__.keys():
            raise TypeError(f"sample() got unexpected keyword arguments {sorted(unknown)}")
        n = len(prompts)
        if n == 0:
            raise ValueError("need at least one prompt")
        negative_prompts = keywords.get("negative_prompts")
        negatives: list[str | None] = (
            list(negative_prompts) if negative_prompts is not None else [None] * n
        )
        if len(negatives) == n:
            negatives = [
                given if given is not None else prompt.negative
                for given, prompt in zip(negatives, prompts, strict=True)
            ]
        given_seeds = keywords.get("seeds")
        seeds = list(given_seeds) if given_seeds is not None else [random_seed() for _ in range(n)]
        if len(negatives) != n or len(seeds) != n:
            raise ValueError(
                f"got {n} prompts, {len(negatives)} negative prompts, {len(seeds)} seeds"
            )
        captions = [prompt.caption or prompt.prompt for prompt in prompts]
        regions = self.regions(captions, negatives, seeds, plan_layout=options.plan_layout)
        generators = generators_from_seeds(seeds, self.device)
        config = self.config
        shape = (n, config.in_channels, config.image_size, config.image_size)
        noise = randn(shape, generators, device=self.device)
        guided = classifier_free_guidance(self.denoiser, options.guidance_scale)
        autocast = (
            torch.autocast(self.device.type, dtype=self.autocast)
            if self.autocast
            else nullcontext()
        )
        with autocast:
            images = get_sampler(options.sampler)(
                regional_denoiser(guided, self.alpha_bar),
                noise,
                regions,
                self.alpha_bar,
                steps=options.steps,
                generator=generators,
                clip_denoised=True,
                control=converted_images(keywords.get("control"), _as_picture),
            )
        return to_host(((images.float() + 1) / 2).clamp(0, 1))

    def warm_up(self, batch_size: int = 1) -> float:
        """Run one small generation (two steps) so that the first request does not pay
        for lazy initialisation (CUDA context, cuBLAS handles, the allocator's pools, the
        text encoder); returns the seconds it took."""
        start = time.perf_counter()
        self.generate(["a red circle"] * batch_size, steps=2, seeds=list(range(batch_size)))
        return time.perf_counter() - start

    def understand(self, prompt: str) -> Understanding:
        """What :meth:`generate` draws for ``prompt``: ``.caption``, the understood prompt
        in the caption grammar (the plan in words; ``None`` when nothing was understood
        and the prompt is drawn as it is), ``.ignored``, the words it did not use, and
        ``.not_learned``, the things it names that this checkpoint's world does not hold
        (:data:`LEARNED_THINGS`; :func:`~models.shapes.understand.understand`)."""
        return understand(prompt, LEARNED_THINGS[self.config.world])

    def regions(
        self,
        captions: list[str],
        negative_prompts: list[str | None],
        seeds: list[int],
        *,
        plan_layout: bool,
    ) -> Regions:
        """The regions to denoise: one whole-image region per caption (what is drawn for
        a prompt), or with ``plan_layout`` one region per planned object of a caption
        naming several, at a cell of the 3x3 grid of the model's canvas.

        A planned image's regions are its objects' cells. A region's weight is 1 on its cell
        plus an equal share of the cells no object holds (where every one-object prompt
        asks for empty canvas); it hides the other objects' cells. The plan, and the noise
        of hidden pixels, are drawn from the image's seed, so a seed still fixes the image.
        Each region is guided with its image's negative prompt (or the null condition).
        Hidden pixels show the caption's empty canvas (:func:`canvas_of`).
        """
        config = self.config
        size, channels = config.image_size, config.in_channels
        texts: list[str] = []
        negatives: list[str | None] = []
        owner: list[int] = []
        weights: list[np.ndarray] = []
        hides: list[np.ndarray] = []
        canvases: list[float] = []
        noises: list[np.ndarray] = []
        for index, (caption, negative, seed) in enumerate(
            zip(captions, negative_prompts, seeds, strict=True)
        ):
            rng = np.random.default_rng([int(seed), PLAN_STREAM])
            plan = plan_regions(caption, rng, size) if plan_layout else None
            if plan is None:
                texts.append(caption)
                masks = np.ones((1, size, size), dtype=np.float32)
                hidden = np.zeros_like(masks)
            else:
                texts.extend(region.prompt for region in plan)
                masks = np.stack([region.mask for region in plan]).astype(np.float32)
                taken = masks.sum(axis=0)
                hidden = taken[None] - masks
                masks = masks + (1.0 - taken)[None] / len(plan)
            count = len(masks)
            negatives.extend([negative] * count)
            canvases.extend([canvas_of(caption)] * count)
            owner.extend([index] * count)
            weights.append(masks)
            hides.append(hidden)
            noises.append(rng.standard_normal((count, channels, size, size), dtype=np.float32))

        device = self.device
        cond = TextCondition(*(to_device(t, device) for t in self.encoder.encode(texts)))
        uncond = self.encoder.encode([neg or "" for neg in negatives])
        uncond = self.model.with_null(
            TextCondition(*(to_device(t, device) for t in uncond)),
            to_device(torch.tensor([neg is None for neg in negatives]), device),
        )
        return Regions(
            cond=(cond, uncond),
            owner=to_device(torch.tensor(owner, dtype=torch.long), device),
            weight=to_device(torch.from_numpy(np.concatenate(weights))[:, None], device),
            hide=to_device(torch.from_numpy(np.concatenate(hides))[:, None], device),
            noise=to_device(torch.from_numpy(np.concatenate(noises)), device),
            background=to_device(torch.tensor(canvases), device),
        )

    def describe(self) -> dict[str, Any]:
        """What is loaded: checkpoint, architecture, training info and defaults."""
        return {
            "name": "dit",
            "source": self.source,
            "parameters": self.model.num_parameters(),
            "config": dataclasses.asdict(self.config),
            "trained_steps": self.info.get("step"),
            "text_encoder": self.encoder.name,
            "samplers": list(self.samplers),
            "default_sampler": self.defaults.sampler,
            "default_steps": self.defaults.steps,
            "default_guidance_scale": self.defaults.guidance_scale,
            "plan_layout": self.defaults.plan_layout,
            "device": str(self.device),
            "precision": str(self.autocast or torch.float32).removeprefix("torch."),
        }
