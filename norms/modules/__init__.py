"""Thin ``nn.Module`` wrappers over :mod:`norms.functional`.

Each submodule declares its public classes in ``__all__`` and registers them with
:func:`norms.registry.register`.
"""

from norms._exports import public_names
from norms.modules.adaptive import *  # noqa: F403
from norms.modules.batch import *  # noqa: F403
from norms.modules.dyt import *  # noqa: F403
from norms.modules.layer import *  # noqa: F403
from norms.modules.local import *  # noqa: F403
from norms.modules.sequence import *  # noqa: F403
from norms.modules.switchable import *  # noqa: F403
from norms.modules.weight_norm import *  # noqa: F403
from norms.modules.whitening import *  # noqa: F403

__all__ = public_names(__name__)
