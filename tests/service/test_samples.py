"""``/samples``: the page's sample photos and paintings, read from ``samples_dir``."""

from __future__ import annotations

import io
import os
from pathlib import Path

import corpus
import pytest
from PIL import Image

from service.routes import samples


def _folder(root: Path) -> Path:
    """A samples folder as ../shared/images lays it out, with things that must not show."""
    (root / "content").mkdir(parents=True)
    (root / "style").mkdir()
    (root / "content" / "chelsea.png").write_bytes(corpus.png(300, 200, seed=1))
    (root / "content" / "astronaut.png").write_bytes(corpus.png(64, 64, seed=2))
    (root / "style" / "starry_night.jpg").write_bytes(_jpeg(400, 320))
    (root / "style" / "the_scream.jpg").write_bytes(_jpeg(32, 40))
    (root / "style" / "notes.txt").write_text("not an image")
    (root / "style" / ".hidden.png").write_bytes(corpus.png())
    (root / "style" / "nested.png").mkdir()  # a folder named like an image
    (root / "README.md").write_text("# samples")
    (root / "secret.png").write_bytes(corpus.png())  # beside the kinds' folders
    return root


def _jpeg(width: int, height: int) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (20, 80, 160)).save(out, "JPEG")
    return out.getvalue()


@pytest.fixture
def samples_client(client_factory, tmp_path):
    return client_factory(samples_dir=_folder(tmp_path / "samples"))


def test_the_listing_names_photos_and_paintings_with_their_urls(samples_client):
    answer = samples_client.get("/samples")
    assert answer.status_code == 200
    listing = answer.json()
    assert [s["name"] for s in listing["photos"]] == ["astronaut.png", "chelsea.png"]
    assert [s["name"] for s in listing["paintings"]] == ["starry_night.jpg", "the_scream.jpg"]
    starry = listing["paintings"][0]
    assert starry["title"] == "Starry night"
    assert starry["url"] == "/samples/paintings/starry_night.jpg"
    assert starry["thumbnail_url"] == "/samples/paintings/starry_night.jpg/thumbnail"
    assert starry["bytes"] == len(samples_client.get(starry["url"]).content)


def test_a_sample_is_served_as_it_is(samples_client, tmp_path):
    answer = samples_client.get("/samples/photos/chelsea.png")
    assert answer.status_code == 200
    assert answer.headers["content-type"] == "image/png"
    assert "max-age" in answer.headers["cache-control"]
    assert answer.content == (tmp_path / "samples" / "content" / "chelsea.png").read_bytes()


@pytest.fixture
def thumbnails_made(monkeypatch):
    """The arguments of each thumbnail made from here on (``make_thumbnail`` recorded)."""
    made = []
    real = samples.make_thumbnail
    monkeypatch.setattr(samples, "make_thumbnail", lambda *a: made.append(a) or real(*a))
    return made


def test_a_thumbnail_is_a_small_jpeg_made_once(samples_client, thumbnails_made):
    made = thumbnails_made
    for _ in range(3):
        answer = samples_client.get("/samples/paintings/starry_night.jpg/thumbnail")
        assert answer.status_code == 200
        assert answer.headers["content-type"] == "image/jpeg"
    image = Image.open(io.BytesIO(answer.content))
    assert image.format == "JPEG"
    assert image.size == (256, 205)  # 400x320 to 256 on its longer side
    assert len(made) == 1  # cached
    small = Image.open(
        io.BytesIO(samples_client.get("/samples/paintings/the_scream.jpg/thumbnail").content)
    )
    assert small.size == (32, 40)  # never enlarged


def test_a_changed_file_gets_a_new_thumbnail(samples_client, tmp_path):
    url = "/samples/photos/astronaut.png/thumbnail"
    first = Image.open(io.BytesIO(samples_client.get(url).content)).size
    path = tmp_path / "samples" / "content" / "astronaut.png"
    path.write_bytes(corpus.png(100, 50, seed=3))
    os.utime(path, ns=(1, 2))
    second = Image.open(io.BytesIO(samples_client.get(url).content)).size
    assert (first, second) == ((64, 64), (100, 50))


@pytest.mark.parametrize(
    "path",
    [
        "/samples/photos/..%2F..%2FREADME.md",
        "/samples/photos/..%2Fsecret.png",
        "/samples/photos/%2E%2E",
        "/samples/photos/../secret.png",
        "/samples/content/chelsea.png",  # the folder's name is not a kind
        "/samples/other/chelsea.png",
        "/samples/paintings/notes.txt",
        "/samples/paintings/.hidden.png",
        "/samples/paintings/nested.png",
        "/samples/paintings/nested.png/thumbnail",
        "/samples/photos/missing.png",
        "/samples/photos/chelsea.png%00.txt",
        "/samples/photos/%2Fetc%2Fpasswd",
    ],
)
def test_nothing_outside_the_listing_is_served(samples_client, path):
    answer = samples_client.get(path)
    assert answer.status_code == 404
    assert answer.json()["error"]["code"] == "not_found"
    assert b"# samples" not in answer.content


def test_a_link_inside_the_folder_is_not_followed(client_factory, tmp_path):
    root = _folder(tmp_path / "samples")
    outside = tmp_path / "outside.png"
    outside.write_bytes(corpus.png())
    (root / "content" / "linked.png").symlink_to(outside)
    client = client_factory(samples_dir=root)
    names = [s["name"] for s in client.get("/samples").json()["photos"]]
    assert "linked.png" not in names
    assert client.get("/samples/photos/linked.png").status_code == 404


