"""llmkit.generation.choice: an option's score is the model's log-probability of all its tokens, and
under ``ToolCallConstraint`` the loop picks the tool whose whole call opening is most likely (greedy)
or draws tools in proportion to it (sampling), with and without the KV cache."""
from __future__ import annotations

import functools

import pytest
import torch

from llmkit.chat.constrained import ToolCallConstraint, call_openings
from llmkit.chat.markers import marker_ids
from llmkit.chat.template import render
from llmkit.generation.choice import ROWS_AT_ONCE, option_log_probs, pick_option
from llmkit.generation.generate import generate
from llmkit.generation.sampling import GREEDY, SamplingParams
from llmkit.model.transformer import ModelConfig
from scripted_model import ScriptedModel

pytestmark = pytest.mark.usefixtures("one_thread")

# Names that share their first tokens, so that the first token does not decide the tool.
NAMES = ["get_tide_level", "get_river_depth", "get_rain_chance", "count_birds"]
TOOLS = [{"name": name, "description": f"The {name.replace('_', ' ')}.",
          "input_schema": {"type": "object", "properties": {}}} for name in NAMES]


def _log_prob(model, context: list[int], continuation: list[int]) -> float:
    """The plain way: one forward pass over everything, no cache."""
    with torch.no_grad():
        logits = model(torch.tensor([context + continuation]))[0]
    logp = torch.log_softmax(logits.float(), dim=-1)
    return sum(float(logp[len(context) - 1 + i, token]) for i, token in enumerate(continuation))


def _calling_model(tokenizer, seed: int, scale: float = 4.0):
    """A random model that opens a tool call right after the prompt (then writes what it likes)."""
    prompt = render(tokenizer, [{"role": "user", "content": "How deep is the river?"}], tools=TOOLS).ids
    config = ModelConfig.llama(vocab_size=tokenizer.vocab_size, context_length=len(prompt) + 48, d_model=32,
                               n_layers=2, n_heads=4)
    torch.manual_seed(seed)
    model = ScriptedModel(config, [marker_ids(tokenizer)["tool_call"]], len(prompt)).eval()
    with torch.no_grad():
        for parameter in model.parameters():  # wider random weights: more decided preferences
            parameter.mul_(scale)
    return model, prompt


def _chosen(tokenizer, tokens: list[int]) -> int:
    """Which tool the call names (token by token, the opening may be split into other tokens)."""
    text = tokenizer.decode(tokens[1:])
    return next(i for i, name in enumerate(NAMES) if text.startswith('{"name": "' + name + '"'))


def test_option_scores_are_whole_sequence_log_probabilities(tokenizer):
    model, prompt = _calling_model(tokenizer, seed=0)
    context = prompt + [marker_ids(tokenizer)["tool_call"]]  # past the scripted token
    options = [tokenizer.encode(text) for text in ("get_tide_level", "count", "get_river_depth and more")]
    with torch.no_grad():
        logits = model(torch.tensor([context]))[0]
        scores = option_log_probs(logits[-1], options, lambda fed: model(
            torch.cat([torch.tensor([context] * len(options)), fed], 1))[:, len(context):])
    for option, score in zip(options, scores.tolist()):
        assert score == pytest.approx(_log_prob(model, context, option), abs=1e-3)


