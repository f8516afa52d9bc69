"""The asynchronous client: :class:`AsyncClient`, the same calls as
:class:`~atelier_client.Client` (same arguments, same rules for jobs, retries and
results), awaited."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import json
import time
import uuid
from collections.abc import AsyncGenerator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, Unpack

import httpx

from atelier_client import _core
from atelier_client._core import ImageInput, ProgressBar, Retry, check
from atelier_client.client import (
    POLL_S,
    Client,
    _check_deadline,
    _generated,
    _id,
    _start_at,
)
from atelier_client.errors import JobNotFound, SendAsJob, TooManyStreams, TransportFailed
from atelier_client.options import GenerateOptions, StylizeOptions, generate_body, stylize_form
from atelier_client.types import GenerateResult, Job, JobPage, ProgressCallback, Result

Parts = list[tuple[str, tuple[str, bytes, str]]]


class AsyncClient:
    """A client of one Atelier server for asyncio code; see :class:`~atelier_client.Client`
    for the arguments."""

    def __init__(
        self,
        base_url: str | None = None,
        *,
        api_key: str | None = None,
        timeout: float = 120.0,
        retry: Retry | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = _core.server_url(base_url)
        self.retry = retry or Retry()
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            headers=_core.auth_headers(_core.api_key(api_key)),
            timeout=httpx.Timeout(timeout, connect=10.0),
            transport=transport,
        )
        self._limits: dict[str, Any] | None = None

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _request(
        self, method: str, path: str, *, idempotent: bool = False, **kwargs: Any
    ) -> httpx.Response:
        headers = dict(kwargs.pop("headers", None) or {})
        if method == "POST" and idempotent:
            headers.setdefault("Idempotency-Key", uuid.uuid4().hex)
        state = self.retry.state()
        while True:
            try:
                response = await self._http.request(method, path, headers=headers, **kwargs)
            except httpx.TransportError as exc:
                delay = state.after_error(exc)
                if delay is None:
                    raise TransportFailed(f"{method} {path}: {exc}") from exc
                await asyncio.sleep(delay)
                continue
            delay = state.after_answer(response)
            if delay is None:
                return check(response)
            await asyncio.sleep(delay)

    async def limits(self) -> dict[str, Any]:
        if self._limits is None:
            self._limits = dict((await self._request("GET", "/v1/limits")).json())
        return self._limits

    async def models(self) -> dict[str, Any]:
        return dict((await self._request("GET", "/v1/models")).json())

    # ------------------------------------------------------------------ stylize
    async def stylize(
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
        """:meth:`Client.stylize <atelier_client.Client.stylize>`, awaited."""
        parts = Client._stylize_parts(photo, paintings, masks)
        if as_job is None:
            as_job = progress is not None or bool(bar) or await self._wants_job(parts, options)
        if not as_job:
            try:
                response = await self._request(
                    "POST", "/v1/stylize", idempotent=True, files=parts, data=stylize_form(options)
                )
                media_type = response.headers.get("content-type", "application/octet-stream")
                if output is None:
                    return Result(media_type, data=response.content)
                path = Path(output)
                path.write_bytes(response.content)
                return Result(media_type, path=path)
            except SendAsJob:
                pass
        job = await self._submit_stylize(parts, options)
        job = await self.wait(job, progress=progress, bar=bar)
        job.raise_for_failure()
        if output is not None:
            path, media_type = await self._download(job.id, Path(output), 0)
            return Result(media_type, job=job, path=path)
        buffer = io.BytesIO()
        media_type = await self._fetch(job.id, 0, buffer)
        return Result(media_type, job=job, data=buffer.getvalue())

    async def submit_stylize(
        self,
        photo: ImageInput,
        paintings: ImageInput | Sequence[ImageInput],
        *,
        masks: Sequence[ImageInput] | None = None,
        **options: Unpack[StylizeOptions],
    ) -> Job:
        return await self._submit_stylize(Client._stylize_parts(photo, paintings, masks), options)

    async def _wants_job(self, parts: Parts, options: Mapping[str, Any]) -> bool:
        if _core.needs_job(parts[0][1][1]):
            return True
        size = options.get("size")
        if size is None:
            return False
        above = (await self.limits()).get("stylize", {}).get("print_size_above")
        return above is not None and int(size) > int(above)

    async def _submit_stylize(self, parts: Parts, options: Mapping[str, Any]) -> Job:
        response = await self._request(
            "POST",
            "/v1/stylize",
            idempotent=True,
            files=parts,
            data=stylize_form(options),
            headers={"Prefer": "respond-async"},
        )
        return Job.from_json(response.json())

    # ------------------------------------------------------------------ generate
    async def generate(
        self,
        prompt: str,
        *,
        as_job: bool | None = None,
        progress: ProgressCallback | None = None,
        bar: bool | ProgressBar = False,
        **options: Unpack[GenerateOptions],
    ) -> GenerateResult:
        """:meth:`Client.generate <atelier_client.Client.generate>`, awaited."""
        if as_job is None:
            as_job = progress is not None or bool(bar)
        body = generate_body(prompt, options)
        if not as_job:
            response = await self._request("POST", "/v1/generate", idempotent=True, json=body)
            data = response.json()
            images = [base64.b64decode(image) for image in data.pop("images")]
            return _generated(images, data, None)
        job = await self.submit_generate(prompt, **options)
        job = await self.wait(job, progress=progress, bar=bar)
        job.raise_for_failure()
        job = await self.job(job.id)
        images = [await self.result(job.id, index=k) for k in range(job.result_count)]
        return _generated(images, job.result_fields, job)

    async def submit_generate(self, prompt: str, **options: Unpack[GenerateOptions]) -> Job:
        response = await self._request(
            "POST",
            "/v1/generate",
            idempotent=True,
            json=generate_body(prompt, options),
            headers={"Prefer": "respond-async"},
        )
        return Job.from_json(response.json())

    # ------------------------------------------------------------------ jobs
    async def job(self, job_id: str | Job) -> Job:
        return Job.from_json((await self._request("GET", f"/v1/jobs/{_id(job_id)}")).json())

    async def jobs(self, *, limit: int = 20, offset: int = 0) -> JobPage:
        response = await self._request("GET", "/v1/jobs", params={"limit": limit, "offset": offset})
        data = response.json()
        return JobPage([Job.from_json(job) for job in data["jobs"]], data.get("next_offset"))

    async def cancel(self, job_id: str | Job) -> Job | None:
        response = await self._request("DELETE", f"/v1/jobs/{_id(job_id)}")
        return None if response.status_code == 204 else Job.from_json(response.json())

    async def events(self, job_id: str | Job) -> AsyncGenerator[_core.Event, None]:
        timeout = httpx.Timeout(None, connect=10.0)
        url = f"/v1/jobs/{_id(job_id)}/events"
        async with self._http.stream("GET", url, timeout=timeout) as response:
            if not response.is_success:
                await response.aread()
                check(response)
            parser = _core.EventParser()
            async for line in response.aiter_lines():
                event = parser.feed(line)
                if event is not None:
                    yield event

    async def wait(
        self,
        job_id: str | Job,
        *,
        progress: ProgressCallback | None = None,
        bar: bool | ProgressBar = False,
        timeout: float | None = None,
    ) -> Job:
        """:meth:`Client.wait <atelier_client.Client.wait>`, awaited."""
        callback, made = _core.progress_callbacks(progress, bar)
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            return await self._follow(_id(job_id), callback, deadline)
        finally:
            if made is not None:
                made.close()

    async def _follow(
        self, job_id: str, callback: ProgressCallback | None, deadline: float | None
    ) -> Job:
        state = self.retry.state()
        while True:
            try:
                async with contextlib.aclosing(self.events(job_id)) as events:
                    async for event in events:
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
                return await self._poll(job_id, callback, deadline)
            except httpx.TransportError as exc:
                delay = state.after_error(exc)
                if delay is None:
                    raise TransportFailed(f"the events of job {job_id}: {exc}") from exc
                await asyncio.sleep(delay)
            _check_deadline(deadline, job_id)

    async def _poll(
        self, job_id: str, callback: ProgressCallback | None, deadline: float | None
    ) -> Job:
        seen = None
        while True:
            job = await self.job(job_id)
            if callback is not None and job.progress != seen:
                seen = job.progress
                callback(job.progress)
            if job.finished:
                return job
            _check_deadline(deadline, job_id)
            await asyncio.sleep(POLL_S)

    # ------------------------------------------------------------------ results
    async def result(self, job_id: str | Job, *, index: int = 0) -> bytes:
        buffer = io.BytesIO()
        await self._fetch(_id(job_id), index, buffer)
        return buffer.getvalue()

    async def download(self, job_id: str | Job, path: str | Path, *, index: int = 0) -> Path:
        return (await self._download(_id(job_id), Path(path), index))[0]

    async def _download(self, job_id: str, path: Path, index: int) -> tuple[Path, str]:
        part = path.with_name(f"{path.name}.{job_id}-{index}.part")
        with part.open("ab") as sink:
            media_type = await self._fetch(job_id, index, sink)
        part.replace(path)
        return path, media_type

    async def _fetch(self, job_id: str, index: int, sink: IO[bytes]) -> str:
        state = self.retry.state()
        url = f"/v1/jobs/{job_id}/result"
        while True:
            offset = sink.seek(0, io.SEEK_END)
            headers = {"Range": f"bytes={offset}-"} if offset else {}
            try:
                async with self._http.stream(
                    "GET", url, params={"index": index}, headers=headers
                ) as response:
                    if response.status_code == 416 and offset:
                        job = await self.job(job_id)
                        return str(job.raw.get("result", {}).get("media_type", ""))
                    if not response.is_success:
                        await response.aread()
                        delay = state.after_answer(response)
                        if delay is None:
                            check(response)
                        await asyncio.sleep(delay or 0)
                        continue
                    _start_at(sink, response, offset)
                    async for chunk in response.aiter_bytes():
                        sink.write(chunk)
                    return str(response.headers.get("content-type", "application/octet-stream"))
            except httpx.TransportError as exc:
                delay = state.after_error(exc)
                if delay is None:
                    raise TransportFailed(f"the result of job {job_id}: {exc}") from exc
                await asyncio.sleep(delay)