def test_a_linked_kind_folder_is_not_followed(client_factory, tmp_path):
    """``style/`` a link to a folder of paintings elsewhere: no painting is listed or
    served (the photos of the real ``content/`` still are)."""
    root = _folder(tmp_path / "samples")
    elsewhere = tmp_path / "elsewhere"
    (root / "style").rename(elsewhere)
    (root / "style").symlink_to(elsewhere, target_is_directory=True)
    client = client_factory(samples_dir=root)
    listing = client.get("/samples").json()
    assert listing["paintings"] == []
    assert [s["name"] for s in listing["photos"]] == ["astronaut.png", "chelsea.png"]
    assert client.get("/samples/paintings/starry_night.jpg").status_code == 404
    assert client.get("/samples/paintings/starry_night.jpg/thumbnail").status_code == 404


def test_a_file_that_is_not_the_image_its_name_says_is_not_listed(client_factory, tmp_path):
    root = _folder(tmp_path / "samples")
    (root / "content" / "notes.png").write_text("a text file, named .png")
    (root / "content" / "photo.webp").write_bytes(corpus.png(16, 16))  # PNG bytes, .webp
    webp = io.BytesIO()
    Image.new("RGB", (16, 16)).save(webp, "WEBP")
    (root / "content" / "real.webp").write_bytes(webp.getvalue())
    client = client_factory(samples_dir=root)
    names = [s["name"] for s in client.get("/samples").json()["photos"]]
    assert names == ["astronaut.png", "chelsea.png", "real.webp"]
    assert client.get("/samples/photos/notes.png").status_code == 404
    assert client.get("/samples/photos/photo.webp").status_code == 404


def test_a_sample_that_cannot_be_decoded_is_tried_once_until_it_changes(
    samples_client, tmp_path, thumbnails_made
):
    broken = tmp_path / "samples" / "content" / "broken.png"
    broken.write_bytes(b"\x89PNG\r\n\x1a\n not really")
    tried = thumbnails_made
    for _ in range(4):
        answer = samples_client.get("/samples/photos/broken.png/thumbnail")
        assert answer.status_code == 404
        assert "not a readable image" in answer.json()["error"]["message"]
    assert len(tried) == 1
    broken.write_bytes(corpus.png(20, 20))
    os.utime(broken, ns=(1, 10**18))  # a new modification time, whatever the clock
    assert samples_client.get("/samples/photos/broken.png/thumbnail").status_code == 200
    assert len(tried) == 2


def test_too_large_and_unreadable_files(client_factory, tmp_path, monkeypatch):
    root = _folder(tmp_path / "samples")
    (root / "content" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not really")
    monkeypatch.setattr(samples, "MAX_SAMPLE_BYTES", 100_000)
    client = client_factory(samples_dir=root, max_pixels=3000)
    names = [s["name"] for s in client.get("/samples").json()["photos"]]
    assert names == ["astronaut.png", "broken.png"]  # chelsea.png is over MAX_SAMPLE_BYTES
    assert client.get("/samples/photos/chelsea.png").status_code == 404
    assert client.get("/samples/photos/broken.png/thumbnail").status_code == 404
    # 64x64 is over max_pixels (read from the header): no thumbnail is decoded
    answer = client.get("/samples/photos/astronaut.png/thumbnail")
    assert answer.status_code == 404 and "pixels" in answer.json()["error"]["message"]
    assert client.get("/samples/photos/astronaut.png").status_code == 200  # the file itself


def test_the_listing_is_bounded(client_factory, tmp_path, monkeypatch):
    root = tmp_path / "many"
    (root / "photos").mkdir(parents=True)  # the other folder name of the photos
    for i in range(7):
        (root / "photos" / f"p{i}.png").write_bytes(corpus.png(seed=i))
    monkeypatch.setattr(samples, "MAX_SAMPLES", 5)
    client = client_factory(samples_dir=root)
    listing = client.get("/samples").json()
    assert [s["name"] for s in listing["photos"]] == [f"p{i}.png" for i in range(5)]
    assert listing["paintings"] == []


@pytest.mark.parametrize("where", ["unset", "missing", "a file"])
def test_no_folder_lists_nothing(client_factory, tmp_path, where):
    samples_dir = {
        "unset": None,
        "missing": tmp_path / "nowhere",
        "a file": tmp_path / "file.png",
    }[where]
    (tmp_path / "file.png").write_bytes(corpus.png())
    client = client_factory(samples_dir=samples_dir)
    assert client.get("/samples").json() == {"photos": [], "paintings": []}
    assert client.get("/samples/photos/file.png").status_code == 404


def test_samples_need_no_key_like_the_page(client_factory, tmp_path):
    client = client_factory(samples_dir=_folder(tmp_path / "samples"), api_key="sekrit")
    assert client.get("/v1/limits").status_code == 401
    assert len(client.get("/samples").json()["photos"]) == 2
    assert client.get("/samples/photos/chelsea.png/thumbnail").status_code == 200


def test_the_setting_comes_from_the_environment(monkeypatch, tmp_path):
    from service.config import Settings

    monkeypatch.setenv("ATELIER_SAMPLES_DIR", str(tmp_path))
    assert Settings(_env_file=None).samples_dir == tmp_path
    monkeypatch.delenv("ATELIER_SAMPLES_DIR")
    assert Settings(_env_file=None).samples_dir is None


SHARED_IMAGES = Path(__file__).resolve().parents[3] / "shared" / "images"


@pytest.mark.skipif(not SHARED_IMAGES.is_dir(), reason="no ../shared/images beside the checkout")
def test_the_shared_images_are_listed(client_factory):
    listing = client_factory(samples_dir=SHARED_IMAGES).get("/samples").json()
    assert {"astronaut.png", "chelsea.png"} <= {s["name"] for s in listing["photos"]}
    assert "starry_night.jpg" in {s["name"] for s in listing["paintings"]}
