"""Thin ``nn.Module`` wrappers over :mod:`norms.functional`.

Each submodule declares its public classes in ``__all__`` and registers them with
:func:`norms.registry.register`.
"""

import sys

from norms.modules.adaptive import *  # noqa: F403
from norms.modules.batch import *  # noqa: F403
from norms.modules.dyt import *  # noqa: F403
from norms.modules.layer import *  # noqa: F403
from norms.modules.local import *  # noqa: F403
from norms.modules.sequence import *  # noqa: F403
from norms.modules.switchable import *  # noqa: F403
from norms.modules.weight_norm import *  # noqa: F403
from norms.modules.whitening import *  # noqa: F403

# Looked up in sys.modules: a submodule may export a name equal to its own module's
# (e.g. the function ``weight_norm``), which then shadows the module attribute here.
_SUBMODULES = (
    "adaptive",
    "batch",
    "dyt",
    "layer",
    "local",
    "sequence",
    "switchable",
    "weight_norm",
    "whitening",
)
__all__ = [name for sub in _SUBMODULES for name in sys.modules[f"{__name__}.{sub}"].__all__]
