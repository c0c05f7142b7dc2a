"""llmkit.generation.generate: the loop, its stop reasons, streaming, the KV cache and the prefix cache."""
import pytest
import torch

from llmkit.generation.generate import PrefixCache, StopEvent, TokenEvent, generate, next_token_logits, stream
from llmkit.generation.results import STOP_REASONS
from llmkit.model.transformer import ModelConfig, Transformer
from llmkit.model.weights import from_hf
from llmkit.paths import DATA_DIR
from llmkit.generation.sampling import SamplingParams
from llmkit.tokens.tokenizer import Tokenizer
from scripted_model import ScriptedModel

SPECIALS = ["<|endoftext|>", "<|end_turn|>", "<|end_tool_call|>"]
VOCAB = 300
SHIPPED_BASE = DATA_DIR / "models" / "base"


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    text = (DATA_DIR / "corpus" / "train.txt").read_text(encoding="utf-8")[:100_000]
    return Tokenizer.train(text, VOCAB, special_tokens=SPECIALS)


def random_model(family: str, seed: int = 0, *, vocab_size: int = VOCAB, context_length: int = 320) -> Transformer:
    """A small random model. Its matrices are drawn wider than the usual init (std 0.3, not 0.02) so
    greedy decoding wanders over many tokens with clear margins, instead of repeating one token."""
    extra = {"n_kv_heads": 2} if family == "llama" else {}
    config = getattr(ModelConfig, family)(vocab_size=vocab_size, context_length=context_length, d_model=64,
                                          n_layers=2, n_heads=4, **extra)
    torch.manual_seed(seed)
    model = Transformer(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.3)
    return model


def scripted(tokenizer, text: str, prompt_length: int = 4) -> tuple[ScriptedModel, list[int], list[int]]:
    script = tokenizer.encode(text)
    config = ModelConfig.gpt2(vocab_size=VOCAB, context_length=128, d_model=32, n_layers=1, n_heads=2)
    torch.manual_seed(0)
    return ScriptedModel(config, script, prompt_length).eval(), list(range(prompt_length)), script


PROMPT = list(range(40, 60))


pytestmark = pytest.mark.usefixtures("one_thread")


# --- the KV cache and parity with Hugging Face ---------------------------------------------------

@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_greedy_with_kv_cache_equals_without_for_200_tokens(family):
    model = random_model(family)
    cached = generate(model, PROMPT, max_new_tokens=220, keep_logits=True)
    uncached = generate(model, PROMPT, max_new_tokens=220, keep_logits=True, use_cache=False)
    assert cached.stop_reason == uncached.stop_reason == "max_tokens"
    assert cached.tokens == uncached.tokens and len(cached.tokens) == 220
    assert len(set(cached.tokens)) > 20, "the test model should not just repeat itself"
    assert torch.allclose(cached.logits, uncached.logits, atol=1e-4, rtol=0)
    # the logits are the model's own: the last step's equal a plain forward pass over the sequence
    assert torch.allclose(cached.logits[-1], next_token_logits(model, PROMPT + cached.tokens[:-1]), atol=1e-4)


@pytest.mark.skipif(not (SHIPPED_BASE / "model.safetensors").exists(),
                    reason="the shipped base model (data/models/base/model.safetensors) is not built yet")
def test_shipped_model_greedy_with_cache_equals_without():
    from llmkit import load_model

    model, tok = load_model("base")
    prompt = tok.encode("Once upon a time")
    cached = generate(model, prompt, max_new_tokens=200, keep_logits=True)
    uncached = generate(model, prompt, max_new_tokens=200, keep_logits=True, use_cache=False)
    assert cached.tokens == uncached.tokens
    assert torch.allclose(cached.logits, uncached.logits, atol=1e-4, rtol=0)
    prefix_cache, history = PrefixCache(max_bytes=2**24), list(prompt)
    for turn in ("\nROMEO.\n", "\nJULIET.\n", "\nNURSE.\n"):
        history += tok.encode(turn)
        reply = generate(model, history, max_new_tokens=20, prefix_cache=prefix_cache)
        assert reply.tokens == generate(model, history, max_new_tokens=20).tokens
        history += reply.tokens
    assert reply.usage.cache_read_input_tokens > 0


