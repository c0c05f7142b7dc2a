"""Growing a model: the grown one computes exactly what the small one did, then trains its new blocks."""
import dataclasses

import pytest
import torch

from llmkit.model.grow import grow, growable, same_logits
from llmkit.model.transformer import Transformer
from tiny_configs import FAMILIES


def trained_a_little(config, seed: int = 0) -> Transformer:
    """A model whose weights are not the init's (so a test cannot pass on symmetric zeros)."""
    torch.manual_seed(seed)
    model = Transformer(config)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    ids = torch.randint(0, config.vocab_size, (2, 16), generator=torch.Generator().manual_seed(seed))
    for _ in range(3):
        loss = model(ids[:, :-1]).logsumexp(-1).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_grown_model_gives_the_same_logits(family):
    small = trained_a_little(FAMILIES[family])
    big = grow(small, n_layers=small.config.n_layers + 3)
    assert big.config.n_layers == small.config.n_layers + 3
    ids = torch.randint(0, small.config.vocab_size, (3, 20), generator=torch.Generator().manual_seed(5))
    assert same_logits(small, big, ids)
    # and it is a copy: training the grown model leaves the small one as it was
    before = {k: v.clone() for k, v in small.state_dict().items()}
    next(big.parameters()).data.add_(1.0)
    assert all(torch.equal(before[k], v) for k, v in small.state_dict().items())


def test_a_rope_model_grows_its_window_and_agrees_on_the_old_one():
    small = trained_a_little(FAMILIES["llama"])
    big = grow(small, n_layers=4, context_length=4 * small.config.context_length)
    ids = torch.randint(0, small.config.vocab_size, (2, small.config.context_length))
    assert same_logits(small, big, ids)
    long_ids = torch.randint(0, small.config.vocab_size, (1, big.config.context_length))
    assert big(long_ids).shape == (1, big.config.context_length, small.config.vocab_size)


def test_the_new_blocks_learn():
    small = trained_a_little(FAMILIES["llama"])
    big = grow(small, n_layers=3)
    new_block = big.blocks[2]
    ids = torch.randint(0, small.config.vocab_size, (2, 16), generator=torch.Generator().manual_seed(2))
    optimizer = torch.optim.AdamW(big.parameters(), lr=1e-2)
    for _ in range(3):
        loss = torch.nn.functional.cross_entropy(big(ids[:, :-1]).flatten(0, 1), ids[:, 1:].flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    # the zeroed output projections moved first, and then the rest of the block got gradients too
    assert new_block.attn.out.weight.abs().sum() > 0 and new_block.mlp.down.weight.abs().sum() > 0
    assert not same_logits(small, big, ids[:, :-1])


def test_what_cannot_grow_is_refused_with_the_reason():
    small = trained_a_little(FAMILIES["gpt2"])
    with pytest.raises(ValueError, match="adds layers"):
        grow(small, n_layers=1)
    with pytest.raises(ValueError, match="cannot grow"):
        grow(small, n_layers=3, context_length=2 * small.config.context_length)
    wider = dataclasses.replace(FAMILIES["llama"], d_model=64)
    assert any(problem.startswith("d_model") for problem in growable(FAMILIES["llama"], wider))
    assert growable(FAMILIES["llama"], dataclasses.replace(FAMILIES["llama"], n_layers=6, context_length=256)) == []
    assert growable(FAMILIES["llama"], dataclasses.replace(FAMILIES["llama"], n_layers=1)) != []
