"""Decoding uploads safely: limits, bounded large decodes, shrinking, 8-bit pixels.

Decoding order matters for safety: the byte cap is enforced while the body streams in
(see ``service.app``), then Pillow reads only the header, the pixel count is checked,
and only then are pixels decoded. Every failure is a ``ServiceError`` with the status
the API documents (400 bad image, 413 too large, 415 not a supported format). Pixels
become tensors, and results bytes, through the one codec of ``models.images``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import io
import logging
import threading
import time
import warnings
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import TypeVar

import torch
from PIL import Image, UnidentifiedImageError

from models.disk_picture import Picture, ScratchFull, in_memory
from models.images import Decode, fit_longer_side, sniff
from service.errors import (
    BadImage,
    DeadlineExceeded,
    PayloadTooLarge,
    StorageFull,
    UnsupportedMediaType,
)
from service.priorities import lower_this_thread

#: Formats the service decodes (the rest of Pillow's long list is attack surface).
ACCEPTED_FORMATS = ("PNG", "JPEG", "WEBP", "GIF", "BMP")

logger = logging.getLogger("atelier.images")

T = TypeVar("T")


@dataclass(frozen=True)
class ImageLimits:
    """Limits applied to every decoded upload.

    Args:
        max_pixels: largest ``width * height`` accepted, checked from the header.
        min_side: smallest side accepted, and the smallest side an output is shrunk to
            (the encoder's pooling needs a few pixels).
        max_side: largest side an output may have.
        max_aspect: the most elongated image accepted, longer side over shorter (64:1),
            whatever ``max_side / min_side`` would allow.
    """

    max_pixels: int
    min_side: int = 16
    max_side: int = 1024
    max_aspect: int = 64


class DecodeSlots:
    """Large images are decoded on ``slots`` low-priority threads; small ones at once.

    A decode holds the image's full-size pixels (its own mode: 1 to 4 bytes each, up
    to ``max_pixels``) until it is shrunk, so running large decodes on a pool of
    ``slots`` threads bounds that memory at about ``slots * max_pixels * 4`` bytes.
    The pool's threads run at a lower OS priority (``niceness``; Linux applies nice
    values per thread), so a flood of large uploads takes only the CPU that other
    requests leave. Images of at most ``large_pixels`` (after a JPEG's draft scale)
    are decoded by the caller's thread right away: their memory is small, and they
    never queue behind large ones. A large decode still queued when its request's
    deadline passes is dropped without running.

    Args:
        slots: how many large decodes may run at once.
        large_pixels: images above this many pixels go to the pool.
        niceness: added to the pool threads' nice value (0 leaves them as they are).
    """

    def __init__(self, slots: int, large_pixels: int, *, niceness: int = 10) -> None:
        if slots < 1:
            raise ValueError(f"slots must be >= 1, got {slots}")
        self.large_pixels = large_pixels
        self._pool = ThreadPoolExecutor(
            max_workers=slots,
            thread_name_prefix="large-decode",
            initializer=lower_this_thread,
            initargs=(niceness,),
        )
        self._lock = threading.Lock()
        self.waiting = 0

    def run(self, pixels: int, work: Callable[[], T], deadline: float | None = None) -> T:
        """``work()``: at once for a small image, else on the pool; its result.

        Raises:
            DeadlineExceeded: a large decode did not finish before ``deadline``
                (``time.monotonic``); dropped if it had not started.
        """
        if pixels <= self.large_pixels:
            return work()
        with self._lock:
            self.waiting += 1
        future = self._pool.submit(self._started, work)
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            return future.result(timeout=timeout)
        except FutureTimeout:
            if future.cancel():
                with self._lock:
                    self.waiting -= 1
            raise DeadlineExceeded("the request deadline passed while decoding") from None

    def _started(self, work: Callable[[], T]) -> T:
        with self._lock:
            self.waiting -= 1
        return work()


class PreparationBudget:
    """Bounds the pixels of uploads being prepared at once, weighted by their size.

    Preparing a stylisation (reading its uploads, decoding them, encoding a job's
    payload for the store) holds a few bytes of memory per output pixel until the work
    is handed off (the payload stored, or the work given to a batcher). Without a
    bound that memory grows with the uploads arriving together: 64 async 1024 px jobs
    sent at once are 64 preparations at once. A request's weight is its output pixels,
    known before anything is read (``size^2`` per image: the photo, the styles, the
    masks); the weights held at once stay within ``pixels``, and requests that do not
    fit wait in arrival order, so the memory of a burst is that of ``pixels`` whatever
    the burst's size. A request heavier than the whole budget runs when nothing else
    is being prepared. Light requests (at most ``pixels // 32``: a 512 px photo and
    its style, with the default) never wait: their memory is small, and a flood of
    large uploads must not hold them up.

    Args:
        pixels: the output pixels that may be in preparation at once.
    """

    def __init__(self, pixels: int) -> None:
        if pixels < 1:
            raise ValueError(f"pixels must be >= 1, got {pixels}")
        self.pixels = pixels
        self.light_pixels = pixels // 32
        self.held = 0
        self._waiting: collections.deque[tuple[int, asyncio.Future[None]]] = collections.deque()

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    @contextlib.asynccontextmanager
    async def hold(
        self, weight: int, deadline: float | None = None
    ) -> AsyncIterator[Callable[[], None]]:
        """Hold ``weight`` pixels of the budget; yields ``release``, which gives them
        back early (at hand-off; exiting the block gives them back otherwise).

        Raises:
            DeadlineExceeded: ``deadline`` (``time.monotonic``) passed while waiting.
        """
        if weight <= self.light_pixels:
            yield lambda: None
            return
        await self._acquire(weight, deadline)
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self.held -= weight
                self._wake()

        try:
            yield release
        finally:
            release()

    async def _acquire(self, weight: int, deadline: float | None) -> None:
        if not self._waiting and (self.held == 0 or self.held + weight <= self.pixels):
            self.held += weight
            return
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (weight, turn)
        self._waiting.append(entry)
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            await asyncio.wait_for(asyncio.shield(turn), timeout)
        except BaseException as exc:  # timed out, or the request was cancelled
            if turn.done() and not turn.cancelled():
                self.held -= weight  # granted as it gave up: give it back
            else:
                turn.cancel()
                self._waiting.remove(entry)
            self._wake()
            if isinstance(exc, TimeoutError):
                raise DeadlineExceeded(
                    "the request deadline passed while earlier uploads were being prepared"
                ) from None
            raise

    def _wake(self) -> None:
        """Grant the waiters at the head of the line that fit, in arrival order."""
        while self._waiting:
            weight, turn = self._waiting[0]
            if self.held and self.held + weight > self.pixels:
                return
            self._waiting.popleft()
            self.held += weight
            turn.set_result(None)


def output_size(
    width: int, height: int, size: int, limits: ImageLimits, *, name: str = "image"
) -> tuple[int, int]:
    """The ``(width, height)`` an image is shrunk to for a requested longer side ``size``:
    :func:`~models.images.fit_longer_side` with ``limits.min_side``, so the output never
    has a side under ``min_side`` and is never enlarged. Raising the scale for the shorter
    side can push the longer side past ``size``; past ``max_side`` the image is refused,
    and so is one more elongated than ``max_aspect``:1, so the accepted aspect ratios are
    those up to ``min(max_aspect, max_side / min_side)``.

    Raises:
        BadImage: the aspect ratio is above that (code ``aspect_ratio_too_large``).
    """
    longer, shorter = max(width, height), min(width, height)
    out = fit_longer_side(width, height, size, min_side=limits.min_side)
    ratio = min(limits.max_aspect, limits.max_side // limits.min_side)
    if max(out) > limits.max_side or longer > ratio * shorter:
        raise BadImage(
            f"{name}: {width}x{height} is too elongated; the aspect ratio may be at most "
            f"{ratio}:1 (at least {limits.min_side} px on the short side, at most "
            f"{limits.max_side} px on the long side)",
            code="aspect_ratio_too_large",
        )
    return out


#: Bytes of an upload read for its header alone (a JPEG's EXIF comes before its size).
HEADER_BYTES = 256 * 1024


def painted_side(head: bytes, size: int, limits: ImageLimits) -> int:
    """The longer side a photo is painted at for a requested ``size``: its own when it
    is smaller (a photo is never enlarged, :func:`output_size`), read from the header in
    ``head`` (the upload's first :data:`HEADER_BYTES`; nothing is decoded). ``size``
    when the header cannot tell: the decode reports what is wrong with the upload."""
    try:
        with Image.open(io.BytesIO(head), formats=ACCEPTED_FORMATS) as image:
            width, height = image.size
        return max(output_size(width, height, size, limits))
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError, BadImage):
        return size


def decode_image(
    data: bytes,
    limits: ImageLimits,
    *,
    name: str = "image",
    size: int | tuple[int, int] | None = None,
    slots: DecodeSlots | None = None,
    deadline: float | None = None,
    on_disk_above: int | None = None,
) -> Picture:
    """Decode an upload to 8-bit RGB, EXIF orientation applied.

    Palette (with or without transparency), alpha, CMYK, greyscale and 16-bit inputs
    are converted; transparency is composited over white; an embedded ICC profile is
    converted to sRGB (:func:`to_srgb`), on the shrunk image.

    Memory: the image is shrunk before it is converted. A JPEG is decoded at the
    smallest of 1/1, 1/2, 1/4, 1/8 scale still at least the target (``draft``); other
    formats decode at full size in their own mode (a greyscale 6300 x 6300 PNG is
    40 MB of uint8), are shrunk by Pillow in that mode, and only the small result is
    converted to RGB. It never becomes float (:func:`~models.images.pil_to_uint8`): a
    1024 px upload is 3 MB from here until the model takes it, not 12.6 MB. 16-bit
    inputs are rounded to 8 bits, as every input of the model is.

    Args:
        data: the file bytes.
        limits: pixel and size limits.
        name: the form field, for error messages.
        size: ``None`` keeps the decoded size; an int is the requested longer side
            (see :func:`output_size`); ``(height, width)`` is an exact size.
        slots: bounds concurrent large decodes (see :class:`DecodeSlots`); none if unset.
        deadline: ``time.monotonic()`` past which waiting for a slot gives up (504).
        on_disk_above: a result with a longer side above it is kept on disk (a print's
            photo: :func:`~models.images.pil_to_picture`); ``None``: in memory.

    Shape:
        Output: ``(3, H, W)``, ``uint8``.

    Raises:
        BadImage: empty, truncated or corrupt file, animated image, too small, too
            elongated for ``size``.
        PayloadTooLarge: more than ``limits.max_pixels`` pixels (header check).
        StorageFull: no room in the temporary folder for a picture kept on disk (507).
        UnsupportedMediaType: not a PNG, JPEG, WebP, GIF or BMP image.
    """

    def decode(planned: Decode) -> Picture:
        if on_disk_above is None:
            return planned.pixels()
        return planned.pixels(on_disk_above=on_disk_above)

    return _read_upload(
        data, limits, name, _target_chooser(limits, name, size), decode, slots, deadline
    )


def _load_only(planned: Decode) -> None:
    planned.image.load()


def _target_chooser(
    limits: ImageLimits, name: str, size: int | tuple[int, int] | None
) -> Callable[[tuple[int, int]], tuple[int, int] | None]:
    """The :meth:`~models.images.Decode.plan` target for an upload shown ``(width,
    height)``: refuses one under ``limits.min_side``; ``None`` for ``size=None``."""

    def choose(shown: tuple[int, int]) -> tuple[int, int] | None:
        if min(shown) < limits.min_side:
            raise BadImage(
                f"{name}: {shown[0]}x{shown[1]} is smaller than {limits.min_side} px on a side",
                code="image_too_small",
            )
        if size is None:
            return None
        if isinstance(size, tuple):
            return (size[1], size[0])
        return output_size(*shown, size, limits, name=name)

    return choose


def _read_upload(
    data: bytes,
    limits: ImageLimits,
    name: str,
    choose: Callable[[tuple[int, int]], tuple[int, int] | None],
    read: Callable[[Decode], T],
    slots: DecodeSlots | None,
    deadline: float | None,
) -> T:
    """Open an upload's header, check its pixel count and that it is one frame, plan its
    decode with ``choose`` and run ``read`` on the plan (on ``slots`` when it is large),
    with every failure as the API's error (see :func:`decode_image`)."""
    if not data:
        raise BadImage(f"{name}: the file is empty", code="empty_file")
    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        image = _open(data, name)
        with image:
            width, height = image.size
            if width * height > limits.max_pixels:
                raise PayloadTooLarge(
                    f"{name}: {width}x{height} is more than {limits.max_pixels} pixels",
                    code="image_too_large",
                )
            if getattr(image, "is_animated", False) or getattr(image, "n_frames", 1) > 1:
                raise BadImage(f"{name}: animated images are not accepted", code="animated_image")
            # a JPEG's EXIF precedes its pixels: plan (and draft) it now; a PNG's may
            # follow them, so reading it decodes them: where a large image's pixels are
            # read (on a slot, at low priority)
            plan = Decode.plan(image, choose, name, data) if image.format == "JPEG" else None

            def run() -> T:
                return read(plan or Decode.plan(image, choose, name, data))

            pixels = image.size[0] * image.size[1]
            try:
                return run() if slots is None else slots.run(pixels, run, deadline)
            except ScratchFull as exc:  # before OSError: a full disk is not a bad image
                raise StorageFull(f"{name}: the photo could not be kept: {exc.strerror}") from None
            except (OSError, SyntaxError, ValueError, EOFError) as exc:
                logger.info("corrupt upload", extra={"field": name, "error": str(exc)})
                raise BadImage(
                    f"{name}: the image is truncated or corrupt", code="corrupt_image"
                ) from None


@dataclass(frozen=True)
class Decoding:
    """How one request decodes its uploads: its limits, the shared slots, its deadline."""

    limits: ImageLimits
    slots: DecodeSlots | None = None
    deadline: float | None = None

    def decode(
        self, data: bytes, *, name: str, size: int | tuple[int, int] | None = None
    ) -> torch.Tensor:
        """:func:`decode_image` with this request's limits, slots and deadline."""
        decoded = decode_image(
            data, self.limits, name=name, size=size, slots=self.slots, deadline=self.deadline
        )
        return in_memory(decoded)

    def check(self, data: bytes, *, name: str, size: int) -> tuple[int, int]:
        """What :func:`decode_image` would check and the size it would decode to, without
        keeping the pixels: a print's photo is checked in its request and decoded in its
        turn by the worker (``service.execution.stylize.UploadedPhoto``), so that a
        decode never waits in memory beside the print painted before it.

        Memory: a JPEG is read at 1/8 scale (``draft``: every coded block is still
        entropy-decoded, so a truncated or corrupt file is found as the full decode
        finds it; Pillow holds 1/64 of its pixels, 4 MiB for an 8192 px photo against
        256 MiB); other formats are read whole in their own mode, on the decode slots,
        and let go.

        Returns:
            ``(height, width)``: the size :func:`decode_image` with the same ``size``
            decodes to.

        Raises:
            The errors of :func:`decode_image`.
        """
        choose_output = _target_chooser(self.limits, name, size)
        output: tuple[int, int] | None = None

        def choose_smallest(shown: tuple[int, int]) -> tuple[int, int]:
            nonlocal output
            output = choose_output(shown)
            # the smallest draft a JPEG has; Pillow keeps any other format's full size
            return (max(1, shown[0] // 8), max(1, shown[1] // 8))

        _read_upload(
            data, self.limits, name, choose_smallest, _load_only, self.slots, self.deadline
        )
        assert output is not None  # an int size always has one
        return (output[1], output[0])


def _open(data: bytes, name: str) -> Image.Image:
    """Read the header only (Pillow is lazy); map its failures to the API's errors."""
    try:
        return Image.open(io.BytesIO(data), formats=ACCEPTED_FORMATS)
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise PayloadTooLarge(
            f"{name}: image dimensions exceed the pixel limit", code="image_too_large"
        ) from None
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:
        # an accepted format's signature: a failure to read it is a corrupt image (400)
        if (sniff(data) or "").upper() in ACCEPTED_FORMATS:
            logger.info("corrupt upload", extra={"field": name, "error": str(exc)})
            raise BadImage(f"{name}: corrupt image header", code="corrupt_image") from None
        raise UnsupportedMediaType(
            f"{name}: not an image in a supported format ({', '.join(ACCEPTED_FORMATS)})",
            code="unsupported_image_type",
        ) from None
