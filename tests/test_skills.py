"""Skill conversations: every kind renders and ends its turn; splits are held out by construction;
the scores judge hand-made transcripts right."""
import copy
import json
import random
import re
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmkit.chat.markers import marker_ids
from llmkit.chat.template import render
from llmkit.course.phrasing_pools import TRAIN
from llmkit.course.skill_preferences import greeting_preference, make_skill_preferences
from llmkit.course.skill_scores import (INTRODUCING_KINDS, SCORES, calls_in, conversations_run, evaluate_skills, final_text,
                                       fractions, introduction, repeats, score)
from llmkit.course import own_tools
from llmkit.course.skills import KINDS, SPLITS, make_skill, make_skills
from llmkit.course.toolgen import TOOL_WORDS, pool_words
from llmkit.course.values import value_split
from llmkit.tokens.tokenizer import Tokenizer
from llmkit.paths import data_path

COURSE_TOOLS = {"get_weather", "count_letters", "calculator", "web_search"}


@pytest.fixture(scope="module")
def tokenizer():
    return Tokenizer.load(data_path("models", "base", "tokenizer.json"))


@pytest.mark.parametrize("split", SPLITS)
@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_renders_fits_1024_and_ends_its_turn(tokenizer, kind, split):
    end_turn = marker_ids(tokenizer)["end_turn"]
    for seed in range(6):
        c = make_skill(kind, split, seed)
        rendered = c.render(tokenizer)
        assert len(rendered) <= 1024
        assert rendered.ids[-1] == end_turn and rendered.mask[-1]
        assert 1 <= len(c.tools) + (kind in ("chitchat", "memory", "memory_open", "missing", "not_offered")) <= 6
        # what is expected is what follows the last request (errands answer earlier ones before it)
        assert [(b["name"], b["input"]) for b in calls_in(c.messages[len(c.prompt):])] == list(c.expected.calls)
        text = c.messages[-1]["content"]
        text = text if isinstance(text, str) else text[-1]["text"]
        assert all(v in text for v in c.expected.answer_values)


@pytest.mark.parametrize("split", SPLITS)
def test_errands_ask_for_different_offered_tools_in_turn_and_expect_the_last(split):
    for seed in range(20):
        c = make_skill("errands", split, seed)
        names = [b["name"] for b in calls_in(c.messages)]
        assert 2 <= len(names) <= 3 and len(set(names)) == len(names)  # a different tool each turn
        assert set(names) <= {t.name for t in c.tools} and 3 <= len(c.tools) <= 4
        assert c.expected.calls[0][0] == names[-1]
        assert len(_user_texts(c)) == len(names)  # one typed request per call, each answered in turn


def test_the_training_mix_has_every_kind_but_the_optional_ones_and_is_seeded():
    a = make_skills(300, split="train", seed=4)
    assert {c.kind for c in a} == set(KINDS) - {"which", "not_offered", "own_tool", "own_tool_open", "memory_open"}  # a recipe's mix may add them
    assert [c.messages for c in a[:20]] == [c.messages for c in make_skills(20, split="train", seed=4)]
    assert a[0].messages != make_skills(1, split="train", seed=5)[0].messages


def _user_texts(c):
    return [m["content"] for m in c.messages if m["role"] == "user" and isinstance(m["content"], str)]


def _typed_values(c):
    """The values the user wrote that come from the value pools (not enum options, days or letters)."""
    schemas = {t.name: t.input_schema["properties"] for t in c.tools}
    offered = {t.name: t for t in c.tools}
    values = []
    for name, args in c.expected.calls:
        if name == "calculator":
            values += [int(n) for n in re.findall(r"\d+", args["expression"])]
        elif name in ("get_weather", "count_letters"):
            values.append(args.get("city") or args["word"])
        elif name != "web_search":  # search topics are split by the document that answers them
            values += [v for k, v in args.items() if "enum" not in schemas[name][k] and not isinstance(v, bool)
                       and not (_own(offered[name]) and isinstance(v, str) and len(v) == 1)]  # a letter to count
    return values + ([c.expected.name] if c.expected.name else [])


def _own(tool) -> bool:
    """A learner-style course tool (``own_tools``): its words have pools of their own, tested in test_own_tools.py."""
    return tool.function.__module__ == own_tools.__name__


def _trigrams(text):
    words = re.sub(r"[^a-z' ]", " ", text.lower()).split()
    return {tuple(words[i:i + 3]) for i in range(len(words) - 2)}


