"""The raw material of the course's synthetic conversations: the splits and their values (cities,
names, words, numbers), the question and answer templates, the ``Conversation`` type, and the two
steps every tool conversation shares (offer some tools, call one and read its real result).

Held-out values: cities and names come from disjoint lists; words and numbers are assigned to a
split by a SHA-256 hash of their text (``split_of``), so the held-out evaluation asks about
values the model never saw in training. ``llmkit.course.conversations`` builds the conversations.
"""
from __future__ import annotations

import functools
import hashlib
import random
from dataclasses import dataclass, field

from llmkit.chat.template import Rendered, render
from llmkit.chat.tools import run_tool_call
from llmkit.course.react import OBSERVATION
from llmkit.course.tools import EXAMPLE_TOOLS, get_weather

SPLITS = ("train", "heldout")
UMBRELLA_FROM_PERCENT = 50  # take an umbrella when the chance of rain is at least this

# Short names only: each costs a few tokens three times over (question, call, result).
CITIES = {
    "train": ["Pune", "Paris", "Rome", "London", "Delhi", "Cairo", "Lima", "Lagos", "Seoul", "Kyiv", "Riga",
              "Bern", "Accra", "Milan", "Lyon", "Porto", "Perth", "Boston", "Denver", "Austin", "Naples",
              "Venice", "Prague", "Nice", "York", "Goa"],
    "heldout": ["Warsaw", "Turin", "Tunis", "Sofia", "Rabat", "Minsk", "Leeds", "Lille", "Kabul", "Kandy",
                "Ghent", "Giza", "Doha", "Baku", "Bath", "Cork", "Bari", "Pisa", "Oxford", "Dover"],
}
NAMES = {
    "train": ["Ada", "Alan", "Grace", "Linus", "Ravi", "Omar", "Lena", "Maya", "Noor", "Tom", "Ines", "Leo",
              "Sam", "Kate", "Jack", "Lucy", "Paul", "Rita", "Tara", "Ben", "Sara", "Ali", "Raj", "Juliet"],
    "heldout": ["Ivy", "Dev", "Mira", "Felix", "Anya", "Kofi", "Rosa", "Sami", "Nina", "Theo", "Eva", "Finn",
                "Hana", "Kai", "Zoe", "Viola"],
}
REAL_WORDS = {
    "train": ["strawberry", "banana", "raspberry", "blueberry", "cherry", "apple", "lemon", "orange", "pepper",
              "mississippi", "bookkeeper", "committee", "balloon", "coffee", "butterfly", "parallel",
              "assessment", "tomorrow", "umbrella", "letter", "bottle", "kitten", "rabbit", "carrot", "puzzle",
              "success", "address", "grammar"],
    "heldout": ["cranberry", "gooseberry", "elderberry", "broccoli", "tennessee", "accommodate", "occurrence",
                "possession", "hippopotamus", "programmer", "embarrass", "millennium", "necessary", "giraffe",
                "spaghetti", "ungarbarrylirryburirira"],
}
SYLLABLES = ["ba", "bar", "bu", "da", "ga", "gar", "ke", "li", "lir", "lo", "ma", "mu", "ni", "pe", "ra",
             "ri", "ro", "ry", "se", "ta", "tu", "un", "we", "zo"]
INVENTED_PER_SPLIT = {"train": 24, "heldout": 12}
NUMBER_RANGE = range(2, 1000)
SYSTEM_PROMPTS = [None, "You are a helpful assistant.", "You are a helpful assistant. Answer briefly."]

WEATHER_QUESTIONS = {  # question -> answer style: umbrella advice, or a short report
    "Will it rain in {city} {day}? Should I take an umbrella?": "umbrella",
    "Do I need an umbrella in {city} {day}?": "umbrella",
    "Is it going to rain in {city} {day}?": "umbrella",
    "What's the weather in {city} {day}?": "report",
    "What will the weather be like in {city} {day}?": "report",
}
WEATHER_THINKING = ["{Day}'s weather isn't in my training data.", "I can't know {day}'s weather; I'll check."]
LETTER_THINKING = ["I see tokens, not letters: the tool counts exactly.", "Counting letters is a job for the tool."]
ARITHMETIC_THINKING = ["Exact arithmetic is a job for the calculator.",
                       "I'd only guess the digits: use the calculator."]
LETTER_QUESTIONS = ["How many {letter}'s are in {word}?", "How many times does {letter} appear in {word}?",
                    "Count the letter {letter} in {word}."]
ARITHMETIC_QUESTIONS = ["What is {expression}?", "Calculate {expression}.", "What's {expression}?"]
EXPRESSIONS = ["{a} + {b}", "{a} - {b}", "{a} * {b}", "{a} / {b}", "{a} * {b} + {c}", "({a} + {b}) * {c}"]
INTRODUCTIONS = ["My name is {name}.", "Hi, I'm {name}.", "Hello! Call me {name}."]
NAME_QUESTIONS = ["What's my name?", "Do you remember my name?", "What did I say my name was?"]
DIRECT = {  # (question, answer, a word the answer must contain)
    "train": [("Hello!", "Hello! How can I help?", "help"),
              ("Hi there.", "Hi! What can I do for you?", "Hi"),
              ("Who wrote Hamlet?", "William Shakespeare wrote Hamlet.", "Shakespeare"),
              ("Who wrote Macbeth?", "William Shakespeare wrote Macbeth.", "Shakespeare"),
              ("What is a token?", "A piece of text, often part of a word, that a model reads as one unit.", "text"),
              ("Do you remember our last chat?", "No. I only see the messages sent in this conversation.", "No"),
              ("Can you run code?", "No. I only write text; the harness runs tools for me.", "No"),
              ("Thank you!", "You're welcome!", "welcome"),
              ("What does a tokenizer do?", "It splits text into tokens and gives each token an id.", "tokens")],
    "heldout": [("Good morning!", "Good morning! How can I help?", "help"),
                ("Who wrote Othello?", "William Shakespeare wrote Othello.", "Shakespeare"),
                ("Who wrote King Lear?", "William Shakespeare wrote King Lear.", "Shakespeare"),
                ("What is a language model?", "A program that predicts the next token of a text.", "token"),
                ("Thanks a lot.", "You're welcome!", "welcome"),
                ("Do you learn from our chats?", "No. My weights don't change while we talk.", "No")],
}


