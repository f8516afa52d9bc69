"""Every call of the client, written once as a flow (:mod:`atelier_client._flow`).

Every call is one or a few HTTP requests to the service (README, "HTTP API"); a POST
carries an ``Idempotency-Key`` made for the call and kept across its retries, so a
retry (after a 429, a 503 or a broken connection) answers the first request's job and
never makes a second. Work that the server runs as a job (a video, a print above
``print_size_above``, anything the server answers ``send_as_job``, or any call that asks
for progress) is sent with ``Prefer: respond-async`` and followed on its event stream;
its result is read from ``GET /v1/jobs/{id}/result``, resumed with ``Range`` where a
connection breaks.
"""

from __future__ import annotations

import base64
import io
import json
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, Generic, TypeVar, Unpack

import httpx

from atelier_client import _core
from atelier_client._core import Event, ImageInput, ProgressBar, Retry, RetryState, check
from atelier_client._flow import Body, Emit, Flow, Next, Runner, Send, Sleep, call
from atelier_client.errors import (
    AtelierError,
    JobNotFound,
    SendAsJob,
    TooManyStreams,
    TransportFailed,
)
from atelier_client.options import GenerateOptions, StylizeOptions, generate_body, stylize_form
from atelier_client.types import GenerateResult, Job, JobPage, ProgressCallback, Result

#: How often a job is polled when its event stream is refused (too many streams).
POLL_S = 0.5
#: Where a call reports its progress: a callback, or nowhere.
Reporting = ProgressCallback | None
#: A request's uploads: (form field, (file name, bytes, media type)).
Parts = list[tuple[str, tuple[str, bytes, str]]]
Transport = TypeVar("Transport", httpx.BaseTransport, httpx.AsyncBaseTransport)