def hf_model(family: str):
    transformers = pytest.importorskip("transformers")
    if family == "gpt2":
        config = transformers.GPT2Config(vocab_size=VOCAB, n_positions=320, n_embd=64, n_layer=2, n_head=4,
                                         bos_token_id=0, eos_token_id=0)
        model = transformers.GPT2LMHeadModel(config)
    else:
        config = transformers.LlamaConfig(vocab_size=VOCAB, max_position_embeddings=320, hidden_size=64,
                                          intermediate_size=192, num_hidden_layers=2, num_attention_heads=4,
                                          num_key_value_heads=2, bos_token_id=0, eos_token_id=0)
        model = transformers.LlamaForCausalLM(config)
    torch.manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.3)
    return model.eval()


@pytest.mark.parametrize("family", ["gpt2", "llama"])
@pytest.mark.parametrize("penalty", [1.0, 1.3])
def test_greedy_matches_hugging_face_generate(family, penalty):
    hf = hf_model(family)
    ours = from_hf(hf)
    with torch.inference_mode():
        expected = hf.generate(torch.tensor([PROMPT]), max_new_tokens=200, do_sample=False, eos_token_id=None,
                               pad_token_id=0, repetition_penalty=penalty)[0, len(PROMPT):].tolist()
    got = generate(ours, PROMPT, max_new_tokens=200, sampling=SamplingParams(temperature=0, repetition_penalty=penalty))
    assert got.tokens == expected


# --- stop reasons, each from a real run ----------------------------------------------------------

def test_every_stop_reason_from_a_real_run(tokenizer):
    model = random_model("llama")
    with torch.no_grad():  # zero the (tied) output rows of tokens that are not printable ASCII, so the
        for token in range(VOCAB):  # random model's text is readable and a stop sequence easy to pick
            if not tokenizer.token_bytes(token).isascii() or token in tokenizer.special_tokens.values():
                model.lm_head.weight[token] = 0.0
    free = generate(model, PROMPT, max_new_tokens=60, tokenizer=tokenizer)
    assert free.stop_reason == "max_tokens" and len(free.tokens) == 60
    reasons = {"max_tokens"}

    # a stop token ends the turn at its first appearance; it is the last token, not part of the text
    stop_at = free.tokens[25]
    first = free.tokens.index(stop_at)
    ended = generate(model, PROMPT, max_new_tokens=60, stop_tokens=[stop_at], tokenizer=tokenizer)
    assert (ended.stop_reason, ended.tokens) == ("end_turn", free.tokens[:first + 1])
    assert ended.text == tokenizer.decode(free.tokens[:first])
    reasons.add(ended.stop_reason)

    unused = next(t for t in range(VOCAB) if t not in free.tokens)
    tool = generate(model, PROMPT, max_new_tokens=60, stop_tokens=[unused], tool_stop_tokens=[stop_at])
    assert (tool.stop_reason, tool.tokens) == ("tool_use", free.tokens[:first + 1])
    reasons.add(tool.stop_reason)

    # a stop sequence that straddles the boundary between two ASCII tokens in the middle of the text
    boundary = next(i for i in range(20, 59)
                    if _ascii(tokenizer, free.tokens[i - 1]) and _ascii(tokenizer, free.tokens[i]))
    before, after = tokenizer.decode(free.tokens[:boundary]), tokenizer.decode(free.tokens[boundary:boundary + 1])
    stop = before[-1] + after[0]
    cut = generate(model, PROMPT, max_new_tokens=60, tokenizer=tokenizer, stop_sequences=["never appears", stop])
    assert cut.stop_reason == "stop_sequence" and cut.stop_sequence == stop
    assert cut.text == free.text[:free.text.index(stop)]
    assert cut.tokens == free.tokens[:len(cut.tokens)] and len(cut.tokens) <= boundary + 1
    reasons.add(cut.stop_reason)

    # the context window fills before max_new_tokens is reached
    context = model.config.context_length
    long_prompt = (PROMPT * 20)[:context - 5]
    full = generate(model, long_prompt, max_new_tokens=50)
    assert full.stop_reason == "context_window" and len(full.tokens) == 5
    reasons.add(full.stop_reason)
    assert reasons == set(STOP_REASONS)