TRAIN_FORM_TRIGRAMS = set()
for forms in [*TRAIN.forms.values(), *TRAIN.later_forms.values()]:
    for form in forms:
        for run in re.split(r"\{[a-z_]+\}", form):
            TRAIN_FORM_TRIGRAMS |= _trigrams(run)


def _assert_heldout_tools(c):
    train_words = pool_words("train")
    for t in c.tools:
        if t.name in COURSE_TOOLS or _own(t):  # the course's tools; own tools: test_own_tools.py
            continue
        for word in t.name.split("_"):
            assert word not in train_words and (word in pool_words("heldout") or value_split(word) == "heldout")
        for param in t.input_schema["properties"]:
            assert not set(param.split("_")) & train_words
        for wording in TOOL_WORDS["train"]["descriptions"]:
            for run in re.split(r"\{[a-z_]+\}", wording):
                assert not _trigrams(run) & _trigrams(t.description), (wording, t.description)


def _assert_training_tools(c):
    for t in c.tools:
        if t.name not in COURSE_TOOLS and not _own(t):
            assert set(t.name.split("_")) & pool_words("train") or all(value_split(w) == "train" for w in t.name.split("_"))


def _assert_values(c, wanted):
    for value in _typed_values(c):
        assert value_split(value) == wanted, (c.split, value)


@settings(max_examples=120, deadline=None)
@given(seed=st.integers(0, 10**9), kind=st.sampled_from(KINDS))
def test_unseen_split_shares_no_template_tool_word_parameter_or_description(seed, kind):
    c = make_skill(kind, "unseen_phrasings_and_tools", seed)
    _assert_heldout_tools(c)
    for text in _user_texts(c):
        assert not _trigrams(text) & TRAIN_FORM_TRIGRAMS, text
    _assert_values(c, "heldout")


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**9), kind=st.sampled_from(KINDS))
def test_the_one_factor_splits_hold_out_their_factor_and_keep_the_other(seed, kind):
    phrasings, tools = make_skill(kind, "unseen_phrasings", seed), make_skill(kind, "unseen_tools", seed)
    _assert_training_tools(phrasings)
    _assert_heldout_tools(tools)
    for text in _user_texts(phrasings):
        assert not _trigrams(text) & TRAIN_FORM_TRIGRAMS, text
    _assert_values(phrasings, "heldout")
    _assert_values(tools, "heldout")


def test_unseen_tools_keeps_the_training_phrasings():
    texts = [t for c in make_skills(60, split="unseen_tools", seed=2, kinds=["weather", "letters", "tool"])
             for t in _user_texts(c)]
    assert sum(bool(_trigrams(t) & TRAIN_FORM_TRIGRAMS) for t in texts) > len(texts) / 3


@settings(max_examples=120, deadline=None)
@given(seed=st.integers(0, 10**9), kind=st.sampled_from(KINDS))
def test_seen_uses_training_values_and_unseen_values_uses_heldout_ones(seed, kind):
    for split, wanted in (("seen", "train"), ("unseen_values", "heldout")):
        c = make_skill(kind, split, seed)
        _assert_values(c, wanted)
        _assert_training_tools(c)


def test_unknown_split_and_kind_are_refused():
    with pytest.raises(ValueError, match="split must be one of"):
        make_skills(1, split="heldout")
    with pytest.raises(ValueError, match="unknown kind"):
        make_skill("poetry", "train", 0)


# ------------------------------------------------------------------------------------------ scores
def _replay(c):
    """The transcript a perfect model would produce: everything after the prompt."""
    return copy.deepcopy(c.messages[len(c.prompt):])


@pytest.mark.parametrize("kind", KINDS)
def test_a_perfect_transcript_scores_full_marks(kind):
    for seed in range(5):
        c = make_skill(kind, "seen", seed)
        scores = score(c, _replay(c), "end_turn")
        assert all(v is None or v is True for v in scores.values()), (kind, scores)
        assert scores["right_tool"] and scores["ends_turn"]


def _first_call(transcript):
    return next(b for m in transcript if m["role"] == "assistant" and isinstance(m["content"], list)
                for b in m["content"] if b["type"] in ("tool_use", "server_tool_use"))