@dataclass(frozen=True)
class Expected:
    """What a correct assistant does, for the evaluator.

    ``tool``/``tool_input``: the call it should make first (``None``: answer without a tool).
    ``answer_values``: strings its final answer must contain (numbers exactly as the tool
    returned them, a name). ``no_invention``: the answer must contain no digit at all, because
    nothing it was given holds the number. ``facts``: the values behind it (city, the tool's
    result, umbrella yes/no, ...).
    """

    tool: str | None = None
    tool_input: dict | None = None
    answer_values: tuple[str, ...] = ()
    no_invention: bool = False
    facts: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Conversation:
    """One synthetic conversation: Messages-API ``messages`` (ending with the assistant's final
    answer), the tool definitions offered, the system prompt, its kind and split, and what a
    correct assistant does (``expected``)."""

    kind: str
    split: str
    messages: list[dict]
    tools: list[dict] | None
    system: str | None
    expected: Expected

    @property
    def prompt(self) -> list[dict]:
        """The messages an evaluation starts from: everything up to the last question the user
        typed (the model must then write the rest: call tools, answer)."""
        typed = [i for i, m in enumerate(self.messages) if m["role"] == "user" and has_text(m)
                 and not (self.kind == "react" and m["content"].startswith(OBSERVATION))]  # the harness wrote that
        last_question = max(typed)
        return self.messages[: last_question + 1]

    @property
    def tool_results(self) -> list[dict]:
        """The ``tool_result`` blocks in the conversation, in order (what the harness sent back)."""
        return [block for message in self.messages if message["role"] == "user" and isinstance(message["content"], list)
                for block in message["content"] if block.get("type") == "tool_result"]

    @property
    def before_answer(self) -> list[dict]:
        """Every message but the final answer: the question and any tool call with its real result,
        so that only the answer is left for the model to write."""
        return self.messages[:-1]

    def render(self, tokenizer) -> Rendered:
        """The whole conversation as training ids and loss mask."""
        return render(tokenizer, self.messages, tools=self.tools, system=self.system, add_generation_prompt=False)


# ---------------------------------------------------------------------------------------------- values
def split_of(value: str) -> str:
    """The split a word or number belongs to, from a SHA-256 hash of its text (about 1 in 4 held out)."""
    return "heldout" if hashlib.sha256(f"llmkit-split|{value}".encode()).digest()[0] < 64 else "train"


def numbers(split: str) -> list[int]:
    """The operands arithmetic questions of ``split`` draw from (disjoint between splits)."""
    return [k for k in NUMBER_RANGE if split_of(str(k)) == check_split(split)]


def words(split: str) -> list[str]:
    """Words for letter counting: real words plus invented ones that no model can have memorised
    (the same list every time: it defines the split, it doesn't depend on a seed)."""
    return list(_words(check_split(split)))


@functools.cache
def _words(split: str) -> tuple[str, ...]:
    fixed = REAL_WORDS[split]
    every_fixed = {w for ws in REAL_WORDS.values() for w in ws}
    rng = random.Random(f"llmkit-invented-words|{split}")
    invented: list[str] = []
    while len(invented) < INVENTED_PER_SPLIT[split]:
        word = "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(4, 8)))
        if split_of(word) == split and word not in every_fixed and word not in invented:
            invented.append(word)
    return tuple(fixed + invented)


def check_split(split: str) -> str:
    if split not in SPLITS:
        raise ValueError(f"split must be 'train' or 'heldout', got {split!r}")
    return split


def has_text(message: dict) -> bool:
    content = message["content"]
    return isinstance(content, str) or any(block.get("type") == "text" for block in content)


# ---------------------------------------------------------------------------------------------- shared steps
def offer(rng: random.Random, needed, *, others: bool = True) -> list[dict]:
    """The needed tool plus, at random, some of the other example tools (in their usual order), so
    the model learns to pick the right one. get_weather comes only with weather questions, alone:
    its result is long, and with more tools the conversation would not fit the first course model's
    256 tokens (this data is kept as it was; the skill data, ``llmkit.course.skills``, offers 1-5 tools)."""
    chosen = [t for t in EXAMPLE_TOOLS if t is needed or (others and t is not get_weather and rng.random() < 0.5)]
    return [t.definition() for t in chosen]


def call_and_result(thinking: str | None, tool, tool_input: dict, call_id: str = "toolu_0") -> tuple[list[dict], str]:
    """The assistant's thinking (None: none) + tool call, and the user message carrying the real tool's result."""
    result = run_tool_call(EXAMPLE_TOOLS, tool.name, tool_input, tool_use_id=call_id)
    if result["is_error"]:
        raise AssertionError(f"the example call {tool.name}({tool_input}) failed: {result['content']}")
    thought = [] if thinking is None else [{"type": "thinking", "thinking": thinking}]
    call = {"role": "assistant", "content": [
        *thought, {"type": "tool_use", "id": call_id, "name": tool.name, "input": tool_input}]}
    return [call, {"role": "user", "content": [result]}], result["content"]
