"""Name -> norm-layer registry.

``build(spec, num_features, **kw)`` accepts a registered name ("batch", "group", ...),
a class, or a ``functools.partial`` / any callable taking ``num_features`` first.
Modules register themselves with the :func:`register` decorator at import time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from torch import nn

_REGISTRY: dict[str, Callable[..., nn.Module]] = {}
T = TypeVar("T")


def register(name: str) -> Callable[[T], T]:
    """Class decorator: make ``norms.build(name, ...)`` construct the class."""
    if name != name.lower():
        raise ValueError(f"registry names are lower-case, got {name!r}")

    def decorator(cls: T) -> T:
        if name in _REGISTRY and _REGISTRY[name] is not cls:
            raise ValueError(f"norm {name!r} is already registered to {_REGISTRY[name]!r}")
        _REGISTRY[name] = cls  # type: ignore[assignment]
        return cls

    return decorator


def available() -> list[str]:
    """The registered names, sorted."""
    return sorted(_REGISTRY)


def build(spec: str | Callable[..., nn.Module], num_features: int, **kwargs: Any) -> nn.Module:
    """Construct a norm layer from a name, class or partial.

    Raises:
        KeyError: an unknown name; the message lists the valid ones.
        TypeError: ``spec`` is neither a string nor callable.
    """
    if isinstance(spec, str):
        try:
            factory = _REGISTRY[spec.lower()]
        except KeyError:
            raise KeyError(f"unknown norm {spec!r}; available: {', '.join(available())}") from None
    elif callable(spec):
        factory = spec
    else:
        raise TypeError(f"norm spec must be a name, class or callable, got {type(spec).__name__}")
    return factory(num_features, **kwargs)