class Calls(Runner, Generic[Transport]):
    """What both clients are: their settings and every call, as a flow (the clients
    run it with their own I/O)."""

    #: The ``httpx`` client class the ops go through.
    _http_client: Callable[..., Any]

    def __init__(
        self,
        base_url: str | None = None,
        *,
        api_key: str | None = None,
        timeout: float = 120.0,
        retry: Retry | None = None,
        transport: Transport | None = None,
    ) -> None:
        self.base_url = _core.server_url(base_url)
        self.retry = retry or Retry()
        self._known_limits: dict[str, Any] | None = None
        self._http = self._http_client(
            transport=transport,
            base_url=self.base_url,
            headers=_core.auth_headers(_core.api_key(api_key)),
            timeout=httpx.Timeout(timeout, connect=10.0),
        )

    # ------------------------------------------------------------------ requests
    def _request(
        self, method: str, path: str, *, idempotent: bool = False, **kwargs: Any
    ) -> Flow[httpx.Response]:
        """One request, retried by :attr:`retry`; a POST with a fresh ``Idempotency-Key``
        kept across its retries. Raises the error of an answer that is not 2xx."""
        headers = dict(kwargs.pop("headers", None) or {})
        if method == "POST" and idempotent:
            headers.setdefault("Idempotency-Key", uuid.uuid4().hex)
        state = self.retry.state()
        while True:
            try:
                response = yield Send(method, path, {**kwargs, "headers": headers})
            except httpx.TransportError as exc:
                yield Sleep(_retry_delay(state, exc, f"{method} {path}"))
                continue
            delay = state.after_answer(response)
            if delay is None:
                return check(response)
            yield Sleep(delay)

    def _limits(self) -> Flow[dict[str, Any]]:
        """``GET /v1/limits``: what this server takes (asked once, then kept)."""
        if self._known_limits is None:
            self._known_limits = dict((yield from self._request("GET", "/v1/limits")).json())
        return self._known_limits

    def _models(self) -> Flow[dict[str, Any]]:
        """``GET /v1/models``: each model, loaded or why not."""
        return dict((yield from self._request("GET", "/v1/models")).json())

    # ------------------------------------------------------------------ stylize
    def _stylize(
        self,
        photo: ImageInput,
        paintings: ImageInput | Sequence[ImageInput],
        *,
        masks: Sequence[ImageInput] | None = None,
        as_job: bool | None = None,
        progress: Reporting = None,
        bar: bool | ProgressBar = False,
        output: str | Path | None = None,
        **options: Unpack[StylizeOptions],
    ) -> Flow[Result]:
        """Paint ``photo`` (a still or a video) in the style of one to four paintings.

        A request the server answers at once is sent that way unless ``as_job`` or a
        progress report (``progress``, ``bar``) asks for a job; a video, a print (``size``
        above the server's ``print_size_above``) and a request the server answers
        ``send_as_job`` go as a job, followed to its end. The result comes back as
        bytes (``Result.content``, ``Result.image()``), or written to ``output`` a chunk
        at a time.

        Raises:
            AtelierError: the API's error (its code's class), or the failed job's.
        """
        parts = _stylize_parts(photo, paintings, masks)
        if as_job is None:
            wants = progress is not None or bool(bar)
            as_job = wants or (yield from self._wants_job(parts, options))
        if not as_job:
            try:
                response = yield from self._request(
                    "POST", "/v1/stylize", idempotent=True, files=parts, data=stylize_form(options)
                )
                return _answered_now(response, output)
            except SendAsJob:
                pass
        job = yield from self._submit_parts(parts, options)
        job = yield from self._wait(job, progress=progress, bar=bar)
        return (yield from self._job_result(job, output))

    def _submit_stylize(
        self,
        photo: ImageInput,
        paintings: ImageInput | Sequence[ImageInput],
        *,
        masks: Sequence[ImageInput] | None = None,
        **options: Unpack[StylizeOptions],
    ) -> Flow[Job]:
        """Start a stylisation job (``Prefer: respond-async``) and return it at once."""
        return (yield from self._submit_parts(_stylize_parts(photo, paintings, masks), options))

    def _wants_job(self, parts: Parts, options: Mapping[str, Any]) -> Flow[bool]:
        if _core.needs_job(parts[0][1][1]):
            return True
        size = options.get("size")
        if size is None:
            return False
        above = (yield from self._limits()).get("stylize", {}).get("print_size_above")
        return above is not None and int(size) > int(above)

    def _submit_parts(self, parts: Parts, options: Mapping[str, Any]) -> Flow[Job]:
        response = yield from self._request(
            "POST",
            "/v1/stylize",
            idempotent=True,
            files=parts,
            data=stylize_form(options),
            headers={"Prefer": "respond-async"},
        )
        return Job.from_json(response.json())

    def _job_result(self, job: Job, output: str | Path | None) -> Flow[Result]:
        job.raise_for_failure()
        if output is not None:
            path, media_type = yield from self._download_to(job.id, Path(output), 0)
            return Result(media_type, job=job, path=path)
        buffer = io.BytesIO()
        media_type = yield from self._fetch(job.id, 0, buffer)
        return Result(media_type, job=job, data=buffer.getvalue())

    # ------------------------------------------------------------------ generate
    def _generate(
        self,
        prompt: str,
        *,
        as_job: bool | None = None,
        progress: Reporting = None,
        bar: bool | ProgressBar = False,
        **options: Unpack[GenerateOptions],
    ) -> Flow[GenerateResult]:
        """Draw ``num_images`` images of ``prompt``: answered at once, or as a job
        followed to its end when ``as_job`` or a progress report asks for one."""
        if as_job is None:
            as_job = progress is not None or bool(bar)
        body = generate_body(prompt, options)
        if not as_job:
            answer = yield from self._request("POST", "/v1/generate", idempotent=True, json=body)
            data = answer.json()
            images = [base64.b64decode(image) for image in data.pop("images")]
            return _generated(images, data, None)
        job = yield from self._submit_generate(prompt, **options)
        job = yield from self._wait(job, progress=progress, bar=bar)
        job.raise_for_failure()
        job = yield from self._job(job.id)  # the record with the result's fields
        images = []
        for index in range(job.result_count):
            images.append((yield from self._result(job.id, index=index)))
        return _generated(images, job.result_fields, job)

    def _submit_generate(self, prompt: str, **options: Unpack[GenerateOptions]) -> Flow[Job]:
        """Start a text-to-image job and return it at once."""
        response = yield from self._request(
            "POST",
            "/v1/generate",
            idempotent=True,
            json=generate_body(prompt, options),
            headers={"Prefer": "respond-async"},
        )
        return Job.from_json(response.json())

    # ------------------------------------------------------------------ jobs
    def _job(self, job_id: str | Job) -> Flow[Job]:
        """``GET /v1/jobs/{id}``."""
        return Job.from_json((yield from self._request("GET", f"/v1/jobs/{_id(job_id)}")).json())

    def _jobs(self, *, limit: int = 20, offset: int = 0) -> Flow[JobPage]:
        """``GET /v1/jobs``: a page of this key's recent jobs, newest first."""
        params = {"limit": limit, "offset": offset}
        data = (yield from self._request("GET", "/v1/jobs", params=params)).json()
        return JobPage([Job.from_json(job) for job in data["jobs"]], data.get("next_offset"))

    def _cancel(self, job_id: str | Job) -> Flow[Job | None]:
        """``DELETE /v1/jobs/{id}``: an unfinished job is stopped (returned, stopped or
        asked to stop); a finished one is forgotten (``None``)."""
        response = yield from self._request("DELETE", f"/v1/jobs/{_id(job_id)}")
        return None if response.status_code == 204 else Job.from_json(response.json())

    def _events(self, job_id: str | Job) -> Flow[None]:
        """The events of the clients' ``events``, emitted as they come."""
        response, lines = yield from _open_events(_id(job_id))
        parser = _core.EventParser()
        while (event := (yield from _next_event(lines, parser))) is not None:
            yield Emit(event)
        yield Body(response, "close")

    def _wait(
        self,
        job_id: str | Job,
        *,
        progress: Reporting = None,
        bar: bool | ProgressBar = False,
        timeout: float | None = None,
    ) -> Flow[Job]:
        """Follow the job until it finishes and return it (failed or cancelled too:
        ``Job.raise_for_failure()``), calling ``progress`` at each change. Its event
        stream is followed again after a replica's ``reconnect`` or a broken
        connection; a refused stream (too many open) falls back to polling.

        Raises:
            TimeoutError: not finished within ``timeout`` seconds.
        """
        callback, made = _core.progress_callbacks(progress, bar)
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            return (yield from self._follow(_id(job_id), callback, deadline))
        finally:
            if made is not None:
                made.close()

    def _follow(self, job_id: str, callback: Reporting, deadline: float | None) -> Flow[Job]:
        state = self.retry.state()
        while True:
            try:
                job = yield from _follow_stream(job_id, callback, deadline)
            except TooManyStreams:
                return (yield from self._poll(job_id, callback, deadline))
            except httpx.TransportError as exc:
                yield Sleep(_retry_delay(state, exc, f"the events of job {job_id}"))
                job = None
            if job is not None:
                return job
            _check_deadline(deadline, job_id)

    def _poll(self, job_id: str, callback: Reporting, deadline: float | None) -> Flow[Job]:
        seen = None
        while True:
            job = yield from self._job(job_id)
            if callback is not None and job.progress != seen:
                seen = job.progress
                callback(job.progress)
            if job.finished:
                return job
            _check_deadline(deadline, job_id)
            yield Sleep(POLL_S)

    # ------------------------------------------------------------------ results
    def _result(self, job_id: str | Job, *, index: int = 0) -> Flow[bytes]:
        """The succeeded job's file ``index`` (``GET /v1/jobs/{id}/result``), as bytes."""
        buffer = io.BytesIO()
        yield from self._fetch(_id(job_id), index, buffer)
        return buffer.getvalue()

    def _download(self, job_id: str | Job, path: str | Path, *, index: int = 0) -> Flow[Path]:
        """Write the succeeded job's file ``index`` to ``path`` a chunk at a time,
        through ``path``'s ``.part`` file: a download cut off (here, or in an earlier
        call) resumes where it stopped with a ``Range`` request."""
        return (yield from self._download_to(_id(job_id), Path(path), index))[0]

    def _download_to(self, job_id: str, path: Path, index: int) -> Flow[tuple[Path, str]]:
        part = path.with_name(f"{path.name}.{job_id}-{index}.part")
        with part.open("ab") as sink:
            media_type = yield from self._fetch(job_id, index, sink)
        part.replace(path)
        return path, media_type

    def _fetch(self, job_id: str, index: int, sink: IO[bytes]) -> Flow[str]:
        """Stream the result into ``sink`` from its current end (``Range``), resuming
        after a broken connection; return its media type."""
        state = self.retry.state()
        while True:
            try:
                media_type = yield from self._fetch_once(job_id, index, sink, state)
            except httpx.TransportError as exc:
                yield Sleep(_retry_delay(state, exc, f"the result of job {job_id}"))
                continue
            if media_type is not None:
                return media_type

    def _fetch_once(
        self, job_id: str, index: int, sink: IO[bytes], state: RetryState
    ) -> Flow[str | None]:
        """One try of :meth:`_fetch`: the media type, or ``None`` to try again."""
        offset = sink.seek(0, io.SEEK_END)
        headers = {"Range": f"bytes={offset}-"} if offset else {}
        options = {"params": {"index": index}, "headers": headers}
        response = yield Send("GET", f"/v1/jobs/{job_id}/result", options, stream=True)
        try:
            if response.status_code == 416 and offset:  # the part is whole already
                job = yield from self._job(job_id)
                return str(job.raw.get("result", {}).get("media_type", ""))
            if not response.is_success:
                yield Body(response, "all")
                delay = state.after_answer(response)
                if delay is None:
                    check(response)
                yield Sleep(delay or 0)
                return None
            _start_at(sink, response, offset)
            chunks = yield Body(response, "bytes")
            while (chunk := (yield Next(chunks))) is not None:
                sink.write(chunk)
            return str(response.headers.get("content-type", "application/octet-stream"))
        finally:
            yield Body(response, "close")

    # ------------------------------------------------------------------ the client's calls
    limits, models = call(_limits), call(_models)
    stylize, submit_stylize = call(_stylize), call(_submit_stylize)
    generate, submit_generate = call(_generate), call(_submit_generate)
    job, jobs, cancel, wait = call(_job), call(_jobs), call(_cancel), call(_wait)
    result, download = call(_result), call(_download)


