"""The pieces the phrasing grammars compose: one set for training, a second written separately.

``TRAIN`` and ``HELDOUT`` share no piece (tests/test_phrasing.py proves it, and that no three-word
run of a training form occurs in a held-out sentence). ``later_forms`` were written after the
recipe's pretraining corpus was built: the skill conversations use them, the corpus's plain-text
dialogues do not, so the corpus a fresh checkout remakes is the text the base was trained on.
``wider_*`` pieces were written after the recipe's skills stage was trained (more word orders, the
value before its name, more introductions): stages that set ``wider_phrasings`` use them. Slots: ``{city}``, ``{day}``, ``{word}``,
``{letter}``, ``{expression}``, ``{topic}``, ``{subject}``, ``{args}``, ``{name}``, ``{play}``,
``{first}``/``{second}`` (two whole requests, for the multi-intent form), ``{subjects}`` (several
things to find a tool for).
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Pieces:
    """Everything one split's grammars are made of."""

    forms: dict[str, list[str]]
    before: dict[str, list[str]]
    after: dict[str, list[str]]
    openers: list[str]
    polite: list[str]
    closers: list[str]
    arg_styles: list[str] = field(default_factory=list)  # how one argument is said: {words}, {value}
    arg_joiners: list[str] = field(default_factory=list)
    chatter: list[str] = field(default_factory=list)  # talk around a request; each {thing} gets a tool-like word
    later_forms: dict[str, list[str]] = field(default_factory=dict)  # forms the recipe's corpus was built without
    wider_forms: dict[str, list[str]] = field(default_factory=dict)  # written after the skills stage was trained
    wider_arg_styles: list[str] = field(default_factory=list)
    wider_arg_joiners: list[str] = field(default_factory=list)

    def argument_ways(self, wider: bool) -> tuple[list[str], list[str]]:
        """The styles and joiners arguments are said in: the wider ones only where asked for."""
        if not wider:
            return self.arg_styles, self.arg_joiners
        return self.arg_styles + self.wider_arg_styles, self.arg_joiners + self.wider_arg_joiners


