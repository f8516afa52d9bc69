"""Device choice: one resolver for the service, the CLIs and training."""

from __future__ import annotations

import pytest
import torch

from models import devices
from models.adain import StyleTransfer
from models.devices import bf16_supported, device_list
from models.dit.train import autocast_dtype
from service.config import Settings


@pytest.mark.parametrize(
    "cuda,mps,expected",
    [(2, True, ["cuda:0", "cuda:1"]), (0, True, ["mps"]), (0, False, ["cpu"])],
)
def test_auto_prefers_every_cuda_device_then_mps_then_the_cpu(monkeypatch, cuda, mps, expected):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: cuda)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: mps)
    assert device_list("auto") == device_list(" AUTO ") == expected


def test_an_explicit_list_is_kept_in_order_without_blanks():
    assert device_list("cuda:1, cpu,,") == ["cuda:1", "cpu"]


@pytest.mark.parametrize("spec,match", [(" , ", "no device"), ("cpu,gpu7", "gpu7")])
def test_an_empty_or_unknown_device_is_a_clear_error(spec, match):
    with pytest.raises(ValueError, match=match):
        device_list(spec)


def test_the_settings_resolve_their_devices_with_it():
    assert Settings(devices="cpu, cuda:1").device_list() == ["cpu", "cuda:1"]
    assert Settings(devices="auto").device_list() == device_list("auto")


@pytest.mark.parametrize("native", [True, False])
def test_bf16_is_supported_where_the_cpu_runs_it_natively(monkeypatch, native):
    monkeypatch.setattr(devices, "_cpu_has_native_bf16", lambda: native)
    assert bf16_supported("cpu") is native
    assert not bf16_supported("meta")


@pytest.mark.parametrize("native", [True, False])
def test_style_transfer_and_dit_training_agree_on_bf16(monkeypatch, tiny_networks, native):
    """One answer for both: the AdaIN fast path's dtype and training's "auto" autocast."""
    monkeypatch.setattr(devices, "_cpu_has_native_bf16", lambda: native)
    encoder, decoders = tiny_networks
    fast = StyleTransfer(encoder, decoders, levels=("relu3_1",), fast=True)
    assert fast.describe()["dtype"] == ("bfloat16" if native else "float32")
    assert autocast_dtype(torch.device("cpu"), "auto") == (torch.bfloat16 if native else None)


def test_host_reads_counts_what_would_wait_for_a_gpu():
    x = torch.arange(6.0)
    with devices.HostReads() as reads:
        y = (x * 2 + 1).exp().sum()  # device work only
        x[x > 2]  # a boolean mask: its size is read back
        bool(y > 0), int(x.max()), float(x[0]), x.tolist(), x.nonzero()
    assert reads.names == ["__getitem__", "__bool__", "__int__", "__float__", "tolist", "nonzero"]


def test_to_device_moves_and_converts():
    x = torch.arange(4, dtype=torch.uint8)
    moved = devices.to_device(x, "cpu", torch.float32)
    assert moved.dtype == torch.float32 and torch.equal(moved, x.float())
    assert devices.to_device(moved, "cpu") is moved  # nothing to do: no copy


def test_autocast_dtype_names_a_bad_precision():
    with pytest.raises(ValueError, match="precision"):
        devices.autocast_dtype(torch.device("cpu"), "fp16")


@pytest.mark.parametrize("batch,per_image", [(1, 10), (7, 3), (32, 2**26), (5, 2**31), (4, 1)])
def test_index_safe_slices_cover_the_batch_in_order_under_the_limit(batch, per_image):
    parts = devices.index_safe_slices(batch, per_image)
    assert [i for part in parts for i in range(batch)[part]] == list(range(batch))
    for part in parts:
        images = part.stop - part.start
        assert images == 1 or images * per_image <= devices.INDEX_LIMIT
    if batch * per_image <= devices.INDEX_LIMIT:
        assert parts == [slice(0, batch)]


def test_batches_over_cudas_32_bit_index_limit_run_in_slices_with_the_same_result(monkeypatch):
    # an H200 refused a batch of 32 photos of 1024 px ("input tensor must fit into 32-bit
    # index math", reflection padding at relu1_1): the encoder and decoder slice the batch
    # so no map holds more than INDEX_LIMIT elements, here lowered to fit three images
    from models.decoder import Decoder
    from models.vgg import VGGEncoder

    torch.manual_seed(0)
    encoder, decoder = VGGEncoder("relu3_1").eval(), Decoder("relu3_1").eval()
    images = torch.rand(7, 3, 24, 20)
    with torch.no_grad():
        whole = encoder(images)
        decoded = decoder(whole["relu3_1"])
        matrix = torch.randn(7, 256, 256) / 16
        shift = torch.randn(7, 256)
        linear = decoder.forward_linear(whole["relu3_1"], matrix, shift)
    monkeypatch.setattr(devices, "INDEX_LIMIT", 3 * 64 * 26 * 22)
    padded = []
    for module in [*encoder.layers, *decoder.layers]:
        if isinstance(module, torch.nn.ReflectionPad2d):
            module.register_forward_hook(lambda m, args, out: padded.append(out.numel()))
    with torch.no_grad():
        sliced = encoder(images)
        for level, features in whole.items():
            torch.testing.assert_close(sliced[level], features, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(decoder(whole["relu3_1"]), decoded, rtol=1e-6, atol=1e-6)
        got = decoder.forward_linear(whole["relu3_1"], matrix, shift)
        torch.testing.assert_close(got, linear, rtol=1e-5, atol=1e-5)
    assert padded and max(padded) <= devices.INDEX_LIMIT


def test_to_host_returns_a_cpu_tensor_with_the_same_values():
    x = torch.randn(2, 3, 4, dtype=torch.bfloat16)
    host = devices.to_host(x)
    assert host.device.type == "cpu" and host.dtype == x.dtype
    torch.testing.assert_close(host, x, rtol=0, atol=0)
