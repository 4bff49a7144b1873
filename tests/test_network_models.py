"""The reference networks of tune_gym.networks.models: structure, seeding, export to TVM Relax."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tune_gym.errors import TaskError
from tune_gym.networks.models import MODELS, BertModel, ModelSpec, get_model

SMALL = ["tiny", "squeezenet1.0", "mobilenet_v2", "resnet18", "efficientnet_b0"]
LARGE = ["alexnet", "vgg16", "bert_base"]

MINI_BERT = ModelSpec(
    "mini_bert", "two-layer BERT for tests", 0,
    factory=lambda: BertModel(vocab_size=100, hidden=32, num_layers=2, num_heads=4, intermediate=64, max_positions=16),
    input_shape=(16,), vocab_size=100,
)


def _outputs(out: torch.Tensor | tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    return out if isinstance(out, tuple) else (out,)


def _expected_shapes(name: str, batch: int = 1) -> list[tuple[int, ...]]:
    if name == "bert_base":
        return [(batch, 128, 768), (batch, 768)]
    return [(batch, 10)] if name == "tiny" else [(batch, 1000)]


def test_registry_lists_the_networks_in_order():
    assert list(MODELS) == [
        "alexnet", "vgg16", "resnet18", "squeezenet1.0", "mobilenet_v2", "efficientnet_b0", "bert_base", "tiny",
    ]
    assert sorted(SMALL + LARGE) == sorted(MODELS)
    assert get_model("resnet18") is MODELS["resnet18"]


def test_unknown_model_names_it_and_lists_the_known_ones():
    with pytest.raises(TaskError, match=r"'resnet19'.*resnet18.*bert_base"):
        get_model("resnet19")


def test_reference_parameter_counts():
    assert {name: spec.parameters for name, spec in MODELS.items()} == {
        "alexnet": 61_100_840,
        "vgg16": 138_357_544,
        "resnet18": 11_689_512,
        "squeezenet1.0": 1_248_424,
        "mobilenet_v2": 3_504_872,
        "efficientnet_b0": 5_288_548,
        "bert_base": 109_482_240,
        "tiny": 6_186,
    }


@pytest.mark.parametrize("name", list(MODELS))
def test_structure_parameter_count_and_output_shape(name):
    """On the meta device: the structure and shapes without drawing or computing anything."""
    spec = MODELS[name]
    with torch.device("meta"):
        model = spec.build()
        assert not model.training
        assert sum(p.numel() for p in model.parameters()) == spec.parameters
        inputs = tuple(x.to("meta") for x in spec.inputs(batch=2))
        out = _outputs(model(*inputs))
    assert [tuple(o.shape) for o in out] == _expected_shapes(name, batch=2)


def test_inputs_are_deterministic_and_typed():
    image = MODELS["resnet18"].inputs(batch=2, seed=3)[0]
    assert image.shape == (2, 3, 224, 224) and image.dtype == torch.float32
    assert image.min() >= -1 and image.max() < 1
    assert torch.equal(image, MODELS["resnet18"].inputs(batch=2, seed=3)[0])
    assert not torch.equal(image, MODELS["resnet18"].inputs(batch=2, seed=4)[0])
    ids = MODELS["bert_base"].inputs()[0]
    assert ids.shape == (1, 128) and ids.dtype == torch.int64
    assert ids.min() >= 0 and ids.max() < 30522
    assert MODELS["tiny"].inputs()[0].shape == (1, 3, 32, 32)


@pytest.mark.parametrize("name", [*SMALL, "mini_bert"])
def test_same_seed_same_weights_other_seed_other_weights(name):
    spec = MINI_BERT if name == "mini_bert" else MODELS[name]
    first, again, other = (spec.build(seed).state_dict() for seed in (0, 0, 1))
    assert all(torch.equal(first[k], again[k]) for k in first)
    assert not all(torch.equal(first[k], other[k]) for k in first if first[k].is_floating_point())
    running_vars = [v for k, v in first.items() if k.endswith("running_var")]
    assert all(bool(((v >= 0.5) & (v <= 1.5)).all()) and v.std() > 0 for v in running_vars)


@pytest.mark.parametrize("name", [*SMALL, *(pytest.param(n, marks=pytest.mark.slow) for n in LARGE)])
def test_forward_is_finite_with_the_right_shape(name):
    spec = MODELS[name]
    model = spec.build(seed=0)
    with torch.no_grad():
        out = _outputs(model(*spec.inputs()))
    assert [tuple(o.shape) for o in out] == _expected_shapes(name)
    for o in out:
        assert torch.isfinite(o).all()
        assert o.std() > 1e-3  # activations did not vanish through the depth


def test_tiny_exports_imports_into_relax_and_builds_like_pytorch():
    import tvm
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    spec = get_model("tiny")
    model = spec.build(seed=0)
    inputs = spec.inputs(seed=1)
    with torch.no_grad():
        expected = model(*inputs).numpy()
    mod = from_exported_program(torch.export.export(model, inputs))
    mod = relax.get_pipeline("zero")(relax.transform.DecomposeOpsForInference()(mod))
    ex = tvm.compile(mod, target=tvm.target.Target({"kind": "llvm", "num-cores": 1}))
    vm = relax.VirtualMachine(ex, tvm.cpu())
    out = vm["main"](*(tvm.runtime.tensor(x.numpy()) for x in inputs))
    np.testing.assert_allclose(out[0].numpy(), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in MODELS if n != "tiny"])
def test_exports_and_imports_into_relax(name):
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    spec = MODELS[name]
    mod = from_exported_program(torch.export.export(spec.build(seed=0), spec.inputs()))
    assert isinstance(mod["main"], relax.Function)
    assert len(mod["main"].params) == 1