def test_wrong_tool_and_miscopied_argument_are_caught():
    c = next(c for c in make_skills(50, split="seen", seed=1, kinds=["tool"]) if c.expected.calls[0][1])
    wrong_tool = _replay(c)
    _first_call(wrong_tool)["name"] = "not_" + c.expected.calls[0][0]
    s = score(c, wrong_tool, "end_turn")
    assert s["right_tool"] is False and s["args_exact"] is False and s["tool_call_valid"] is False
    assert s["calls_made"] is True  # written wrong, but written: not a call left out
    miscopied = _replay(c)
    key = next(iter(c.expected.calls[0][1]))
    value = _first_call(miscopied)["input"][key]
    _first_call(miscopied)["input"][key] = (not value) if isinstance(value, bool) else (
        value + 1 if isinstance(value, (int, float)) else value + "x")
    s = score(c, miscopied, "end_turn")
    assert s["right_tool"] is True and s["args_exact"] is False


def test_calls_made_counts_calls_due_not_calls_right():
    c = next(c for c in make_skills(20, split="seen", seed=2, kinds=["multi"]) if len(c.expected.calls) == 2)
    both = _replay(c)
    assert score(c, both, "end_turn")["calls_made"] is True
    second_call = _call_message(both, 1)
    one_left_out = both[:both.index(second_call)] + [{"role": "assistant", "content": "Done."}]
    assert len(calls_in(one_left_out)) == 1 and score(c, one_left_out, "end_turn")["calls_made"] is False
    chitchat = make_skill("chitchat", "seen", 0)
    assert score(chitchat, _replay(chitchat), "end_turn")["calls_made"] is None  # no call was due


def _call_message(transcript, which):
    return [m for m in transcript if m["role"] == "assistant" and isinstance(m["content"], list)
            and any(b["type"] in ("tool_use", "server_tool_use") for b in m["content"])][which]


def test_types_count_in_args_exact():
    c = next(c for c in make_skills(80, split="seen", seed=2, kinds=["tool"])
             if any(isinstance(v, int) and not isinstance(v, bool) for v in c.expected.calls[0][1].values()))
    t = _replay(c)
    call = _first_call(t)
    key = next(k for k, v in call["input"].items() if isinstance(v, int) and not isinstance(v, bool))
    call["input"][key] = float(call["input"][key])
    assert score(c, t, "end_turn")["args_exact"] is False


def test_an_answer_without_the_result_value_is_caught():
    c = make_skill("tool", "seen", 3)
    t = _replay(c)
    t[-1]["content"] = [{"type": "text", "text": "I could not say."}]
    assert score(c, t, "end_turn")["answer_from_result"] is False


def test_loops_and_max_tokens_do_not_end_a_turn():
    c = make_skill("chitchat", "seen", 0)
    loop = [{"role": "assistant", "content": "and then the and then the and then the and then the"}]
    assert repeats(loop[0]["content"])
    assert score(c, loop, "end_turn")["ends_turn"] is False
    assert score(c, _replay(c), "max_tokens")["ends_turn"] is False
    assert score(c, [{"role": "assistant", "content": "Hello there, how are you?"}], "end_turn")["ends_turn"] is True


def test_an_invented_number_or_a_call_when_no_tool_fits_is_caught():
    c = make_skill("missing", "seen", 0)
    assert score(c, _replay(c), "end_turn")["no_invention"] is True
    invented = [{"role": "assistant", "content": f"The {c.expected.facts['subject']} is 4512."}]
    assert score(c, invented, "end_turn")["no_invention"] is False
    called = [{"role": "assistant", "content": [{"type": "tool_use", "id": "x", "name": "anything", "input": {}}]}]
    s = score(c, called, "tool_use")
    assert s["right_tool"] is False and s["no_invention"] is False


def test_memory_needs_the_exact_name():
    c = make_skill("memory", "seen", 0)
    assert score(c, _replay(c), "end_turn")["memory"] is True
    wrong = [{"role": "assistant", "content": f"Your name is {c.expected.name[:-1]}."}]
    assert score(c, wrong, "end_turn")["memory"] is False


def test_fractions_skip_scores_that_do_not_apply():
    rows = [{"memory": True, "args_exact": None}, {"memory": False, "args_exact": True}]
    assert fractions(rows) == {"args_exact": 1.0, "n_args_exact": 1, "memory": 0.5, "n_memory": 2}


def test_preference_pairs_render_and_differ(tokenizer):
    pairs = make_skill_preferences(40, split="train", seed=0)
    assert len(pairs) == 40
    for pair in pairs:
        ids = pair.render(tokenizer)
        assert ids["chosen"] != ids["rejected"]


