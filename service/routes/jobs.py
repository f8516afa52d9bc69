"""``/v1/jobs``: a job's state and result (whole, or as a thumbnail), its cancel, its
event stream (with live previews when the job was sent with them); the key's jobs.

The job routes answer only the key that made the job: any other key gets the same 404
as an unknown job (no existence leak). ``GET /v1/jobs`` lists the key's recent jobs, a
page at a time, and ``GET /v1/me`` says which key is in use. Event streams are fed by
one reader per job per replica (``service.jobs.feeds``); they are bounded per key and
per replica, and do not count against ``max_connections``.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Sized
from functools import partial
from typing import Annotated, Any, Generic, TypeVar

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse
from fastapi.sse import EventSourceResponse, ServerSentEvent
from PIL import Image
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from models.devices import return_freed_memory
from models.images import png_thumbnail
from models.png import NotBanded
from service.errors import (
    ErrorBody,
    JobNotFound,
    JobNotReady,
    RangeNotSatisfiable,
    StoreUnavailable,
    error_responses,
    json_error_responses,
)
from service.jobs.blobs import PackedSource
from service.jobs.records import JobRecord, JobResult, pack, read_layout, unpack
from service.jobs.store import JobStore, job_topic
from service.protocol import FileSpanResponse, SendableBytes, offers_zero_copy_send
from service.routes.deps import CallerDep, DrainDep, FeedsDep, StoreDep, app_owned

router = APIRouter(prefix="/v1", tags=["jobs"])

#: How long ``DELETE`` waits for a running job to stop before it answers 202.
CANCEL_WAIT_S = 2.0


def job_accepted(job: JobRecord) -> JSONResponse:
    """How a work route answers work that became a background job: ``202 Accepted``
    with the job, where to follow it (``Location``) and ``Preference-Applied:
    respond-async`` (RFC 7240)."""
    return JSONResponse(
        job.public(),
        status_code=202,
        headers={"Location": f"/v1/jobs/{job.id}", "Preference-Applied": "respond-async"},
    )


async def job_of(job_id: str, store: StoreDep, who: CallerDep) -> JobRecord:
    """The caller's job, or 404 (unknown, expired, or another key's)."""
    record = await store.get(job_id) if len(job_id) <= 64 else None
    if record is None or record.owner != who.name:
        raise JobNotFound(f"no job {job_id[:64]!r} (unknown, or expired after job_ttl_s)")
    return record


JobDep = Annotated[JobRecord, Depends(job_of)]


#: What a :class:`ResultCache` holds: anything with a size in bytes.
HeldT = TypeVar("HeldT", bound=Sized)


class ResultCache(Generic[HeldT]):
    """What recent jobs' results are served as (their base64 JSON, their thumbnails),
    bounded in bytes.

    A result is encoded once, off the event loop, however many clients ask for it at the
    same time (they wait for the one encoding: encoding holds the GIL, so sixty-four at
    once would starve the event loop even on threads); later reads send what is held.
    """

    def __init__(self, max_bytes: int = 64 * 1024 * 1024) -> None:
        self.max_bytes = max_bytes
        self._held: OrderedDict[str, HeldT] = OrderedDict()
        self._bytes = 0
        self._building: dict[str, asyncio.Future[HeldT | None]] = {}

    async def get(self, job_id: str, build: Callable[[], Awaitable[HeldT | None]]) -> HeldT | None:
        data = self._held.get(job_id)
        if data is not None:
            self._held.move_to_end(job_id)
            return data
        pending = self._building.get(job_id)
        if pending is not None:
            return await asyncio.shield(pending)
        pending = self._building[job_id] = asyncio.get_running_loop().create_future()
        try:
            data = await build()
        except BaseException as exc:
            pending.set_exception(exc)
            pending.exception()  # retrieved: the waiters re-raise it
            raise
        finally:
            del self._building[job_id]
        pending.set_result(data)
        if data is not None:
            self._put(job_id, data)
        return data

    def _put(self, job_id: str, data: HeldT) -> None:
        if len(data) > self.max_bytes:
            return
        self._held[job_id] = data
        self._bytes += len(data)
        while self._bytes > self.max_bytes:
            _, old = self._held.popitem(last=False)
            self._bytes -= len(old)


#: The app's cache of serialized results.
ResultCacheDep = Annotated[
    ResultCache[SendableBytes], Depends(app_owned("result_cache", ResultCache[SendableBytes]))
]

#: Results sent inline (base64) in the job's JSON; others only through ``result_url``.
STILL_TYPES = frozenset({"image/png", "image/jpeg", "image/webp"})
#: The file name suffix of a result's download, by media type.
SUFFIXES = {
    "image/png": "png",
    "image/jpeg": "jpg",
    "image/webp": "webp",
    "image/gif": "gif",
    "video/mp4": "mp4",
    "video/quicktime": "mov",
    "video/webm": "webm",
    "video/x-matroska": "mkv",
}


#: The most image bytes a job's JSON carries as base64 (a 1024 px PNG is 1-3 MB); a
#: bigger result (a print: tens of MB) is only linked, as a video is.
INLINE_RESULT_MAX_BYTES = 4 * 1024 * 1024


async def _result_json(store: JobStore, job_id: str) -> SendableBytes | None:
    """A result in the job's JSON: images as base64 up to ``INLINE_RESULT_MAX_BYTES`` in
    all; a bigger one, a video or an animated GIF only by its files' sizes
    (``file_bytes``), fetched from the job's ``result_url``. Only the result's header is
    read for the sizes (a print's JSON never reads its tens of MB); an inlined result is
    read whole, checked against its checksum (a large one then held where answers send it
    by ``sendfile``). ``None``: the result was forgotten."""
    source = await store.result_source(job_id)
    if source is None:
        return None
    layout = await read_layout(source)
    sizes = [stop - start for start, stop in layout.spans]
    media_type, fields = layout.header["media_type"], layout.header["fields"]
    if media_type not in STILL_TYPES or sum(sizes) > INLINE_RESULT_MAX_BYTES:
        linked = {"media_type": media_type, "file_bytes": sizes, **fields}
        return SendableBytes(json.dumps(linked).encode())
    packed = await store.result(job_id)
    return None if packed is None else await run_in_threadpool(_inline_json, packed)


def _inline_json(packed: bytes) -> SendableBytes:
    result = JobResult.from_bytes(packed)
    images = [base64.b64encode(image).decode("ascii") for image in result.images]
    inline = {"media_type": result.media_type, "images": images, **result.fields}
    return SendableBytes(json.dumps(inline).encode())


@router.get(
    "/jobs/{job_id}",
    summary="A job's state, progress, timings, and its result once it succeeded",
    response_class=Response,
    responses={
        200: {"content": {"application/json": {"schema": {"type": "object"}}}},
        **error_responses(401, 404, 503),
    },
)
async def get_job(
    request: Request, job: JobDep, store: StoreDep, results: ResultCacheDep
) -> Response:
    """The job's JSON: its public record, then its result once it succeeded. A large
    result is sent from where the cache holds it by ``sendfile`` (64 clients reading a
    4 MB answer kept ``/healthz`` waiting 25-117 ms when it went through the event loop,
    6-9 ms this way: ``docs/service.md``, Jobs, keys and streams)."""
    head = json.dumps(job.public()).encode()
    prefix, suffix = head[:-1] + b', "result": ', b"}"
    result = None
    if job.state == "succeeded":
        result = await results.get(job.id, partial(_result_json, store, job.id))
    if result is None:
        return json_bytes_response([prefix, b"null", suffix])
    file = result.open() if offers_zero_copy_send(request.scope) else None
    if file is None:
        return json_bytes_response([prefix, result.content(), suffix])
    return FileSpanResponse(
        file,
        0,
        len(result),
        status_code=200,
        media_type="application/json",
        headers={},
        prefix=prefix,
        suffix=suffix,
    )


#: Bodies larger than this go out in pieces of this size.
CHUNK_BYTES = 256 * 1024


@router.get(
    "/jobs/{job_id}/result",
    summary="A succeeded job's image or video as a file (the first; ?index=k for another), "
    "with range requests",
    response_class=Response,
    responses={
        200: {"content": {media_type: {} for media_type in SUFFIXES}},
        206: {"description": "the bytes a Range header asked for"},
        409: {"description": "the job has not succeeded (yet)"},
        416: {"description": "the range is outside the file"},
        **error_responses(401, 404, 503),
    },
)
async def get_job_result(
    request: Request,
    job: JobDep,
    store: StoreDep,
    index: Annotated[int, Query(ge=0, description="Which image of the job.")] = 0,
) -> Response:
    """The image bytes themselves, not base64 in JSON: what a large result is fetched by
    (``curl -o``, a browser's download, an ``<img>``), resumable with ``Range``. Only the
    image's bytes (or the range of them) are read from the store, a chunk at a time, or,
    from a file on the blob volume, sent by the server from the disk (``sendfile``:
    ``service.protocol.FileSpanResponse``)."""
    if job.state != "succeeded":
        raise JobNotReady(f"the job is {job.state}; its result exists once it succeeded")
    source = await store.result_source(job.id)
    if source is None:
        raise JobNotFound("the job's result was forgotten")
    layout = await read_layout(source)
    if index >= len(layout.spans):
        raise JobNotFound(f"the job has {len(layout.spans)} image(s); no index {index}")
    begin, end = layout.spans[index]
    media_type = layout.header["media_type"]
    extension = SUFFIXES.get(media_type, "bin")
    headers = {
        "Accept-Ranges": "bytes",
        "Content-Disposition": f'attachment; filename="{job.id}-{index}.{extension}"',
    }
    wanted = byte_range(request.headers.get("range"), end - begin)
    start, stop, status = (0, end - begin, 200) if wanted is None else (*wanted, 206)
    if wanted is not None:
        headers["Content-Range"] = f"bytes {start}-{stop - 1}/{end - begin}"
    headers["Content-Length"] = str(stop - start)
    if offers_zero_copy_send(request.scope) and (file := await source.open_file()) is not None:
        return FileSpanResponse(
            file,
            begin + start,
            stop - start,
            status_code=status,
            media_type=media_type,
            headers=headers,
        )
    return StreamingResponse(
        _pieces(source, begin + start, begin + stop),
        status_code=status,
        media_type=media_type,
        headers=headers,
    )


async def _pieces(source: PackedSource, start: int, stop: int) -> AsyncIterator[bytes]:
    """Bytes ``[start, stop)`` of ``source``, ``CHUNK_BYTES`` a read (a 79 MB print is
    never in memory whole)."""
    for at in range(start, stop, CHUNK_BYTES):
        until = min(stop, at + CHUNK_BYTES)
        piece = await source.read(at, until)
        if len(piece) != until - at:
            raise StoreUnavailable("a job's result ended before its recorded size")
        yield piece


#: Sides a job's thumbnail may have, and the default (the page's cards ask 256).
MIN_THUMBNAIL_SIDE, MAX_THUMBNAIL_SIDE, THUMBNAIL_SIDE = 16, 512, 256
THUMBNAIL_QUALITY = 80
#: Thumbnails made at once per replica (each decodes a whole result image).
THUMBNAIL_WORKERS = 2


class Thumbnails:
    """A replica's thumbnails of job results: made once each (a few at a time, off the
    event loop) and kept in a small cache bounded in bytes."""

    def __init__(self, max_bytes: int = 8 * 1024 * 1024) -> None:
        self.cache: ResultCache[bytes] = ResultCache(max_bytes)
        self.slots = asyncio.Semaphore(THUMBNAIL_WORKERS)
        self.made = 0


#: The app's thumbnails, made on first use.
ThumbnailsDep = Annotated[Thumbnails, Depends(app_owned("job_thumbnails", Thumbnails))]


def make_thumbnail(image_bytes: bytes, media_type: str, side: int) -> bytes | None:
    """A result's image at most ``side`` px on its longer side, packed with its media
    type (:func:`~service.jobs.records.pack`): a JPEG, or the image itself when it is
    that small already; ``None`` when it is no still image."""
    if media_type not in STILL_TYPES:
        return None
    try:
        small = _banded_thumbnail(image_bytes, media_type, side)
        if small is None:
            with Image.open(io.BytesIO(image_bytes)) as opened:
                if max(opened.size) <= side:
                    return pack({"media_type": media_type}, [image_bytes])
                image: Image.Image = opened
                if image.mode not in ("RGB", "L"):  # a palette would resample as nearest
                    opened.draft("RGB", (side, side))
                    image = opened.convert("RGB")
                # in place: a JPEG decodes small (its draft), anything else is reduced by
                # an integer factor before the resample, with no converted copy of its size
                image.thumbnail((side, side), Image.Resampling.LANCZOS)
                small = image.convert("RGB")
    except (OSError, Image.DecompressionBombError, SyntaxError, ValueError):
        return None
    out = io.BytesIO()
    small.save(out, "JPEG", quality=THUMBNAIL_QUALITY)
    return pack({"media_type": "image/jpeg"}, [out.getvalue()])


def _banded_thumbnail(image_bytes: bytes, media_type: str, side: int) -> Image.Image | None:
    """A big 8-bit RGB PNG's thumbnail read a band at a time (:func:`~models.images.png_thumbnail`:
    Pillow's pixels without its whole decode, 268 MB for an 8192 px print); ``None`` for
    any other image, or one small enough to decode whole."""
    if media_type != "image/png":
        return None
    try:
        return png_thumbnail(image_bytes, side)
    except NotBanded:
        return None


async def _result_image(store: JobStore, job_id: str, index: int) -> tuple[bytes, str] | None:
    """Image ``index`` of a job's result and its media type, read alone (a print's other
    bytes and its packed copy never are); ``None``: no such image, or the result was
    forgotten."""
    source = await store.result_source(job_id)
    if source is None:
        return None
    layout = await read_layout(source)
    if index >= len(layout.spans):
        return None
    start, stop = layout.spans[index]
    return await source.read(start, stop), layout.header["media_type"]


@router.get(
    "/jobs/{job_id}/thumbnail",
    summary="A small picture of a succeeded job's image (JPEG, or the image itself when "
    "it is that small already)",
    response_class=Response,
    responses={
        200: {"content": {"image/jpeg": {}, "image/png": {}, "image/webp": {}}},
        404: {
            "description": "no such job; or its result has no such image, or is a video "
            "(code no_thumbnail)",
            "model": ErrorBody,
        },
        409: {"description": "the job has not succeeded (yet)", "model": ErrorBody},
        **error_responses(401, 422, 503),
    },
)
async def get_job_thumbnail(
    job: JobDep,
    store: StoreDep,
    thumbnails: ThumbnailsDep,
    size: Annotated[
        int,
        Query(
            ge=MIN_THUMBNAIL_SIDE,
            le=MAX_THUMBNAIL_SIDE,
            description="The thumbnail's longer side, at most.",
        ),
    ] = THUMBNAIL_SIDE,
    index: Annotated[int, Query(ge=0, description="Which image of the job.")] = 0,
) -> Response:
    """What a gallery shows of a job without downloading its result: made once per
    replica, off the event loop, and cached; browsers may keep it (a result never
    changes)."""
    if job.state != "succeeded":
        raise JobNotReady(f"the job is {job.state}; its thumbnail exists once it succeeded")

    async def build() -> bytes | None:
        async with thumbnails.slots:
            image = await _result_image(store, job.id, index)
            if image is None:
                return None
            made = await run_in_threadpool(make_thumbnail, *image, size)
            del image  # its bytes and its decode (a print's: hundreds of MB) go back
            await run_in_threadpool(return_freed_memory)  # to the OS, not kept by serve
        thumbnails.made += 1
        return made

    made = await thumbnails.cache.get(f"{job.id}/{index}/{size}", build)
    if made is None:
        raise JobNotFound(
            f"the job's result has no still image {index} to show small (a video, or fewer images)",
            code="no_thumbnail",
        )
    header, (data,) = unpack(made)
    return Response(
        data, media_type=header["media_type"], headers={"Cache-Control": "private, max-age=3600"}
    )


def byte_range(header: str | None, size: int) -> tuple[int, int] | None:
    """The ``[start, stop)`` a single-range ``Range: bytes=a-b`` header asks of ``size``
    bytes (``a-``, ``-n`` too; RFC 9110 14.1.2); ``None`` for no header or one that is
    not a single byte range (the whole file is sent).

    Raises:
        RangeNotSatisfiable: the range starts past the end.
    """
    if header is None or not header.startswith("bytes=") or "," in header:
        return None
    first, _, last = header.removeprefix("bytes=").strip().partition("-")
    try:
        if not first:  # the last n bytes
            start, stop = max(0, size - int(last)), size
        else:
            start = int(first)
            stop = size if not last else min(size, int(last) + 1)
    except ValueError:
        return None
    if start >= size or start >= stop:
        raise RangeNotSatisfiable(f"bytes {header.removeprefix('bytes=')} of {size}", size)
    return start, stop


def json_bytes_response(parts: list[bytes]) -> Response:
    """A JSON body already encoded, in parts. A large one is sent a piece at a time (views
    of the parts, never copies), each after the last left the socket's buffer: many large
    answers at once never pile up megabytes in the event loop's write buffers (which
    Python 3.11 shifts on every partial send)."""
    size = sum(len(part) for part in parts)
    if size <= CHUNK_BYTES:
        return Response(b"".join(parts), media_type="application/json")

    async def pieces() -> AsyncIterator[memoryview]:
        for part in parts:
            view = memoryview(part)
            for start in range(0, len(view), CHUNK_BYTES):
                yield view[start : start + CHUNK_BYTES]

    return StreamingResponse(
        pieces(), media_type="application/json", headers={"Content-Length": str(size)}
    )


@router.delete(
    "/jobs/{job_id}",
    summary="Cancel an unfinished job (it stops at its next sampler step or pass), or "
    "forget a finished one and its result",
    responses={
        200: {"description": "the job, stopped"},
        202: {"description": "the job, asked to stop: it stops at its next step"},
        204: {"description": "a finished job, forgotten"},
        **error_responses(401, 404, 503),
    },
)
async def cancel_job(job: JobDep, store: StoreDep) -> Response:
    if job.finished:
        await store.delete(job.id)
        return Response(status_code=204)
    with store.hub.watch(job_topic(job.id)) as changed:
        record = await store.cancel(job.id) or job
        deadline = time.monotonic() + CANCEL_WAIT_S
        while not record.finished and (left := deadline - time.monotonic()) > 0:
            await changed.wait(min(left, 0.25))
            record = await store.get(job.id) or record
    return JSONResponse(record.public(), status_code=200 if record.finished else 202)


#: How far ``GET /v1/jobs`` pages: each page reads the jobs before it too.
MAX_JOBS_OFFSET = 1000


class JobList(BaseModel):
    jobs: list[dict[str, Any]] = Field(description="The key's recent async jobs, newest first.")
    next_offset: int | None = Field(
        default=None,
        description="The offset of the next page (send it as ?offset=), or null after the "
        "last page (or past the deepest offset, 1000). Offsets count from the newest job: "
        "a job made meanwhile shifts the pages by one.",
    )


@router.get(
    "/jobs",
    summary="The calling key's recent async jobs, newest first, a page at a time",
    response_model=JobList,
    responses=error_responses(401, 422, 503),
)
async def list_jobs(
    store: StoreDep,
    who: CallerDep,
    limit: Annotated[int, Query(ge=1, le=100, description="Jobs in the page.")] = 20,
    offset: Annotated[
        int,
        Query(
            ge=0, le=MAX_JOBS_OFFSET, description="Jobs to skip: the previous page's next_offset."
        ),
    ] = 0,
) -> JobList:
    jobs = await store.jobs_of(who.name, offset + limit + 1)  # one more: is there a next page?
    end = offset + limit
    more = len(jobs) > end and end <= MAX_JOBS_OFFSET
    return JobList(
        jobs=[job.public() for job in jobs[offset:end]], next_offset=end if more else None
    )


class Me(BaseModel):
    key: str = Field(description="The name of the API key in use ('anonymous' with none).")
    max_jobs: int = Field(description="Unfinished async jobs this key may hold.")
    rate: float | None = Field(description="Requests per second this key may send.")


@router.get("/me", summary="Which API key is in use, and its limits", response_model=Me)
async def me(who: CallerDep) -> Me:
    return Me(key=who.name, max_jobs=who.max_jobs, rate=who.rate)


# ----------------------------------------------------------------- event streams
async def stream_room(job: JobDep, feeds: FeedsDep) -> AsyncIterator[JobRecord]:
    """The job, with one of its key's stream places held until the stream ends (else
    429). A dependency with ``yield``: FastAPI leaves it after the answer has ended."""
    with feeds.room(job.owner):
        yield job


@router.get(
    "/jobs/{job_id}/events",
    summary="Server-Sent Events: 'progress' at each change, then one 'done' with the job; "
    "'preview' (a small JPEG of the work so far) for a job sent with previews",
    response_class=EventSourceResponse,
    responses=json_error_responses(401, 404, 429, 503),
)
async def job_events(
    request: Request,
    job: Annotated[JobRecord, Depends(stream_room)],
    feeds: FeedsDep,
    drain: DrainDep,
) -> AsyncIterator[ServerSentEvent]:
    exempt = request.scope.get("state", {}).get("exempt_from_connection_cap")
    if exempt is not None:
        exempt()  # a long stream must not hold one of max_connections' places
    stop = drain.drain_started
    async with feeds.stream(job.id) as feed:
        seen = sent = sent_preview = 0
        while True:
            await feed.wait(seen, stop)
            if feed.version != seen and feed.latest is not None:
                seen = feed.version
                if feed.preview is not None and feed.preview[0] > sent_preview:
                    sent_preview = feed.preview[0]
                    yield ServerSentEvent(event="preview", raw_data=feed.preview[1])
                if feed.latest_version > sent:
                    sent = feed.latest_version
                    event, data = feed.latest
                    yield ServerSentEvent(event=event, raw_data=data)
                    if event in ("done", "gone"):
                        return
            elif stop.is_set():
                # this replica is stopping: the client reconnects (to another replica)
                yield ServerSentEvent(event="reconnect", raw_data="{}", retry=1000)
                return
