"""The server's packed linear layers compute what F.linear computes, row by row, whatever the batch."""
import functools

import pytest
import torch
import torch.nn.functional as F

from llmkit.serve.packed import PackedLinear, can_pack, packed_linear

needs_onednn = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="this torch build has no oneDNN")


def weights(out_features=48, in_features=32, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return (torch.randn(out_features, in_features, generator=generator),
            torch.randn(out_features, generator=generator))


@needs_onednn
@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("shape", [(1, 32), (8, 32), (1, 5, 32), (2, 3, 32)])
def test_a_packed_layer_computes_f_linear(with_bias, shape):
    weight, bias = weights()
    bias = bias if with_bias else None
    layer = packed_linear(weight, bias)
    assert isinstance(layer, PackedLinear)
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(1))
    out = layer(x)
    assert out.shape == (*shape[:-1], 48)
    torch.testing.assert_close(out, F.linear(x, weight, bias), rtol=1e-5, atol=1e-5)


@needs_onednn
def test_a_rows_result_does_not_depend_on_the_rows_beside_it():
    """The engine promises the same greedy tokens alone or in a batch: each row's bits must not
    change with how many rows share the pass."""
    layer = packed_linear(*weights(320, 320))
    rows = torch.randn(16, 320, generator=torch.Generator().manual_seed(2))
    alone = torch.cat([layer(rows[i:i + 1]) for i in range(16)])
    for batch in (2, 8, 16):
        assert torch.equal(layer(rows[:batch]), alone[:batch])


@needs_onednn
def test_packing_copies_the_weights():
    weight, bias = weights()
    layer = packed_linear(weight, bias)
    x = torch.randn(2, 32)
    before = layer(x)
    with torch.no_grad():
        weight.mul_(2)
        bias.zero_()
    assert torch.equal(layer(x), before)


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_weights_that_cannot_be_packed_keep_the_plain_product(dtype):
    weight, bias = (w.to(dtype) for w in weights())
    assert not can_pack(weight)
    layer = packed_linear(weight, bias)
    assert isinstance(layer, functools.partial)
    x = torch.randn(3, 32).to(dtype)
    assert torch.equal(layer(x), F.linear(x, weight, bias))


def test_pack_false_keeps_the_plain_product_on_the_models_own_weights():
    weight, bias = weights()
    layer = packed_linear(weight, bias, pack=False)
    with torch.no_grad():
        weight.mul_(2)  # the plain product reads the weights as they are now
    x = torch.randn(3, 32)
    assert torch.equal(layer(x), F.linear(x, weight, bias))