def test_greeting_pairs_prefer_the_name_on_the_introduction_alone(tokenizer):
    pairs = make_skill_preferences(300, split="train", seed=1, greetings=0.2)
    greetings = [p for p in pairs if len(p.prompt) == 1 and p.kind in ("memory", "memory_open")]
    assert 30 <= len(greetings) <= 90 and {p.kind for p in greetings} == {"memory", "memory_open"}
    for pair in greetings:
        spoken = pair.prompt[0]["content"]
        assert pair.prompt[0]["role"] == "user" and pair.chosen["role"] == "assistant"
        greeted = re.match(r"(?:Nice to meet you, |Hello, |Hi )([^\s,!]+)", pair.chosen["content"]).group(1)
        assert greeted in spoken and greeted not in pair.rejected["content"]
        ids = pair.render(tokenizer)
        assert ids["chosen"] != ids["rejected"]


def test_no_greeting_share_leaves_the_pairs_as_they_were():
    plain = make_skill_preferences(30, split="train", seed=2)
    assert make_skill_preferences(30, split="train", seed=2, greetings=0.0) == plain
    assert make_skill_preferences(30, split="train", seed=2, greetings=0.5) != plain
    with pytest.raises(ValueError, match="share"):
        make_skill_preferences(3, greetings=1.5)
    with pytest.raises(ValueError, match="introduces a name"):
        greeting_preference(make_skill("tool", "train", 0), random.Random(0))


# ------------------------------------------------------------------------------------------ the driver
class ReplayClient:
    """Answers each request with the next assistant message of the matching conversation: a
    perfect model, run through the real harness loop (run_agent runs the real tools)."""

    def __init__(self, specs):
        self.by_prompt = {json.dumps(s.prompt, sort_keys=True): s for s in specs}
        self.messages = self

    def create(self, *, messages, tools, **_):
        for cut in range(len(messages), 0, -1):
            spec = self.by_prompt.get(json.dumps(messages[:cut], sort_keys=True))
            if spec is not None:
                break
        replies = [m for m in spec.messages[len(spec.prompt):] if m["role"] == "assistant"]
        reply = replies[sum(m["role"] == "assistant" for m in messages[cut:])]
        content = reply["content"] if isinstance(reply["content"], list) else [{"type": "text", "text": reply["content"]}]
        stop = "tool_use" if content[-1]["type"] == "tool_use" else "end_turn"
        return SimpleNamespace(content=content, stop_reason=stop)


class SilentClient:
    messages = property(lambda self: self)

    def create(self, **_):
        return SimpleNamespace(content=[{"type": "text", "text": "Hello."}], stop_reason="end_turn")


def test_a_perfect_model_through_the_harness_scores_one_everywhere():
    splits = ("seen", "unseen_phrasings_and_tools")
    specs = [s for split in splits for kind in KINDS for s in make_skills(3, split=split, seed=0, kinds=[kind])]
    greetings = [introduction(s) for s in specs if s.kind in INTRODUCING_KINDS]  # the first replies, replayed too
    done = []
    report = evaluate_skills(ReplayClient(specs + greetings), per_kind=3, splits=splits, seed=0, progress=done.append)
    for split in splits:
        assert all(report[split][name] == 1.0 for name in SCORES), report[split]
        assert report[split]["n_right_tool"] == 3 * len(KINDS)
        assert report[split]["n_greets_by_name"] == 3 * len(INTRODUCING_KINDS)
    assert done[-1] == conversations_run(KINDS, splits, 3) == len(specs) + len(greetings)


def test_greets_by_name_scores_the_first_reply_not_the_replayed_greeting():
    """A model that answers the name question right but greets without the name: memory 1, greeting 0."""
    specs = make_skills(4, split="seen", seed=2, kinds=["memory"])

    class ForgetfulGreeter(ReplayClient):
        def create(self, *, messages, tools, **kwargs):
            if len(messages) == 1:
                return SimpleNamespace(content=[{"type": "text", "text": "Hello there!"}], stop_reason="end_turn")
            return super().create(messages=messages, tools=tools, **kwargs)

    report = evaluate_skills(ForgetfulGreeter(specs), per_kind=4, splits=("seen",), seed=2, kinds=["memory"])["seen"]
    assert report["memory"] == 1.0 and report["greets_by_name"] == 0.0 and report["n_greets_by_name"] == 4
    assert introduction(specs[0]).messages == specs[0].messages[:2]


