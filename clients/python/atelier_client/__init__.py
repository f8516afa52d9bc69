"""atelier-client: a typed client, sync and async, for the Atelier image service.

    from atelier_client import Client

    with Client("http://127.0.0.1:8000") as atelier:
        atelier.stylize("photo.jpg", "painting.jpg", alpha=0.8).save("painted.png")

:class:`Client` and :class:`AsyncClient` make the same calls; errors are the classes of
:mod:`atelier_client.errors`, named after the API's codes; :func:`verify_webhook` checks
a signed delivery.
"""

from atelier_client._core import DEFAULT_SERVER, Event, ProgressBar, Retry
from atelier_client.aio import AsyncClient
from atelier_client.client import Client
from atelier_client.errors import *  # noqa: F403 - one class per API error code
from atelier_client.errors import ERRORS_BY_CODE, AtelierError, TransportFailed
from atelier_client.options import GenerateOptions, StylizeOptions
from atelier_client.types import GenerateResult, Job, JobPage, Progress, Result
from atelier_client.webhooks import WebhookVerificationError, sign_webhook, verify_webhook

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_SERVER",
    "ERRORS_BY_CODE",
    "AsyncClient",
    "AtelierError",
    "Client",
    "Event",
    "GenerateOptions",
    "GenerateResult",
    "Job",
    "JobPage",
    "Progress",
    "ProgressBar",
    "Result",
    "Retry",
    "StylizeOptions",
    "TransportFailed",
    "WebhookVerificationError",
    "sign_webhook",
    "verify_webhook",
    *(cls.__name__ for cls in ERRORS_BY_CODE.values()),
]