TRAIN = Pieces(
    forms={
        "weather": [
            "Will it rain in {city} {day}?", "Do I need an umbrella in {city} {day}?",
            "What's the weather in {city} {day}?", "What will the weather be like in {city} {day}?",
            "Is it going to be sunny in {city} {day}?", "{city} weather {day}?", "Umbrella for {city} {day}?",
            "How hot will it get in {city} {day}?", "Should I pack a raincoat for {city} {day}?",
            "{day}, {city}: rain or shine?", "Forecast for {city} {day}, please.",
            "Tell me the forecast for {city} {day}.", "Any rain expected in {city} {day}?",
            "Check the weather in {city} for {day}.", "How's the weather looking in {city} {day}?",
        ],
        "letters": [
            "How many {letter}'s are in {word}?", "How many times does {letter} appear in {word}?",
            "Count the letter {letter} in {word}.", "Count the {letter}'s in {word}.",
            "How often does the letter {letter} occur in {word}?", "In {word}, how many {letter}'s are there?",
            "{word}: how many {letter}'s?", "Number of {letter}'s in {word}?",
            "Tell me how many {letter}'s the word {word} has.", "Does {word} contain the letter {letter}, and how many times?",
            "How many letter {letter}'s does {word} have?", "Count every {letter} in the word {word}.",
        ],
        "arithmetic": [
            "What is {expression}?", "Calculate {expression}.", "What's {expression}?", "Compute {expression}.",
            "Work out {expression} for me.", "{expression} = ?", "How much is {expression}?",
            "Can you calculate {expression}?", "Solve {expression}.", "What does {expression} come to?",
            "Quick sum: {expression}", "Evaluate {expression}.",
        ],
        "search": [
            "Search for {topic}.", "Look up {topic}.", "Find something about {topic}.",
            "What do the documents say about {topic}?", "Can you search {topic}?",
            "I'd like to read about {topic}.", "Search the docs for {topic}.", "Find me info on {topic}.",
        ],
        "tool": [
            "What's the {subject} for {args}?", "Look up the {subject} with {args}.", "Get me the {subject}: {args}.",
            "I need the {subject}, {args}.", "Can you find the {subject}? {args}.", "{args}. What is the {subject}?",
            "Check the {subject} for {args}.", "Fetch the {subject} using {args}.", "Tell me the {subject} ({args}).",
            "Please get the {subject} where {args}.", "Find out the {subject}. Details: {args}.",
            "What {subject} do we get for {args}?",
        ],
        "tool_bare": [
            "What's the {subject}?", "Get me the {subject}.", "Tell me the current {subject}.",
            "Look up the {subject}.", "Can you check the {subject}?", "I need the {subject}.",
            "What is the {subject} right now?", "Fetch the {subject}.",
        ],
        "memory_intro": [
            "My name is {name}.", "Hi, I'm {name}.", "Hello! Call me {name}.", "I'm called {name}.",
            "Hey, {name} here.", "Call me {name}.", "Name's {name}.", "Hi there, my name's {name}.",
            "You can call me {name}.", "I am {name}.", "This is {name} speaking.", "Good day, I'm {name}.",
        ],
        "memory_question": [
            "What's my name?", "Do you remember my name?", "What did I say my name was?", "Who am I?",
            "What name did I give you?", "Can you tell me my name?", "What am I called?",
            "Remind me, what's my name?", "Say my name.", "Which name did I tell you?",
        ],
        "greet": ["Hello!", "Hi there.", "Hey!", "Good morning.", "Hi, how are you?", "Hello, anyone there?",
                  "Hey there, how's it going?"],
        "thanks": ["Thank you!", "Thanks a lot.", "Cheers, that helped.", "Thanks!", "Much appreciated.",
                   "Great, thank you."],
        "abilities": ["What can you do?", "How can you help me?", "What are you able to do?",
                      "Can you run code?", "Do you remember our last chat?", "What are you?"],
        "author": ["Who wrote {play}?", "Who is the author of {play}?", "{play} was written by whom?",
                   "Who penned {play}?"],
        "multi": ["{first} {second}", "{first} Also, {second}", "{first} And {second}",
                  "{first} Then: {second}", "Two things. {first} {second}", "{first} Plus, {second}"],
        "which_tools": [
            "Which tool would you use for each of these: {subjects}?", "For each of {subjects}, which tool gives it?",
            "Name the tool for each one: {subjects}.", "What tools answer {subjects}?",
            "Match a tool to each of these: {subjects}.", "Which of your tools covers {subjects}? One per item.",
            "Before you look anything up: which tools would you call for {subjects}?",
            "List the right tool for {subjects}.", "{subjects}: which tool for each?",
        ],
    },
    before={
        "weather": ["I'm heading out later.", "We have a picnic planned.", "My flight lands soon.",
                    "I'm going for a long walk.", "Planning a day trip."],
        "letters": ["It's for a word game.", "My kid asked me this.", "Settling a bet here.",
                    "Spelling question."],
        "arithmetic": ["Doing my budget.", "Homework check.", "I'm splitting a bill.", "Math time."],
        "search": ["I'm curious.", "For a school project.", "Something I wondered about."],
        "tool": ["I'm working on a report.", "Need this for a form.", "Quick lookup.", "For my records."],
        "tool_bare": ["I'm working on a report.", "Quick lookup."],
        "memory_intro": ["Nice to meet you.", "First time here."],
        "memory_question": ["Quick test.", "Let's see if you were listening."],
    },
    after={
        "weather": ["Thinking about what to wear.", "I don't want to get wet.", "Thanks in advance.",
                    "It matters for my plans."],
        "letters": ["Count carefully.", "Be exact."],
        "arithmetic": ["Exact answer please.", "No rounding."],
        "search": ["Keep it short.", "Just the main point."],
        "tool": ["Be precise.", "Thanks in advance.", "It's urgent."],
        "tool_bare": ["Thanks in advance."],
        "memory_intro": ["Nice to meet you.", "Glad to be here."],
    },
    openers=["Hi!", "Hey,", "Hello.", "Quick question:", "Okay,", "So,", "Hmm,", "Yo,", "Good morning!",
             "Excuse me,"],
    polite=["Please", "Could you tell me:", "Can you help?", "Kindly"],
    closers=["Thanks!", "Thank you.", "Cheers.", "Appreciate it.", "Ta."],
    arg_styles=["{words} {value}", "{words}: {value}", "{words} = {value}", "the {words} is {value}",
                "{words} set to {value}"],
    arg_joiners=[", ", " and ", "; "],
    chatter=["My {thing} broke again.", "The {thing} meeting ran late.", "We're out of {thing}.",
             "Someone mentioned {thing} earlier.", "I was just reading about {thing}.", "Our {thing} team needs this.",
             "It's for the {thing} project.", "Busy week with the {thing}.", "The {thing} and the {thing} are both ready.",
             "I left my {thing} at home.", "Ignore the {thing} for now.", "Not about {thing}, by the way.",
             "My boss loves {thing}.", "Sorry, the {thing} distracted me.", "Back from the {thing} fair.",
             "Writing a note on {thing} and {thing}.", "This {thing} business is confusing.",
             "After that I'll check on {thing}.", "We talked about {thing} all morning.", "The {thing} can wait."],
    wider_forms={
        "weather": [
            "Is {city} wet {day}?", "{city} {day}: do I take a coat?", "Need to know if it rains in {city} {day}.",
            "Will {city} see rain {day}?", "What are the chances of rain in {city} {day}?",
            "Going to {city} {day}. Rain?", "Sunny or rainy in {city} {day}?", "Is {day} dry in {city}?",
            "What should I expect from the weather in {city} {day}?", "Temperature in {city} {day}?",
            "Do you know if {city} gets rain {day}?", "Rain in {city} {day}, yes or no?",
        ],
        "letters": [
            "How many {letter}'s does {word} contain?", "Letter count: {letter} in {word}.",
            "Find how many times {letter} shows up in {word}.", "{letter} in {word}: how many?",
            "What's the number of {letter}'s in the word {word}?", "Count up the {letter}'s of {word}.",
            "Check how many {letter}'s {word} has.", "The word {word}: count its {letter}'s.",
            "Could you count {letter} in {word}?", "Occurrences of {letter} in {word}?",
        ],
        "arithmetic": [
            "Add this up: {expression}", "{expression}, what do you get?", "Do the math: {expression}.",
            "I need {expression} worked out.", "What comes out of {expression}?", "Answer to {expression}?",
            "Help me with {expression}.", "Total of {expression}?", "Give me {expression}.",
        ],
        "search": [
            "Look into {topic}.", "What's known about {topic}?", "Search up {topic} for me.",
            "Get me something on {topic}.", "Information about {topic}?", "Any docs on {topic}?",
            "Check the documents for {topic}.", "Research {topic}.",
        ],
        "memory_intro": [
            "People call me {name}.", "Everyone calls me {name}.", "My friends call me {name}.", "It's {name}.",
            "I'm {name}, by the way.", "Let me introduce myself: {name}.", "My first name is {name}.",
            "Put me down as {name}.", "{name}, that's me.", "Remember me as {name}.", "Me? I'm {name}.",
            "They named me {name}.", "{name} here, hello.", "Hello, {name} speaking.",
        ],
        "memory_question": [
            "Do you know who I am?", "Have you forgotten my name already?", "Tell me my name.",
            "Whose name did I mention?", "What should you call me?", "Which name was mine?",
            "Repeat my name back to me.", "What name do you have for me?", "Who did I say I am?",
            "My name, do you still have it?",
        ],
        "multi": ["{first} Next, {second}", "{first} After that, {second}", "{first} Oh, and {second}",
                  "{first} Besides, {second}", "{first} Also: {second}", "First: {first} Second: {second}",
                  "{first} Another thing: {second}", "{first} One more: {second}", "{first} Secondly, {second}"],
        "tool": [
            "Produce the {subject} from {args}.", "Need the {subject}; {args}.", "{args} -- I need the {subject}.",
            "Compute the {subject} (with {args}).", "Let me have the {subject}. Use {args}.",
            "From {args}, tell me the {subject}.", "I'm after the {subject}: {args}.",
            "What would the {subject} be for {args}?", "Can I have the {subject} for {args}?",
            "{args}. I need to know the {subject}.", "The {subject}? {args}.", "Please look up the {subject}, {args}.",
        ],
    },
    wider_arg_styles=["{value} for {words}", "{value} is the {words}", "{words} of {value}", "{value} ({words})",
                      "{words} equal to {value}", "take {value} for {words}", "{words} should be {value}",
                      "where {words} is {value}", "{words}={value}", "{value} for the {words}", "with {words} {value}",
                      "{words} '{value}'", "{value}, that's the {words}", "set {words} to {value}",
                      "{words} at {value}", "my {words} is {value}"],
    wider_arg_joiners=[", and ", " with ", ". ", " - ", ", also "],
    later_forms={
        "tool": [
            "Hand over the {subject} for {args}.", "Find the {subject} with {args}.", "Read me the {subject} for {args}.",
            "Report the {subject}: {args}.", "I'd like the {subject} for {args}.", "Could you get the {subject}? {args}.",
            "Work out the {subject} from {args}.", "Query the {subject} for {args}.",
            "Do you know the {subject} for {args}?", "Let me know the {subject} when {args}.",
            "Any idea what the {subject} is for {args}?", "I want to know the {subject}, {args}.",
            "Send me the {subject} - {args}.", "With {args}, what is the {subject}?", "For {args}, find the {subject}.",
            "Return the {subject} for {args}.", "The {subject} for {args}, please.", "{subject} for {args}?",
            "How about the {subject} with {args}?", "{args} - what's the {subject}?",
        ],
        "tool_bare": [
            "Hand over the {subject}.", "Find the {subject}.", "Read me the {subject}.", "Report the {subject}.",
            "I'd like the {subject}.", "Do you know the {subject}?", "The {subject}, please.", "{subject}?",
            "Any idea what the {subject} is?", "Query the {subject}.",
        ],
    },
)

