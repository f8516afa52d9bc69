"""sequence_batch_norm, SequenceBatchNorm and BatchNormRNN: references, padding, modules."""

from __future__ import annotations

import _reference_batch as ref
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import norms
from norms.functional import batch_norm, sequence_batch_norm, sequence_mask

MODES = ["sequence", "frame"]


def _rand(gen, *shape, dtype=torch.float32, scale=1.0, offset=0.0):
    return (torch.randn(*shape, generator=gen, dtype=torch.float64) * scale + offset).to(dtype)


def _lengths_mask(lengths, steps):
    return torch.arange(steps)[None, :] < torch.tensor(lengths)[:, None]


def _params(gen, channels, dtype=torch.float32):
    return _rand(gen, channels, scale=0.5, offset=1.0, dtype=dtype), _rand(
        gen, channels, dtype=dtype
    )


@pytest.mark.parametrize("stats", MODES)
def test_training_matches_float64_reference(gen, stats):
    x = _rand(gen, 5, 6, 3, scale=2.0, offset=1.0)
    valid = torch.rand(5, 6, generator=gen) > 0.3
    valid[:2] = True  # every frame has at least two valid values
    weight, bias = _params(gen, 3)
    shape = (3,) if stats == "sequence" else (6, 3)
    running_mean, running_var = torch.zeros(shape), torch.ones(shape)

    y = sequence_batch_norm(
        x, valid, None, running_mean, running_var, weight, bias, True, 0.5, stats=stats
    )

    y_ref, means, variances = ref.sequence_batch_norm(x, valid, stats, weight, bias)
    torch.testing.assert_close(y.double(), y_ref, atol=1e-5, rtol=1e-5)
    if stats == "frame":
        means = torch.stack([means[t] for t in range(6)])
        variances = torch.stack([variances[t] for t in range(6)])
    torch.testing.assert_close(running_mean.double(), 0.5 * means)
    torch.testing.assert_close(running_var.double(), 0.5 + 0.5 * variances)


def test_frame_rows_without_two_values_keep_their_running_stats(gen):
    x = _rand(gen, 3, 5, 2)
    lengths = torch.tensor([5, 2, 3])  # steps 3, 4 have one valid value
    running_mean, running_var = torch.full((4, 2), 7.0), torch.full((4, 2), 3.0)
    y = sequence_batch_norm(
        x, None, lengths, running_mean, running_var, None, None, True, 1.0, stats="frame"
    )
    _, means, variances = ref.sequence_batch_norm(x, sequence_mask(lengths, 5), "frame")
    assert sorted(means) == [0, 1, 2]
    torch.testing.assert_close(running_mean[:3].double(), torch.stack([means[t] for t in range(3)]))
    torch.testing.assert_close(
        running_var[:3].double(), torch.stack([variances[t] for t in range(3)])
    )
    assert torch.equal(running_mean[3], torch.full((2,), 7.0))  # step 3: one value
    assert torch.equal(y[0, 3:], torch.zeros(2, 2))  # a lone value normalises to beta = 0


def test_lengths_equal_their_prefix_mask(gen):
    x = _rand(gen, 4, 5, 3)
    lengths = torch.tensor([5, 3, 1, 4])
    by_lengths = sequence_batch_norm(x, lengths=lengths, stats="frame")
    by_mask = sequence_batch_norm(x, _lengths_mask([5, 3, 1, 4], 5), stats="frame")
    assert torch.equal(by_lengths, by_mask)


def test_without_padding_sequence_stats_are_batch_norm(gen):
    x = _rand(gen, 4, 5, 3, offset=2.0)
    y = sequence_batch_norm(x)
    torch.testing.assert_close(
        y, batch_norm(x.transpose(1, 2)).transpose(1, 2), atol=1e-5, rtol=1e-5
    )


@given(
    seed=st.integers(0, 2**16),
    stats=st.sampled_from(MODES),
    batch=st.integers(2, 5),
    steps=st.integers(1, 6),
    pad_scale=st.sampled_from([1.0, 1e3, 1e6]),
)
def test_valid_outputs_do_not_depend_on_padded_values(seed, stats, batch, steps, pad_scale):
    gen = torch.Generator().manual_seed(seed)
    x = _rand(gen, batch, steps, 3)
    valid = torch.rand(batch, steps, generator=gen) > 0.4
    valid[:2, 0] = True  # at least one pair of valid values
    other = torch.where(valid[..., None], x, _rand(gen, batch, steps, 3, scale=pad_scale))
    weight, bias = _params(gen, 3)
    buffers = [(torch.zeros(steps, 3), torch.ones(steps, 3)) for _ in range(2)]
    if stats == "sequence":
        buffers = [(torch.zeros(3), torch.ones(3)) for _ in range(2)]
    y = sequence_batch_norm(x, valid, None, *buffers[0], weight, bias, stats=stats)
    y_other = sequence_batch_norm(other, valid, None, *buffers[1], weight, bias, stats=stats)
    assert torch.equal(y, y_other)
    assert torch.equal(buffers[0][0], buffers[1][0]) and torch.equal(buffers[0][1], buffers[1][1])
    assert not y[~valid].any()  # padded outputs are zero