def test_a_model_that_never_calls_a_tool_scores_what_it_deserves():
    report = evaluate_skills(SilentClient(), per_kind=2, splits=("seen",), seed=1)["seen"]
    no_call_kinds = {"missing", "memory", "memory_open", "chitchat", "which", "not_offered"}
    specs = [s for kind in KINDS for s in make_skills(2, split="seen", seed=1, kinds=[kind])]
    no_call = [s for s in specs if not s.expected.calls]  # the no-call kinds, and own_tool's refusals
    assert {s.kind for s in no_call} >= no_call_kinds and {s.kind for s in no_call} <= no_call_kinds | {"own_tool"}
    assert report["right_tool"] == pytest.approx(len(no_call) / len(specs), abs=1e-4)
    assert report["calls_made"] == 0.0 and report["tool_call_valid"] == 0.0
    assert report["n_calls_made"] == len(specs) - len(no_call)
    assert report["args_exact"] == 0.0 and report["memory"] == 0.0 and report["answer_from_result"] == 0.0
    assert report["greets_by_name"] == 0.0
    assert report["tools_named"] == 0.0
    assert report["no_invention"] == 1.0 and report["ends_turn"] == 1.0
    assert report["kinds"]["chitchat"]["right_tool"] == 1.0
    assert report["kinds"]["not_offered"]["no_invention"] == 1.0


def test_answer_from_result_is_false_when_the_result_has_another_shape():
    # A real model may call a different tool than expected: its result (here a bare number) has no
    # field where the expected answer sits, which scores False instead of crashing the eval.
    from llmkit.course.skill_scores import answer_from_result
    from llmkit.course.skills import make_skills

    spec = next(s for s in make_skills(200, split="seen", seed=3) if s.expected.calls and s.expected.answer_paths
                and s.expected.answer_paths[0][:1] == ("*first*",))  # the path that once raised AttributeError
    transcript = [{"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "x", "input": {}}]},
                  {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "7",
                                                "is_error": False}]},
                  {"role": "assistant", "content": [{"type": "text", "text": "It is 7."}]}]
    assert answer_from_result(spec, transcript) is False


def test_run_one_measures_with_or_without_the_clients_constrained_decoding(tokenizer, one_thread):
    """A model scripted to call a tool that is not offered: the harness records that call with the
    constraint off, and a call to an offered tool with it on (the default, as a learner's client)."""
    import torch

    from llmkit.chat.client import Client
    from llmkit.course.skill_scores import calls_in, run_one
    from llmkit.model.transformer import ModelConfig
    from scripted_model import ScriptedModel

    spec = next(s for s in make_skills(10, split="seen", seed=1, kinds=["tool"]) if s.tools)
    prompt = render(tokenizer, spec.prompt, tools=spec.definitions, system=spec.system).ids
    script = tokenizer.encode('<|tool_call|>{"name": "not_offered", "input": {}}<|end_tool_call|>', allowed_special="all")
    torch.manual_seed(0)
    config = ModelConfig.llama(vocab_size=tokenizer.vocab_size, context_length=1024, d_model=32, n_layers=1, n_heads=2)
    client = Client.from_model(ScriptedModel(config, script, len(prompt)).eval(), tokenizer)
    free, _ = run_one(client, spec, max_tokens=30, max_iterations=1, constrain_tools=False)
    kept, _ = run_one(client, spec, max_tokens=30, max_iterations=1)
    assert [c["name"] for c in calls_in(free)][:1] == ["not_offered"]
    call = calls_in(kept)[0]  # the random arguments may run past max_tokens: then read the name off the text
    named = call["name"] or re.match(r'\{"name": "([^"]+)"', call["input"]).group(1)
    assert named in {t.name for t in spec.tools}


def test_batched_evals_run_the_same_greedy_conversations_as_one_at_a_time(tiny_llama, tokenizer, one_thread):
    """The evals stage runs conversations 8 at a time through the server's batching engine; on the same
    model they must come out as the one-at-a-time harness writes them (rare last-bit near-ties aside)."""
    from llmkit.chat.client import Client
    from llmkit.course.skill_scores import batched_runs, run_one

    client = Client.from_model(tiny_llama(tokenizer.vocab_size, context_length=1024), tokenizer)
    specs = [s for kind in ("tool", "memory", "chitchat") for s in make_skills(3, split="seen", seed=2, kinds=[kind])]
    alone = [run_one(client, spec, max_tokens=6) for spec in specs]
    seen = []
    together = batched_runs(client, specs, batch=4, max_tokens=6, progress=seen.append)
    assert seen == list(range(1, len(specs) + 1))
    assert sum(a == b for a, b in zip(alone, together)) >= len(specs) - 1, [a == b for a, b in zip(alone, together)]
    assert any(len(transcript) for transcript, _ in alone)  # the tiny model did write something
    report = evaluate_skills(client, per_kind=2, splits=("seen",), kinds=("tool", "chitchat"), max_tokens=6, batch=3)
    assert report["seen"]["n_right_tool"] == 4 and set(report["seen"]["kinds"]) == {"tool", "chitchat"}


