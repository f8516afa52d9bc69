"""``atelier generate`` with the project's own DiT checkpoint (skipped when it is absent)."""

from __future__ import annotations

import base64
import io

import pytest
from fastapi.testclient import TestClient
from PIL import Image
from service_fakes import make_settings

from service.app import create_app
from service.cli import main
from service.config import PROJECT_WEIGHTS_DIR

CHECKPOINT = PROJECT_WEIGHTS_DIR / "dit-shapes32.safetensors"

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.skipif(not CHECKPOINT.is_file(), reason="needs weights/dit-shapes32.safetensors"),
]


def test_the_pngs_record_what_the_service_records(tmp_path, monkeypatch):
    """Same request, same image and the same parameter chunks as ``/v1/generate``."""
    monkeypatch.setenv("ATELIER_DEVICES", "cpu")
    args = ["generate", "a red circle left of a blue square", "-n", "2", "--seed", "7"]
    assert main([*args, "--steps", "2", "--negative", "green", "-o", str(tmp_path)]) == 0
    settings = make_settings(load_models="dit", max_batch_wait_ms=0.0)
    with TestClient(create_app(settings)) as client:
        response = client.post(
            "/v1/generate",
            json={
                "prompt": "a red circle left of a blue square",
                "negative_prompt": "green",
                "num_images": 2,
                "steps": 2,
                "seed": 7,
            },
        )
    assert response.status_code == 200, response.text
    for seed, encoded in zip((7, 8), response.json()["images"], strict=True):
        with (
            Image.open(tmp_path / f"seed{seed}.png") as cli,
            Image.open(io.BytesIO(base64.b64decode(encoded))) as served,
        ):
            assert dict(cli.text) == dict(served.text)
            assert cli.text["seed"] == str(seed) and cli.text["steps"] == "2"
            assert "dit-shapes32.safetensors" in cli.text["checkpoint_sha256"]
