"""The name -> module registry: lookups, errors, classes and partials."""

import functools

import pytest
import torch

import norms
from norms.registry import register

OWN_NAMES = {
    "layer": norms.LayerNorm,
    "rms": norms.RMSNorm,
    "lp": norms.LpNorm,
    "group": norms.GroupNorm,
    "instance": norms.InstanceNorm,
    "adain": norms.AdaIN,
    "conditional_instance": norms.ConditionalInstanceNorm,
    "adaln": norms.AdaLN,
    "adaln_zero": norms.AdaLNZero,
    "local_response": norms.LocalResponseNorm,
    "local_contrast": norms.LocalContrastNorm,
    "global_response": norms.GlobalResponseNorm,
    "dyt": norms.DynamicTanh,
}
EXTRA_KWARGS = {
    "group": {"num_groups": 4},
    "conditional_instance": {"num_styles": 3},
    "adaln": {"cond_features": 5},
    "adaln_zero": {"cond_features": 5},
}


@pytest.mark.parametrize(("name", "cls"), OWN_NAMES.items())
def test_every_name_builds_its_class(name, cls):
    assert name in norms.available()
    module = norms.build(name, 8, **EXTRA_KWARGS.get(name, {}))
    assert type(module) is cls
    assert "8" in module.extra_repr()


def test_available_is_sorted_lower_case_and_lookup_ignores_case():
    names = norms.available()
    assert names == sorted(names) and all(n == n.lower() for n in names)
    assert isinstance(norms.build("LAYER", 4), norms.LayerNorm)


def test_unknown_name_lists_the_valid_ones():
    with pytest.raises(KeyError) as info:
        norms.build("no_such_norm", 4)
    message = str(info.value)
    assert "no_such_norm" in message
    assert all(name in message for name in norms.available())


def test_build_accepts_a_class_and_a_partial():
    by_class = norms.build(norms.GroupNorm, 8, num_groups=2)
    assert isinstance(by_class, norms.GroupNorm) and by_class.num_groups == 2
    factory = functools.partial(norms.GroupNorm, num_groups=4, eps=1e-3)
    by_partial = norms.build(factory, 8)
    assert by_partial.num_groups == 4 and by_partial.eps == 1e-3
    torch_factory = functools.partial(torch.nn.GroupNorm, 2)  # any callable taking C works
    assert isinstance(norms.build(torch_factory, 8), torch.nn.GroupNorm)


def test_build_rejects_a_non_callable_spec():
    with pytest.raises(TypeError, match="name, class or callable"):
        norms.build(3, 8)


def test_register_rejects_upper_case_and_conflicting_names():
    assert register("layer")(norms.LayerNorm) is norms.LayerNorm  # re-registering is a no-op
    with pytest.raises(ValueError, match="lower-case"):
        register("Layer")
    with pytest.raises(ValueError, match="already registered"):
        register("layer")(norms.RMSNorm)
    assert isinstance(norms.build("layer", 4), norms.LayerNorm)
