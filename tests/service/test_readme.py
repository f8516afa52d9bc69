"""The README's examples, run as written, so that they cannot rot.

A fenced code block right after a ``<!-- readme-test -->`` line (blank lines between are
allowed) is an example this test runs; its fence names the language, ``sh`` or
``python``. Each runs in a folder of its own that holds the images the README promises
(``photo.jpg``, ``painting.jpg``, ``wave.jpg``), made here small, so the examples are
quick:

* ``sh``: under ``bash -euo pipefail``, with the project's ``atelier`` and ``python3``
  first on ``PATH``;
* ``python``: the block as a script in a subprocess.

In either, ``http://127.0.0.1:8000`` (``make serve``'s address) is replaced by a real
``atelier serve``'s with the AdaIN and DiT models. An example passes when it exits 0 and
everything it names as an output (``-o FILE`` or ``-o FOLDER/``, ``.save("FILE")``,
``output="FILE"``) is there and is an image. A server's error answer
saved under an image's name is JSON, which fails that check. Needs the VGG weights in
``ATELIER_WEIGHTS_DIR`` (and ``curl`` for the HTTP examples): skipped without them.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from live_server import ROOT, live_server
from PIL import Image

MARK = "<!-- readme-test -->"
#: Where the README's HTTP examples send their requests (``make serve``).
README_URL = "http://127.0.0.1:8000"
LANGUAGES = ("sh", "python")
#: The README's promise: the examples run in a folder holding these.
IMAGES = ("photo.jpg", "painting.jpg", "wave.jpg")
WEIGHTS = os.environ.get("ATELIER_WEIGHTS_DIR")
#: How long one example may take (a loaded 2-core machine; each is a few seconds alone).
EXAMPLE_TIMEOUT_S = 240


@dataclass(frozen=True)
class Example:
    language: str
    code: str
    #: the line of the README where the block's code starts (1-based)
    line: int

    @property
    def needs_server(self) -> bool:
        return README_URL in self.code

    def outputs(self) -> list[str]:
        """What the example says it writes: ``-o NAME`` arguments, ``.save("NAME")``,
        ``output="NAME"`` keywords."""
        return re.findall(r"-o (\S+)", self.code) + re.findall(
            r"(?:\.save\(\s*|\boutput=)[\"']([^\"']+)[\"']", self.code
        )


def marked_examples(text: str) -> list[Example]:
    """The fenced blocks of ``text`` marked ``<!-- readme-test -->``.

    Raises:
        ValueError: a mark not followed by a fenced block in one of :data:`LANGUAGES`,
            or a block never closed.
    """
    lines = text.splitlines()
    examples: list[Example] = []
    for index, line in enumerate(lines):
        if line.strip() != MARK:
            continue
        start = index + 1
        while start < len(lines) and not lines[start].strip():
            start += 1
        fence = lines[start].strip() if start < len(lines) else ""
        language = fence.removeprefix("```")
        if not fence.startswith("```") or language not in LANGUAGES:
            raise ValueError(
                f"line {index + 1}: {MARK} must be followed by a ```sh or ```python block, "
                f"found {fence[:40]!r}"
            )
        end = start + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        if end == len(lines):
            raise ValueError(f"line {start + 1}: the block is never closed")
        examples.append(Example(language, "\n".join(lines[start + 1 : end]) + "\n", start + 2))
    return examples


def readme_examples() -> list[Example]:
    return marked_examples((ROOT / "README.md").read_text())


def test_marked_examples_are_found_and_bad_marks_refused():
    text = (
        "intro\n```sh\nnot marked\n```\n"
        f"{MARK}\n\n```sh\ncurl {README_URL}/healthz -o h.json\n```\n"
        f"{MARK}\n```python\nimage.save('a.png')\n```\n"
        f"{MARK}\n```python\nClient('{README_URL}').stylize(p, s, output=\"b.png\")\n```\n"
    )
    shell, python, client = marked_examples(text)
    assert (shell.language, shell.line, shell.needs_server) == ("sh", 8, True)
    assert shell.outputs() == ["h.json"]
    assert (python.language, python.code, python.needs_server) == (
        "python",
        "image.save('a.png')\n",
        False,
    )
    assert python.outputs() == ["a.png"]
    assert (client.needs_server, client.outputs()) == (True, ["b.png"])
    with pytest.raises(ValueError, match="must be followed by"):
        marked_examples(f"{MARK}\nno block here\n")
    with pytest.raises(ValueError, match="must be followed by"):
        marked_examples(f"{MARK}\n```console\n$ ls\n```\n")
    with pytest.raises(ValueError, match="never closed"):
        marked_examples(f"{MARK}\n```sh\nls\n")


def test_the_readme_marks_an_example_of_each_way_in():
    """HTTP against ``make serve``, the command line, Python in process and the Python
    client against ``make serve``: each is run below."""
    examples = readme_examples()
    assert any(e.language == "sh" and e.needs_server and "curl" in e.code for e in examples)
    assert any(e.language == "sh" and re.search(r"^atelier ", e.code, re.M) for e in examples)
    assert any(e.language == "python" and not e.needs_server for e in examples)
    assert any(e.language == "python" and "atelier_client" in e.code for e in examples)
    for example in examples:
        assert example.outputs(), f"README line {example.line}: the example writes nothing"


def make_images(folder: Path) -> None:
    """A small photo (a gradient with a disc) and two small "paintings" (stripes, rings)."""
    y, x = np.mgrid[0:72, 0:96].astype(np.float32)
    photo = np.stack([x / 96, y / 72, 0.5 + 0 * x], axis=-1)
    photo[(x - 40) ** 2 + (y - 36) ** 2 < 15**2] = (0.9, 0.8, 0.1)
    v, u = np.mgrid[0:64, 0:64].astype(np.float32)
    stripes = np.stack([np.sin(u / 3) > 0, np.cos((u + v) / 5) > 0, v / 64], axis=-1)
    rings = np.sin(np.hypot(u - 32, v - 32) / 2)[..., None] * (0.2, 0.4, 0.5) + 0.5
    for name, pixels in zip(IMAGES, (photo, stripes, rings), strict=True):
        array = (np.asarray(pixels, dtype=np.float32).clip(0, 1) * 255).astype(np.uint8)
        Image.fromarray(array).save(folder / name, quality=90)


def assert_images(path: Path, what: str) -> None:
    """``path`` is an image, or a folder of images (at least one)."""
    files = sorted(path.iterdir()) if path.is_dir() else [path]
    assert files, f"{what}: {path.name}/ is empty"
    for file in files:
        try:
            with Image.open(file) as image:
                image.load()
                assert min(image.size) >= 1
        except (OSError, SyntaxError):
            head = file.read_bytes()[:300] if file.is_file() else b"(missing)"
            raise AssertionError(f"{what}: {file.name} is no image: {head!r}") from None


def start(example: Example, folder: Path, url: str | None) -> subprocess.Popen[str]:
    folder.mkdir()
    make_images(folder)
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH")))),
    }
    code = example.code if url is None else example.code.replace(README_URL, url)
    if example.language == "python":
        command = [sys.executable, "-c", code]
    else:
        command = ["bash", "-euo", "pipefail", "-c", code]
    # a group of its own: a shell example's children are killed with it (``kill``)
    return subprocess.Popen(
        command,
        cwd=folder,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def kill(process: subprocess.Popen[str]) -> None:
    """End an example and whatever it started (``atelier`` under ``bash -c``)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def finish(example: Example, process: subprocess.Popen[str], folder: Path) -> None:
    what = f"README line {example.line} ({example.language})"
    try:
        log, _ = process.communicate(timeout=EXAMPLE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        kill(process)
        log, _ = process.communicate()
        raise AssertionError(f"{what} ran past {EXAMPLE_TIMEOUT_S} s:\n{log[-3000:]}") from None
    assert process.returncode == 0, f"{what} exited {process.returncode}:\n{log[-3000:]}"
    for name in example.outputs():
        target = folder / name
        assert target.exists(), f"{what}: wrote no {name}:\n{log[-3000:]}"
        assert_images(target, what)


@pytest.mark.weights
@pytest.mark.timeout(2 * EXAMPLE_TIMEOUT_S + 120)
@pytest.mark.skipif(
    not WEIGHTS or not (Path(WEIGHTS) / "vgg19-normalised").is_dir(),
    reason="needs the pretrained VGG weights in ATELIER_WEIGHTS_DIR",
)
def test_the_readme_examples_run_as_written(tmp_path, monkeypatch):
    # several examples and a server share a small machine: one thread each
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    examples = readme_examples()
    needs_curl = any(example.needs_server for example in examples)
    if needs_curl and shutil.which("curl") is None:
        pytest.skip("needs curl (Debian's curl, which make test installs)")
    # the examples without a server start at once and run while the server loads
    running = {
        index: start(example, tmp_path / f"example-{index}", None)
        for index, example in enumerate(examples)
        if not example.needs_server
    }
    try:
        settings = {"load_models": "adain,dit", "weights_dir": WEIGHTS, "max_batch_wait_ms": "0"}
        with live_server(settings) as server:
            for index, example in enumerate(examples):
                if example.needs_server:
                    folder = tmp_path / f"example-{index}"
                    finish(example, start(example, folder, server.url), folder)
        for index, process in running.items():
            finish(examples[index], process, tmp_path / f"example-{index}")
    finally:
        for process in running.values():
            kill(process)