HELDOUT = Pieces(
    forms={
        "weather": [
            "Umbrella or sunglasses in {city} {day}?", "Is rain on the cards for {city} {day}?",
            "Give me {city}'s outlook for {day}.", "{city}, {day}: wet or dry?",
            "Am I getting soaked in {city} {day}?", "What's the sky doing over {city} {day}?",
            "Rain check for {city} {day}.", "I wonder if {city} stays dry {day}.",
        ],
        "letters": [
            "Tally up the {letter}'s within {word}.", "{word} holds how many {letter}'s?",
            "I wonder how many {letter}'s live in {word}.", "Spell out {word} and total its {letter}'s.",
            "What's the {letter} tally for {word}?", "Give me the count of {letter} inside {word}.",
        ],
        "arithmetic": [
            "Crunch {expression}.", "Figure {expression} out.", "I wonder what {expression} gives.",
            "Result of {expression}?", "Run the numbers on {expression}.", "Tell me {expression}, exactly.",
        ],
        "search": [
            "Dig up notes on {topic}.", "Anything written on {topic}?", "Browse for {topic}.",
            "Hunt down {topic} in the notes.",
        ],
        "tool": [
            "Pull up the {subject} given {args}.", "{args} -- so, the {subject}?",
            "I wonder about the {subject}; {args}.", "Retrieve the {subject} (use {args}).",
            "Show me the {subject} based on {args}.", "Grab the {subject}, given {args}.",
        ],
        "tool_bare": ["Pull up the {subject}.", "Show me the {subject} as it stands.", "Grab the {subject}.",
                      "Retrieve the {subject} now."],
        "memory_intro": ["Folks know me as {name}.", "{name}'s the name.", "Greetings, I go by {name}.",
                         "Pleased to meet you, I'm known as {name}.", "The name is {name}."],
        "memory_question": ["Got my name stored?", "Whom are you talking to?", "Recall my name for me.",
                            "Still know what I'm called?", "Tell me who I said I was."],
        "greet": ["Greetings!", "Howdy.", "Morning, friend.", "Hiya!"],
        "thanks": ["Many thanks.", "Much obliged.", "Ta very much.", "You've been helpful."],
        "abilities": ["Which tasks suit you?", "Tell me about yourself.", "Do you learn from our chats?"],
        "author": ["Whose pen produced {play}?", "Name the writer of {play}."],
        "multi": ["{first} Moreover, {second}", "{first} On top of that, {second}", "{first} Separately, {second}"],
        "which_tools": [
            "Pair every item here with its function: {subjects}.", "I'm curious which helpers handle {subjects}.",
            "Point me to the proper function per item: {subjects}.", "Sort out a helper for {subjects}, please.",
            "{subjects} -- what handles these?",
        ],
    },
    before={
        "weather": ["Off to the market soon.", "Laundry day today.", "Cycling to work."],
        "letters": ["Puzzle night here.", "Crossword help needed."],
        "arithmetic": ["Balancing accounts.", "Checking an invoice."],
        "search": ["Out of interest."],
        "tool": ["Filling a spreadsheet.", "Part of an audit."],
        "tool_bare": ["Filling a spreadsheet."],
        "memory_intro": ["Long-time reader."],
        "memory_question": ["Memory test."],
    },
    after={
        "weather": ["Deciding on shoes.", "Much obliged."],
        "letters": ["Precision matters."],
        "arithmetic": ["Precision matters."],
        "search": ["Brief is fine."],
        "tool": ["Precision matters.", "Much obliged."],
        "tool_bare": ["Much obliged."],
        "memory_intro": ["Looking forward to it."],
    },
    openers=["Greetings.", "Right then,", "Well,", "Listen,", "Ahoy!", "Alright,"],
    polite=["If possible,", "Would you mind:", "Be a dear:"],
    closers=["Much obliged.", "Many thanks.", "Ta very much."],
    arg_styles=["{value} as the {words}", "{words} -> {value}", "using {value} for the {words}",
                "{words} being {value}"],
    arg_joiners=[" plus ", " & ", " / "],
    chatter=["Yesterday the {thing} flooded.", "Between us, {thing} bores me.", "Scribbling about {thing} in a notebook.",
             "Our neighbour sells {thing}.", "Forget the {thing} and the {thing}.", "Heard a podcast on {thing}.",
             "Stuck behind a {thing} truck.", "Grandma knits {thing} covers."],
)

# Values and replies the skill conversations use as they are (``llmkit.course.skills``).
PLAYS = ["Hamlet", "Macbeth", "Othello", "King Lear", "Romeo and Juliet", "The Tempest", "Twelfth Night",
         "Much Ado About Nothing", "As You Like It", "Julius Caesar", "Coriolanus", "Cymbeline", "Henry V",
         "Richard III", "The Winter's Tale", "Measure for Measure", "Titus Andronicus", "Pericles"]
CHITCHAT_ANSWERS = {
    "greet": ["Hello! How can I help?", "Hi! What can I do for you?"],
    "thanks": ["You're welcome!", "Glad to help."],
    "abilities": ["I'm a small language model: I answer in text and call the tools I'm offered. "
                  "I don't remember other chats."],
}
