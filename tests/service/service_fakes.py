"""Fake models with the real models' call signatures, and the test settings.

The fakes compute something simple and checkable, so route tests can assert that
fields reach the model and results come back intact:

* ``FakeStyleTransfer``: ``(1 - alpha) * content + alpha * weighted mean style colour``
  per batch element (the content itself when ``preserve_color``), in as many steps as
  the preset has passes, and charged as the real model charges the preset.
  A photo above ``BASE_SIDE`` is painted by a ``FakePrintSession``: a base step, then
  one step per band of ``FAKE_BAND_ROWS`` rows, each the photo's negative.
* ``FakeTextToImage``: an 8x8 image of uniform noise from ``torch.Generator(seed)``,
  in ``steps`` steps; it understands prompts as the real shapes pipeline does.

Both honour a step control as the real models do (asked before each step and after the
last; dropped rows leave the batch; a control's ``show`` hook is shown a picture after
each step: the photo for the style transfer, the final image for generation) and
record the rows each step ran on. A ``step_gate`` (a ``threading.Semaphore``) makes
each step wait for a permit, so a test can hold a batch between two steps;
``step_delay_s`` makes each step take that long; ``shown`` counts the pictures a hook
asked for and ``hooked`` says, per forward, whether its control had a hook.

mypy checks this module (``[tool.mypy] files``): ``Fakes.entries`` loads each fake as
the protocol of ``service.model_types`` the service holds it through, so a fake that
drifts from its protocol fails the type check.
"""

from __future__ import annotations

import os
import random
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any, Unpack

import numpy as np
import torch
import uvicorn
from starlette.types import ASGIApp

from models.adain.large import Step, Tile, spans
from models.adain.options import StyleKeywords, StyleOptions
from models.adain.presets import get_preset
from models.adain.stats import convex_weights
from models.control import StepControl, image_hook, take_rows, wanted_rows
from models.disk_picture import DiskPicture, Picture, picture_region
from models.dit.options import SampleKeywords
from models.dit.pipeline import LEARNED_THINGS
from models.shapes.understand import Understanding, understand
from models.temporal import StageBlend
from service.config import Settings
from service.model_types import (
    GenerateDefaults,
    GenerateOptions,
    PrintSession,
    StyleTransferModel,
    TextToImageModel,
)
from service.workers.registry import AnyModelEntry, ModelEntry
from service.workers.style_transfer import run_stylize, style_transfer_details
from service.workers.text_to_image import run_generate, text_to_image_details