def test_nan_padding_does_not_leak_into_values_or_gradients(gen):
    x = _rand(gen, 3, 4, 2, dtype=torch.float64)
    valid = _lengths_mask([4, 2, 3], 4)
    x[~valid] = float("nan")
    x.requires_grad_()
    for stats in MODES:
        y = sequence_batch_norm(x, valid, stats=stats)
        assert torch.isfinite(y).all()
        (grad,) = torch.autograd.grad((y**2).sum(), x)
        assert torch.isfinite(grad).all() and not grad[~valid].any()


@pytest.mark.parametrize("stats", MODES)
def test_gradcheck(gen, stats):
    x = _rand(gen, 4, 3, 2, dtype=torch.float64).requires_grad_()
    valid = _lengths_mask([3, 3, 2, 1], 3)
    weight, bias = (p.requires_grad_() for p in _params(gen, 2, torch.float64))
    assert torch.autograd.gradcheck(
        lambda x, w, b: sequence_batch_norm(x, valid, None, None, None, w, b, stats=stats),
        (x, weight, bias),
    )


def test_eval_uses_running_stats_and_the_last_frame_row_beyond_max_len(gen):
    x = _rand(gen, 2, 5, 3)
    running_mean, running_var = _rand(gen, 3, 3), _rand(gen, 3, 3).abs() + 0.5
    y = sequence_batch_norm(
        x, None, torch.tensor([5, 4]), running_mean, running_var, training=False, stats="frame"
    )
    rows = torch.tensor([0, 1, 2, 2, 2])
    expected = (x.double() - running_mean[rows].double()) / torch.sqrt(
        running_var[rows].double() + 1e-5
    )
    expected[1, 4] = 0.0
    torch.testing.assert_close(y.double(), expected, atol=1e-5, rtol=1e-5)
    seq_mean, seq_var = running_mean[0], running_var[0]
    y = sequence_batch_norm(x, None, None, seq_mean, seq_var, training=False)
    torch.testing.assert_close(
        y.double(), (x.double() - seq_mean.double()) / torch.sqrt(seq_var.double() + 1e-5)
    )


def test_bfloat16_statistics_in_float32(gen):
    x = _rand(gen, 4, 6, 3, scale=64.0, offset=1e3, dtype=torch.bfloat16)
    valid = _lengths_mask([6, 5, 4, 2], 6)
    y = sequence_batch_norm(x, valid)
    assert y.dtype == torch.bfloat16
    torch.testing.assert_close(
        y.double(), ref.sequence_batch_norm(x, valid, "sequence")[0], atol=4e-2, rtol=0
    )


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: sequence_batch_norm(torch.randn(4, 3)), "B, T, C"),
        (lambda: sequence_batch_norm(torch.randn(2, 3, 4), stats="time"), "stats"),
        (
            lambda: sequence_batch_norm(
                torch.randn(2, 3, 4), torch.ones(2, 3, dtype=torch.bool), torch.tensor([3, 3])
            ),
            "either",
        ),
        (lambda: sequence_batch_norm(torch.randn(2, 3, 4), torch.ones(2, 3)), "bool"),
        (
            lambda: sequence_batch_norm(torch.randn(2, 3, 4), torch.ones(3, 2, dtype=torch.bool)),
            "shape",
        ),
        (
            lambda: sequence_batch_norm(torch.randn(2, 3, 4), lengths=torch.tensor([4, 1])),
            "lengths",
        ),
        (
            lambda: sequence_batch_norm(torch.randn(2, 3, 4), lengths=torch.tensor([1, 0])),
            "more than 1",
        ),
        (lambda: sequence_batch_norm(torch.randn(1, 3, 4), stats="frame"), "more than 1"),
        (lambda: sequence_batch_norm(torch.randn(2, 3, 4), training=False), "running"),
        (
            lambda: sequence_batch_norm(
                torch.randn(2, 3, 4), None, None, torch.zeros(4), torch.ones(4), stats="frame"
            ),
            "(L, C)",
        ),
    ],
)
def test_bad_arguments(call, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        call()


# --------------------------------------------------------------------------- modules


@pytest.mark.parametrize("stats", MODES)
def test_module_train_eval_and_state_dict(gen, stats):
    max_len = 4 if stats == "frame" else None
    layer = norms.build("sequence_batch", 3, stats=stats, max_len=max_len)
    assert isinstance(layer, norms.SequenceBatchNorm)
    lengths = torch.tensor([4, 3, 2])
    for _ in range(2):
        x = _rand(gen, 3, 4, 3, offset=1.0)
        y = layer(x, lengths=lengths)
        torch.testing.assert_close(
            y.double(),
            ref.sequence_batch_norm(x, sequence_mask(lengths, 4), stats)[0],
            atol=1e-5,
            rtol=1e-5,
        )
    assert int(layer.num_batches_tracked) == 2
    expected_shape = (3,) if stats == "sequence" else (4, 3)
    assert layer.running_mean.shape == expected_shape
    copy = norms.SequenceBatchNorm(3, stats=stats, max_len=max_len)
    copy.load_state_dict(layer.state_dict())
    layer.eval()
    copy.eval()
    assert torch.equal(copy(x, lengths=lengths), layer(x, lengths=lengths))
    assert int(layer.num_batches_tracked) == 2
    assert f"stats={stats!r}" in repr(layer)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"stats": "frame"},
        {"stats": "frame", "max_len": 0},
        {"stats": "sequence", "max_len": 4},
        {"stats": "other"},
        {"momentum": -0.5},
    ],
)
def test_module_rejects_bad_arguments(kwargs):
    with pytest.raises(ValueError):
        norms.SequenceBatchNorm(3, **kwargs)


