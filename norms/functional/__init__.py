"""Pure functions of the normalization family (also reachable as ``norms.F``).

Names and argument order are a contract (``docs/architecture.md``): checks outside the repository
call them. Each submodule declares its public names in ``__all__``.
"""

import sys

from norms.functional.adaptive import *  # noqa: F403
from norms.functional.batch import *  # noqa: F403
from norms.functional.dyt import *  # noqa: F403
from norms.functional.layer import *  # noqa: F403
from norms.functional.local import *  # noqa: F403
from norms.functional.sequence import *  # noqa: F403
from norms.functional.switchable import *  # noqa: F403
from norms.functional.whitening import *  # noqa: F403

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
    "whitening",
)
__all__ = [name for sub in _SUBMODULES for name in sys.modules[f"{__name__}.{sub}"].__all__]
