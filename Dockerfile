# Atelier image: one Python 3.11 image that serves on NVIDIA GPUs and on plain CPUs.
# The pinned torch==2.14.1 wheel from PyPI is a CUDA build that also runs on the CPU, so
# no CUDA base image is needed: on a GPU host run it through the NVIDIA container runtime
# (`docker run --gpus all ...`, or the GPU reservation in docker-compose.yml); on a
# CPU-only host run it as it is and the service falls back to the CPU. That wheel is
# most of the image (6.5 GB, measured): the CUDA libraries of the nvidia-* wheels 3.4 GB,
# torch 1.2 GB, triton 0.9 GB (a torch dependency for torch.compile, which the service
# does not use), the rest of the venv 0.8 GB, the base image 0.1-0.3 GB.
#
#   docker build -t atelier .
#   docker build -t atelier --build-arg FETCH_WEIGHTS="NAME ..." .   # bake third-party weights in
#   docker run --gpus all -p 8000:8000 -v atelier-weights:/weights -v atelier-state:/state atelier
#
# Behind a mirror or offline, name the base image and the package index (the ARGs
# below; deploy/smoke.py builds this way, from a debootstrap base and a local index):
#
#   docker build -t atelier --network host \
#       --build-arg PYTHON_IMAGE=atelier-base:bookworm \
#       --build-arg PIP_INDEX_URL=http://127.0.0.1:8765/simple .
#
# The install steps are docs/deployment.md's bare-metal install (tests/deploy checks it).
# No `# syntax=` line: BuildKit would pull that frontend image from Docker Hub, which an
# offline or mirror-only build cannot reach; the built-in frontend reads everything here.

# Any image with Python 3.11 as `python` and the `venv` module (Debian's python3-venv
# and python-is-python3 on a plain Debian image); both stages start from it.
ARG PYTHON_IMAGE=python:3.11-slim

# ---------------------------------------------------------------- builder: venv + code
FROM ${PYTHON_IMAGE} AS builder
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH
RUN python -m venv /opt/venv
WORKDIR /app

# Where pip finds packages. Unset (the default) is pip's own default, PyPI; a corporate
# mirror or a local index goes here. pip reads them from the environment of the RUN
# steps below, and build arguments are not kept in the runtime image.
ARG PIP_INDEX_URL
ARG PIP_EXTRA_INDEX_URL
ARG PIP_FIND_LINKS
ARG PIP_TRUSTED_HOST

# Dependencies first, from pyproject.toml alone: editing the code keeps this (large) layer.
COPY pyproject.toml ./
COPY deploy/requirements.py deploy/
RUN python deploy/requirements.py | pip install -r /dev/stdin

# Then the project itself (editable, so service.config finds /app/weights), with its own
# checkpoints (weights/manifest.json and the files this project trained).
COPY README.md ./
COPY deploy/healthcheck.py deploy/
COPY norms norms/
COPY models models/
COPY service service/
COPY weights weights/
RUN pip install --no-deps -e .

# Third-party weights (e.g. the VGG encoders) are normally a volume at /weights. To bake
# them in instead, name them: they are fetched (sha256-checked) into the project's own
# weights folder, which the service searches after ATELIER_WEIGHTS_DIR.
ARG FETCH_WEIGHTS=""
RUN for name in ${FETCH_WEIGHTS}; do \
        ATELIER_WEIGHTS_DIR=/app/weights atelier weights fetch "${name}"; \
    done

# ---------------------------------------------------------------- runtime
# NVIDIA_VISIBLE_DEVICES is deliberately not set: which GPUs a container sees is up to
# `--gpus`, the compose reservation or the Kubernetes device plugin, even on hosts where
# nvidia is the default runtime (an image-wide "all" would hand every GPU to each replica).
FROM ${PYTHON_IMAGE} AS runtime
ENV VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    ATELIER_HOST=0.0.0.0 \
    ATELIER_PORT=8000 \
    ATELIER_WEIGHTS_DIR=/weights \
    ATELIER_STATE_DIR=/state

# /state holds the embedded job store (SQLite, used when ATELIER_REDIS_URL is unset):
# mount a volume there so that accepted jobs and results outlive the container. Both
# folders belong to the service user, and a named volume mounted on them starts so.
RUN groupadd --system --gid 10001 atelier \
    && useradd --system --uid 10001 --gid atelier --create-home --home-dir /home/atelier atelier \
    && mkdir /weights /state \
    && chown atelier:atelier /weights /state

# Code and venv stay owned by root: the service user can read them, not change them.
COPY --from=builder /opt/venv /opt/venv
COPY --from=builder /app /app
WORKDIR /app

USER 10001:10001
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s --start-period=120s --retries=3 \
    CMD ["python", "/app/deploy/healthcheck.py"]
# Every setting comes from the environment (ATELIER_*; see service/config.py).
CMD ["atelier", "serve"]