def test_max_tokens_wins_when_the_window_fills_on_the_same_step():
    model = random_model("gpt2")
    prompt = (PROMPT * 20)[:model.config.context_length - 3]
    assert generate(model, prompt, max_new_tokens=3).stop_reason == "max_tokens"


# --- streaming ------------------------------------------------------------------------------------

def collect(events):
    events = list(events)
    assert isinstance(events[-1], StopEvent) and all(isinstance(e, TokenEvent) for e in events[:-1])
    return events[:-1], events[-1]


def test_stream_yields_the_same_tokens_and_text_as_generate(tokenizer):
    model = random_model("gpt2")
    tokens, stop = collect(stream(model, PROMPT, max_new_tokens=40, tokenizer=tokenizer))
    whole = generate(model, PROMPT, max_new_tokens=40, tokenizer=tokenizer)
    assert [e.token for e in tokens] == whole.tokens == stop.generation.tokens
    assert "".join(e.text for e in tokens) == whole.text
    assert stop.stop_reason == "max_tokens" and stop.usage.output_tokens == 40
    times = [e.elapsed for e in tokens]
    assert times == sorted(times) and times[0] == pytest.approx(stop.usage.time_to_first_token)


def test_stream_holds_back_split_characters_and_possible_stop_sequences(tokenizer):
    text = "naïve ENVY café 語 🙂 END tail"
    model, prompt, script = scripted(tokenizer, text)
    assert any(_incomplete_utf8(tokenizer.token_bytes(t)) for t in script), "the script should split a character"
    tokens, stop = collect(stream(model, prompt, max_new_tokens=len(script), tokenizer=tokenizer,
                                  stop_sequences=["END"]))
    assert stop.stop_reason == "stop_sequence" and stop.stop_sequence == "END"
    deltas = [e.text for e in tokens]
    assert "".join(deltas) == stop.generation.text == "naïve ENVY café 語 🙂 "
    assert all("\ufffd" not in d for d in deltas)
    # the first byte of "ï" arrives alone and yields no text; "EN" of "ENVY" waits for the "V"
    first_byte_event = next(e for e in tokens if _incomplete_utf8(tokenizer.token_bytes(e.token)))
    assert first_byte_event.text == ""
    released = ""
    for event in tokens:
        released += event.text
        assert not released.endswith(("E", "EN")), "a possible start of the stop sequence was released"


def test_stream_flushes_held_text_when_it_stops_for_another_reason(tokenizer):
    model, prompt, script = scripted(tokenizer, "so EN")
    tokens, stop = collect(stream(model, prompt, max_new_tokens=len(script), tokenizer=tokenizer,
                                  stop_sequences=["END"]))
    assert stop.stop_reason == "max_tokens"
    assert "".join(e.text for e in tokens) == stop.generation.text == "so EN"
    # a character cut off by max_tokens is shown as U+FFFD rather than silently dropped
    model, prompt, script = scripted(tokenizer, "a 🙂")
    cut = generate(model, prompt, max_new_tokens=len(script) - 1, tokenizer=tokenizer)
    assert cut.text == "a \ufffd" == tokenizer.decode(cut.tokens)