def test_many_options_keep_the_likeliest_by_their_first_two_tokens_and_score_them_whole(tokenizer):
    """More options than ``ROWS_AT_ONCE`` (a conversation's spans): the beam keeps that many, by their
    first two tokens, scores those exactly, and rules the rest out."""
    model, prompt = _calling_model(tokenizer, seed=1)
    context = prompt + [marker_ids(tokenizer)["tool_call"]]
    opening = tokenizer.encode(' "')
    words = [tokenizer.encode(f"w{i} x{i % 7}") for i in range(ROWS_AT_ONCE * 3)]
    options = [opening + word for word in words] + [tokenizer.encode("z")]  # one option of a single token
    with torch.no_grad():
        logits = model(torch.tensor([context]))[0]
        scores = option_log_probs(logits[-1], options, lambda fed: model(
            torch.cat([torch.tensor([context] * fed.size(0)), fed], 1))[:, len(context):])
    kept = [i for i, score in enumerate(scores.tolist()) if score != float("-inf")]
    assert len(kept) == ROWS_AT_ONCE
    two = [_log_prob(model, context, option[:2]) for option in options]
    assert min(two[i] for i in kept) >= max(two[i] for i in range(len(options)) if i not in kept) - 1e-4
    for i in kept:
        assert scores[i].item() == pytest.approx(_log_prob(model, context, options[i]), abs=1e-3)


def test_pick_option_takes_the_best_or_draws_in_proportion():
    scores = torch.log(torch.tensor([0.2, 0.5, 0.3]))
    assert pick_option(scores, GREEDY, None) == 1
    generator = torch.Generator().manual_seed(0)
    draws = [pick_option(scores, SamplingParams(temperature=1.0), generator) for _ in range(3000)]
    assert [round(draws.count(i) / 3000, 1) for i in range(3)] == [0.2, 0.5, 0.3]
    assert pick_option(torch.tensor([0.0, float("-inf")]), SamplingParams(temperature=1.0), generator) == 0


@pytest.mark.parametrize("use_cache", [True, False])
def test_greedy_calls_the_tool_whose_whole_opening_is_most_likely(tokenizer, use_cache):
    openings = call_openings(tokenizer, TOOLS)
    assert openings is not None
    differs = 0
    for seed in range(8):
        model, prompt = _calling_model(tokenizer, seed)
        context = prompt + [marker_ids(tokenizer)["tool_call"]]
        best = max(range(len(TOOLS)), key=lambda i: _log_prob(model, context, openings[i]))
        run = functools.partial(generate, model, prompt, max_new_tokens=len(max(openings, key=len)) + 12,
                                use_cache=use_cache)
        whole = run(constraint=functools.partial(ToolCallConstraint, tokenizer, TOOLS)).samples[0].tokens
        token_by_token = run(constraint=functools.partial(ToolCallConstraint, tokenizer, TOOLS,
                                                          choose_names=False)).samples[0].tokens
        assert _chosen(tokenizer, whole) == best
        differs += _chosen(tokenizer, token_by_token) != best
    assert differs > 0  # committing to the first token chose another tool for some of these models


def test_sampling_draws_tools_in_proportion_to_their_whole_probability(tokenizer):
    openings = call_openings(tokenizer, TOOLS)
    model, prompt = _calling_model(tokenizer, seed=0, scale=1.0)
    context = prompt + [marker_ids(tokenizer)["tool_call"]]
    temperature = 8.0  # options are drawn with probability proportional to P(option) ** (1 / temperature)
    exact = torch.softmax(torch.tensor([_log_prob(model, context, o) for o in openings]) / temperature, dim=0)
    counts = torch.zeros(len(TOOLS))
    for seed in (0, 1):
        generation = generate(model, prompt, max_new_tokens=len(max(openings, key=len)) + 1, num_samples=200,
                              sampling=SamplingParams(temperature=temperature), seed=seed,
                              constraint=functools.partial(ToolCallConstraint, tokenizer, TOOLS))
        for sample in generation.samples:
            counts[_chosen(tokenizer, sample.tokens)] += 1
    assert exact.max() < 0.9  # a real choice: more than one tool is likely
    assert (counts / 400 - exact).abs().max() < 0.07, (counts / 400, exact)


def test_openings_are_tokenised_as_in_a_whole_call(tokenizer):
    for opening, name in zip(call_openings(tokenizer, TOOLS), NAMES):
        whole = tokenizer.encode('{"name": "' + name + '", "input": {}}')
        assert whole[:len(opening)] == opening
        assert tokenizer.decode(opening) == '{"name": "' + name + '", "input'


