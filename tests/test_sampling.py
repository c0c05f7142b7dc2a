"""llmkit.generation.sampling: each processor, the fall-back, seeds, and draws that match their target."""
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import chisquare

from llmkit.generation.sampling import (
    STAGES,
    SamplingParams,
    apply_repetition_penalty,
    make_generator,
    min_p_filter,
    process_logits,
    sample,
    sample_batch,
    stage_probabilities,
    top_k_filter,
    top_p_filter,
)

# A small known distribution with no ties, so every filter's boundary is unambiguous.
TARGET = torch.tensor([0.30, 0.20, 0.15, 0.12, 0.10, 0.07, 0.04, 0.02], dtype=torch.float64)
LOGITS = TARGET.log().float()


pytestmark = pytest.mark.usefixtures("one_thread")


def draw_counts(params: SamplingParams, n: int = 10_000, seed: int = 1234) -> np.ndarray:
    """Counts of n draws through the public ``sample``, continuing one seeded generator."""
    generator = make_generator(seed)
    counts = np.zeros(len(TARGET), dtype=np.int64)
    for _ in range(n):
        counts[sample(LOGITS, params, generator=generator)] += 1
    return counts


def renormalised(keep: list[int], probs: torch.Tensor = TARGET) -> np.ndarray:
    kept = probs.numpy()[keep]
    return kept / kept.sum()


@pytest.mark.parametrize(
    "params, keep, probs",
    [
        (SamplingParams(top_k=3), [0, 1, 2], TARGET),
        # mass before token 3 is 0.65 < 0.7, so it is kept; before token 4 it is 0.77 >= 0.7
        (SamplingParams(top_p=0.7), [0, 1, 2, 3], TARGET),
        # cut-off 0.3 * 0.30 = 0.09: tokens down to 0.10 survive
        (SamplingParams(min_p=0.3), [0, 1, 2, 3, 4], TARGET),
        # temperature 0.5 squares the probabilities (before renormalising), then top-k 4
        (SamplingParams(temperature=0.5, top_k=4), [0, 1, 2, 3], TARGET**2),
        (SamplingParams(), list(range(8)), TARGET),
    ],
    ids=["top_k", "top_p", "min_p", "temperature+top_k", "plain"],
)
def test_empirical_frequencies_match_the_renormalised_target(params, keep, probs):
    counts = draw_counts(params)
    removed = [i for i in range(len(TARGET)) if i not in keep]
    assert counts[removed].sum() == 0, "a filtered-out token was drawn"
    expected = renormalised(keep, probs) * counts.sum()
    assert chisquare(counts[keep], expected).pvalue > 1e-3


def test_the_chi_square_check_can_fail():
    """Draws at temperature 0.5 are clearly rejected against the untempered target."""
    counts = draw_counts(SamplingParams(temperature=0.5, top_k=4))
    keep = [0, 1, 2, 3]
    untempered = renormalised(keep) * counts.sum()
    assert chisquare(counts[keep], untempered).pvalue < 1e-6


def test_same_seed_same_token_and_different_seeds_differ():
    logits = torch.randn(1000, generator=torch.Generator().manual_seed(0))
    params = SamplingParams(temperature=1.5)
    assert sample(logits, params, seed=7) == sample(logits, params, seed=7)
    assert len({sample(logits, params, seed=s) for s in range(20)}) > 1
    # drawing never touches torch's global random state
    torch.manual_seed(0)
    before = torch.get_rng_state()
    sample(logits, params, seed=3)
    sample(logits, params)
    assert torch.equal(before, torch.get_rng_state())


def test_greedy_is_argmax_and_uses_no_randomness():
    logits = torch.randn(50, generator=torch.Generator().manual_seed(1))
    assert sample(logits, SamplingParams(temperature=0)) == int(logits.argmax())
    # the repetition penalty still applies under greedy: the top token, once seen, can lose its place
    top, second = logits.topk(2).indices.tolist()
    gap = float(logits[top] - logits[second])
    penalised = sample(logits, SamplingParams(temperature=0, repetition_penalty=100.0), previous_tokens=[top])
    assert penalised != top or gap > 99 * abs(float(logits[top]))