def _open_events(job_id: str) -> Flow[tuple[httpx.Response, Any]]:
    """Open the job's event stream: the response and its lines (an error raised)."""
    options = {"timeout": httpx.Timeout(None, connect=10.0)}
    response = yield Send("GET", f"/v1/jobs/{job_id}/events", options, stream=True)
    if not response.is_success:
        yield Body(response, "all")
        check(response)
    return response, (yield Body(response, "lines"))


def _next_event(lines: Any, parser: _core.EventParser) -> Flow[Event | None]:
    """The stream's next event, or ``None`` at its end."""
    while (line := (yield Next(lines))) is not None:
        event = parser.feed(line)
        if event is not None:
            return event
    return None


def _follow_stream(job_id: str, callback: Reporting, deadline: float | None) -> Flow[Job | None]:
    """Follow one connection of the job's event stream: the finished job, or ``None``
    when the stream ends first (a replica's ``reconnect``)."""
    response, lines = yield from _open_events(job_id)
    try:
        parser = _core.EventParser()
        while (event := (yield from _next_event(lines, parser))) is not None:
            if event.event == "gone":
                raise JobNotFound(f"job {job_id} was forgotten")
            if event.event not in ("progress", "done"):
                continue
            job = Job.from_json(json.loads(event.data))
            if callback is not None:
                callback(job.progress)
            if event.event == "done" or job.finished:
                return job
            _check_deadline(deadline, job_id)
        return None
    finally:
        yield Body(response, "close")


