"""Token vectors, their neighbours, the 2-D projection, position schemes and image patches."""
import numpy as np
import pytest
import torch

from llmkit.model import embeddings as E
from llmkit.paths import data_path
from llmkit.tokens.tokenizer import Tokenizer


def random_table(rows: int = 50, dim: int = 16, seed: int = 0) -> torch.Tensor:
    return torch.randn(rows, dim, generator=torch.Generator().manual_seed(seed))


def test_cosine_similarities_match_the_definition():
    table = random_table()
    vector = table[3]
    expected = torch.stack([torch.dot(row, vector) / (row.norm() * vector.norm()) for row in table])
    assert torch.allclose(E.cosine_similarities(table, vector), expected, atol=1e-6)
    assert torch.allclose(E.cosine_similarities(table * 7.0, vector), expected, atol=1e-6)  # length is ignored
    with pytest.raises(ValueError, match="table and a"):
        E.cosine_similarities(table, torch.ones(3))


def test_nearest_neighbours_agree_with_brute_force_and_skip_the_token_itself():
    table = random_table()
    near = E.nearest_neighbours(table, 7, k=4)
    similarity = E.cosine_similarities(table, table[7])
    brute = sorted((i for i in range(len(table)) if i != 7), key=lambda i: -float(similarity[i]))[:4]
    assert [i for i, _ in near] == brute
    assert all(a >= b for (_, a), (_, b) in zip(near, near[1:]))
    assert all(abs(s - float(similarity[i])) < 1e-6 for i, s in near)


def test_nearest_neighbours_find_a_planted_twin_within_the_candidates():
    table = random_table()
    table[20] = 3.0 * table[5] + 0.01 * table[6]  # same direction, different length
    assert E.nearest_neighbours(table, 5, k=1)[0][0] == 20
    assert 20 not in [i for i, _ in E.nearest_neighbours(table, 5, k=3, candidates=range(10))]
    assert len(E.nearest_neighbours(table, 5, k=99, candidates=[1, 2, 5])) == 2  # itself never counts
    with pytest.raises(ValueError, match="outside the table"):
        E.nearest_neighbours(table, 50)
    with pytest.raises(ValueError, match="candidates"):
        E.nearest_neighbours(table, 1, candidates=[60])


@pytest.mark.parametrize("pattern", ["gpt4", "spaced"])
def test_word_token_ids_are_the_one_token_a_word_is_after_a_space(pattern):
    text = data_path("corpus", "train.txt").read_text(encoding="utf-8")[:60_000]
    tokenizer = Tokenizer.train([text], 600, pattern=pattern)
    words = E.word_token_ids(tokenizer)
    space = tokenizer.encode_ordinary(" ")
    assert len(words) > 50
    king = tokenizer.encode_ordinary(" king")
    assert (king[-1] if pattern == "spaced" else king[0]) in words
    for token_id in words:
        piece = tokenizer.token_bytes(token_id)
        word = piece[1:] if pattern == "gpt4" else piece  # GPT-4's split gives a word its space
        assert word.isalpha() and len(word) >= 2 and (pattern == "spaced") != piece.startswith(b" ")
        said = tokenizer.encode_ordinary(" " + word.decode())
        assert said == (space + [token_id] if pattern == "spaced" else [token_id])


def test_project_2d_keeps_the_two_largest_directions():
    generator = torch.Generator().manual_seed(1)
    # 200 points spread 10x along one hidden direction, 3x along another, 0.1x along the rest
    basis, _ = torch.linalg.qr(torch.randn(8, 8, generator=generator))
    scales = torch.tensor([10.0, 3.0] + [0.1] * 6)
    vectors = (torch.randn(200, 8, generator=generator) * scales) @ basis.T + 5.0
    points, explained = E.project_2d(vectors)
    assert points.shape == (200, 2)
    assert torch.allclose(points.mean(dim=0), torch.zeros(2), atol=1e-3)  # centred
    assert points[:, 0].var() > points[:, 1].var() > 0
    assert 0.95 < float(explained.sum()) <= 1.0 and explained[0] > explained[1]
    # distances in the plane are close to the true distances (little is lost)
    true = torch.cdist(vectors, vectors)
    assert float((torch.cdist(points, points) - true).abs().max()) < 0.1 * float(true.max())
    again, _ = E.project_2d(vectors.flip(1))  # the same cloud in other coordinates: the same picture
    assert torch.allclose(again.abs(), points.abs(), atol=1e-3)
    with pytest.raises(ValueError, match="two vectors"):
        E.project_2d(torch.ones(1, 8))


def test_rope_scores_depend_only_on_the_offset():
    generator = torch.Generator().manual_seed(2)
    query, key = torch.randn(32, generator=generator), torch.randn(32, generator=generator)
    grid = E.rope_score_grid(query, key, n_positions=40)
    assert grid.shape == (40, 40)
    assert torch.allclose(grid[0, 0], torch.dot(query, key), atol=1e-5)  # position 0: no rotation
    assert abs(float(grid[10, 3] - grid[30, 23])) < 1e-4  # same offset 7, far apart
    assert E.offset_spread(grid) < 1e-4
    assert abs(float(grid[10, 3] - grid[10, 4])) > 1e-3  # but different offsets differ
    with pytest.raises(ValueError, match="even"):
        E.rope_score_grid(torch.ones(5), torch.ones(5), 4)


def test_learned_positions_give_no_offset_pattern_by_themselves():
    generator = torch.Generator().manual_seed(3)
    query, key = torch.randn(32, generator=generator), torch.randn(32, generator=generator)
    table = 0.5 * torch.randn(40, 32, generator=generator)
    grid = E.learned_score_grid(query, key, table)
    assert torch.allclose(grid[4, 9], torch.dot(query + table[4], key + table[9]), atol=1e-5)
    assert E.offset_spread(grid) > 1.0
    assert E.offset_spread(E.learned_score_grid(query, key, torch.zeros(40, 32))) < 1e-5  # no positions at all
    with pytest.raises(ValueError, match="position_table"):
        E.learned_score_grid(query, key, torch.zeros(40, 8))


def test_patchify_cuts_an_image_into_reading_order_vectors():
    image = np.arange(224 * 224 * 3, dtype=np.float32).reshape(224, 224, 3)
    patches = E.patchify(image, patch=28)
    assert patches.shape == (64, 28 * 28 * 3)
    assert torch.equal(patches[0], torch.from_numpy(image[:28, :28].reshape(-1)))
    assert torch.equal(patches[1], torch.from_numpy(image[:28, 28:56].reshape(-1)))  # left to right first
    assert torch.equal(patches[8], torch.from_numpy(image[28:56, :28].reshape(-1)))  # then the next row
    assert torch.equal(E.unpatchify(patches, 8, 8, patch=28), torch.from_numpy(image))
    assert E.patchify(image[:, :, 0], patch=56).shape == (16, 56 * 56)  # grey images have one channel


def test_patchify_refuses_sizes_that_do_not_divide():
    with pytest.raises(ValueError, match="resize or pad it to multiples of 28 first \\(e.g. 224x252\\)"):
        E.patchify(np.zeros((200, 250, 3)), patch=28)
    with pytest.raises(ValueError, match="height, width"):
        E.patchify(np.zeros(10))