def test_end_turn_text_is_the_decoded_tokens_without_the_stop_token(tokenizer):
    end = tokenizer.special_tokens["<|end_turn|>"]
    model, prompt, script = scripted(tokenizer, "done: 語", prompt_length=3)
    script.append(end)
    tokens, stop = collect(stream(model, prompt, max_new_tokens=50, tokenizer=tokenizer, stop_tokens=[end]))
    assert stop.stop_reason == "end_turn" and stop.generation.tokens[-1] == end
    assert stop.generation.text == "done: 語" == "".join(e.text for e in tokens)


def _ascii(tokenizer, token: int) -> bool:
    data = tokenizer.token_bytes(token)
    return token not in tokenizer.special_tokens.values() and data.isascii() and data.strip() == data

def _incomplete_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
        return False
    except UnicodeDecodeError:
        return True


# --- sampling through the loop, and several samples from one prefill -----------------------------

def test_same_seed_same_generation_and_the_global_rng_is_untouched():
    model = random_model("llama")
    params = SamplingParams(temperature=1.0, top_p=0.95)
    torch.manual_seed(123)
    state = torch.get_rng_state()
    runs = [generate(model, PROMPT, max_new_tokens=30, sampling=params, seed=s).tokens for s in (5, 5, 6)]
    assert runs[0] == runs[1] != runs[2]
    assert torch.equal(state, torch.get_rng_state())


def test_num_samples_share_one_prefill():
    model = random_model("gpt2")
    greedy = generate(model, PROMPT, max_new_tokens=30)
    batch = generate(model, PROMPT, max_new_tokens=30, num_samples=3)
    assert [s.tokens for s in batch.samples] == [greedy.tokens] * 3
    assert batch.usage.input_tokens == len(PROMPT) and batch.usage.output_tokens == 90

    params = SamplingParams(temperature=1.2)
    drawn = generate(model, PROMPT, max_new_tokens=30, sampling=params, seed=9, num_samples=4)
    again = generate(model, PROMPT, max_new_tokens=30, sampling=params, seed=9, num_samples=4)
    assert [s.tokens for s in drawn.samples] == [s.tokens for s in again.samples]
    assert len({tuple(s.tokens) for s in drawn.samples}) == 4, "samples should differ"
    # each sample stops for its own reason: stop on a token only some samples produce
    stop = next(t for t in drawn.samples[0].tokens if t not in drawn.samples[1].tokens)
    mixed = generate(model, PROMPT, max_new_tokens=30, sampling=params, seed=9, num_samples=4, stop_tokens=[stop])
    assert mixed.samples[0].stop_reason == "end_turn" and mixed.samples[1].stop_reason == "max_tokens"
    assert mixed.samples[1].tokens == drawn.samples[1].tokens
    assert mixed.usage.output_tokens == sum(len(s.tokens) for s in mixed.samples)


def test_usage_reports_timings():
    usage = generate(random_model("gpt2"), PROMPT, max_new_tokens=10).usage
    assert usage.input_tokens == len(PROMPT) and usage.cache_read_input_tokens == 0 and usage.output_tokens == 10
    assert usage.time_to_first_token > 0 and usage.decode_tokens_per_s > 0
    assert generate(random_model("gpt2"), PROMPT, max_new_tokens=1).usage.decode_tokens_per_s is None


def test_generate_leaves_the_models_training_mode_alone():
    model = random_model("gpt2").train()
    model.blocks[1].eval()  # a mixed model: each module gets its own mode back
    modes = [m.training for m in model.modules()]
    seen = []
    model.blocks[0].register_forward_hook(lambda module, args, out: seen.append(module.training))
    generate(model, PROMPT, max_new_tokens=3)
    assert seen and not any(seen)  # dropout was off while generating
    assert [m.training for m in model.modules()] == modes


# --- ruling tokens out: suppress_tokens and constraint -------------------------------------------