def test_filters_match_hugging_face_warpers():
    from transformers.generation.logits_process import (
        MinPLogitsWarper,
        RepetitionPenaltyLogitsProcessor,
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    g = torch.Generator().manual_seed(2)
    logits = torch.randn(4, 300, generator=g) * 3
    previous = torch.randint(0, 300, (4, 20), generator=g)
    dummy_ids = torch.zeros(4, 1, dtype=torch.long)
    ours_vs_theirs = [
        (top_k_filter(logits, 17), TopKLogitsWarper(17)(dummy_ids, logits.clone())),
        (top_p_filter(logits, 0.8), TopPLogitsWarper(0.8)(dummy_ids, logits.clone())),
        (min_p_filter(logits, 0.05), MinPLogitsWarper(0.05)(dummy_ids, logits.clone())),
    ]
    for ours, theirs in ours_vs_theirs:
        assert torch.equal(torch.isinf(ours), torch.isinf(theirs))
    theirs = RepetitionPenaltyLogitsProcessor(1.3)(previous, logits.clone())
    assert torch.allclose(apply_repetition_penalty(logits, previous, 1.3), theirs)
    # temperature: same distribution (ours subtracts the max first, which softmax ignores)
    ours = process_logits(logits, SamplingParams(temperature=0.7))
    theirs = TemperatureLogitsWarper(0.7)(dummy_ids, logits.clone())
    assert torch.allclose(ours.softmax(-1), theirs.softmax(-1), atol=1e-6)


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    scale=st.sampled_from([1e-3, 1.0, 30.0, 1e30]),
    temperature=st.sampled_from([0.0, 1e-30, 0.3, 1.0, 7.0]),
    top_k=st.sampled_from([None, 1, 5, 1000]),
    top_p=st.sampled_from([1e-9, 0.5, 0.95, 1.0]),
    min_p=st.sampled_from([0.0, 0.1, 1.0]),
)
def test_processed_distribution_is_valid_and_keeps_the_top_token(seed, scale, temperature, top_k, top_p, min_p):
    logits = torch.randn(2, 64, generator=torch.Generator().manual_seed(seed)) * scale
    params = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p)
    probs = process_logits(logits, params).softmax(-1)
    assert not torch.isnan(probs).any()
    assert torch.allclose(probs.sum(-1), torch.ones(2))
    top = logits.argmax(-1, keepdim=True)
    assert (probs.gather(-1, top) > 0).all(), "the most likely token must survive every filter"
    if top_k is not None:
        assert ((probs > 0).sum(-1) <= top_k).all()
    token = sample(logits[0], params, seed=seed)
    assert probs[0, token] > 0


def test_top_p_keeps_the_smallest_set_that_reaches_p():
    logits = torch.randn(200, generator=torch.Generator().manual_seed(5))
    for p in (0.1, 0.5, 0.9):
        kept = top_p_filter(logits, p).isfinite()
        probs = logits.softmax(-1)
        kept_probs = probs[kept].sort(descending=True).values
        assert kept_probs.sum() >= p - 1e-6
        assert kept_probs[:-1].sum() < p  # without its least likely member the set falls short
        assert probs[~kept].max() <= kept_probs.min()


def test_degenerate_logits_fall_back_to_the_top_token_never_nan():
    nan = float("nan")
    cases = [
        (torch.tensor([nan, 1.0, 3.0, nan]), 2),
        (torch.tensor([0.0, float("inf"), 1.0]), 1),
        (torch.tensor([3.0e38, -3.0e38, 3.0e38 * 0.5]), 0),
    ]
    for logits, expected in cases:
        for params in (SamplingParams(), SamplingParams(temperature=1e-30, top_p=1e-9, min_p=1.0)):
            probs = process_logits(logits, params).softmax(-1)
            assert not torch.isnan(probs).any()
            if not torch.isfinite(logits).all() or params.temperature < 1:
                assert sample(logits, params, seed=0) == expected


