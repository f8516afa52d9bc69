"""Sequence batch norm and a recurrent layer that applies it to the input-to-hidden term."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from norms.functional import _args
from norms.functional.sequence import Stats, sequence_batch_norm, sequence_mask
from norms.modules._affine import FactoryKwargs
from norms.modules.batch import RunningStatsNorm
from norms.registry import register

__all__ = ["BatchNormRNN", "SequenceBatchNorm"]


@register("sequence_batch")
class SequenceBatchNorm(RunningStatsNorm):
    """Batch normalization of padded ``(B, T, C)`` sequences over their valid steps.

    ``stats="sequence"`` pools over batch and time (running statistics ``(C,)``);
    ``stats="frame"`` keeps one set per time step (running statistics ``(max_len, C)``;
    longer sequences reuse the last row in eval). Padded outputs are zero. See
    :func:`norms.functional.sequence_batch_norm`.

    Args:
        num_features: channels ``C`` (the last dim).
        stats: ``"sequence"`` or ``"frame"``.
        max_len: number of per-step running statistics; required for
            ``stats="frame"`` with ``track_running_stats=True``.
        eps, momentum, affine, track_running_stats, device, dtype: see
            :class:`norms.modules.batch.RunningStatsNorm`.

    Shape:
        - input: ``(B, T, C)``; mask: ``(B, T)`` bool or lengths: ``(B,)``
        - output: ``(B, T, C)``.
    """

    def __init__(
        self,
        num_features: int,
        *,
        stats: Stats = "sequence",
        max_len: int | None = None,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        if stats not in ("sequence", "frame"):
            raise ValueError(f"stats must be 'sequence' or 'frame', got {stats!r}")
        if stats == "frame" and track_running_stats:
            if not isinstance(max_len, int) or max_len < 1:
                raise ValueError(
                    f"stats='frame' with running statistics needs max_len >= 1, got {max_len!r}"
                )
        elif max_len is not None:
            raise ValueError("max_len only applies to stats='frame' with running statistics")
        self.stats, self.max_len = stats, max_len
        stats_shape = (max_len, num_features) if max_len else None
        super().__init__(
            num_features, eps, momentum, affine, track_running_stats, device, dtype, stats_shape
        )

    def forward(
        self, x: Tensor, mask: Tensor | None = None, lengths: Tensor | None = None
    ) -> Tensor:
        if x.dim() != 3 or x.shape[2] != self.num_features:
            raise ValueError(f"expected (B, T, {self.num_features}), got {tuple(x.shape)}")
        return sequence_batch_norm(x, mask, lengths, *self._batch_norm_args(), stats=self.stats)

    def extra_repr(self) -> str:
        extra = f", max_len={self.max_len}" if self.max_len else ""
        return super().extra_repr() + f", stats={self.stats!r}{extra}"


_NONLINEARITIES = {"tanh": torch.tanh, "relu": torch.relu}


class BatchNormRNN(nn.Module):
    """An Elman RNN layer with batch norm on the input-to-hidden term.

    .. math:: h_t = \\phi\\big(\\mathrm{BN}(W x_t) + U h_{t-1}\\big)

    Following Laurent et al. (2016) only ``W x_t`` is normalised (the BN shift is the
    layer's bias). ``W x`` does not depend on ``h``, so it is computed and normalised for
    every step at once (:class:`SequenceBatchNorm`, padding excluded from the
    statistics); only the ``U h`` recurrence loops over time. At padded steps the state is
    carried through unchanged and the output is zero, so ``h_n`` is each sequence's state
    after its last valid step.

    Args:
        input_size: features of ``x_t``.
        hidden_size: features of ``h_t``.
        stats, max_len, eps, momentum: passed to the :class:`SequenceBatchNorm`.
        nonlinearity: ``"tanh"`` or ``"relu"``.
        norm_weight_init: initial BN ``gamma``; Cooijmans et al. (2017) recommend a small
            value (0.1) so ``tanh`` does not saturate at the start.
        device, dtype: of the parameters and buffers, as torch's factory kwargs.

    Shape:
        - x: ``(B, T, input_size)``; mask ``(B, T)`` bool or lengths ``(B,)``;
          h0: ``(B, hidden_size)`` (zeros if omitted)
        - returns: outputs ``(B, T, hidden_size)`` and ``h_n`` ``(B, hidden_size)``.
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        *,
        stats: Stats = "sequence",
        max_len: int | None = None,
        nonlinearity: str = "tanh",
        norm_weight_init: float = 0.1,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        _args.positive_int("input_size", input_size)
        _args.positive_int("hidden_size", hidden_size)
        if nonlinearity not in _NONLINEARITIES:
            raise ValueError(
                f"nonlinearity must be one of {sorted(_NONLINEARITIES)}, got {nonlinearity!r}"
            )
        self.input_size, self.hidden_size = input_size, hidden_size
        self.nonlinearity, self.norm_weight_init = nonlinearity, norm_weight_init
        factory_kwargs = FactoryKwargs(device=device, dtype=dtype)
        self.input_proj = nn.Linear(input_size, hidden_size, bias=False, **factory_kwargs)  # W
        self.hidden_proj = nn.Linear(hidden_size, hidden_size, bias=False, **factory_kwargs)  # U
        self.norm = SequenceBatchNorm(
            hidden_size, stats=stats, max_len=max_len, eps=eps, momentum=momentum, **factory_kwargs
        )
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Default ``W``, orthogonal ``U``, BN ``gamma = norm_weight_init`` and ``beta = 0``."""
        self.input_proj.reset_parameters()
        nn.init.orthogonal_(self.hidden_proj.weight)
        self.norm.reset_parameters()
        assert self.norm.weight is not None  # the norm is affine
        nn.init.constant_(self.norm.weight, self.norm_weight_init)

    def forward(
        self,
        x: Tensor,
        mask: Tensor | None = None,
        lengths: Tensor | None = None,
        h0: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        if x.dim() != 3 or x.shape[2] != self.input_size:
            raise ValueError(f"expected (B, T, {self.input_size}), got {tuple(x.shape)}")
        batch, steps, _ = x.shape
        if lengths is not None:
            if mask is not None:
                raise ValueError("give either mask or lengths, not both")
            mask = sequence_mask(lengths.to(x.device), steps)
        drive = self.norm(self.input_proj(x), mask)  # (B, T, H), zero at padded steps
        h = x.new_zeros(batch, self.hidden_size) if h0 is None else h0
        if h.shape != (batch, self.hidden_size):
            raise ValueError(f"h0 must be ({batch}, {self.hidden_size}), got {tuple(h.shape)}")
        phi = _NONLINEARITIES[self.nonlinearity]
        outputs = []
        for t in range(steps):
            new_h = phi(drive[:, t] + self.hidden_proj(h))
            if mask is not None:
                valid = mask[:, t, None]  # (B, 1)
                h = torch.where(valid, new_h, h)
                outputs.append(torch.where(valid, new_h, 0.0))
            else:
                h = new_h
                outputs.append(new_h)
        return torch.stack(outputs, dim=1), h

    def extra_repr(self) -> str:
        return f"{self.input_size}, {self.hidden_size}, nonlinearity={self.nonlinearity!r}"