class OnlyThese:
    """A TokenConstraint allowing a fixed set of ids (all of them when None) that records what it is told."""

    def __init__(self, allowed_ids=None, vocab_size: int = VOCAB):
        self.mask = None
        if allowed_ids is not None:
            self.mask = torch.zeros(vocab_size, dtype=torch.bool)
            self.mask[list(allowed_ids)] = True
        self.told: list[int] = []

    def allowed(self):
        return self.mask

    def advance(self, token: int) -> None:
        self.told.append(token)


def test_suppressed_tokens_are_never_drawn():
    model = random_model("llama")
    params = SamplingParams(temperature=1.0)
    seen: dict[int, int] = {}
    for seed in range(5):
        for sample in generate(model, PROMPT, max_new_tokens=30, sampling=params, seed=seed, num_samples=4).samples:
            for token in sample.tokens:
                seen[token] = seen.get(token, 0) + 1
    banned = sorted(seen, key=seen.get, reverse=True)[:15]  # the tokens this model draws most
    for seed in range(20):
        drawn = generate(model, PROMPT, max_new_tokens=30, sampling=params, seed=seed, num_samples=4,
                         suppress_tokens=banned)
        assert not {t for s in drawn.samples for t in s.tokens} & set(banned)
    # greedy takes the best token that is left; the kept logits are still the model's own
    greedy = generate(model, PROMPT, max_new_tokens=1, keep_logits=True)
    second = generate(model, PROMPT, max_new_tokens=1, keep_logits=True, suppress_tokens=greedy.tokens)
    assert second.tokens[0] == int(greedy.logits[0].topk(2).indices[1])
    assert torch.equal(second.logits, greedy.logits)


def test_without_restrictions_generation_is_unchanged():
    model = random_model("gpt2")
    params = SamplingParams(temperature=0.9, top_k=40)
    plain = generate(model, PROMPT, max_new_tokens=40, sampling=params, seed=4, num_samples=3)
    made: list[OnlyThese] = []

    def anything() -> OnlyThese:
        made.append(OnlyThese())
        return made[-1]

    for extra in ({"suppress_tokens": []}, {"constraint": None}, {"constraint": anything}):
        again = generate(model, PROMPT, max_new_tokens=40, sampling=params, seed=4, num_samples=3, **extra)
        assert [s.tokens for s in again.samples] == [s.tokens for s in plain.samples]
    assert [c.told for c in made] == [s.tokens for s in plain.samples]  # one constraint per sample, told its tokens


def test_each_sample_keeps_to_its_constraint_and_the_mask_comes_before_top_k():
    model = random_model("llama")
    evens = range(0, VOCAB, 2)
    drawn = generate(model, PROMPT, max_new_tokens=30, sampling=SamplingParams(temperature=1.5), seed=1, num_samples=4,
                     constraint=lambda: OnlyThese(evens))
    assert all(t % 2 == 0 for s in drawn.samples for t in s.tokens)
    # top-k = 1 keeps the best *allowed* token, so it picks what greedy picks under the same constraint
    first = next_token_logits(model, PROMPT)
    allowed = [t for t in range(VOCAB) if t != int(first.argmax())][:200]
    top1 = generate(model, PROMPT, max_new_tokens=1, sampling=SamplingParams(top_k=1), seed=0,
                    constraint=lambda: OnlyThese(allowed))
    assert top1.tokens[0] == max(allowed, key=lambda t: first[t])


def test_a_constraint_and_suppress_tokens_that_leave_nothing_are_an_error():
    model = random_model("gpt2")
    events = stream(model, PROMPT, max_new_tokens=3, suppress_tokens=[7], constraint=lambda: OnlyThese([7]))
    with pytest.raises(RuntimeError, match="no token left"):
        next(events)


# --- the prefix cache -----------------------------------------------------------------------------

