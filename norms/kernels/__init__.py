"""Triton kernels for the norms on the CUDA hot paths, and the rule that picks them.

- :mod:`norms.kernels.rows`: layer norm fused with adaLN modulation (the DiT blocks) and
  RMS norm, one program per row.
- :mod:`norms.kernels.groups`: statistics over space per channel group, NCHW or
  channels_last: AdaIN (style statistics, then the content normalised and re-scaled),
  instance norm and group norm.

Every kernel's oracle is the reference function of :mod:`norms.functional`; the tests
run them on the CPU under ``TRITON_INTERPRET=1`` (``pytest -k triton``). The functions
of :mod:`norms.functional` call a kernel only when :func:`norms.kernels.dispatch.chosen`
says so: on CUDA, and only for kernels the GPU check measured faster than torch
(:data:`norms.kernels.dispatch.MEASURED_WINS`). Importing this package does not import
Triton; the submodules do.
"""

from norms.kernels.dispatch import MEASURED_WINS, chosen, triton_available

__all__ = ["MEASURED_WINS", "chosen", "triton_available"]
