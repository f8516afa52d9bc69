"""The DiT training loop: learning, EMA, warmup, exact resume, checkpoints, the CLI."""

from __future__ import annotations

import copy
import dataclasses
import json

import pytest
import torch

from models import devices
from models.diffusion import diffusion_loss
from models.dit.checkpoint import load_dit, read_metadata
from models.dit.config import DiTConfig, get_preset
from models.dit.train import TrainConfig, Trainer, autocast_dtype
from models.text_encoder import HashedWordEncoder
from service.cli import main as cli_main

pytestmark = pytest.mark.usefixtures("single_thread")


def make_trainer(model_config: DiTConfig | None = None, **overrides) -> Trainer:
    """A tiny-preset trainer; ``model_config`` overrides the architecture."""
    options = {
        "preset": "tiny",
        "batch_size": 4,
        "lr": 3e-3,
        "warmup_steps": 2,
        "precision": "fp32",
    }
    config = TrainConfig(**{**options, **overrides})
    return Trainer(config, encoder=HashedWordEncoder(), model_config=model_config)


def fixed_batch_loss(trainer: Trainer, model) -> float:
    """Loss of ``model`` on a held-aside batch with fixed noise and timesteps."""
    x0, captions = trainer.batch(10_000)
    cond = trainer.encoder.encode(captions)
    losses = []
    for seed in range(4):
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            losses.append(
                float(
                    diffusion_loss(
                        model,
                        x0,
                        cond,
                        trainer.alpha_bar,
                        prediction=trainer.model_config.prediction,
                        generator=generator,
                    )
                )
            )
    return sum(losses) / len(losses)


def test_loss_falls_over_a_few_steps():
    trainer = make_trainer(batch_size=8)
    before = fixed_batch_loss(trainer, trainer.model)
    for _ in range(30):
        trainer.train_step()
    after = fixed_batch_loss(trainer, trainer.model)
    assert after < 0.8 * before


def test_resume_restores_the_state_exactly(tmp_path):
    straight = make_trainer()
    for _ in range(4):
        straight.train_step()

    first = make_trainer()
    for _ in range(2):
        first.train_step()
    first.save(tmp_path / "state.pt")
    resumed = make_trainer()
    with torch.no_grad():  # move the fresh weights away, so only resume can restore them
        for p in resumed.model.parameters():
            p.add_(1.0)
    resumed.generator.manual_seed(99)
    resumed.resume(tmp_path / "state.pt")
    assert resumed.step == 2
    for _ in range(2):
        resumed.train_step()

    for a, b in zip(straight.model.parameters(), resumed.model.parameters(), strict=True):
        assert torch.equal(a, b)
    for a, b in zip(straight.ema.parameters(), resumed.ema.parameters(), strict=True):
        assert torch.equal(a, b)
    assert torch.equal(straight.generator.get_state(), resumed.generator.get_state())


@pytest.mark.filterwarnings("ignore:for .*meta parameter")
def test_resume_on_another_device_keeps_the_generator_state_on_the_cpu(tmp_path):
    # a trainer on any device but the CPU (meta stands in for CUDA here): the saved
    # generator state must not follow the weights there
    first = make_trainer()
    first.train_step()
    first.save(tmp_path / "state.pt")
    elsewhere = Trainer(first.config, encoder=HashedWordEncoder(), device="meta")
    elsewhere.resume(tmp_path / "state.pt")
    assert elsewhere.step == 1
    assert torch.equal(elsewhere.generator.get_state(), first.generator.get_state())
    assert all(p.device.type == "meta" for p in elsewhere.model.parameters())


def test_resume_rejects_another_architecture(tmp_path):
    trainer = make_trainer()
    trainer.save(tmp_path / "state.pt")
    state = torch.load(tmp_path / "state.pt", weights_only=True)
    state["model_config"] = get_preset("shapes32").to_json()
    with pytest.raises(ValueError, match="different model"):
        trainer.load_state_dict(state)


def test_resume_reads_a_state_saved_before_the_norm_field(tmp_path):
    trainer = make_trainer()
    trainer.train_step()
    state = trainer.state_dict()
    stored = json.loads(state["model_config"])
    del stored["norm"]
    state["model_config"] = json.dumps(stored)
    fresh = make_trainer()
    fresh.load_state_dict(state)
    assert fresh.step == 1


def test_resume_rejects_another_data_stream(tmp_path):
    make_trainer().save(tmp_path / "state.pt")
    with pytest.raises(ValueError, match="seed"):
        make_trainer(seed=5).resume(tmp_path / "state.pt")


