"""``/samples``: the page's gallery of sample photos and paintings (``samples_dir``).

The folder holds photos in ``content/`` and paintings in ``style/`` (``photos/`` and
``paintings/`` are read too), as ``../shared/images`` does; the page lists them with
``GET /samples`` and shows each by its small thumbnail. Like the page itself, these
routes need no API key: the operator chose the folder to be shown.

Only what the listing holds is ever served: regular files (no links, nothing hidden)
directly in one of those folders (a real folder, not a link to one), with an image
suffix, a plain name, the first bytes of that format and at most ``MAX_SAMPLE_BYTES``;
at most ``MAX_SAMPLES`` of each kind. A request names a kind and
a file name, which is looked up in the listing, never joined to a path, so no name
reaches outside the folder. Thumbnails are made once (off the event loop, a few at a
time, the image's pixels checked against ``max_pixels`` from its header first) and kept
in a small in-memory cache keyed by the file's size and modification time, as is the
reason a file could not be made into one (it is not decoded again until it changes).
"""

from __future__ import annotations

import asyncio
import functools
import io
import itertools
import os
import re
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Response
from fastapi.responses import FileResponse, JSONResponse
from PIL import Image, ImageOps
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException

from service.routes.deps import SettingsDep, app_owned

router = APIRouter(include_in_schema=False)

#: Public kind -> the folder names that hold it, first found wins.
KINDS: dict[str, tuple[str, ...]] = {
    "photos": ("content", "photos"),
    "paintings": ("style", "paintings"),
}
MEDIA_TYPES = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".webp": "image/webp",
}
#: A sample's file name: letters, digits, ``.``, ``_`` and ``-``, not hidden.
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
MAX_SAMPLES = 48
MAX_SAMPLE_BYTES = 32 * 1024 * 1024
THUMBNAIL_SIDE = 256
THUMBNAIL_QUALITY = 82
#: Thumbnails kept (each a few kB to ~20 kB).
THUMBNAIL_CACHE_SIZE = 2 * MAX_SAMPLES
#: Thumbnails made at once.
THUMBNAIL_WORKERS = 2
#: Browsers may keep a sample (or its thumbnail) this long without asking again.
CACHE_CONTROL = "public, max-age=3600"


@dataclass(frozen=True)
class Sample:
    kind: str
    name: str
    path: Path
    size: int
    mtime_ns: int

    @property
    def media_type(self) -> str:
        return MEDIA_TYPES[Path(self.name).suffix.lower()]

    @property
    def title(self) -> str:
        """``the_shipwreck_of_the_minotaur.jpg`` -> ``The shipwreck of the minotaur``."""
        words = re.sub(r"[_-]+", " ", Path(self.name).stem).strip()
        return words[:1].upper() + words[1:]

    def public(self) -> dict[str, Any]:
        url = f"/samples/{self.kind}/{self.name}"
        return {
            "name": self.name,
            "title": self.title,
            "url": url,
            "thumbnail_url": f"{url}/thumbnail",
            "bytes": self.size,
        }


#: The first bytes of each format a sample may be (a WebP's: ``RIFF``, its size, ``WEBP``).
SIGNATURES: dict[str, tuple[bytes, ...]] = {
    "image/png": (b"\x89PNG\r\n\x1a\n",),
    "image/jpeg": (b"\xff\xd8\xff",),
    "image/webp": (b"RIFF", b"WEBP"),
}


def kind_folder(root: Path, kind: str) -> Path | None:
    """The folder of ``kind`` under ``root``: a real folder, never a link to one."""
    for name in KINDS[kind]:
        folder = root / name
        if not folder.is_symlink() and folder.is_dir():
            return folder
    return None


