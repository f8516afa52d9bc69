"""Runtime settings, read from the environment (prefix ``ATELIER_``) or a ``.env`` file.

Every knob of the service lives here; nothing else reads environment variables.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

#: The repository's own ``weights/`` folder: the manifest and the checkpoints this
#: project trained itself. Always searched after ``Settings.weights_dir``.
PROJECT_WEIGHTS_DIR = Path(__file__).resolve().parent.parent / "weights"


class Settings(BaseSettings):
    """Service configuration. Each field maps to ``ATELIER_<FIELD>`` in the environment."""

    model_config = SettingsConfigDict(env_prefix="ATELIER_", env_file=".env", extra="ignore")

    weights_dir: Path = Field(
        default=Path("weights"),
        description="Folder holding checkpoints (third-party ones are mounted or fetched here).",
    )
    devices: str = Field(
        default="auto",
        description='"auto" (every CUDA device, else Apple MPS, else the CPU) or a comma list like "cuda:0,cuda:1" or "cpu".',
    )
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)
    max_batch_size: int = Field(default=8, ge=1, le=256)
    max_batch_wait_ms: float = Field(default=10.0, ge=0.0, le=10_000.0)
    queue_size: int = Field(default=64, ge=1, description="Bound of each worker's queue.")
    request_timeout_s: float = Field(default=60.0, gt=0.0)
    drain_grace_s: float = Field(
        default=0.0,
        ge=0.0,
        description="After a stop signal, seconds during which /readyz already answers 503 "
        "but new requests are still served, so that a load balancer takes the replica out "
        "of rotation before anyone is refused; then new requests get 503 while those in "
        "flight finish. Set it to the balancer's health-check interval (or more).",
    )
    max_image_steps: int = Field(
        default=2000,
        ge=1,
        description="Most sampler steps x images one generate request may cost: what this "
        "server finishes within request_timeout_s (measure seconds per image-step, e.g. "
        "with benchmarks/dit_bench.py, and set timeout / that). Past it: 422.",
    )
    max_stylize_pixel_passes: int = Field(
        default=16_000_000,
        ge=1,
        description="Most pixels x AdaIN passes one stylize request may cost, counted as "
        "size^2 x (1 content + the styles) x the model's passes (4 by default): what this "
        "server finishes within request_timeout_s (a 1024 px request with 4 styles is "
        "21 M and took 56 s on a shared 2-core CPU). Past it: 422.",
    )
    max_jobs: int = Field(
        default=64, ge=1, description="Async jobs held at once (unfinished ones: 429 past it)."
    )
    job_ttl_s: float = Field(default=600.0, gt=0.0, description="How long a finished job is kept.")
    job_results_max_bytes: int = Field(
        default=256 * 1024 * 1024, ge=1024, description="Bytes of job results held in memory."
    )
    job_timeout_s: float = Field(default=600.0, gt=0.0, description="An async job's deadline.")
    max_upload_bytes: int = Field(default=20 * 1024 * 1024, ge=1024)
    header_timeout_s: float = Field(
        default=10.0,
        gt=0.0,
        description="A connection whose request line and headers are not complete this "
        "long after it opened (or after its previous answer) is closed.",
    )
    body_timeout_s: float = Field(
        default=30.0,
        gt=0.0,
        description="The whole body must arrive this long after the request began; else 408.",
    )
    keep_alive_timeout_s: float = Field(
        default=5.0,
        gt=0.0,
        description="An idle keep-alive connection is closed after this; so is one still "
        "sending a body this long after its answer (a 401, 408, 413 or refused upload).",
    )
    max_connections: int = Field(
        default=128,
        ge=1,
        description="Open connections (or requests in progress) beyond which a request "
        "gets 503 and its connection is closed.",
    )
    max_pixels: int = Field(
        default=40_000_000, ge=1, description="Largest decoded image, in pixels."
    )
    max_side: int = Field(default=1024, ge=16, description="Largest output side for stylize.")
    max_concurrent_decodes: int = Field(
        default_factory=lambda: max(1, (os.cpu_count() or 2) // 2),
        ge=1,
        description="Large uploads decoded at once (default: half the CPU cores, at least "
        "1, so a flood of them leaves CPU for other requests); each may hold a full-size "
        "decode of up to max_pixels in its own mode (1 to 4 bytes a pixel) until shrunk.",
    )
    large_image_pixels: int = Field(
        default=4_000_000,
        ge=0,
        description="Uploads above this many pixels (a JPEG: after its draft scale) are "
        "decoded on the pool of max_concurrent_decodes low-priority threads; smaller ones "
        "at once.",
    )
    api_key: str | None = Field(
        default=None, description="When set, /v1 routes need 'Authorization: Bearer <key>'."
    )
    protect_metrics_and_docs: bool = Field(
        default=True,
        description="With api_key set, /metrics, /docs, /redoc and /openapi.json need it too.",
    )
    cors_origins: list[str] = Field(default_factory=list)
    load_models: str = Field(
        default="adain,dit", description="Comma list of models to load at startup."
    )
    log_level: str = "info"

    def device_list(self) -> list[str]:
        """``devices`` resolved to torch device names (:func:`models.devices.device_list`)."""
        from models.devices import device_list

        return device_list(self.devices)

    def weight_search_path(self) -> list[Path]:
        """Folders searched for a checkpoint, in order."""
        return [self.weights_dir, PROJECT_WEIGHTS_DIR]


@lru_cache
def get_settings() -> Settings:
    """The process-wide settings (cached); tests build their own ``Settings`` instead."""
    return Settings()
