"""Runtime settings, read from the environment (prefix ``ATELIER_``) or a ``.env`` file.

Every knob of the service lives here; nothing else reads environment variables.
``Settings()`` is the one way to read them (the CLI adds its flags on top:
``service.cli.settings``); tests build their own ``Settings``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

#: The repository's own ``weights/`` folder: the manifest and the checkpoints this
#: project trained itself. Always searched after ``Settings.weights_dir``.
PROJECT_WEIGHTS_DIR = Path(__file__).resolve().parent.parent / "weights"


def parse_list(value: object) -> object:
    """A list setting's text: a JSON list (``["a", "b"]``), or comma-separated words
    (``a, b``), the way operators write one-value and many-value variables; an empty
    text is the empty list. Anything else is left for the field's own check."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if text.startswith("["):
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(
                f"not a JSON list ({exc.msg}); or write the items comma-separated"
            ) from None
    return [item.strip() for item in text.split(",") if item.strip()]


#: A list of strings set as a JSON list or comma-separated (:func:`parse_list`); NoDecode
#: keeps pydantic-settings from reading the environment's text as JSON first.
StringList = Annotated[list[str], NoDecode, BeforeValidator(parse_list)]
#: A time in seconds, more than zero.
Seconds = Annotated[float, Field(gt=0.0)]
#: A number of things (jobs, pixels, streams, ...), at least one.
Count = Annotated[int, Field(ge=1)]
#: A size in bytes, at least 1 KiB.
ByteSize = Annotated[int, Field(ge=1024)]