def test_stage_probabilities_walk_through_every_stage():
    logits = torch.randn(100, generator=torch.Generator().manual_seed(3))
    params = SamplingParams(temperature=0.8, top_k=20, top_p=0.9, min_p=0.05, repetition_penalty=1.2)
    stages = stage_probabilities(logits, params, previous_tokens=[1, 2, 3])
    assert tuple(stages) == STAGES
    assert torch.allclose(stages["model"], logits.softmax(-1))
    for probs in stages.values():
        assert torch.allclose(probs.sum(), torch.tensor(1.0))
    final = process_logits(logits, params, previous_tokens=[1, 2, 3]).softmax(-1)
    assert torch.allclose(stages["min-p"], final)
    kept = [int((p > 0).sum()) for p in stages.values()]
    assert kept == sorted(kept, reverse=True) and kept[-1] < kept[0]
    # temperature 0 shows as a single token with probability 1
    greedy = stage_probabilities(logits, SamplingParams(temperature=0))
    assert greedy["temperature"].max() == 1.0


def test_sample_batch_draws_each_row_from_its_own_distribution():
    logits = torch.full((3, 10), -10.0)
    logits[0, 4] = logits[1, 7] = logits[2, 1] = 10.0
    tokens = sample_batch(logits, SamplingParams(top_k=1), generator=make_generator(0))
    assert tokens.tolist() == [4, 7, 1]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"temperature": -0.1}, "temperature"),
        ({"temperature": math.inf}, "temperature"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
        ({"top_k": 0}, "top_k"),
        ({"min_p": -0.1}, "min_p"),
        ({"min_p": 1.5}, "min_p"),
        ({"repetition_penalty": 0.0}, "repetition_penalty"),
        ({"repetition_penalty": math.nan}, "repetition_penalty"),
    ],
)
def test_bad_parameters_get_clear_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SamplingParams(**kwargs)


@pytest.mark.parametrize(
    "kwargs", [{"top_k": 2.5}, {"top_k": True}, {"temperature": "0.7"}, {"top_p": None}, {"min_p": "0"}]
)
def test_parameters_of_the_wrong_type_are_type_errors(kwargs):
    with pytest.raises(TypeError, match=next(iter(kwargs))):
        SamplingParams(**kwargs)


def test_sample_rejects_a_batch_and_double_randomness():
    with pytest.raises(ValueError, match="one logits vector"):
        sample(torch.zeros(2, 5))
    with pytest.raises(ValueError, match="not both"):
        sample(torch.zeros(5), seed=1, generator=make_generator(1))


# ------------------------------------------------------------------ edges of each filter
def float64_nucleus(logits: torch.Tensor, p: float) -> set[int]:
    """The tokens top-p keeps, computed in numpy float64 from the same float32 logits."""
    x = logits.double().numpy()
    probs = np.exp(x - x.max())
    probs /= probs.sum()
    order = np.argsort(-probs, kind="stable")
    mass_before = np.cumsum(probs[order]) - probs[order]
    return {int(order[i]) for i in range(len(order)) if i == 0 or mass_before[i] < p}


def boundary_cases(n_cases: int = 130) -> list[tuple[torch.Tensor, float]]:
    """Logits and a p a hair (1e-12 relative) either side of a cumulative sum close to 1, where
    float32 rounding (about 6e-8) decides the cut by chance and float64 does not."""
    g = torch.Generator().manual_seed(11)
    cases = []
    for i in range(n_cases):
        logits = torch.randn(512, generator=g) * 2
        probs = np.sort(torch.softmax(logits.double(), -1).numpy())[::-1]
        cumulative = np.cumsum(probs)
        k = int(np.searchsorted(cumulative, 0.999)) + i % 40
        k = min(k, len(probs) - 2)
        side = 1 + (1e-12 if i % 2 else -1e-12)
        cases.append((logits, float(cumulative[k] * side)))
    return cases


def test_top_p_cut_off_matches_a_float64_computation_near_p_1():
    cases = boundary_cases()
    disagreements = [
        i for i, (logits, p) in enumerate(cases)
        if set(top_p_filter(logits, p).isfinite().nonzero().flatten().tolist()) != float64_nucleus(logits, p)
    ]
    assert disagreements == []


