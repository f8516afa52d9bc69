"""Checkpoint reading and writing: weights-only pickles, safetensors, atomic writes, errors."""

from __future__ import annotations

import pickle

import pytest
import torch

from models.checkpoints import (
    load_state_dict,
    save_state_dict,
    save_training_state,
    write_atomically,
)


def _state() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return {"0.weight": torch.randn(3, 3, 1, 1, generator=generator), "0.bias": torch.randn(3)}


def test_pth_round_trip(tmp_path):
    state = _state()
    torch.save(state, tmp_path / "a.pth")
    loaded = load_state_dict(tmp_path / "a.pth")
    assert loaded.keys() == state.keys()
    assert all(torch.equal(loaded[k], state[k]) for k in state)


def test_nested_state_dict_is_unwrapped(tmp_path):
    torch.save({"state_dict": _state()}, tmp_path / "b.pt")
    assert set(load_state_dict(tmp_path / "b.pt")) == {"0.weight", "0.bias"}


def test_safetensors_round_trip_with_metadata(tmp_path):
    state = _state()
    path = save_state_dict(state, tmp_path / "c.safetensors", metadata={"level": "relu3_1"})
    loaded = load_state_dict(path)
    assert all(torch.equal(loaded[k], state[k]) for k in state)


def test_training_state_round_trip_is_readable_weights_only(tmp_path):
    state = {"step": 3, "model": _state(), "name": "run"}
    path = save_training_state(state, tmp_path / "runs" / "state.pt")
    loaded = torch.load(path, weights_only=True)
    assert loaded["step"] == 3 and loaded["name"] == "run"
    assert torch.equal(loaded["model"]["0.weight"], state["model"]["0.weight"])


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = save_state_dict(_state(), tmp_path / "c.safetensors")
    before = path.read_bytes()

    def fail(temporary):
        temporary.write_bytes(b"partial")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_atomically(path, fail)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["c.safetensors"]


def test_written_checkpoints_are_world_readable(tmp_path):
    path = save_state_dict(_state(), tmp_path / "c.safetensors")
    assert path.stat().st_mode & 0o777 == 0o644


class _Exploit:
    def __reduce__(self):
        return (print, ("code ran",))


def test_pickles_that_run_code_are_refused(tmp_path):
    path = tmp_path / "evil.pth"
    with open(path, "wb") as handle:
        pickle.dump({"0.weight": _Exploit()}, handle, protocol=2)
    with pytest.raises(pickle.UnpicklingError):
        load_state_dict(path)


def test_errors(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_state_dict(tmp_path / "missing.pth")
    (tmp_path / "x.bin").write_bytes(b"")
    with pytest.raises(ValueError, match="unknown checkpoint format"):
        load_state_dict(tmp_path / "x.bin")
    torch.save([torch.zeros(1)], tmp_path / "list.pth")
    with pytest.raises(ValueError, match="does not hold a state_dict"):
        load_state_dict(tmp_path / "list.pth")
    with pytest.raises(ValueError, match="safetensors"):
        save_state_dict(_state(), tmp_path / "out.pth")
