"""A circuit breaker around the job store: a stalled store answers 503 at once.

A store that is slow or unreachable without closing its connection (a network
partition, a Redis paused by its host, a disk that hangs) makes every call wait for its
socket timeout, and with the client's retries a request waited 15-45 s. The breaker
bounds that wait and then stops waiting altogether:

* **closed** (the store answers): each call gets ``call_timeout_s`` (plus the time its
  payload's bytes, and those of the calls in flight before it, take at
  ``BULK_BYTES_PER_S``: one big write is no stall of the calls behind it); a call that times out, or fails to
  reach the store, **opens** the breaker and raises ``StoreUnavailable``;
* **open**: every call raises ``StoreUnavailable`` at once, with ``Retry-After``; one
  background probe asks the store (the backend's cheapest round trip) every
  ``probe_interval_s`` with the same timeout, and the first answer **closes** the
  breaker.

Nothing is lost by failing fast: a refused submit was never accepted (the client gets
503 and retries), a worker's claim loop backs off and claims again once the store is
back, and its finish retries until the lease runs out (then the job runs again, and the
first outcome written wins, as after any crash).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import KW_ONLY, dataclass, field
from typing import TypeVar

from service.errors import StoreFull, StoreUnavailable
from service.jobs.shared import stop_task

T = TypeVar("T")

logger = logging.getLogger("atelier.jobs")

#: The slowest transfer a healthy store is allowed for a call's payload (a print-size
#: job's inputs are tens of MB): its bytes add ``bytes / BULK_BYTES_PER_S`` seconds.
BULK_BYTES_PER_S = 20 * 1024 * 1024


@dataclass(eq=False)
class Breaker:
    """See the module's text.

    Args:
        name: the store, for messages ("the job store (Redis)").
        probe: one cheap round trip to the store (raises when it does not answer).
        call_timeout_s: a call's time before the store counts as stalled.
        probe_interval_s: time between two probes while open (also the Retry-After).
        clock: monotonic seconds (tests pass their own).
    """

    name: str
    probe: Callable[[], Awaitable[object]]
    _: KW_ONLY
    call_timeout_s: float = 1.0
    probe_interval_s: float = 0.5
    clock: Callable[[], float] = time.monotonic
    #: when it opened (on ``clock``), None while closed, and why
    opened_at: float | None = field(default=None, init=False)
    reason: str = field(default="", init=False)
    _prober: asyncio.Task[None] | None = field(default=None, init=False, repr=False)
    #: the payload bytes of the calls awaited now
    _bytes_in_flight: int = field(default=0, init=False, repr=False)

    @property
    def is_open(self) -> bool:
        return self.opened_at is not None

    def timeout_for(self, payload_bytes: int) -> float:
        return self.call_timeout_s + payload_bytes / BULK_BYTES_PER_S

    def refuse_if_open(self, *pending: Awaitable[object]) -> None:
        """Raise ``StoreUnavailable`` at once while open, closing the ``pending`` work
        unawaited (a caller that wraps its work checks before wrapping it)."""
        if self.opened_at is not None:
            for work in pending:
                _discard(work)
            raise self._refusal()

    async def call(self, work: Awaitable[T], *, payload_bytes: int = 0) -> T:
        """Await ``work`` within its time, or raise ``StoreUnavailable`` (at once while
        the breaker is open: ``work`` is then closed unawaited).

        Its time counts the bytes of the calls already in flight besides its own: a
        store moves one payload at a time (SQLite's one thread, Redis's one loop), so a
        call queued behind a big write waits for it, and that wait is no stall."""
        self.refuse_if_open(work)
        budget = self.timeout_for(self._bytes_in_flight + payload_bytes)
        self._bytes_in_flight += payload_bytes
        try:
            async with asyncio.timeout(budget):
                return await work
        except TimeoutError:
            self.open(f"no answer within {budget:g} s")
            raise self._refusal() from None
        except StoreFull:  # it answers: reads still work, writes are refused one by one
            raise
        except StoreUnavailable as exc:
            self.open(exc.message)
            raise
        finally:
            self._bytes_in_flight -= payload_bytes

    def open(self, reason: str) -> None:
        """Fail every call fast from now until a probe gets an answer."""
        if self.opened_at is None:
            self.opened_at = self.clock()
            self.reason = reason
            logger.warning("job store unavailable: failing fast", extra={"reason": reason})
        if self._prober is None or self._prober.done():
            with contextlib.suppress(RuntimeError):  # no running loop: the next call probes
                self._prober = asyncio.get_running_loop().create_task(self._probe_until_back())

    async def _probe_until_back(self) -> None:
        while self.opened_at is not None:
            await asyncio.sleep(self.probe_interval_s)
            try:
                async with asyncio.timeout(self.call_timeout_s):
                    await self.probe()
            except (TimeoutError, StoreUnavailable, OSError):
                continue
            except Exception:  # noqa: BLE001 - any answer but a stall means "reachable"
                logger.exception("job store probe failed")
                continue
            outage = self.clock() - self.opened_at
            self.opened_at = None
            logger.warning("job store back", extra={"outage_s": round(outage, 3)})

    def _refusal(self) -> StoreUnavailable:
        retry = max(1, round(self.probe_interval_s * 2))
        return StoreUnavailable(
            f"{self.name} is not answering ({self.reason}); retry in a moment",
            retry_after_s=retry,
        )

    async def close(self) -> None:
        await stop_task(self._prober)


def _discard(work: Awaitable[object]) -> None:
    """Close a coroutine that will not be awaited (no 'never awaited' warning)."""
    close = getattr(work, "close", None)
    if callable(close):
        close()