class Settings(BaseSettings):
    """Service configuration. Each field maps to ``ATELIER_<FIELD>`` in the environment;
    the docstring under a field is its description (the flag's help, the error's hint)."""

    model_config = SettingsConfigDict(
        env_prefix="ATELIER_", env_file=".env", extra="ignore", use_attribute_docstrings=True
    )

    weights_dir: Path = Path("weights")
    """Folder holding checkpoints (third-party ones are mounted or fetched here)."""
    devices: str = "auto"
    """\"auto" (every CUDA device, else Apple MPS, else the CPU) or a comma list like
    "cuda:0,cuda:1" or "cpu"."""
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)
    max_batch_size: int = Field(default=8, ge=1, le=256)
    max_batch_wait_ms: float = Field(default=10.0, ge=0.0, le=10_000.0)
    queue_size: Count = 64
    """Bound of each worker's queue."""
    request_timeout_s: Seconds = 60.0
    drain_grace_s: float = Field(default=0.0, ge=0.0)
    """After a stop signal, seconds during which /readyz already answers 503 but new
    requests are still served, so that a load balancer takes the replica out of rotation
    before anyone is refused; then new requests get 503 while those in flight finish. Set it
    to the balancer's health-check interval (or more)."""
    max_image_steps: Count = 2000
    """Most sampler steps x images one generate request may cost: what this server finishes
    within request_timeout_s (measure seconds per image-step, e.g. with
    benchmarks/dit_bench.py, and set timeout / that). Past it: 422."""
    max_stylize_pixel_passes: Count = 6_500_000
    """Most pixels x AdaIN passes one synchronous stylize request may cost, counted as
    base^2 x (1 content + the styles x max(1, style_scale)^2) x the preset's passes in
    full-size equivalents (the model's figure: 1.33 for both presets), base = min(size,
    1024), plus size^2 for each print-size octave above 1024 px (sizes halved down to 1024):
    what this server finishes within request_timeout_s (benchmarks/stylize_cost.py measures
    seconds per pixel-pass). Past it: 422, which says to send the request as a job."""
    max_job_stylize_pixel_passes: Count = 120_000_000
    """The same bound for a stylize job (Prefer: respond-async), which has job_timeout_s:
    the default admits 8192 px with four styles at style_scale 2 (~112 M). Past it: 422."""
    max_batch_pixels: Count = 16 * 1024 * 1024
    """Most pixels one batched forward may hold (a memory budget beside max_batch_size;
    stylize counts the content and styles, generate its images): compatible requests past it
    wait for the next batch, one request over it runs alone; an out-of-memory error still
    splits a batch in halves."""
    state_dir: Path = Path(".atelier")
    """Where the embedded job store keeps its SQLite database (jobs.db) when redis_url is
    unset: accepted jobs and results survive a restart."""
    blob_store: Literal["volume", "s3"] = "volume"
    """Where job inputs and results of 256 KiB or more live (the job store keeps their
    names and checksums): "volume", files in blob_dir; "s3", objects in blob_s3_bucket
    (what replicas on several hosts share, e.g. beside Redis)."""
    blob_dir: Path | None = None
    """The folder of the volume blob store; unset: jobs-files beside jobs.db in state_dir.
    With Redis and several hosts it must be a volume every replica mounts (or use s3)."""
    blob_s3_bucket: str | None = Field(default=None, validate_default=True)
    """The bucket of the s3 blob store (it must exist); credentials come from the standard
    AWS chain (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, a profile, a pod's role)."""
    blob_s3_prefix: str = "atelier/"
    """What the key of every object starts with (deployments may share a bucket)."""
    blob_s3_endpoint_url: str | None = None
    """An S3-compatible server other than AWS (http://minio:9000); unset: AWS S3."""
    redis_url: str | None = None
    """redis://host:port/db (Redis >= 6.2 or Valkey): the shared job store, so that every
    replica and worker sees the same jobs. Unset: the SQLite store."""
    redis_prefix: str = "atelier:"
    """Prefix of every Redis key."""
    store_call_timeout_s: Seconds = 1.0
    """A job-store call's time (plus 1 s per 20 MB it moves) before the store counts as
    stalled: the call answers 503 store_unavailable, and so does every call after it, at
    once, until a probe gets an answer."""
    store_probe_interval_s: Seconds = 0.5
    """Time between two probes of a stalled job store (the breaker closes at the first answer)."""
    max_jobs: Count = 256
    """Unfinished async jobs (queued or running) in all; past it: 429."""
    key_max_jobs: Count = 32
    """Unfinished async jobs of one API key, unless its entry in the keys file says
    otherwise; past it: 429."""
    job_inputs_max_bytes: ByteSize = 512 * 1024 * 1024
    """Bytes of job inputs (encoded images) held for unfinished jobs; past it: 429."""
    job_ttl_s: Seconds = 3600.0
    """How long a finished job and its result are kept."""
    job_results_max_bytes: ByteSize = 256 * 1024 * 1024
    """Bytes of job results held; the oldest finished jobs are forgotten first."""
    job_timeout_s: Seconds = 600.0
    """An async job's deadline, from its creation."""
    job_lease_s: Seconds = 30.0
    """A worker's lease on a job: renewed every third of it while the job runs; a job whose
    worker died goes back to the queue once it runs out."""
    job_max_attempts: Count = 3
    """Leases a job may lose (its worker died) before it fails with worker_lost instead of
    running again."""
    bulk_jobs_per_device: Count = 1
    """Bulk jobs (prints above print_size_above, and clips) a worker paints at once per
    device: each holds its picture (a clip: its segments) in memory while it is painted,
    so a replica takes another only when one is painted (its encoding and storing overlap
    the next); the rest wait in the queue for any replica, and small jobs are claimed
    beside them."""
    job_progress_interval_s: float = Field(default=0.2, ge=0.0)
    """Least time between two progress writes of a job to the store."""
    max_event_streams: Count = 1024
    """Open /v1/jobs/{id}/events streams per replica (they do not count against
    max_connections); past it: 429."""
    key_max_event_streams: Count = 8
    """Open event streams of one API key per replica; past it: 429."""
    shutdown_timeout_s: Seconds = 25.0
    """After a stop signal (and drain_grace_s): how long requests in flight and running jobs
    may take to finish; then unfinished jobs go back to the queue for another worker and the
    process exits. Keep it under the orchestrator's grace period (Kubernetes: 30 s by
    default)."""
    max_json_bytes: ByteSize = 64 * 1024
    """Largest body of a request that is not a multipart upload (JSON); past it: 413, before
    any of it is parsed."""
    max_upload_bytes: ByteSize = 20 * 1024 * 1024
    """Largest multipart body of the routes other than /v1/stylize."""
    max_stylize_upload_bytes: ByteSize = 64 * 1024 * 1024
    """Largest multipart body of POST /v1/stylize: a 50 MP JPEG photo (about 15-35 MB) with
    its styles. Past it: 413."""
    header_timeout_s: Seconds = 10.0
    """A connection whose request line and headers are not complete this long after it
    opened (or after its previous answer) is closed."""
    body_timeout_s: Seconds = 30.0
    """The whole body must arrive this long after the request began; else 408."""
    keep_alive_timeout_s: Seconds = 5.0
    """An idle keep-alive connection is closed after this; so is one still sending a body
    this long after its answer (a 401, 408, 413 or refused upload)."""
    max_connections: Count = 128
    """Open connections (or requests in progress) beyond which a request gets 503 and its
    connection is closed."""
    max_pixels: Count = 80_000_000
    """Largest decoded image, in pixels, read from its header before any pixel is decoded (a
    decompression bomb is refused there): a 50-60 MP camera photo fits. A decode holds up to
    4 bytes a pixel until it is shrunk, so max_concurrent_decodes x max_pixels x 4 bytes
    bounds that memory (320 MB a slot). Pillow's own bomb guard refuses images above ~89 MP
    whatever this says."""
    max_side: int = Field(default=8192, ge=16)
    """Largest output side for stylize. Above 1024 px a photo is painted by print-size
    octaves, tile by tile (docs/style-transfer.md); the cost budgets decide what runs
    synchronously and what must be a job."""
    max_video_side: int = Field(default=1920, ge=16)
    """Largest side of a video's stylised frames (a frame is painted whole). A larger clip
    is refused (422) unless the request's size scales it down."""
    max_video_seconds: Seconds = 60.0
    """Longest video clip accepted for stylize (422)."""
    max_video_frames: Count = 3600
    """Most frames of a video clip accepted (422)."""
    max_video_fps: float = Field(default=60.0, gt=0.0)
    """Highest frame rate of a video clip accepted (422)."""
    max_video_pixels: Count = 1_400_000_000
    """Frames x height x width of a stylised clip, at most (422): a 60 s 720p clip at 24 fps
    is 1.33 G."""
    video_probe_timeout_s: Seconds = 10.0
    """Time an uploaded clip may take to be opened and counted; past it the upload is
    refused as unreadable (400)."""
    video_job_timeout_s: Seconds = 3600.0
    """A video job's deadline, from its creation (job_timeout_s for others)."""
    max_concurrent_decodes: int = Field(
        default_factory=lambda: max(1, (os.cpu_count() or 2) // 2), ge=1
    )
    """Large uploads decoded at once (default: half the CPU cores, at least 1, so a flood of
    them leaves CPU for other requests); each may hold a full-size decode of up to
    max_pixels in its own mode (1 to 4 bytes a pixel) until shrunk."""
    large_image_pixels: int = Field(default=4_000_000, ge=0)
    """Uploads above this many pixels (a JPEG: after its draft scale) are decoded on the
    pool of max_concurrent_decodes low-priority threads; smaller ones at once."""
    max_preparing_pixels: Count = 16 * 1024 * 1024
    """Output pixels of stylize uploads being read, decoded and stored at once (each image
    counts size^2); heavier requests wait their turn, so a burst of uploads holds the memory
    of this many pixels (a few bytes each), not of the whole burst. Requests of at most 1/32
    of it never wait."""
    api_key: str | None = None
    """A single API key (named 'default'): when set, /v1 routes need 'Authorization: Bearer
    <key>'."""
    api_keys_file: Path | None = None
    """The named keys made by 'atelier keys add' (hashes, names, limits); re-read when it
    changes or on SIGHUP. When set, /v1 routes need a key."""
    key_rate: float | None = Field(default=None, gt=0.0)
    """Requests per second (bursts of max(1, rate)) one key may send to the routes that
    start work, unless its entry in the keys file says otherwise; past it: 429 with
    Retry-After. Unset: no limit."""
    protect_metrics_and_docs: bool = True
    """With api_key set, /metrics, /docs, /redoc and /openapi.json need it too."""
    idempotency_ttl_s: Seconds = 24 * 3600.0
    """How long an Idempotency-Key is remembered (the job's result itself is kept job_ttl_s)."""
    webhook_secret: str | None = None
    """The Standard Webhooks signing secret ('whsec_' + base64); webhooks are refused (422)
    without it."""
    webhook_allowed_hosts: StringList = Field(default_factory=list)
    """Host names (or '*.example.com') webhooks may go to, comma-separated or as a JSON
    list; empty: every webhook is refused (422)."""
    webhook_allow_private_addresses: bool = False
    """Let webhooks reach private, loopback and link-local addresses (off: a host that
    resolves to one is refused, at submit and at each delivery)."""
    webhook_timeout_s: Seconds = 10.0
    """One delivery's timeout."""
    webhook_max_attempts: Count = 8
    """Delivery attempts of one event before giving up."""
    webhook_retry_base_s: Seconds = 5.0
    """Wait before the second attempt; doubled before each later one."""
    webhook_progress_interval_s: Seconds = 5.0
    """Least time between two progress webhooks of a job."""
    cors_origins: StringList = Field(default_factory=list)
    """Origins allowed by CORS, comma-separated or as a JSON list."""
    load_models: str = "adain,dit"
    """Comma list of models to load at startup."""
    samples_dir: Path | None = None
    """A folder of sample images the page offers to try at once: photos in its content/
    folder, paintings in its style/ folder (PNG, JPEG, WebP; served at /samples without a
    key). Unset or missing: the page shows no samples."""
    log_level: str = "info"

    @field_validator("blob_s3_bucket", mode="after")
    @classmethod
    def _s3_has_a_bucket(cls, bucket: str | None, info: ValidationInfo) -> str | None:
        if info.data.get("blob_store") == "s3" and not bucket:
            raise ValueError("blob_store s3 needs a bucket: set ATELIER_BLOB_S3_BUCKET")
        return bucket

    def blob_folder(self) -> Path:
        """The volume blob store's folder (``blob_dir``, else beside ``jobs.db``)."""
        return self.blob_dir or self.state_dir / "jobs-files"

    def device_list(self) -> list[str]:
        """``devices`` resolved to torch device names (:func:`models.devices.device_list`)."""
        from models.devices import device_list

        return device_list(self.devices)

    def weight_search_path(self) -> list[Path]:
        """Folders searched for a checkpoint, in order."""
        return [self.weights_dir, PROJECT_WEIGHTS_DIR]
