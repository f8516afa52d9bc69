"""Style-transfer work: one photo stylised, at once or by print-size steps.

A photo above the base (``models.adain.presets.BASE_SIDE``) is painted by print-size
steps, each a batcher item of its own, ``STEPS_IN_FLIGHT`` at a time. A print is bulk
work (``service.priorities``): its steps yield the device to every other forward, and
its CPU work outside them (its plan, taking its tiles in, encoding its picture) runs on
the low-priority bulk threads. The 8-bit
images travel in a job's payload as PNGs (:func:`~models.images.to_png`,
:func:`~models.images.from_png`), as the video work's styles do. A print's photo travels
as it was uploaded (:class:`UploadedPhoto`: checked by its request, decoded in the job's
turn, so that its decode never holds memory beside the print painted before it) and is
kept on disk from its decode to the end of its painting (``models.disk_picture``: 201 MB
at 8192 px, read a strip or a tile at a time).
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable
from contextlib import aclosing
from dataclasses import asdict, dataclass
from functools import partial
from typing import Any, ClassVar

import torch

from models.adain.large import Step
from models.adain.options import StyleOptions
from models.adain.presets import BASE_SIDE
from models.devices import return_freed_memory
from models.disk_picture import DiskPicture, Picture, ScratchFull
from models.images import (
    encode_image,
    from_png,
    mask_from_rgb,
    picture_from_png,
    tensor_to_pil,
    to_float,
    to_png,
)
from service.errors import StorageFull
from service.execution.work import RunContext, Work
from service.images import ImageLimits, decode_image
from service.jobs.records import JobResult, pack
from service.model_types import StyleTransferModel
from service.priorities import off_loop_as_bulk
from service.workers.pool import WorkerPool, in_order
from service.workers.style_transfer import PrintStep, StylizeItem, StylizeJob

#: Print-size steps of one job in flight: two keep a device busy (the next is queued
#: while one runs, and while the one before is taken in) without holding a queue's
#: places.
STEPS_IN_FLIGHT = 2


_WHOLE_PICTURE: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
    weakref.WeakKeyDictionary()
)


def whole_picture() -> asyncio.Lock:
    """One print's whole picture in memory at a time on this event loop (a server's
    process): a photo's decode (Pillow's image of it, 4 bytes a pixel: 268 MB at 8192 px)
    or a result's encode. The next print starts while the one before is encoded
    (``bulk_jobs_per_device``); its decode waits for that encode, so the two never add
    up. Awaited on the loop: a print waiting for it holds no bulk thread."""
    loop = asyncio.get_running_loop()
    lock = _WHOLE_PICTURE.get(loop)
    if lock is None:
        lock = _WHOLE_PICTURE[loop] = asyncio.Lock()
    return lock


@dataclass(frozen=True)
class UploadedPhoto:
    """A print's photo as it was uploaded: its request checked it
    (:meth:`~service.images.Decoding.check`: every error a decode would find, at 1/8 scale
    for a JPEG) and planned its ``size``; the worker decodes it in the job's turn
    (:meth:`decode`), after the print before it is painted. Decoded in the request, a
    JPEG's whole-image decode (268 MB at 8192 px) waited in memory beside that print.

    Shape:
        ``size``: ``(H, W)`` of the decoded photo; :attr:`shape` is ``(3, H, W)``.
    """

    data: bytes
    size: tuple[int, int]
    limits: ImageLimits

    @property
    def shape(self) -> tuple[int, int, int]:
        return (3, *self.size)

    def decode(self) -> Picture:
        """The photo at :attr:`size`, on disk (:func:`~service.images.decode_image`);
        Pillow's whole image, freed, is given back to the OS before the painting starts
        (else the allocator keeps its 268 MB at 8192 px under the base pass's memory)."""
        photo = decode_image(
            self.data, self.limits, name="content", size=self.size, on_disk_above=BASE_SIDE
        )
        return_freed_memory()
        return photo


@dataclass(frozen=True, eq=False)
class StylizeWork(Work):
    """One stylisation: decoded 8-bit images and the options.

    Shape:
        - content: ``(3, H, W)`` uint8 in memory for a still; a print's (above the
          base) as uploaded (:class:`UploadedPhoto`), or decoded on disk
          (:class:`~models.disk_picture.DiskPicture`: its painting reads it a tile at a
          time)
        - styles: each ``(3, h_i, w_i)`` uint8
        - masks: each ``(3, H, W)`` uint8 (read as their channel mean), or ``None``
    """

    kind: ClassVar[str] = "stylize"
    model: ClassVar[str] = "adain"
    encodes_images: ClassVar[bool] = True

    content: Picture | UploadedPhoto
    styles: tuple[torch.Tensor, ...]
    masks: tuple[torch.Tensor, ...] | None
    options: StyleOptions
    format: str
    request_parameters: dict[str, Any]
    quality: int | None = None  # JPEG's and WebP's

    @property
    def print_size(self) -> bool:
        """Larger than the base: painted by print-size steps (``models.adain.large``)."""
        return max(self.content.shape[-2:]) > BASE_SIDE

    @property
    def bulk(self) -> bool:
        """A print is bulk work (``service.priorities``)."""
        return self.print_size

    @property
    def unit(self) -> str:
        """AdaIN passes; a print-size job counts tiles (its base and each octave's
        statistics count one tile each)."""
        return "tile" if self.print_size else "pass"

    @property
    def parameters(self) -> dict[str, Any]:
        return self.request_parameters

    def job(self) -> StylizeJob:
        """The still's batcher item (a print's are its steps)."""
        assert isinstance(self.content, torch.Tensor)  # a still's photo is in memory
        return StylizeJob(
            content=to_float(self.content),
            styles=tuple(to_float(style) for style in self.styles),
            options=self.options,
            masks=None
            if self.masks is None
            else tuple(mask_from_rgb(to_float(mask)) for mask in self.masks),
        )

    def to_payload(self) -> bytes:
        if isinstance(self.content, UploadedPhoto):
            content = self.content.data
            photo = {"size": list(self.content.size), "limits": asdict(self.content.limits)}
        else:
            content, photo = to_png(self.content), None
        images = [to_png(image) for image in (*self.styles, *(self.masks or ()))]
        header = {
            "kind": self.kind,
            "photo": photo,
            "styles": len(self.styles),
            "masks": None if self.masks is None else len(self.masks),
            "options": asdict(self.options),
            "format": self.format,
            "quality": self.quality,
            "parameters": self.request_parameters,
        }
        return pack(header, [content, *images])

    @classmethod
    def from_payload(cls, header: dict[str, Any], blobs: list[bytes]) -> StylizeWork:
        photo = header.get("photo")  # absent in jobs stored before it existed
        content: Picture | UploadedPhoto
        if photo is not None:
            size = (int(photo["size"][0]), int(photo["size"][1]))
            content = UploadedPhoto(blobs[0], size, ImageLimits(**photo["limits"]))
        else:
            try:  # a print's photo is kept on disk, read a band at a time
                content = picture_from_png(blobs[0], on_disk_above=BASE_SIDE)
            except ScratchFull as exc:  # the job fails once: its photo would not fit again
                raise StorageFull(f"the print's photo could not be kept: {exc.strerror}") from None
        images = [from_png(blob) for blob in blobs[1:]]
        styles = header["styles"]
        masks = None if header["masks"] is None else tuple(images[styles:])
        return cls(
            content,
            tuple(images[:styles]),
            masks,
            StyleOptions(**header["options"]),
            header["format"],
            header["parameters"],
            header.get("quality"),  # jobs stored before it existed
        )

    async def run(
        self, pool: WorkerPool[StyleTransferModel, StylizeItem], context: RunContext
    ) -> JobResult:
        parameters = {**self.request_parameters, **pool.provenance()}
        if self.print_size:  # painted in tiles: no previews
            canvas = await self._run_print_size(pool, context)
            context.done_with_device()  # the next print may start while this one encodes
            async with whole_picture():
                data, media_type = await off_loop_as_bulk(self._encode_print, canvas, parameters)
        else:
            image = await context.submit(pool, self.job(), 0)
            encode = partial(encode_image, image, self.format, parameters, quality=self.quality)
            del image  # the encode holds it
            data, media_type = await asyncio.to_thread(encode)
        return JobResult([data], media_type, {"parameters": parameters})

    def _encode_print(self, canvas: DiskPicture, parameters: dict[str, Any]) -> tuple[bytes, str]:
        """The print's file (made holding :func:`whole_picture`): a PNG a band at a time
        from the canvas on disk, a JPEG or WebP from Pillow's copy of it (268 MB at
        8192 px), given back after.

        Raises:
            StorageFull: the PNG has no room in the temporary folder (the job fails
                once: it would not fit again).
        """
        image = canvas if self.format == "png" else tensor_to_pil(canvas)
        try:
            encoded = encode_image(image, self.format, parameters, quality=self.quality)
        except ScratchFull as exc:
            raise StorageFull(f"the print could not be encoded: {exc.strerror}") from None
        del image
        return_freed_memory()
        return encoded

    async def _run_print_size(
        self, pool: WorkerPool[StyleTransferModel, StylizeItem], context: RunContext
    ) -> DiskPicture:
        """Every step of a print-size stylisation through the pool's batcher, phase by
        phase, ``STEPS_IN_FLIGHT`` in flight (other work cuts in between them; each result
        taken in while the next step runs); progress counts steps; a cancelled job stops
        at its next step. Returns ``(3, H, W)`` uint8, on disk.

        Raises:
            StorageFull: the worker's temporary folder has no room for the print's
                pictures (the job fails once: it would not fit again).
            BadImage: the uploaded photo does not decode (its request checked it; a
                JPEG at 1/8 scale).
        """
        try:
            return await self._paint_print(pool, context)
        except ScratchFull as exc:
            raise StorageFull(f"the print could not be painted: {exc.strerror}") from None

    async def _paint_print(
        self, pool: WorkerPool[StyleTransferModel, StylizeItem], context: RunContext
    ) -> DiskPicture:
        photo = self.content
        if isinstance(photo, UploadedPhoto):
            async with whole_picture():
                photo = await off_loop_as_bulk(photo.decode)
        session = await off_loop_as_bulk(
            pool.model.print_stylization,
            photo,
            [to_float(style)[None] for style in self.styles],
            **self.options.keywords(),
        )
        done = 0

        def submit(step: Step) -> Awaitable[torch.Tensor]:
            return context.submit(pool, PrintStep(session, step), None, bulk=True)

        for phase in session.phases():
            async with aclosing(in_order(submit, phase, STEPS_IN_FLIGHT)) as results:
                async for step, result in results:
                    await off_loop_as_bulk(session.accept, step, result)
                    done += 1
                    context.report(done, session.steps)
            await off_loop_as_bulk(return_freed_memory)  # what the phase's steps freed
        return session.result()