def test_the_serving_engine_chooses_the_same_tool_as_generate(tokenizer):
    from llmkit.model.transformer import Transformer
    from llmkit.serve.engine import Engine

    tools = TOOLS[:3]  # names of about one length in tokens, so that a random model may prefer any
    openings = call_openings(tokenizer, tools)
    budget = len(max(openings, key=len)) + 2

    def in_a_call() -> ToolCallConstraint:  # the prompt ends with <|tool_call|>: the call has begun
        constraint = ToolCallConstraint(tokenizer, tools)
        constraint.advance(marker_ids(tokenizer)["tool_call"])
        return constraint

    chosen = set()
    for seed in range(6):
        scripted, prompt = _calling_model(tokenizer, seed)
        model = Transformer(scripted.config).eval()  # the engine serves plain models only
        model.load_state_dict(scripted.state_dict())
        prompt = prompt + [marker_ids(tokenizer)["tool_call"]]
        alone = generate(model, prompt, max_new_tokens=budget, constraint=in_a_call).samples[0].tokens
        engine = Engine(model, max_batch=2, kv_cache_mb=4, block_size=16)
        try:
            events = list(engine.stream(model, prompt, max_new_tokens=budget, constraint=in_a_call))
        finally:
            engine.close()
        served = events[-1].generation.samples[0].tokens
        assert served[:len(alone)] == alone[:len(served)]
        chosen.add(tokenizer.decode(alone).split('"')[3])
    assert len(chosen) > 1  # the models disagree, so agreeing is not luck


def test_every_generated_tool_gets_whole_name_choice():
    """With the shipped tokenizer, a call opening is never split differently inside
    a whole call, so no generated tool falls back to choosing its name token by token."""
    from llmkit.course.skills import make_skills
    from llmkit.paths import data_path
    from llmkit.tokens.tokenizer import Tokenizer

    tokenizer = Tokenizer.load(data_path("models", "base", "tokenizer.json"))
    for spec in make_skills(40, split="unseen_phrasings_and_tools", seed=0, kinds=["tool", "errands"]):
        assert call_openings(tokenizer, spec.definitions) is not None, [t.name for t in spec.tools]


def test_the_client_chooses_names_whole_unless_told_per_token(tokenizer):
    """The client's default and its "per_token" setting agree with the constraint's two ways."""
    from llmkit.chat.client import Client

    model, prompt = _calling_model(tokenizer, seed=3)  # a model for which the two ways disagree
    client = Client.from_model(model, tokenizer)
    messages = [{"role": "user", "content": "How deep is the river?"}]
    named = []
    for setting, choose_names in ((True, True), ("per_token", False)):
        reply = client.messages.create(messages=messages, tools=TOOLS, max_tokens=40, temperature=0,
                                       constrain_tools=setting)
        alone = generate(model, prompt, max_new_tokens=40,
                         constraint=functools.partial(ToolCallConstraint, tokenizer, TOOLS, choose_names=choose_names))
        named.append(next(b["name"] or b["input"].split('"')[3] for b in reply.content if b["type"] == "tool_use"))
        assert tokenizer.decode(alone.samples[0].tokens).split('"')[3] == named[-1]
    assert named[0] != named[1]


def test_an_option_holding_a_banned_token_is_never_chosen():
    from llmkit.generation.choice import choose_option

    class Recorder:
        chosen = None

        def choose(self, index):
            self.chosen = index

    suppressed = torch.zeros(10, dtype=torch.bool)
    suppressed[3] = True
    recorder = Recorder()
    choose_option(recorder, [[1, 3], [2, 4]], torch.tensor([0.0, -5.0]), GREEDY, None, suppressed)
    assert recorder.chosen == 1  # the likelier option holds token 3
    nothing = Recorder()
    choose_option(nothing, [[3]], torch.tensor([0.0]), GREEDY, None, suppressed)
    assert nothing.chosen is None  # no option may win: the constraint goes on token by token