def _retry_delay(state: RetryState, exc: httpx.TransportError, what: str) -> float:
    """Seconds to wait before trying again after no answer; raises once the retries
    are spent."""
    delay = state.after_error(exc)
    if delay is None:
        raise TransportFailed(f"{what}: {exc}") from exc
    return delay


def _stylize_parts(
    photo: ImageInput,
    paintings: ImageInput | Sequence[ImageInput],
    masks: Sequence[ImageInput] | None,
) -> Parts:
    styles = (
        list(paintings)
        if isinstance(paintings, Sequence) and not isinstance(paintings, str | bytes)
        else [paintings]
    )
    files = [*_core.iter_files("content", [_core.read_input(photo)])]
    files += _core.iter_files("style", [_core.read_input(item) for item in styles])
    files += _core.iter_files("mask", [_core.read_input(item) for item in masks or ()])
    return files


def _answered_now(response: httpx.Response, output: str | Path | None) -> Result:
    """The result of a request answered at once, kept as bytes or written to ``output``."""
    media_type = response.headers.get("content-type", "application/octet-stream")
    if output is None:
        return Result(media_type, data=response.content)
    path = Path(output)
    path.write_bytes(response.content)
    return Result(media_type, path=path)


def _start_at(sink: IO[bytes], response: httpx.Response, offset: int) -> None:
    """Position ``sink`` where the answer's bytes start: after the part held for a
    ``206``, at 0 for a whole file."""
    if response.status_code == 206:
        start = _core.content_range_start(response)
        if start != offset:
            raise AtelierError(f"asked bytes from {offset}, got from {start}", code="bad_answer")
    else:
        sink.seek(0)
        sink.truncate()


def _id(job: str | Job) -> str:
    return job.id if isinstance(job, Job) else job


def _check_deadline(deadline: float | None, job_id: str) -> None:
    if deadline is not None and time.monotonic() > deadline:
        raise TimeoutError(f"job {job_id} did not finish in time")


def _generated(images: list[bytes], fields: Mapping[str, Any], job: Job | None) -> GenerateResult:
    return GenerateResult(
        images=images,
        seeds=[int(seed) for seed in fields.get("seeds", [])],
        understood=fields.get("understood"),
        ignored=list(fields.get("ignored", [])),
        parameters=dict(fields.get("parameters", {})),
        job=job,
        not_learned=list(fields.get("not_learned", [])),
    )