class _Oracle:
    """A stand-in model whose logits pick ``target``'s next token, or any other token when ``wrong``."""

    def __init__(self, target: list[int], vocab: int, wrong: bool = False, wrong_at: frozenset = frozenset()):
        import torch

        self.target, self.vocab, self.wrong, self._weight = target, vocab, wrong, torch.zeros(1)
        self.wrong_at = wrong_at  # positions of ``target`` predicted wrong even when not ``wrong``

    def parameters(self):
        return iter([self._weight])

    def __call__(self, ids):
        import torch

        length = ids.shape[1]
        assert ids[0].tolist() == self.target[:length]  # the prefix is the rendered conversation
        logits = torch.zeros(1, length, self.vocab)
        for i in range(length):
            nxt = self.target[i + 1] if i + 1 < len(self.target) else 0
            logits[0, i, (nxt + 1) % self.vocab if self.wrong or i + 1 in self.wrong_at else nxt] = 1.0
        return logits


def test_tool_name_choice_is_one_for_a_model_that_predicts_the_name_and_zero_for_one_that_does_not(tokenizer):
    from llmkit.course.forced_scores import _first_call_name_positions, tool_name_choice, without_thinking

    spec = make_skills(1, split="unseen_phrasings_and_tools", seed=4, kinds=["tool"])[0]
    ids = without_thinking(spec).render(tokenizer).ids
    name = spec.expected.calls[0][0]
    positions = _first_call_name_positions(tokenizer, ids, ids.index(tokenizer.special_tokens["<|tool_call|>"]),
                                           name)
    spelled = b"".join(tokenizer.token_bytes(ids[p]) for p in positions)
    assert name.encode() + b'"' in spelled and len(spelled) <= len(name) + 12  # the name, its quotes, little else
    good = tool_name_choice(_Oracle(ids, tokenizer.vocab_size), tokenizer, [spec])
    bad = tool_name_choice(_Oracle(ids, tokenizer.vocab_size, wrong=True), tokenizer, [spec])
    assert (good["right"], bad["right"], good["n"]) == (1.0, 0.0, 1)
    assert good["chance"] == pytest.approx(1 / len(spec.tools))
    with pytest.raises(ValueError, match="calls a tool"):
        tool_name_choice(_Oracle(ids, tokenizer.vocab_size), tokenizer,
                         make_skills(1, split="seen", seed=0, kinds=["chitchat"]))


def _scripted_on(tokenizer, spec, call_names: list[str]):
    """A tiny model that writes ``spec``'s conversation with its calls naming ``call_names`` in turn
    (each token pushed far ahead of the rest): an oracle for a real model's interface."""
    import copy

    import torch

    from llmkit.model.transformer import ModelConfig
    from scripted_model import ScriptedModel

    messages, names = copy.deepcopy(spec.messages), iter(call_names)
    for message in messages:
        if message["role"] == "assistant" and isinstance(message["content"], list):
            for block in message["content"]:
                if block["type"] == "tool_use":
                    block["name"] = next(names)
    ids = render(tokenizer, messages, tools=spec.definitions, system=spec.system, add_generation_prompt=False).ids
    torch.manual_seed(0)
    config = ModelConfig.llama(vocab_size=tokenizer.vocab_size, context_length=len(ids) + 8, d_model=32,
                               n_layers=1, n_heads=2)
    return ScriptedModel(config, ids, 0).eval()


def test_name_choice_picks_the_tool_whose_whole_opening_the_model_writes(tokenizer):
    from llmkit.course.forced_scores import name_choice

    spec = next(s for s in make_skills(6, split="unseen_phrasings_and_tools", seed=4, kinds=["tool"])
                if len(s.tools) > 1)
    name = spec.expected.calls[0][0]
    other = next(t.name for t in spec.tools if t.name != name)
    good = name_choice(_scripted_on(tokenizer, spec, [name]), tokenizer, [spec])
    bad = name_choice(_scripted_on(tokenizer, spec, [other]), tokenizer, [spec])
    assert (good["right"], bad["right"], good["n"]) == (1.0, 0.0, 1)
    assert good["chance"] == pytest.approx(1 / len(spec.tools))
    with pytest.raises(ValueError, match="calls a tool"):
        name_choice(_scripted_on(tokenizer, spec, [name]), tokenizer,
                    make_skills(1, split="seen", seed=0, kinds=["chitchat"]))


