"""Pure functions of the normalization family (also reachable as ``norms.F``).

Names and argument order are a contract (``docs/architecture.md``): checks outside the repository
call them. Each submodule declares its public names in ``__all__``.
"""

from norms._exports import public_names
from norms.functional.adaptive import *  # noqa: F403
from norms.functional.batch import *  # noqa: F403
from norms.functional.dyt import *  # noqa: F403
from norms.functional.layer import *  # noqa: F403
from norms.functional.local import *  # noqa: F403
from norms.functional.sequence import *  # noqa: F403
from norms.functional.switchable import *  # noqa: F403
from norms.functional.whitening import *  # noqa: F403

__all__ = public_names(__name__)