@pytest.mark.parametrize("family", ["gpt2", "llama"])
@pytest.mark.parametrize("sampling", [None, SamplingParams(temperature=0.9, top_k=50)])
def test_prefix_cache_never_changes_results_over_a_conversation(family, sampling):
    model = random_model(family)
    cache = PrefixCache(max_bytes=2**24, block_size=8)
    history = list(PROMPT)
    for turn in range(4):
        history += [100 + turn, 101, 102]  # the "user" speaks
        with_cache = generate(model, history, max_new_tokens=25, sampling=sampling, seed=turn,
                              prefix_cache=cache, keep_logits=True)
        without = generate(model, history, max_new_tokens=25, sampling=sampling, seed=turn, keep_logits=True)
        assert with_cache.tokens == without.tokens
        assert torch.allclose(with_cache.logits, without.logits, atol=1e-4, rtol=0)
        usage = with_cache.usage
        assert usage.prompt_tokens == len(history)
        if turn > 0:  # the earlier history is served from the cache, all but the reply's last token
            assert usage.cache_read_input_tokens == len(history) - 3 - 1  # (it was drawn, never fed back)
        history += with_cache.tokens
    stats = cache.stats
    assert stats.requests == 4 and stats.hits == 3 and 0 < stats.hit_rate < 1
    assert stats.nbytes <= cache.max_bytes and stats.evictions == 0


def test_one_early_byte_changed_reuses_nothing_after_it(tokenizer):
    model = random_model("gpt2")
    text = "The quick brown fox jumps over the lazy dog, then naps in the warm afternoon sun for hours."
    tokens = tokenizer.encode(text)
    cache = PrefixCache(max_bytes=2**24, block_size=4)
    generate(model, tokens, max_new_tokens=2, prefix_cache=cache)
    assert cache.match_length(tokens) == len(tokens) - 1  # the last token is always prefilled
    for position in (1, 30):
        changed = tokenizer.encode(text[:position] + "X" + text[position + 1:])
        first_difference = next(i for i, (a, b) in enumerate(zip(tokens, changed)) if a != b)
        reused = generate(model, changed, max_new_tokens=2, prefix_cache=cache).usage.cache_read_input_tokens
        assert reused == first_difference  # every token before the change, nothing after
        assert generate(model, changed, max_new_tokens=5, prefix_cache=cache).tokens == \
            generate(model, changed, max_new_tokens=5).tokens
    assert generate(model, [1] + tokens[1:], max_new_tokens=2, prefix_cache=cache).usage.cache_read_input_tokens == 0


def test_prefix_cache_evicts_least_recently_used_within_its_budget():
    model = random_model("llama")
    token_bytes = 2 * 2 * 2 * 16 * 4  # K and V, 2 layers, 2 kv heads, head_dim 16, float32
    cache = PrefixCache(max_bytes=50 * token_bytes, block_size=8)
    a, b, c = ([t] * 25 for t in (7, 8, 9))  # three prompts of three blocks and a 1-token tail, sharing nothing
    for prompt in (a, b, a, c):
        result = generate(model, prompt, max_new_tokens=1, prefix_cache=cache)
        assert result.tokens == generate(model, prompt, max_new_tokens=1).tokens
        assert cache.nbytes <= cache.max_bytes
    # a was used after b, so making room for c evicted b's blocks
    assert cache.match_length(a) == 24 and cache.match_length(b) == 0 and cache.match_length(c) == 24
    assert cache.stats.evictions == 4


def test_prefix_cache_is_tied_to_one_model_and_its_current_weights():
    model, other = random_model("gpt2", seed=0), random_model("gpt2", seed=1)
    cache = PrefixCache(max_bytes=2**24, block_size=8)
    generate(model, PROMPT, max_new_tokens=3, prefix_cache=cache)
    with pytest.raises(ValueError, match="another model"):
        generate(other, PROMPT, max_new_tokens=3, prefix_cache=cache)
    with torch.no_grad():
        model.blocks[0].attn.qkv.weight.add_(0.1)  # as an optimiser step would
    after = generate(model, PROMPT, max_new_tokens=3, prefix_cache=cache)
    assert after.usage.cache_read_input_tokens == 0 and after.tokens == generate(model, PROMPT, max_new_tokens=3).tokens
    with pytest.raises(ValueError, match="cannot hold even one block"):
        generate(model, PROMPT, max_new_tokens=3, prefix_cache=PrefixCache(max_bytes=100))


