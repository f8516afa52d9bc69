"""The functional contract of docs/architecture.md: names and positional argument order are fixed,
because checks outside the repository call them."""

import inspect

import pytest

import norms

CONTRACT = {
    "batch_norm": "x, running_mean=None, running_var=None, weight=None, bias=None, "
    "training=True, momentum=0.1, eps=1e-05",
    "layer_norm": "x, normalized_shape, weight=None, bias=None, eps=1e-05",
    "rms_norm": "x, normalized_shape, weight=None, eps=1e-06",
    "lp_norm": "x, p, normalized_shape, weight=None, bias=None, eps=1e-06",
    "group_norm": "x, num_groups, weight=None, bias=None, eps=1e-05",
    "instance_norm": "x, weight=None, bias=None, eps=1e-05",
    "adain": "content, style, eps=1e-05",
    "modulate": "x, shift, scale",
    "ada_layer_norm": "x, shift, scale, eps=1e-06",
    "local_response_norm": "x, size, alpha=0.0001, beta=0.75, k=2.0",
    "local_contrast_norm": "x, size=5, kernel_size=9, alpha=0.0001, beta=0.75, k=2.0",
    "global_response_norm": "x, weight, bias, eps=1e-06",
    "switchable_norm": "x, mean_weight, var_weight, weight=None, bias=None, eps=1e-05, "
    "running_mean=None, running_var=None, training=True, momentum=0.1",
    "dynamic_tanh": "x, alpha, weight=None, bias=None",
}


def _positional_signature(function) -> str:
    parameters = inspect.signature(function).parameters.values()
    return ", ".join(
        p.name if p.default is inspect.Parameter.empty else f"{p.name}={p.default!r}"
        for p in parameters
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    )


@pytest.mark.parametrize("name", sorted(CONTRACT))
def test_function_signature_is_the_contract(name):
    function = getattr(norms.F, name)
    assert function is getattr(norms.functional, name)
    assert _positional_signature(function) == CONTRACT[name]


def test_every_contract_function_is_exported():
    assert set(CONTRACT) <= set(norms.F.__all__)
