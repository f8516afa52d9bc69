"""Weight normalization (Salimans & Kingma, 2016) as a ``torch.nn.utils.parametrize`` rule.

>>> from norms import weight_norm
>>> layer = weight_norm(nn.Linear(16, 8))          # per output row
>>> layer.parametrizations.weight.original0.shape    # g: (8, 1)
>>> layer.parametrizations.weight.original1.shape    # v: (8, 16)

``original0`` / ``original1`` hold ``g`` and ``v`` with the same names and shapes as
``torch.nn.utils.parametrizations.weight_norm``, so state dicts are interchangeable.
``torch.nn.utils.parametrize.remove_parametrizations(layer, "weight")`` bakes the
current ``w`` back into a plain parameter.
"""

from __future__ import annotations

from torch import Tensor, nn
from torch.nn.utils import parametrize

from norms.functional._stats import acc_dtype

__all__ = ["WeightNorm", "weight_norm"]


class WeightNorm(nn.Module):
    """The parametrization ``w = g * v / ||v||``, the norm over every dim but ``dim``.

    .. math:: w = g \\, \\frac{v}{\\lVert v \\rVert}, \\qquad
              \\lVert v \\rVert_k = \\sqrt{\\textstyle\\sum_{i \\ne \\text{dim}} v_{k,i}^2}

    Args:
        dim: the dim that keeps one ``g`` per slice (0: per output channel of a Linear or
            Conv; 1 for ConvTranspose); ``None``: one ``g`` for the whole tensor.

    Shape:
        - g: ``v``'s shape with every dim but ``dim`` set to 1 (a scalar ``()`` when
          ``dim`` is None); v: the weight's shape; output: the weight's shape.
    """

    def __init__(self, dim: int | None = 0) -> None:
        super().__init__()
        self.dim = dim

    def _reduced_dims(self, v: Tensor) -> tuple[int, ...]:
        if self.dim is None:
            return tuple(range(v.dim()))
        if not -v.dim() <= self.dim < v.dim():
            raise ValueError(f"dim {self.dim} is out of range for a weight of rank {v.dim()}")
        keep = self.dim % v.dim()
        return tuple(d for d in range(v.dim()) if d != keep)

    def _norm(self, v: Tensor) -> Tensor:
        keepdim = self.dim is not None  # torch's convention: a scalar g for the whole tensor
        norm = v.norm(2, dim=self._reduced_dims(v), keepdim=keepdim, dtype=acc_dtype(v.dtype))
        return norm.to(v.dtype)

    def forward(self, g: Tensor, v: Tensor) -> Tensor:
        return v * (g / self._norm(v))

    def right_inverse(self, weight: Tensor) -> tuple[Tensor, Tensor]:
        """Split a weight into ``(g, v)`` with ``g = ||weight||`` and ``v = weight``."""
        return self._norm(weight), weight

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


def weight_norm(module: nn.Module, name: str = "weight", dim: int | None = 0) -> nn.Module:
    """Reparametrize ``module.<name>`` as ``g * v / ||v||`` (per output channel by default).

    Works on any module holding the parameter (Linear, Conv1d/2d/3d, ConvTranspose with
    ``dim=1``, Embedding, ...). The initial ``g`` is ``||w||``, so the module's output is
    unchanged by the call.

    Args:
        module: the module to modify in place.
        name: the parameter to reparametrize.
        dim: the dim keeping its own ``g`` (``None``: whole-tensor norm).

    Returns:
        ``module``, with ``module.parametrizations[name]`` holding ``original0`` (g) and
        ``original1`` (v).

    Raises:
        ValueError: ``module`` has no parameter ``name`` or ``dim`` is out of range.
    """
    param = getattr(module, name, None)
    if not isinstance(param, nn.Parameter):
        raise ValueError(f"{type(module).__name__} has no parameter named {name!r}")
    if dim is not None and not -param.dim() <= dim < param.dim():
        raise ValueError(f"dim {dim} is out of range for {name} of shape {tuple(param.shape)}")
    parametrize.register_parametrization(module, name, WeightNorm(dim))
    return module
