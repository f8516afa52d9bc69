"""Pure functions of the normalization family (also reachable as ``norms.F``).

Names and argument order are a contract (``DESIGN.md``): checks outside the repository
call them. Each submodule declares its public names in ``__all__``.
"""

from norms.functional import adaptive, batch, dyt, layer, local, sequence, switchable
from norms.functional.adaptive import *  # noqa: F403
from norms.functional.batch import *  # noqa: F403
from norms.functional.dyt import *  # noqa: F403
from norms.functional.layer import *  # noqa: F403
from norms.functional.local import *  # noqa: F403
from norms.functional.sequence import *  # noqa: F403
from norms.functional.switchable import *  # noqa: F403

__all__ = [
    name
    for module in (adaptive, batch, dyt, layer, local, sequence, switchable)
    for name in module.__all__
]