def test_the_float64_boundary_cases_do_trip_a_float32_sum():
    """The check above can fail: the same cut-off summed in float32 disagrees on many of the cases."""
    def float32_nucleus(logits, p):
        sorted_logits, order = logits.sort(descending=True)
        probs = sorted_logits.softmax(-1)
        mass_before = probs.cumsum(-1) - probs
        return {int(order[i]) for i in range(len(order)) if i == 0 or mass_before[i] < p}

    cases = boundary_cases()
    wrong = sum(float32_nucleus(logits, p) != float64_nucleus(logits, p) for logits, p in cases)
    assert wrong > len(cases) // 4


def test_top_p_of_zero_keeps_exactly_the_top_token():
    logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(4))
    kept = top_p_filter(logits, 0.0).isfinite()
    assert kept.sum(-1).tolist() == [1, 1, 1]
    assert torch.equal(kept.float().argmax(-1), logits.argmax(-1))


@pytest.mark.parametrize("function, bad, error, message", [
    (top_k_filter, 0, ValueError, "k >= 1"),
    (top_k_filter, -3, ValueError, "k >= 1"),
    (top_k_filter, 2.0, TypeError, "k must be an int"),
    (top_p_filter, 1.5, ValueError, "0 <= p <= 1"),
    (top_p_filter, -0.1, ValueError, "0 <= p <= 1"),
    (top_p_filter, math.nan, ValueError, "finite"),
    (min_p_filter, 1.5, ValueError, r"min_p must be in \[0, 1\]"),
    (min_p_filter, -0.5, ValueError, r"min_p must be in \[0, 1\]"),
    (min_p_filter, "0.1", TypeError, "min_p must be a number"),
])
def test_filters_refuse_bad_settings_clearly(function, bad, error, message):
    with pytest.raises(error, match=message):
        function(LOGITS, bad)


def test_min_p_of_one_keeps_the_top_token_and_its_ties():
    logits = torch.tensor([1.0, 3.0, 3.0, 2.0])
    assert min_p_filter(logits, 1.0).isfinite().tolist() == [False, True, True, False]


def test_repetition_penalty_refuses_ids_outside_the_vocabulary():
    logits = torch.zeros(2, 10)
    for bad in ([3, 10], [[1, 2], [-1, 4]]):
        with pytest.raises(ValueError, match=r"outside this vocabulary of 10 logits \(valid ids are 0..9\)"):
            apply_repetition_penalty(logits, bad, 1.3)
    with pytest.raises(TypeError, match="integer token ids"):
        apply_repetition_penalty(logits, torch.tensor([1.5]), 1.3)
    with pytest.raises(ValueError, match="penalty must be a number > 0"):
        apply_repetition_penalty(logits, [1], -2.0)
    assert apply_repetition_penalty(logits + 1, [9], 2.0)[:, 9].tolist() == [0.5, 0.5]  # the last id is fine


def test_a_row_with_nothing_allowed_is_an_error_not_token_0():
    masked = torch.full((5,), float("-inf"))
    for params in (SamplingParams(), SamplingParams(temperature=0)):
        with pytest.raises(ValueError, match="row 0 of the logits rules out every token"):
            sample(masked, params, seed=0)
    with pytest.raises(ValueError, match="rules out every token"):
        sample(torch.full((5,), float("nan")), seed=0)
    batch = torch.zeros(3, 5)
    batch[2] = float("-inf")
    with pytest.raises(ValueError, match="row 2 of the logits"):
        sample_batch(batch, SamplingParams(), generator=make_generator(0))
    one_allowed = masked.clone()
    one_allowed[3] = -50.0
    assert sample(one_allowed, seed=0) == 3


@pytest.mark.parametrize("seed, error", [(1.5, TypeError), ("7", TypeError), (True, TypeError), (2**64, ValueError)])
def test_seeds_must_be_whole_numbers_that_fit_64_bits(seed, error):
    with pytest.raises(error, match="seed"):
        make_generator(seed)