def test_frame_module_without_running_stats_needs_no_max_len(gen):
    layer = norms.SequenceBatchNorm(3, stats="frame", track_running_stats=False).eval()
    x = _rand(gen, 3, 5, 3)
    torch.testing.assert_close(
        layer(x).double(),
        ref.sequence_batch_norm(x, torch.ones(3, 5, dtype=torch.bool), "frame")[0],
        atol=1e-5,
        rtol=1e-5,
    )


def _rnn_reference(rnn, x, valid):
    """Float64 loop: h_t = tanh(BN(W x_t) + U h_{t-1}), state held over padded steps."""
    w = rnn.input_proj.weight.detach().double()
    u = rnn.hidden_proj.weight.detach().double()
    drive, _, _ = ref.sequence_batch_norm(
        x.double() @ w.T, valid, rnn.norm.stats, rnn.norm.weight, rnn.norm.bias
    )
    h = torch.zeros(x.shape[0], u.shape[0], dtype=torch.float64)
    outputs = torch.zeros(x.shape[0], x.shape[1], u.shape[0], dtype=torch.float64)
    for t in range(x.shape[1]):
        new_h = torch.tanh(drive[:, t] + h @ u.T)
        for b in range(x.shape[0]):
            if valid[b, t]:
                h[b] = new_h[b]
                outputs[b, t] = new_h[b]
    return outputs, h


@pytest.mark.parametrize("stats", MODES)
def test_rnn_matches_float64_loop(gen, stats):
    torch.manual_seed(0)
    rnn = norms.BatchNormRNN(3, 5, stats=stats, max_len=6 if stats == "frame" else None)
    x = _rand(gen, 4, 6, 3)
    lengths = torch.tensor([6, 4, 4, 2])
    outputs, h_n = rnn(x, lengths=lengths)
    expected_outputs, expected_h = _rnn_reference(rnn, x, sequence_mask(lengths, 6))
    torch.testing.assert_close(outputs.double(), expected_outputs, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(h_n.double(), expected_h, atol=1e-5, rtol=1e-5)
    outputs.sum().backward()
    for name, p in rnn.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_rnn_in_eval_runs_each_sequence_as_if_alone(gen):
    """With running statistics, padding a sequence into a batch changes none of its outputs."""
    torch.manual_seed(1)
    rnn = norms.BatchNormRNN(2, 4, stats="frame", max_len=5)
    for _ in range(3):
        rnn(_rand(gen, 4, 5, 2), lengths=torch.tensor([5, 5, 3, 2]))
    rnn.eval()
    x = _rand(gen, 3, 5, 2)
    lengths = [5, 2, 3]
    outputs, h_n = rnn(x, lengths=torch.tensor(lengths))
    for b, length in enumerate(lengths):
        alone, h_alone = rnn(x[b : b + 1, :length])
        torch.testing.assert_close(outputs[b, :length], alone[0], atol=1e-6, rtol=1e-6)
        torch.testing.assert_close(h_n[b], h_alone[0], atol=1e-6, rtol=1e-6)
        assert not outputs[b, length:].any()


def test_rnn_initialisation_and_errors():
    rnn = norms.BatchNormRNN(3, 4, nonlinearity="relu", norm_weight_init=0.2)
    assert torch.equal(rnn.norm.weight, torch.full((4,), 0.2))
    u = rnn.hidden_proj.weight.detach()
    torch.testing.assert_close(u @ u.T, torch.eye(4), atol=1e-5, rtol=1e-5)
    assert "relu" in repr(rnn)
    with pytest.raises(ValueError):
        norms.BatchNormRNN(0, 4)
    with pytest.raises(ValueError):
        norms.BatchNormRNN(3, 4, nonlinearity="sigmoid")
    with pytest.raises(ValueError):
        rnn(torch.randn(2, 3, 5))
    with pytest.raises(ValueError):
        rnn(torch.randn(2, 3, 3), h0=torch.zeros(2, 5))
    with pytest.raises(ValueError):
        rnn(torch.randn(2, 3, 3), torch.ones(2, 3, dtype=torch.bool), torch.tensor([3, 3]))
