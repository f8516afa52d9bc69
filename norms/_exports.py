"""How the ``norms`` subpackages build their ``__all__`` from their submodules'."""

from __future__ import annotations

import sys

__all__ = ["public_names"]


def public_names(package: str) -> list[str]:
    """The ``__all__`` names of ``package``'s public submodules, in submodule-name order.

    A package calls it as ``__all__ = public_names(__name__)`` after star-importing its
    submodules: the submodules are the direct children of ``package`` already imported,
    those whose name starts with ``_`` left out. They are looked up in ``sys.modules``,
    not as attributes, because a submodule may export a name equal to its own module's
    (e.g. the function ``weight_norm``), which then shadows the module attribute.
    """
    prefix = f"{package}."
    children = sorted(
        name
        for name in sys.modules
        if name.startswith(prefix)
        and "." not in name[len(prefix) :]
        and not name[len(prefix) :].startswith("_")
    )
    return [name for child in children for name in sys.modules[child].__all__]