@functools.lru_cache(maxsize=4 * MAX_SAMPLES)
def looks_like(path: str, media_type: str, size: int, mtime_ns: int) -> bool:
    """Whether the file starts as ``media_type`` does (read once per size and
    modification time; ``size`` and ``mtime_ns`` are the cache's key): a text file
    named ``.png`` is no sample."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(descriptor, "rb") as file:
            head = file.read(12)
    except OSError:
        return False
    signature = SIGNATURES[media_type]
    if len(signature) == 2:  # RIFF container: the form type follows the size
        return head[:4] == signature[0] and head[8:12] == signature[1]
    return head.startswith(signature[0])


def scan(root: Path | None, kind: str) -> dict[str, Sample]:
    """The samples of one kind under ``root``, by name, sorted (empty when there is no
    such folder)."""
    folder = None if root is None else kind_folder(root, kind)
    if folder is None:
        return {}
    found: list[Sample] = []
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                if not NAME.match(entry.name) or Path(entry.name).suffix.lower() not in MEDIA_TYPES:
                    continue
                if not entry.is_file(follow_symlinks=False):
                    continue
                info = entry.stat(follow_symlinks=False)
                if info.st_size > MAX_SAMPLE_BYTES:
                    continue
                found.append(
                    Sample(kind, entry.name, Path(entry.path), info.st_size, info.st_mtime_ns)
                )
    except OSError:
        return {}
    found.sort(key=lambda sample: sample.name.lower())
    images = (
        sample
        for sample in found
        if looks_like(str(sample.path), sample.media_type, sample.size, sample.mtime_ns)
    )
    return {sample.name: sample for sample in itertools.islice(images, MAX_SAMPLES)}


def make_thumbnail(path: Path, max_pixels: int) -> bytes:
    """A JPEG at most ``THUMBNAIL_SIDE`` px on a side; ``ValueError`` when the file is
    not an image Pillow reads, or has more than ``max_pixels`` pixels."""
    try:
        with Image.open(path) as image:
            width, height = image.size
            if width * height > max_pixels:
                raise ValueError(f"{width}x{height} is more than {max_pixels} pixels")
            image.draft("RGB", (THUMBNAIL_SIDE, THUMBNAIL_SIDE))  # JPEG: decode small
            small = ImageOps.exif_transpose(image).convert("RGB")
    except (OSError, Image.DecompressionBombError, SyntaxError) as exc:
        raise ValueError(f"not a readable image ({exc.__class__.__name__})") from None
    small.thumbnail((THUMBNAIL_SIDE, THUMBNAIL_SIDE), Image.Resampling.LANCZOS)
    out = io.BytesIO()
    small.save(out, "JPEG", quality=THUMBNAIL_QUALITY, optimize=True)
    return out.getvalue()


class Thumbnails:
    """Recent thumbnails by (path, size, mtime), and the files that could not be made
    into one (their reason, so that a broken sample is decoded once, not at every
    request, until it changes); a few made at once."""

    def __init__(self, capacity: int = THUMBNAIL_CACHE_SIZE) -> None:
        self.capacity = capacity
        #: the thumbnail's bytes, or why there is none (a ``str``)
        self._held: OrderedDict[tuple[str, int, int, int], bytes | str] = OrderedDict()
        self._slots = asyncio.Semaphore(THUMBNAIL_WORKERS)
        #: files decoded (a thumbnail made, or the reason there is none)
        self.made = 0

    async def get(self, sample: Sample, max_pixels: int) -> bytes:
        """The thumbnail; ``ValueError`` (with the reason) when the file is no image
        within ``max_pixels``."""
        key = (str(sample.path), sample.size, sample.mtime_ns, max_pixels)
        held = self._held.get(key)
        if held is None:
            async with self._slots:
                held = self._held.get(key)
                if held is None:
                    try:
                        held = await run_in_threadpool(make_thumbnail, sample.path, max_pixels)
                    except ValueError as exc:
                        held = str(exc)
                    self.made += 1
                    self._held[key] = held
                    while len(self._held) > self.capacity:
                        self._held.popitem(last=False)
        self._held.move_to_end(key)
        if isinstance(held, str):
            raise ValueError(held)
        return held


#: The app's thumbnail cache, made on first use.
ThumbnailsDep = Annotated[Thumbnails, Depends(app_owned("sample_thumbnails", Thumbnails))]


def _not_found(what: str) -> HTTPException:
    return HTTPException(404, f"no sample {what}")


async def _sample(settings: SettingsDep, kind: str, name: str) -> Sample:
    if kind not in KINDS or not NAME.match(name):
        raise _not_found(f"{kind[:20]!r}/{name[:100]!r}")
    sample = (await run_in_threadpool(scan, settings.samples_dir, kind)).get(name)
    if sample is None:
        raise _not_found(f"{kind}/{name!r}")
    return sample


@router.get("/samples")
async def list_samples(settings: SettingsDep) -> JSONResponse:
    """``{"photos": [...], "paintings": [...]}``: name, title, url, thumbnail_url, bytes."""
    listing = {}
    for kind in KINDS:
        found = await run_in_threadpool(scan, settings.samples_dir, kind)
        listing[kind] = [sample.public() for sample in found.values()]
    return JSONResponse(listing, headers={"Cache-Control": "no-cache"})


@router.get("/samples/{kind}/{name}")
async def sample_file(settings: SettingsDep, kind: str, name: str) -> FileResponse:
    sample = await _sample(settings, kind, name)
    return FileResponse(
        sample.path, media_type=sample.media_type, headers={"Cache-Control": CACHE_CONTROL}
    )


@router.get("/samples/{kind}/{name}/thumbnail")
async def sample_thumbnail(
    settings: SettingsDep, thumbnails: ThumbnailsDep, kind: str, name: str
) -> Response:
    sample = await _sample(settings, kind, name)
    try:
        data = await thumbnails.get(sample, settings.max_pixels)
    except ValueError as exc:
        raise _not_found(f"{kind}/{name!r} as a thumbnail: {exc}") from None
    return Response(data, media_type="image/jpeg", headers={"Cache-Control": CACHE_CONTROL})