class Stepper:
    """The step loop of the fakes: asks the control, honours the gate, records rows.

    ``hold``: a file; while it exists, every step after the first waits (a process whose
    work a test holds from outside, e.g. to kill it mid-job); one-step work never waits.
    ``gate_only``: when set, the step gate holds only forwards on batcher threads whose
    name contains it (``"background"``: async jobs). ``steps_by`` records
    ``(priority, step)`` of every step run, in order.
    """

    def __init__(self, hold: Path | None = None) -> None:
        self.step_gate: threading.Semaphore | None = None
        self.gate_only: str | None = None
        self.hold = hold
        self.step_rows: list[list[int]] = []  # per step: the batch rows (original order)
        self.steps_by: list[tuple[str, int]] = []
        self.stepped = threading.Condition()
        self.step_delay_s = 0.0
        self.shown = 0
        self.hooked: list[bool] = []  # per forward: whether its control had a show hook

    def _gated(self) -> bool:
        if self.step_gate is None:
            return False
        return self.gate_only is None or self.gate_only in threading.current_thread().name

    def _wait_while_held(self) -> None:
        while self.hold is not None and self.hold.exists():
            time.sleep(0.01)

    def run(
        self,
        batch: int,
        steps: int,
        control: StepControl | None,
        picture: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """The original row numbers still wanted after ``steps`` steps; ``picture(rows)``:
        what a control's ``show`` hook is shown after each step."""
        rows = torch.arange(batch)
        show = image_hook(control)
        self.hooked.append(show is not None)
        for done in range(steps + 1):
            if 0 < done < steps:
                self._wait_while_held()
            if done < steps and self.step_gate is not None and self._gated():
                assert self.step_gate.acquire(timeout=10)
            keep = wanted_rows(control, done, steps)
            if keep is not None:
                rows = take_rows(rows, keep)
            if done == steps or rows.numel() == 0:
                return rows
            thread = threading.current_thread().name
            priority = "background" if "background" in thread else "interactive"
            with self.stepped:
                self.step_rows.append(rows.tolist())
                self.steps_by.append((priority, done))
                self.stepped.notify_all()
            if self.step_delay_s:
                time.sleep(self.step_delay_s)
            if show is not None and picture is not None:
                show(done + 1, steps, partial(self._picture, picture, rows))
        return rows

    def _picture(
        self, picture: Callable[[torch.Tensor], torch.Tensor], rows: torch.Tensor
    ) -> torch.Tensor:
        self.shown += 1
        return picture(rows)

    def wait_for_steps(self, count: int, timeout: float = 10) -> bool:
        with self.stepped:
            return self.stepped.wait_for(lambda: len(self.step_rows) >= count, timeout)


class FakeStyleTransfer(Stepper):
    def __init__(self, device: str = "cpu", hold: Path | None = None) -> None:
        super().__init__(hold)
        self.device = device
        self.batch_sizes: list[int] = []
        self.presets: list[str | None] = []
        self.style_scales: list[float] = []
        self.gate: threading.Event | None = None
        self.entered = threading.Event()
        #: The threads print-size stylisations were planned on.
        self.print_threads: list[str] = []
        #: Frames of clips stylised so far, and how many before ``hold`` is heeded.
        self.frames_seen = 0
        #: The threads each chunk of a clip was painted on (a batcher's: its priority).
        self.chunk_threads: list[str] = []
        self.frames_before_hold = int(os.environ.get("REPLICA_FRAMES_BEFORE_HOLD", "0"))

    warmed_up = False

    def warm_up(self) -> float:
        self.warmed_up = True
        return 0.0

    def full_size_passes(self, preset: str | None = None) -> float:
        return get_preset(preset or "quality").full_size_passes

    def describe(self) -> dict[str, Any]:
        """The fields of ``models.adain.StyleTransfer.describe``."""
        levels = list(get_preset("quality").levels)
        return {
            "name": "adain",
            "mode": "single-level" if len(levels) == 1 else "multi-level",
            "levels": levels,
            "preset": "quality",
            "weight_files": ["/fake/vgg.pth"],
            "device": self.device,
            "fast": False,
            "dtype": "float32",
        }

    def stylize(
        self,
        content: torch.Tensor,
        styles: Sequence[torch.Tensor],
        *,
        masks: Sequence[torch.Tensor] | None = None,
        control: StepControl | None = None,
        blend: StageBlend | None = None,
        **keywords: Unpack[StyleKeywords],
    ) -> torch.Tensor:
        keywords.setdefault("preset", "quality")  # the real model's default
        options = StyleOptions(**keywords)
        alpha = options.alpha
        if blend is not None:
            return self._frames(content, styles, alpha, blend)
        self.batch_sizes.append(content.shape[0])
        self.presets.append(options.preset)
        self.style_scales.append(options.style_scale)
        self.entered.set()
        if self.gate is not None:
            assert self.gate.wait(10)
        passes = get_preset(options.preset or "quality").passes
        rows = self.run(content.shape[0], passes, control, lambda rows: content[rows])
        if options.preserve_color:
            return content[rows].clone()
        means = [s.mean(dim=(2, 3))[:, :, None, None] for s in styles]  # (B or 1, 3, 1, 1)
        if masks is None:
            weights = convex_weights(options.style_weights, len(styles))
            colour = sum((w * m for w, m in zip(weights, means, strict=True)), torch.zeros(()))
            styled = colour.expand_as(content)
        else:  # as the real model: the style whose mask is largest (>= 0.5), else the photo
            stacked = torch.stack([m.expand(content.shape[0], 1, *m.shape[-2:]) for m in masks])
            largest, chosen = stacked.max(dim=0)  # (B, 1, H, W)
            styled = content.clone()
            for i, mean in enumerate(means):
                where = (chosen == i) & (largest >= 0.5)
                styled = torch.where(where, mean.expand_as(content), styled)
        out = (1 - alpha) * content + alpha * styled
        return out[rows]

    def _frames(
        self, content: torch.Tensor, styles: Sequence[torch.Tensor], alpha: float, blend: StageBlend
    ) -> torch.Tensor:
        """A clip's frames: the photo's negative lerped towards the first style's mean by
        ``alpha``, then one stage of ``blend`` (so a clip's state carries from chunk to
        chunk as with the real model). Waits, before the chunk, while ``hold`` exists once
        ``frames_before_hold`` frames were stylised (a test kills the process mid-clip)."""
        if self.frames_seen >= self.frames_before_hold:
            self._wait_while_held()
        self.frames_seen += content.shape[0]
        self.chunk_threads.append(threading.current_thread().name)
        self.batch_sizes.append(content.shape[0])
        mean = styles[0].mean(dim=(2, 3))[:, :, None, None]
        frames = torch.lerp(1.0 - content, mean.expand_as(content), alpha * 0.5)
        return blend.after_stage(0, 0.125, frames.clone())

    def print_stylization(
        self,
        content: Picture,
        styles: Sequence[torch.Tensor],
        **keywords: Unpack[StyleKeywords],
    ) -> PrintSession:
        options = StyleOptions(**keywords)
        self.presets.append(options.preset)
        self.style_scales.append(options.style_scale)
        self.print_threads.append(threading.current_thread().name)
        return FakePrintSession(content)


#: Rows of one band of a fake print-size stylisation.
FAKE_BAND_ROWS = 128


class FakePrintSession:
    """The fake's print-size stylisation: a base step, then one step per band of rows,
    each the photo's negative there. Every step after the first waits while the fake's
    ``hold`` file exists, and records itself in the fake's ``steps_by``."""

    def __init__(self, content: Picture) -> None:
        self.content = content
        self.output: DiskPicture | None = None  # on disk, made at the first band as the model's
        height, width = content.shape[-2:]
        bands = [
            Step("tiles", 0, (Tile(top, bottom, 0, width),))
            for top, bottom in spans(height, FAKE_BAND_ROWS)
        ]
        self._phases = [[Step("base")], bands]

    @property
    def steps(self) -> int:
        return sum(len(phase) for phase in self._phases)

    def phases(self) -> list[list[Step]]:
        return self._phases

    def run_step(self, model: Any, step: Step) -> torch.Tensor:
        assert isinstance(model, FakeStyleTransfer)
        if step.kind != "base":
            model._wait_while_held()
        with model.stepped:
            model.steps_by.append(("print", len(model.steps_by)))
            model.step_rows.append([0])
            model.stepped.notify_all()
        if step.kind == "base":
            return torch.zeros(1)
        tile = step.tiles[0]
        rows, columns = slice(tile.top, tile.bottom), slice(tile.left, tile.right)
        return (255 - picture_region(self.content, rows, columns))[None]

    def accept(self, step: Step, result: torch.Tensor) -> None:
        if step.kind == "base":
            return
        if self.output is None:
            channels, height, width = self.content.shape
            self.output = DiskPicture((channels, height, width), torch.uint8)
        for tile, image in zip(step.tiles, result, strict=True):
            self.output.write(tile.top, tile.left, image)

    def result(self) -> DiskPicture:
        assert self.output is not None
        return self.output


class FakeTextToImage(Stepper):
    defaults = GenerateDefaults(
        steps=4,
        guidance_scale=3.0,
        sampler="ddim",
        plan_layout=True,
        samplers=("ddim", "ddpm"),
        max_steps=1000,
    )
    image_size = 8

    def __init__(self, hold: Path | None = None) -> None:
        super().__init__(hold)
        self.calls: list[dict[str, Any]] = []
        self.read: list[str] = []

    warmed_up = False

    def warm_up(self) -> float:
        """Read a prompt, as the real warm-up does: it loads the word forms (``inflect``,
        seconds), which the first request would otherwise load on the event loop."""
        understand("a red circle")
        self.warmed_up = True
        return 0.0

    def describe(self) -> dict[str, Any]:
        return {"name": "dit", "weight_files": ["/fake/dit.safetensors"]}

    def understand(self, prompt: str) -> Understanding:
        self.read.append(prompt)
        return understand(prompt, LEARNED_THINGS["shapes"])  # as the shapes checkpoint

    def sample(
        self,
        prompts: Sequence[Understanding],
        options: GenerateOptions,
        **keywords: Unpack[SampleKeywords],
    ) -> torch.Tensor:
        """``None`` fills as the real pipeline fills it: no negative prompts, random seeds."""
        negative_prompts = keywords.get("negative_prompts") or [None] * len(prompts)
        seeds = keywords.get("seeds") or [random.getrandbits(31) for _ in prompts]
        self.calls.append(
            {
                "prompts": [prompt.prompt for prompt in prompts],
                "negative_prompts": list(negative_prompts),
                "steps": options.steps,
                "guidance_scale": options.guidance_scale,
                "seeds": list(seeds),
                "sampler": options.sampler,
                "plan_layout": options.plan_layout,
            }
        )
        images = torch.stack([self.image(seed) for seed in seeds])
        control = keywords.get("control")
        rows = self.run(len(prompts), options.steps, control, lambda rows: images[rows])
        return images[rows]

    @classmethod
    def image(cls, seed: int) -> torch.Tensor:
        """The ``(3, 8, 8)`` image drawn for ``seed``, in [0, 1]."""
        size = cls.image_size
        return torch.rand(3, size, size, generator=torch.Generator().manual_seed(seed))

    @classmethod
    def pixels(cls, seed: int) -> np.ndarray[Any, np.dtype[np.uint8]]:
        """``image(seed)`` as the ``(8, 8, 3)`` uint8 pixels of the PNG the service sends."""
        return (cls.image(seed) * 255).round().to(torch.uint8).permute(1, 2, 0).numpy()


class Fakes:
    """Holds the fake instances an app loaded, one per (model, device)."""

    def __init__(self, hold: Path | None = None) -> None:
        self.hold = hold
        self.adain: dict[str, FakeStyleTransfer] = {}
        self.dit: dict[str, FakeTextToImage] = {}

    def entries(self) -> dict[str, AnyModelEntry]:
        """Entries that load the fakes, typed as the protocols the service holds them as."""

        def load_adain(search_path: Sequence[Path], device: str) -> StyleTransferModel:
            return self.adain.setdefault(device, FakeStyleTransfer(device, self.hold))

        def load_dit(search_path: Sequence[Path], device: str) -> TextToImageModel:
            return self.dit.setdefault(device, FakeTextToImage(self.hold))

        return {
            "adain": ModelEntry("adain", load_adain, run_stylize, style_transfer_details),
            "dit": ModelEntry("dit", load_dit, run_generate, text_to_image_details),
        }


def wait_until(condition: Callable[[], object], timeout_s: float = 30.0) -> None:
    """Poll ``condition`` (set by another thread or the server) until it holds."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("the condition never held")
        time.sleep(0.005)


def make_settings(**overrides: Any) -> Settings:
    options: dict[str, Any] = {
        "devices": "cpu",
        "max_batch_size": 4,
        "max_batch_wait_ms": 1.0,
        "queue_size": 16,
        "request_timeout_s": 30.0,
        "max_upload_bytes": 2 * 1024 * 1024,
        "max_pixels": 4_000_000,
        "max_side": 1024,
        "load_models": "adain,dit",
        "state_dir": Path(tempfile.mkdtemp(prefix="atelier-state-")),
        "shutdown_timeout_s": 5.0,
        "job_lease_s": 3.0,
        "job_progress_interval_s": 0.0,
        # the stores here are healthy: a call slowed by a loaded machine (a CI run beside
        # a benchmark once took over 1 s to store a clip) must not open the breaker; the
        # outage tests set the shipped 1 s themselves
        "store_call_timeout_s": 10.0,
        "_env_file": None,
    }
    options.update(overrides)
    return Settings(**options)


@contextmanager
def served(app: ASGIApp) -> Iterator[str]:
    """Serve ``app`` with uvicorn in a thread on 127.0.0.1 (a free port); yields its base URL.

    The lifespan runs (models load) before the URL is yielded; leaving the block stops
    the server and waits for its thread.
    """
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        for _ in range(6000):  # no startup event to wait on; real models warm up first
            if server.started or not thread.is_alive():
                break
            time.sleep(0.05)
        assert server.started, "uvicorn did not start"
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()