# --- clear errors ---------------------------------------------------------------------------------

@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"max_new_tokens": 0}, ValueError, "max_new_tokens must be at least 1"),
        ({"max_new_tokens": 2.5}, TypeError, "max_new_tokens must be an int"),
        ({"max_new_tokens": True}, TypeError, "max_new_tokens must be an int"),
        ({"num_samples": "2"}, TypeError, "num_samples must be an int"),
        ({"use_cache": "no"}, TypeError, "use_cache must be True or False"),
        ({"keep_logits": 1}, TypeError, "keep_logits must be True or False"),
        ({"prefix_cache": {}}, TypeError, "prefix_cache must be a PrefixCache"),
        ({"prompt_ids": [5] * 320}, ValueError, "context window"),
        ({"prompt_ids": []}, ValueError, "empty"),
        ({"prompt_ids": [VOCAB]}, ValueError, "outside the model's vocabulary"),
        ({"prompt_ids": "hello"}, TypeError, "encode it first"),
        ({"stop_sequences": [""]}, ValueError, "non-empty"),
        ({"stop_sequences": "\n"}, TypeError, "list of strings"),
        ({"stop_sequences": ["\n"], "tokenizer": None}, ValueError, "tokenizer="),
        ({"stop_tokens": 5}, TypeError, "collection"),
        ({"stop_tokens": [1], "tool_stop_tokens": [1]}, ValueError, "both"),
        ({"num_samples": 0}, ValueError, "num_samples"),
        ({"use_cache": False, "prefix_cache": PrefixCache(2**20)}, ValueError, "use_cache"),
        ({"sampling": {"temperature": 1}}, TypeError, "SamplingParams"),
        ({"suppress_tokens": 5}, TypeError, "collection"),
        ({"suppress_tokens": [VOCAB]}, ValueError, "suppress_tokens"),
        ({"suppress_tokens": range(VOCAB)}, ValueError, "every token"),
        ({"constraint": OnlyThese()}, TypeError, "function that returns a new TokenConstraint"),
        ({"constraint": lambda: "free"}, TypeError, "not a TokenConstraint"),
        ({"constraint": (lambda one: lambda: one)(OnlyThese()), "num_samples": 2}, ValueError, "same object"),
    ],
)
def test_bad_requests_get_clear_errors_before_any_work(kwargs, error, message):
    model = random_model("gpt2")
    arguments = {"prompt_ids": PROMPT, "max_new_tokens": 5, **kwargs}
    with pytest.raises(error, match=message):
        stream(model, **arguments)  # raises on the call itself, not at the first token


def test_bad_sampling_parameters_are_rejected():
    for bad in ({"temperature": -1.0}, {"top_p": 0.0}, {"top_p": 1.01}):
        with pytest.raises(ValueError):
            SamplingParams(**bad)


def test_a_tokenizer_smaller_than_the_model_is_rejected(tokenizer):
    with pytest.raises(ValueError, match="tokenizer knows only"):
        generate(random_model("gpt2", vocab_size=512), PROMPT, max_new_tokens=2, tokenizer=tokenizer)


def test_num_samples_is_bounded_before_anything_is_allocated():
    from llmkit.generation.request import MAX_SAMPLES
    from llmkit.model.config import ModelConfig
    from llmkit.model.transformer import Transformer

    model = Transformer(ModelConfig(vocab_size=32, context_length=16, d_model=16, n_layers=1, n_heads=2)).eval()
    with pytest.raises(ValueError, match=f"num_samples must be at most {MAX_SAMPLES}"):
        generate(model, [1, 2], max_new_tokens=2, num_samples=10**9)
