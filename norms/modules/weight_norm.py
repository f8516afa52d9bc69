"""Weight normalization (Salimans & Kingma, 2016) as a ``torch.nn.utils.parametrize`` rule.

>>> from norms import weight_norm
>>> layer = weight_norm(nn.Linear(16, 8))          # per output row
>>> layer.parametrizations.weight.original0.shape    # g: (8, 1)
>>> layer.parametrizations.weight.original1.shape    # v: (8, 16)

``original0`` / ``original1`` hold ``g`` and ``v`` with the same names and shapes as
``torch.nn.utils.parametrizations.weight_norm``, so state dicts are interchangeable, and
state dicts of the legacy ``torch.nn.utils.weight_norm`` (``weight_g`` / ``weight_v``)
load too. ``dim`` follows torch: ``None`` *and* ``-1`` mean one norm over the whole
tensor; other negative dims count from the end. ``torch.nn.utils.parametrize.
remove_parametrizations(layer, "weight")`` bakes the current ``w`` back into a plain
parameter.
"""

from __future__ import annotations

from numbers import Integral
from typing import Any

from torch import Tensor, nn
from torch.nn.utils import parametrize

from norms.functional._stats import acc_dtype

__all__ = ["WeightNorm", "weight_norm"]


def _check_dim_type(dim: object) -> None:
    if dim is not None and not (isinstance(dim, Integral) and not isinstance(dim, bool)):
        raise ValueError(f"dim must be an int or None, got {dim!r}")


def _kept_dim(dim: int | None, rank: int) -> int | None:
    """The dim keeping its own ``g`` for a weight of ``rank`` dims; ``None``: whole tensor.

    torch's convention: ``dim=None`` and ``dim=-1`` both mean the whole-tensor norm
    (``torch.nn.utils.parametrizations.weight_norm`` maps ``None`` to ``-1``); any
    other dim in ``[-rank, rank)`` counts as usual.
    """
    _check_dim_type(dim)
    if dim is None or dim == -1:
        return None
    if not -rank <= dim < rank:
        raise ValueError(f"dim {dim} is out of range for a weight of rank {rank}")
    return int(dim) % rank


class WeightNorm(nn.Module):
    """The parametrization ``w = g * v / ||v||``, the norm over every dim but ``dim``.

    .. math:: w = g \\, \\frac{v}{\\lVert v \\rVert}, \\qquad
              \\lVert v \\rVert_k = \\sqrt{\\textstyle\\sum_{i \\ne \\text{dim}} v_{k,i}^2}

    Args:
        dim: the dim that keeps one ``g`` per slice (0: per output channel of a Linear or
            Conv; 1 for ConvTranspose); ``None`` or ``-1``: one ``g`` for the whole
            tensor, as in torch.

    Shape:
        - g: ``v``'s shape with every dim but ``dim`` set to 1 (a scalar ``()`` for the
          whole-tensor norm); v: the weight's shape; output: the weight's shape.
    """

    def __init__(self, dim: int | None = 0) -> None:
        super().__init__()
        _check_dim_type(dim)
        self.dim = None if dim == -1 else dim

    def _norm(self, v: Tensor) -> Tensor:
        keep = _kept_dim(self.dim, v.dim())
        norm: Tensor  # Tensor.norm is unannotated in torch
        if keep is None:
            norm = v.norm(2, dtype=acc_dtype(v.dtype))  # () like torch's whole-tensor g
        else:
            reduced = tuple(d for d in range(v.dim()) if d != keep)
            norm = v.norm(2, dim=reduced, keepdim=True, dtype=acc_dtype(v.dtype))
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
    unchanged by the call. Like torch's parametrization it registers a
    load-state-dict pre-hook that renames the legacy ``<name>_g`` / ``<name>_v`` keys of
    ``torch.nn.utils.weight_norm`` to ``parametrizations.<name>.original0`` /
    ``original1``, so old checkpoints load strictly.

    Args:
        module: the module to modify in place.
        name: the parameter to reparametrize.
        dim: the dim keeping its own ``g``; ``None`` or ``-1``: whole-tensor norm.

    Returns:
        ``module``, with ``module.parametrizations[name]`` holding ``original0`` (g) and
        ``original1`` (v).

    Raises:
        ValueError: ``module`` has no parameter ``name`` or ``dim`` is out of range.
    """
    param = getattr(module, name, None)
    if not isinstance(param, nn.Parameter):
        raise ValueError(f"{type(module).__name__} has no parameter named {name!r}")
    _kept_dim(dim, param.dim())
    parametrize.register_parametrization(module, name, WeightNorm(dim))
    module.register_load_state_dict_pre_hook(_LegacyWeightNormKeys(name))  # type: ignore[no-untyped-call]  # unannotated in torch
    return module


class _LegacyWeightNormKeys:
    """Load-state-dict pre-hook: ``<prefix><name>_g`` / ``_v`` -> the parametrization's keys."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, module: nn.Module, state_dict: dict[str, Any], prefix: str, *_: Any) -> None:
        g_key, v_key = f"{prefix}{self.name}_g", f"{prefix}{self.name}_v"
        if g_key in state_dict and v_key in state_dict:
            target = f"{prefix}parametrizations.{self.name}"
            state_dict[f"{target}.original0"] = state_dict.pop(g_key)
            state_dict[f"{target}.original1"] = state_dict.pop(v_key)