def test_initialize_from_a_checkpoint_starts_from_its_weights(tmp_path):
    source = make_trainer()
    for _ in range(2):
        source.train_step()
    path = source.export(tmp_path / "tiny.safetensors")
    tuned = make_trainer(seed=3)
    tuned.initialize_from(path)
    assert tuned.step == 0
    for mine, theirs in zip(tuned.model.parameters(), source.ema.parameters(), strict=True):
        assert torch.equal(mine, theirs)
    for mine, theirs in zip(tuned.ema.parameters(), source.ema.parameters(), strict=True):
        assert torch.equal(mine, theirs)
    tuned.train_step()  # and it trains on from there
    assert tuned.step == 1


def test_initialize_from_may_add_text_positions_and_keeps_the_predictions(tmp_path):
    source = make_trainer()
    source.train_step()
    path = source.export(tmp_path / "tiny.safetensors")
    tuned = make_trainer(dataclasses.replace(get_preset("tiny"), text_positions=6))
    tuned.initialize_from(path)
    x0, captions = tuned.batch(0)
    cond = tuned.encoder.encode(captions)
    t = torch.full((x0.shape[0],), 400)
    with torch.no_grad():
        torch.testing.assert_close(tuned.model(x0, t, cond), source.ema(x0, t, cond))


def test_an_export_names_its_text_encoder_and_loads_with_it(tmp_path):
    from models.dit.pipeline import TextToImage

    path = make_trainer().export(tmp_path / "tiny.safetensors")
    assert read_metadata(path)[1]["text_encoder"] == HashedWordEncoder.name
    pipe = TextToImage.from_checkpoint(path)
    assert isinstance(pipe.encoder, HashedWordEncoder)
    assert pipe.encoder.dim == get_preset("tiny").text_dim


def test_a_bfloat16_export_loads_as_the_rounded_float32_weights(tmp_path):
    trainer = make_trainer()
    trainer.train_step()
    path = trainer.export(tmp_path / "tiny.safetensors", dtype="bfloat16")
    info = read_metadata(path)[1]
    assert info["step"] == 1 and info["samples"] == 4
    assert info["hardware"] and info["train_hours"] >= 0
    loaded = load_dit(path)
    for name, value in trainer.ema.state_dict().items():
        got = loaded.state_dict()[name]
        assert got.dtype == torch.float32
        assert torch.equal(got, value.to(torch.bfloat16).float()), name
    with pytest.raises(ValueError, match="dtype"):
        trainer.export(tmp_path / "x.safetensors", dtype="float16")


def test_worker_processes_make_the_same_batches_in_the_same_order():
    inline = make_trainer()
    workers = make_trainer(num_workers=2)
    for step in range(3):
        x_inline, captions_inline = inline.batch(step)
        x_workers, captions_workers = workers._next_batch()
        assert captions_workers == captions_inline
        torch.testing.assert_close(x_workers, x_inline)
        workers.step += 1  # what train_step does after its batch


def test_the_canvas_size_picks_the_data_world():
    assert get_preset("shapes32").world == "shapes"
    assert get_preset("things64").world == "things"
    with pytest.raises(ValueError, match="48 px"):
        _ = dataclasses.replace(get_preset("tiny"), image_size=48, patch_size=4).world
    with pytest.raises(ValueError, match="64 px preset"):
        Trainer(TrainConfig(preset="tiny", things=3), encoder=HashedWordEncoder())


def test_initialize_from_rejects_another_architecture(tmp_path):
    source = make_trainer()
    path = source.export(tmp_path / "tiny.safetensors")
    trainer = make_trainer(dataclasses.replace(get_preset("tiny"), depth=3))
    with pytest.raises(ValueError, match="different architecture"):
        trainer.initialize_from(path)


def test_ema_follows_its_update_rule():
    trainer = make_trainer(ema_decay=0.9)
    trainer.train_step()  # update n = 0: decay min(0.9, 1 / 10) = 0.1
    before_ema = copy.deepcopy(trainer.ema)
    before_step = trainer.step
    trainer.train_step()
    decay = min(0.9, (1 + before_step) / (10 + before_step))
    for ema, old, new in zip(
        trainer.ema.parameters(), before_ema.parameters(), trainer.model.parameters(), strict=True
    ):
        torch.testing.assert_close(ema, decay * old + (1 - decay) * new)


def test_learning_rate_warms_up_linearly():
    trainer = make_trainer(lr=1e-3, warmup_steps=4)
    assert [trainer.learning_rate(s) for s in range(6)] == pytest.approx(
        [2.5e-4, 5e-4, 7.5e-4, 1e-3, 1e-3, 1e-3]
    )


def test_learning_rate_cools_down_linearly_to_the_last_step():
    trainer = make_trainer(lr=1e-3, warmup_steps=0, cooldown_steps=4)
    assert trainer.learning_rate(9) == 1e-3  # no end known yet: constant
    trainer.fit(10, progress=False)
    assert [trainer.learning_rate(s) for s in range(5, 11)] == pytest.approx(
        [1e-3, 1e-3, 7.5e-4, 5e-4, 2.5e-4, 0.0]
    )
    assert trainer.optimizer.param_groups[0]["lr"] == pytest.approx(2.5e-4)  # step 9's rate