def test_name_choice_scores_the_last_request_of_errands_not_the_first():
    """Errands call several tools in turn; the score is the expected call's, after the prompt."""
    from llmkit.course.forced_scores import name_choice
    from llmkit.course.skill_scores import calls_in

    tokenizer = Tokenizer.load(data_path("models", "base", "tokenizer.json"))

    def length(name: str) -> int:
        return len(tokenizer.encode(json.dumps({"name": name, "input": {}})))

    for spec in make_skills(40, split="seen", seed=2, kinds=["errands"]):
        earlier = [call["name"] for call in calls_in(spec.prompt)]
        expected = spec.expected.calls[0][0]
        # a wrong first call as long in tokens as the right one, so the scripted positions stay in step
        wrong = [t.name for t in spec.tools if t.name not in (expected, *earlier[:1])
                 and earlier and length(t.name) == length(earlier[0])]
        if wrong:
            break
    else:
        pytest.fail("no errands conversation with a same-length wrong first call")
    wrong_first = name_choice(_scripted_on(tokenizer, spec, [wrong[0]] + earlier[1:] + [expected]), tokenizer, [spec])
    wrong_last = name_choice(_scripted_on(tokenizer, spec, earlier + [wrong[0]]), tokenizer, [spec])
    assert (wrong_first["right"], wrong_last["right"]) == (1.0, 0.0)  # the first turn's call is only context


def test_without_thinking_takes_out_the_thinking_and_nothing_else():
    from llmkit.course.forced_scores import without_thinking

    specs = make_skills(12, split="seen", seed=3, kinds=["tool"])
    thinking = [s for s in specs if any(b["type"] == "thinking" for m in s.messages if m["role"] == "assistant"
                                        and isinstance(m["content"], list) for b in m["content"])]
    assert thinking, "no conversation of these has a thinking step"
    for spec in thinking:
        name = spec.expected.calls[0][0]
        plain = without_thinking(spec)
        assert plain.messages is not spec.messages and len(plain.messages) == len(spec.messages)
        blocks = [b for m in plain.messages if isinstance(m["content"], list) for b in m["content"]]
        assert all(b["type"] != "thinking" for b in blocks)
        assert [b["name"] for b in blocks if b["type"] == "tool_use"] == [name]  # the call is still there
        assert any(b["type"] == "thinking" for m in spec.messages  # the original kept
                   if isinstance(m["content"], list) for b in m["content"])


def test_argument_copy_sorts_values_by_whether_the_prompt_spells_them_in_the_same_tokens():
    """With GPT-4's pre-split a word the user typed after a space is other tokens than the same word in
    the call's JSON string; with the course's ``spaced`` pattern it is the same tokens."""
    from llmkit.course.forced_scores import argument_copy
    from llmkit.tokens.tokenizer import COURSE_SPECIAL_TOKENS

    specs = [s for s in make_skills(6, split="seen", seed=2, kinds=["letters"]) if s.expected.calls]
    documents = [m["content"] for s in make_skills(60, split="seen", seed=9) for m in s.prompt
                 if isinstance(m["content"], str)]
    gpt4, spaced = (Tokenizer.train(documents, 600, pattern=p, special_tokens=COURSE_SPECIAL_TOKENS)
                    for p in ("gpt4", "spaced"))
    for spec in specs:
        for tok in (gpt4, spaced):
            ids = spec.render(tok).ids
            good = argument_copy(_Oracle(ids, tok.vocab_size), tok, [spec])
            bad = argument_copy(_Oracle(ids, tok.vocab_size, wrong=True), tok, [spec])
            assert good["in_prompt"]["n"] + good["respelled"]["n"] == 2  # the word and the letter
            assert all(g["right"] == 1.0 for g in good.values() if g["n"])
            assert all(g["right"] == 0.0 for g in bad.values() if g["n"])
        # the word follows a space in the question: other tokens under GPT-4's split, the same under ours
        assert argument_copy(_Oracle(spec.render(gpt4).ids, gpt4.vocab_size), gpt4, [spec])["respelled"]["n"] >= 1
        assert argument_copy(_Oracle(spec.render(spaced).ids, spaced.vocab_size), spaced, [spec])["in_prompt"]["n"] == 2


