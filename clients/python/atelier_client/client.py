"""The synchronous client: :class:`Client`.

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
import contextlib
import io
import json
import time
import uuid
from collections.abc import Generator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, Unpack

import httpx

from atelier_client import _core
from atelier_client._core import ImageInput, ProgressBar, Retry, check
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


class Client:
    """A client of one Atelier server.

    Args:
        base_url: the server, e.g. ``http://127.0.0.1:8000`` (default: ``ATELIER_SERVER``,
            else that URL).
        api_key: sent as ``Authorization: Bearer`` (default: ``ATELIER_API_KEY``).
        timeout: seconds to wait for an answer (a request answered at once runs within
            the server's own deadline, 60 s by default).
        retry: when to try again (:class:`~atelier_client.Retry`).
        transport: an ``httpx`` transport (tests, proxies).
    """

    def __init__(
        self,
        base_url: str | None = None,
        *,
        api_key: str | None = None,
        timeout: float = 120.0,
        retry: Retry | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = _core.server_url(base_url)
        self.retry = retry or Retry()
        self._http = httpx.Client(
            base_url=self.base_url,
            headers=_core.auth_headers(_core.api_key(api_key)),
            timeout=httpx.Timeout(timeout, connect=10.0),
            transport=transport,
        )
        self._limits: dict[str, Any] | None = None

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ requests
    def _request(
        self, method: str, path: str, *, idempotent: bool = False, **kwargs: Any
    ) -> httpx.Response:
        """One request, retried by :attr:`retry`; a POST with a fresh ``Idempotency-Key``
        kept across its retries. Raises the error of an answer that is not 2xx."""
        headers = dict(kwargs.pop("headers", None) or {})
        if method == "POST" and idempotent:
            headers.setdefault("Idempotency-Key", uuid.uuid4().hex)
        state = self.retry.state()
        while True:
            try:
                response = self._http.request(method, path, headers=headers, **kwargs)
            except httpx.TransportError as exc:
                delay = state.after_error(exc)
                if delay is None:
                    raise TransportFailed(f"{method} {path}: {exc}") from exc
                time.sleep(delay)
                continue
            delay = state.after_answer(response)
            if delay is None:
                return check(response)
            time.sleep(delay)

    def limits(self) -> dict[str, Any]:
        """``GET /v1/limits``: what this server takes (asked once, then kept)."""
        if self._limits is None:
            self._limits = dict(self._request("GET", "/v1/limits").json())
        return self._limits

    def models(self) -> dict[str, Any]:
        """``GET /v1/models``: each model, loaded or why not."""
        return dict(self._request("GET", "/v1/models").json())

    # ------------------------------------------------------------------ stylize
    def stylize(
        self,
        photo: ImageInput,
        paintings: ImageInput | Sequence[ImageInput],
        *,
        masks: Sequence[ImageInput] | None = None,
        as_job: bool | None = None,
        progress: ProgressCallback | None = None,
        bar: bool | ProgressBar = False,
        output: str | Path | None = None,
        **options: Unpack[StylizeOptions],
    ) -> Result:
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
        parts = self._stylize_parts(photo, paintings, masks)
        if as_job is None:
            as_job = progress is not None or bool(bar) or self._wants_job(parts, options)
        if not as_job:
            try:
                return self._stylize_now(parts, options, output)
            except SendAsJob:
                pass
        job = self._submit_stylize(parts, options)
        job = self.wait(job, progress=progress, bar=bar)
        return self._job_result(job, output)

    def submit_stylize(
        self,
        photo: ImageInput,
        paintings: ImageInput | Sequence[ImageInput],
        *,
        masks: Sequence[ImageInput] | None = None,
        **options: Unpack[StylizeOptions],
    ) -> Job:
        """Start a stylisation job (``Prefer: respond-async``) and return it at once."""
        return self._submit_stylize(self._stylize_parts(photo, paintings, masks), options)

    @staticmethod
    def _stylize_parts(
        photo: ImageInput,
        paintings: ImageInput | Sequence[ImageInput],
        masks: Sequence[ImageInput] | None,
    ) -> list[tuple[str, tuple[str, bytes, str]]]:
        styles = (
            list(paintings)
            if isinstance(paintings, Sequence) and not isinstance(paintings, str | bytes)
            else [paintings]
        )
        files = [*_core.iter_files("content", [_core.read_input(photo)])]
        files += _core.iter_files("style", [_core.read_input(item) for item in styles])
        files += _core.iter_files("mask", [_core.read_input(item) for item in masks or ()])
        return files

    def _wants_job(
        self, parts: list[tuple[str, tuple[str, bytes, str]]], options: Mapping[str, Any]
    ) -> bool:
        if _core.needs_job(parts[0][1][1]):
            return True
        size = options.get("size")
        if size is None:
            return False
        above = self.limits().get("stylize", {}).get("print_size_above")
        return above is not None and int(size) > int(above)

    def _stylize_now(
        self,
        parts: list[tuple[str, tuple[str, bytes, str]]],
        options: Mapping[str, Any],
        output: str | Path | None,
    ) -> Result:
        response = self._request(
            "POST", "/v1/stylize", idempotent=True, files=parts, data=stylize_form(options)
        )
        media_type = response.headers.get("content-type", "application/octet-stream")
        if output is None:
            return Result(media_type, data=response.content)
        path = Path(output)
        path.write_bytes(response.content)
        return Result(media_type, path=path)

    def _submit_stylize(
        self, parts: list[tuple[str, tuple[str, bytes, str]]], options: Mapping[str, Any]
    ) -> Job:
        response = self._request(
            "POST",
            "/v1/stylize",
            idempotent=True,
            files=parts,
            data=stylize_form(options),
            headers={"Prefer": "respond-async"},
        )
        return Job.from_json(response.json())

    def _job_result(self, job: Job, output: str | Path | None) -> Result:
        job.raise_for_failure()
        if output is not None:
            path, media_type = self._download(job.id, Path(output), 0)
            return Result(media_type, job=job, path=path)
        buffer = io.BytesIO()
        media_type = self._fetch(job.id, 0, buffer)
        return Result(media_type, job=job, data=buffer.getvalue())

    # ------------------------------------------------------------------ generate
    def generate(
        self,
        prompt: str,
        *,
        as_job: bool | None = None,
        progress: ProgressCallback | None = None,
        bar: bool | ProgressBar = False,
        **options: Unpack[GenerateOptions],
    ) -> GenerateResult:
        """Draw ``num_images`` images of ``prompt``: answered at once, or as a job
        followed to its end when ``as_job`` or a progress report asks for one."""
        if as_job is None:
            as_job = progress is not None or bool(bar)
        body = generate_body(prompt, options)
        if not as_job:
            data = self._request("POST", "/v1/generate", idempotent=True, json=body).json()
            images = [base64.b64decode(image) for image in data.pop("images")]
            return _generated(images, data, None)
        job = self.wait(self.submit_generate(prompt, **options), progress=progress, bar=bar)
        job.raise_for_failure()
        job = self.job(job.id)  # the record with the result's fields (seeds, understood)
        images = [self.result(job.id, index=k) for k in range(job.result_count)]
        return _generated(images, job.result_fields, job)

    def submit_generate(self, prompt: str, **options: Unpack[GenerateOptions]) -> Job:
        """Start a text-to-image job and return it at once."""
        response = self._request(
            "POST",
            "/v1/generate",
            idempotent=True,
            json=generate_body(prompt, options),
            headers={"Prefer": "respond-async"},
        )
        return Job.from_json(response.json())

    # ------------------------------------------------------------------ jobs
    def job(self, job_id: str | Job) -> Job:
        """``GET /v1/jobs/{id}``."""
        return Job.from_json(self._request("GET", f"/v1/jobs/{_id(job_id)}").json())

    def jobs(self, *, limit: int = 20, offset: int = 0) -> JobPage:
        """``GET /v1/jobs``: a page of this key's recent jobs, newest first."""
        data = self._request("GET", "/v1/jobs", params={"limit": limit, "offset": offset}).json()
        return JobPage([Job.from_json(job) for job in data["jobs"]], data.get("next_offset"))

    def cancel(self, job_id: str | Job) -> Job | None:
        """``DELETE /v1/jobs/{id}``: an unfinished job is stopped (returned, stopped or
        asked to stop); a finished one is forgotten (``None``)."""
        response = self._request("DELETE", f"/v1/jobs/{_id(job_id)}")
        return None if response.status_code == 204 else Job.from_json(response.json())

    def events(self, job_id: str | Job) -> Generator[_core.Event, None, None]:
        """The job's Server-Sent Events as they come (``progress``, ``preview``,
        ``done``; ``reconnect`` when the replica stops), one connection."""
        timeout = httpx.Timeout(None, connect=10.0)
        with self._http.stream("GET", f"/v1/jobs/{_id(job_id)}/events", timeout=timeout) as r:
            if not r.is_success:
                r.read()
                check(r)
            parser = _core.EventParser()
            for line in r.iter_lines():
                event = parser.feed(line)
                if event is not None:
                    yield event

    def wait(
        self,
        job_id: str | Job,
        *,
        progress: ProgressCallback | None = None,
        bar: bool | ProgressBar = False,
        timeout: float | None = None,
    ) -> Job:
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
            return self._follow(_id(job_id), callback, deadline)
        finally:
            if made is not None:
                made.close()

    def _follow(
        self, job_id: str, callback: ProgressCallback | None, deadline: float | None
    ) -> Job:
        state = self.retry.state()
        while True:
            try:
                with contextlib.closing(self.events(job_id)) as events:
                    for event in events:
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
            except TooManyStreams:
                return self._poll(job_id, callback, deadline)
            except httpx.TransportError as exc:
                delay = state.after_error(exc)
                if delay is None:
                    raise TransportFailed(f"the events of job {job_id}: {exc}") from exc
                time.sleep(delay)
            _check_deadline(deadline, job_id)

    def _poll(self, job_id: str, callback: ProgressCallback | None, deadline: float | None) -> Job:
        seen = None
        while True:
            job = self.job(job_id)
            if callback is not None and job.progress != seen:
                seen = job.progress
                callback(job.progress)
            if job.finished:
                return job
            _check_deadline(deadline, job_id)
            time.sleep(POLL_S)

    # ------------------------------------------------------------------ results
    def result(self, job_id: str | Job, *, index: int = 0) -> bytes:
        """The succeeded job's file ``index`` (``GET /v1/jobs/{id}/result``), as bytes."""
        buffer = io.BytesIO()
        self._fetch(_id(job_id), index, buffer)
        return buffer.getvalue()

    def download(self, job_id: str | Job, path: str | Path, *, index: int = 0) -> Path:
        """Write the succeeded job's file ``index`` to ``path`` a chunk at a time,
        through ``path``'s ``.part`` file: a download cut off (here, or in an earlier
        call) resumes where it stopped with a ``Range`` request."""
        return self._download(_id(job_id), Path(path), index)[0]

    def _download(self, job_id: str, path: Path, index: int) -> tuple[Path, str]:
        part = path.with_name(f"{path.name}.{job_id}-{index}.part")
        with part.open("ab") as sink:
            media_type = self._fetch(job_id, index, sink)
        part.replace(path)
        return path, media_type

    def _fetch(self, job_id: str, index: int, sink: IO[bytes]) -> str:
        """Stream the result into ``sink`` from its current end (``Range``), resuming
        after a broken connection; return its media type."""
        state = self.retry.state()
        url = f"/v1/jobs/{job_id}/result"
        while True:
            offset = sink.seek(0, io.SEEK_END)
            headers = {"Range": f"bytes={offset}-"} if offset else {}
            try:
                with self._http.stream("GET", url, params={"index": index}, headers=headers) as r:
                    if r.status_code == 416 and offset:  # the part is whole already
                        return str(self.job(job_id).raw.get("result", {}).get("media_type", ""))
                    if not r.is_success:
                        r.read()
                        delay = state.after_answer(r)
                        if delay is None:
                            check(r)
                        time.sleep(delay or 0)
                        continue
                    _start_at(sink, r, offset)
                    for chunk in r.iter_bytes():
                        sink.write(chunk)
                    return str(r.headers.get("content-type", "application/octet-stream"))
            except httpx.TransportError as exc:
                delay = state.after_error(exc)
                if delay is None:
                    raise TransportFailed(f"the result of job {job_id}: {exc}") from exc
                time.sleep(delay)


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
    )
