"""``POST /v1/generate`` with a fake model: seeds, defaults, batching, PNG answers."""

from __future__ import annotations

import base64
import io

import numpy as np
import torch
from api_headers import ASYNC
from PIL import Image
from service_fakes import wait_until


def _decode(b64: str) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(base64.b64decode(b64))).convert("RGB"))


def _expected(seed: int) -> np.ndarray:
    image = torch.rand(3, 8, 8, generator=torch.Generator().manual_seed(seed))
    return (image * 255).round().to(torch.uint8).permute(1, 2, 0).numpy()


def test_images_follow_their_seeds(client, fakes):
    response = client.post("/v1/generate", json={"prompt": "a cat", "num_images": 3, "seed": 41})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["seeds"] == [41, 42, 43]
    assert len(body["images"]) == 3
    for b64, seed in zip(body["images"], body["seeds"], strict=True):
        np.testing.assert_array_equal(_decode(b64), _expected(seed))
    model = fakes.dit["cpu"]
    assert sum(len(call["seeds"]) for call in model.calls) == 3
    assert all(call["prompts"] == ["a cat"] * len(call["seeds"]) for call in model.calls)
    assert model.read == ["a cat"]  # the prompt is read once per request, not per image


def test_defaults_come_from_the_model(client, fakes):
    body = client.post("/v1/generate", json={"prompt": "a dog"}).json()
    assert (body["steps"], body["guidance_scale"], body["sampler"]) == (4, 3.0, "ddim")
    call = fakes.dit["cpu"].calls[-1]
    assert (call["steps"], call["guidance_scale"], call["sampler"]) == (4, 3.0, "ddim")
    assert call["negative_prompts"] == [None]
    assert body["plan_layout"] is call["plan_layout"] is True
    assert 0 <= body["seeds"][0] < 2**31


def test_explicit_options_reach_the_model(client, fakes):
    request = {
        "prompt": "a boat",
        "negative_prompt": "blurry",
        "steps": 7,
        "guidance_scale": 0.0,
        "sampler": "ddpm",
        "seed": 5,
        "plan_layout": False,
    }
    assert client.post("/v1/generate", json=request).status_code == 200
    call = fakes.dit["cpu"].calls[-1]
    assert call == {
        "prompts": ["a boat"],
        "negative_prompts": ["blurry"],
        "steps": 7,
        "guidance_scale": 0.0,
        "seeds": [5],
        "sampler": "ddpm",
        "plan_layout": False,
    }


def test_accept_png_answers_the_image_itself(client):
    response = client.post(
        "/v1/generate", json={"prompt": "a cat", "seed": 9}, headers={"Accept": "image/png"}
    )
    assert response.status_code == 200
    assert response.headers["content-type"] == "image/png"
    assert response.headers["X-Seed"] == "9"
    pixels = np.asarray(Image.open(io.BytesIO(response.content)).convert("RGB"))
    np.testing.assert_array_equal(pixels, _expected(9))


def test_accept_png_with_several_images_answers_json(client):
    response = client.post(
        "/v1/generate", json={"prompt": "a cat", "num_images": 2}, headers={"Accept": "image/png"}
    )
    assert response.headers["content-type"].startswith("application/json")
    assert len(response.json()["images"]) == 2


def test_seeds_wrap_past_the_largest_seed_and_larger_ones_are_refused(client):
    from models.diffusion.random import MAX_SEED

    body = {"prompt": "a cat", "num_images": 2, "seed": MAX_SEED}
    assert client.post("/v1/generate", json=body).json()["seeds"] == [MAX_SEED, 0]
    body["seed"] = MAX_SEED + 1
    assert client.post("/v1/generate", json=body).status_code == 422


def test_json_types_are_read_as_the_schema_says(client, fakes):
    """Strict JSON types (no ``"3"`` for 3, no ``0`` for false), except that an integral
    number is an integer, as JSON Schema has it."""
    response = client.post("/v1/generate", json={"prompt": "a", "steps": 3.0, "seed": 2.0})
    assert response.status_code == 200, response.text
    assert (fakes.dit["cpu"].calls[-1]["steps"], response.json()["seeds"]) == (3, [2])
    for wrong in ({"steps": "3"}, {"steps": 3.5}, {"plan_layout": 0}, {"guidance_scale": "1"}):
        response = client.post("/v1/generate", json={"prompt": "a", **wrong})
        assert response.status_code == 422, wrong
        assert next(iter(wrong)) in response.json()["error"]["message"]


def test_the_answer_says_what_was_understood_and_what_was_ignored(client):
    body = client.post(
        "/v1/generate", json={"prompt": "A huge red circle beside a blue square, behind a dog"}
    ).json()
    assert body["understood"] == "a large red circle, a blue square and a dog"
    assert body["ignored"] == ["beside", "behind"]
    assert body["not_learned"] == ["dog"]  # the fake reads as the shapes model
    body = client.post("/v1/generate", json={"prompt": "big and beautiful"}).json()
    assert body["understood"] == "a beautiful"  # a word no list knows is a thing
    body = client.post("/v1/generate", json={"prompt": "big and blue"}).json()
    assert body["understood"] is None and body["ignored"] == ["big", "blue"]
    assert body["not_learned"] == []
    grammar = "a red circle to the left of a white square"
    body = client.post("/v1/generate", json={"prompt": grammar}).json()
    assert body["understood"] == grammar and body["ignored"] == [] == body["not_learned"]


def test_a_job_says_which_things_the_model_never_learned(client):
    prompt = {"prompt": "two cats above a grinning dog"}
    response = client.post("/v1/generate", json=prompt, headers=ASYNC)
    assert response.status_code == 202, response.text
    url = f"/v1/jobs/{response.json()['id']}"
    wait_until(lambda: client.get(url).json()["state"] not in ("queued", "running"))
    result = client.get(url).json()["result"]
    assert result["understood"] == "two cats above a grinning dog"
    assert result["not_learned"] == ["cat", "grinning dog"]