def test_argument_copy_says_whether_a_miss_was_the_first_token_or_a_later_one(tokenizer):
    from llmkit.course.forced_scores import argument_copy, argument_values

    tok = tokenizer
    specs = [s for s in make_skills(12, split="seen", seed=4, kinds=["weather", "tool"]) if s.expected.calls]
    values = list(argument_values(tok, specs))
    spec, ids, positions, _ = next(v for v in values if len(v[2]) > 1)  # a value of two tokens or more
    firsts = frozenset(p for s, _, ps, _ in values if s is spec for p in ps[:1])
    laters = frozenset(p for s, _, ps, _ in values if s is spec for p in ps[1:])
    first_missed = argument_copy(_Oracle(ids, tok.vocab_size, wrong_at=firsts), tok, [spec])["in_prompt"]
    assert (first_missed["right"], first_missed["first_token"], first_missed["later_tokens"]) == (0.0, 0.0, 1.0)
    later_missed = argument_copy(_Oracle(ids, tok.vocab_size, wrong_at=laters), tok, [spec])["in_prompt"]
    assert later_missed["first_token"] == 1.0 and later_missed["later_tokens"] == 0.0 and later_missed["n_later"] >= 1


def test_argument_values_point_at_the_expected_call_even_after_earlier_calls(tokenizer):
    """An errand's expected call is its last turn's: the values are found there, not in the first call."""
    from llmkit.course.forced_scores import argument_values
    from llmkit.course.toolgen import spoken

    specs = make_skills(12, split="unseen_tools", seed=11, kinds=["errands"])
    found = list(argument_values(tokenizer, specs))
    assert len({id(spec) for spec, *_ in found}) >= 6
    for spec, ids, positions, _ in found:
        said = [spoken(v) for v in spec.expected.calls[0][1].values()]
        assert tokenizer.decode(ids[positions[0]:positions[-1] + 1]) in said


@pytest.mark.parametrize("split", ["train", "unseen_values", "unseen_phrasings_and_tools"])
def test_every_call_is_preceded_by_the_words_of_its_tool_line(split):
    """The thinking before each call is words of the request that the chosen tool's line has (and,
    for a generated tool, no other offered line has); it does not spell the name (the call does)."""
    from llmkit.chat.template import tool_line

    specs = make_skills(60, split=split, seed=4, kinds=["tool", "weather", "letters", "arithmetic", "multi"])
    checked = 0
    for spec in specs:
        lines = {t.name: tool_line(t.definition()).lower() for t in spec.tools}
        request = " ".join(m["content"] for m in spec.messages if m["role"] == "user" and isinstance(m["content"], str))
        for message in spec.messages:
            if message["role"] != "assistant" or not isinstance(message["content"], list):
                continue
            blocks = message["content"]
            for before, block in zip(blocks, blocks[1:]):
                if block["type"] not in ("tool_use", "server_tool_use"):
                    continue
                assert before["type"] == "thinking", "a call without its lookup"
                key, name = before["thinking"], block["name"]
                assert " -> " not in key and key.lower() in lines[name]
                if name not in COURSE_TOOLS:
                    assert key.lower() in request.lower()  # the words come from the request
                    assert all(key.lower() not in line for other, line in lines.items() if other != name)
                checked += 1
    assert checked >= 40


def test_a_lookup_quotes_only_words_the_tool_line_has():
    from llmkit.course.lookups import lookup_note
    from llmkit.course.tools import get_weather

    assert lookup_note(get_weather, "weather") == "weather -> get_weather"
    with pytest.raises(ValueError, match="tool line"):
        lookup_note(get_weather, "umbrella")


@pytest.mark.parametrize("split", SPLITS)
def test_not_offered_asks_a_course_request_with_its_tool_left_out(split):
    from llmkit.course.skills import COURSE_SUBJECTS, COURSE_TOOLS

    subjects = []
    for c in make_skills(60, split=split, seed=5, kinds=["not_offered"]):
        subject = c.expected.facts["subject"]
        intent = next(i for i, s in COURSE_SUBJECTS.items() if s == subject)
        assert COURSE_TOOLS[intent].name not in {t.name for t in c.tools}
        assert not calls_in(c.messages) and c.expected.no_invention and subject in final_text(c.messages)
        subjects.append(intent)
    assert set(subjects) == set(COURSE_TOOLS)  # every course intent turns up
    other_course_tools = [c for c in make_skills(60, split=split, seed=5, kinds=["not_offered"])
                          if any(t in COURSE_TOOLS.values() for t in c.tools)]
    assert len(other_course_tools) >= 20  # often beside the other course tools: the contrast it teaches
