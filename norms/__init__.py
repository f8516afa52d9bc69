"""The normalization family as pure functions (``norms.F``) and thin modules.

>>> import norms
>>> layer = norms.build("group", 64, num_groups=8)
>>> y = norms.F.rms_norm(x, (768,))

Functions live in :mod:`norms.functional` (alias ``norms.F``); modules are exported
here; :func:`build` and :func:`available` are the registry. ``norms`` imports nothing
else of the project.
"""

from typing import TYPE_CHECKING

from norms import functional
from norms import functional as F  # noqa: N812
from norms.modules import *  # noqa: F403
from norms.modules import __all__ as _module_names
from norms.registry import available, build, register

if TYPE_CHECKING:
    # What ``from norms.modules import *`` brings in, spelled out for type checkers,
    # which cannot evaluate that package's computed ``__all__`` (the same submodules).
    from norms.modules.adaptive import *  # noqa: F403
    from norms.modules.batch import *  # noqa: F403
    from norms.modules.dyt import *  # noqa: F403
    from norms.modules.layer import *  # noqa: F403
    from norms.modules.local import *  # noqa: F403
    from norms.modules.sequence import *  # noqa: F403
    from norms.modules.switchable import *  # noqa: F403
    from norms.modules.weight_norm import *  # noqa: F403
    from norms.modules.whitening import *  # noqa: F403

__all__ = ["F", "functional", "available", "build", "register", *_module_names]