@pytest.mark.parametrize("cond_dropout,learned", [(0.0, False), (1.0, True)])
def test_null_condition_is_learned_only_from_dropped_captions(cond_dropout, learned):
    trainer = make_trainer(cond_dropout=cond_dropout)
    initial = trainer.model.null_pooled.detach().clone()
    for _ in range(3):  # the first step only moves the zero-initialised output layers
        trainer.train_step()
    assert torch.equal(trainer.model.null_pooled, initial) is not learned


@pytest.mark.parametrize(
    "field,value",
    [
        ("batch_size", 0),
        ("lr", 0.0),
        ("cooldown_steps", -1),
        ("ema_decay", 1.0),
        ("cond_dropout", 1.5),
        ("precision", "fp8"),
        ("weighting", "p2"),
        ("things", 0),
        ("num_workers", -1),
    ],
)
def test_train_config_rejects_bad_values(field, value):
    with pytest.raises(ValueError, match=field):
        TrainConfig(**{field: value})


@pytest.mark.parametrize("native", [True, False])
def test_auto_precision_autocasts_to_bf16_only_where_it_is_native(monkeypatch, native):
    monkeypatch.setattr(devices, "_cpu_has_native_bf16", lambda: native)
    cpu = torch.device("cpu")
    assert autocast_dtype(cpu, "auto") == (torch.bfloat16 if native else None)
    assert autocast_dtype(cpu, "bf16") == torch.bfloat16  # asked for: emulated if need be
    assert autocast_dtype(cpu, "fp32") is None


def test_bf16_on_a_device_without_it_is_a_clear_error():
    assert autocast_dtype(torch.device("meta"), "auto") is None
    with pytest.raises(ValueError, match="bfloat16"):
        autocast_dtype(torch.device("meta"), "bf16")


def test_bf16_training_step_runs_and_keeps_float32_weights():
    trainer = make_trainer(precision="bf16")
    loss = trainer.train_step()
    assert loss == loss  # not NaN
    assert all(p.dtype == torch.float32 for p in trainer.model.parameters())


def test_cli_trains_checkpoints_and_resumes(tmp_path, capsys):
    run_dir, export = tmp_path / "run", tmp_path / "dit-tiny.safetensors"
    args = ["train-dit", "--preset", "tiny", "--batch-size", "2", "--fake-text", "--no-progress"]
    args += ["--run-dir", str(run_dir), "--export", str(export), "--precision", "fp32"]
    assert cli_main([*args, "--steps", "2"]) == 0
    config, info = read_metadata(export)
    assert config == get_preset("tiny") and info["step"] == 2
    assert info["text_encoder"] == "HashedWordEncoder"
    assert isinstance(load_dit(export), torch.nn.Module)
    assert cli_main([*args, "--steps", "3", "--resume"]) == 0
    assert "resumed from" in capsys.readouterr().out
    assert read_metadata(export)[1]["step"] == 3


def test_cli_fine_tunes_from_a_checkpoint(tmp_path, capsys):
    source = make_trainer()
    source.train_step()
    start = source.export(tmp_path / "start.safetensors")
    run_dir, export = tmp_path / "run", tmp_path / "tuned.safetensors"
    args = ["train-dit", "--preset", "tiny", "--batch-size", "2", "--fake-text", "--no-progress"]
    args += ["--run-dir", str(run_dir), "--export", str(export), "--precision", "fp32"]
    assert cli_main([*args, "--steps", "1", "--init-from", str(start)]) == 0
    assert f"initialised from {start}" in capsys.readouterr().out
    info = read_metadata(export)[1]
    assert info["step"] == 1
    assert info["init_from"] == {"step": 1, "samples": 4, "init_from": None}
    # the lineage adds up: this leg's 2 samples on top of the start's 4
    assert info["total_samples"] == 2 + 4
    assert info["total_train_hours"] >= info["train_hours"]


def test_a_64px_preset_trains_on_the_things_world(tmp_path):
    """tiny64 draws its batches from the things data (64 px, a subset), and learns."""
    trainer = make_trainer(get_preset("tiny64"), preset="tiny64", things=6, batch_size=8)
    x0, captions = trainer.batch(0)
    assert x0.shape == (8, 3, 64, 64) and float(x0.min()) >= -1 and float(x0.max()) <= 1
    assert all(isinstance(c, str) and c for c in captions)
    before = fixed_batch_loss(trainer, trainer.model)
    for _ in range(20):
        trainer.train_step()
    assert fixed_batch_loss(trainer, trainer.model) < before
