"""The values conversations are about: cities, names, words, codes, numbers, dates, real and invented.

A small model given 26 cities memorises "Pune -> 31%" instead of learning to copy the city from
the question into the call. Large pools of real values plus values invented per example (new
syllable strings, new codes, new numbers) leave copying as the only way to be right.

Every value belongs to one split by a SHA-256 hash of its text (``value_split``): "train" values
for training and the ``seen`` evaluation, "heldout" values for ``unseen_values`` and
``unseen_phrasings_and_tools``. An invented value is drawn until its hash puts it in the asked
split, so no seed can ever leak a held-out value into training.
"""
from __future__ import annotations

import hashlib
import random

VALUE_SPLITS = ("train", "heldout")
HELDOUT_SHARE = 64  # of 256: a quarter of every pool is held out

REAL_CITIES = """Pune Paris Rome London Delhi Cairo Lima Lagos Seoul Kyiv Riga Bern Accra Milan Lyon Porto Perth
Boston Denver Austin Naples Venice Prague Nice York Goa Oslo Warsaw Turin Tunis Sofia Rabat Minsk Leeds Lille Kabul
Kandy Ghent Giza Doha Baku Bath Cork Bari Pisa Oxford Dover Madrid Lisbon Dublin Berlin Munich Vienna Zurich Geneva
Athens Istanbul Ankara Tehran Dubai Karachi Lahore Mumbai Chennai Kolkata Jaipur Surat Nagpur Indore Bhopal Patna
Dhaka Kathmandu Colombo Bangkok Hanoi Manila Jakarta Tokyo Osaka Kyoto Beijing Shanghai Taipei Sydney Melbourne
Auckland Wellington Toronto Montreal Vancouver Chicago Seattle Portland Miami Atlanta Dallas Houston Phoenix
Havana Bogota Quito Santiago Caracas Recife Salvador Nairobi Kampala Dakar Tangier Fez Luxor Aswan Tbilisi Yerevan
Almaty Tashkent Bishkek Ulaanbaatar Reykjavik Helsinki Tallinn Vilnius Gdansk Krakow Brno Graz Salzburg Bruges
Antwerp Utrecht Malmo Bergen Aarhus Cardiff Glasgow Aberdeen Galway Valencia Seville Bilbao Marseille Bordeaux
Nantes Florence Bologna Genoa Palermo Split Zagreb Belgrade Skopje Tirana Varna Odesa Lviv Kazan Samara""".split()
REAL_NAMES = """Ada Alan Grace Linus Ravi Omar Lena Maya Noor Tom Ines Leo Sam Kate Jack Lucy Paul Rita Tara Ben
Sara Ali Raj Juliet Ivy Dev Mira Felix Anya Kofi Rosa Sami Nina Theo Eva Finn Hana Kai Zoe Viola Rohan Priya
Arjun Meera Kiran Anil Sunita Vikram Deepa Farah Yusuf Amara Chidi Ngozi Tunde Aisha Kwame Zara Layla Hamid
Mateo Lucia Diego Sofia Pablo Elena Marco Giulia Luca Chiara Hans Greta Lars Ingrid Sven Astrid Pierre Camille
Jean Amelie Olga Ivan Dmitri Anastasia Mei Wei Jun Hiro Yuki Sakura Min Jisoo Hoang Linh Ana Tomas Jana Piotr
Zofia Emil Nora Otto Clara Hugo Iris Jonas Maren Oskar Selma Tariq Yara Bilal Samira Kenji Aiko Rafael Beatriz
Gabriel Luiza Kemal Elif Cem Defne Nikos Eleni Dara Ciaran Aoife Rhys Seren Callum Isla Ewan Morag""".split()
REAL_WORDS = """strawberry banana raspberry blueberry cherry apple lemon orange pepper mississippi bookkeeper
committee balloon coffee butterfly parallel assessment tomorrow umbrella letter bottle kitten rabbit carrot puzzle
success address grammar cranberry gooseberry elderberry broccoli tennessee accommodate occurrence possession
hippopotamus programmer embarrass millennium necessary giraffe spaghetti excellence bookshelf marshmallow
lighthouse waterfall pineapple watermelon tomato potato avocado mushroom cucumber zucchini rhythm syllable
calendar cinnamon vanilla chocolate caramel pretzel noodle dumpling lantern compass anchor harbour volcano glacier
meadow orchard blossom thunder lightning rainbow snowflake blizzard hurricane keyboard monitor printer notebook
pencil scissors envelope stapler paperclip satellite telescope microscope molecule electron triangle rectangle
hexagon pyramid cylinder algorithm variable function parameter sequence letterbox doorbell staircase balcony
chimney cellar kettle teapot saucepan skillet colander whisk ladle spatula mortar pestle""".split()
ONSETS = ["", "b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "y", "z",
          "br", "ch", "cl", "dr", "fl", "gr", "kr", "ph", "pl", "qu", "sh", "sk", "st", "th", "tr"]
NUCLEI = ["a", "e", "i", "o", "u", "a", "e", "i", "o", "ai", "ea", "ee", "ie", "oa", "ou", "y"]
CODAS = ["", "", "", "", "n", "r", "l", "s", "t", "m", "x", "k", "nd", "rt", "sh", "v"]
DAYS = ("today", "tomorrow")
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December"]


def value_split(value: object) -> str:
    """The split a value belongs to, from a SHA-256 hash of its lower-cased text."""
    digest = hashlib.sha256(f"llmkit-value|{str(value).casefold()}".encode()).digest()
    return "heldout" if digest[0] < HELDOUT_SHARE else "train"


def check_value_split(split: str) -> str:
    if split not in VALUE_SPLITS:
        raise ValueError(f"value split must be 'train' or 'heldout', got {split!r}")
    return split


def _pool(values: list[str], split: str) -> list[str]:
    return [v for v in dict.fromkeys(values) if value_split(v) == check_value_split(split)]


POOLS = {kind: {split: _pool(values, split) for split in VALUE_SPLITS}
         for kind, values in (("city", REAL_CITIES), ("name", REAL_NAMES), ("word", REAL_WORDS))}


def invented_word(rng: random.Random, split: str, syllables: tuple[int, int] = (2, 4)) -> str:
    """A made-up lower-case word of the given number of syllables whose hash puts it in ``split``."""
    check_value_split(split)
    while True:
        word = "".join(rng.choice(ONSETS) + rng.choice(NUCLEI) + rng.choice(CODAS)
                       for _ in range(rng.randint(*syllables)))
        if 3 <= len(word) <= 14 and value_split(word) == split:
            return word


def _until(rng: random.Random, split: str, make) -> str:
    while True:
        value = make()
        if value_split(value) == split:
            return value


def draw(rng: random.Random, kind: str, split: str, *, invented: float = 0.4):
    """One value of ``kind`` from ``split``: real (a pool) or, with probability ``invented``, made up.

    Kinds: city, name, word (strings), code ("QX-4821"), date ("12 March"), integer, number.
    """
    check_value_split(split)
    if kind in POOLS:
        if rng.random() < invented:
            word = invented_word(rng, split, (1, 3) if kind != "word" else (2, 4))
            return word if kind == "word" else word.capitalize()
        return rng.choice(POOLS[kind][split])
    if kind == "code":
        letters = "ABCDEFGHJKLMNPQRSTUVWXYZ"
        return _until(rng, split, lambda: "".join(rng.choice(letters) for _ in range(rng.randint(1, 3)))
                      + rng.choice(["-", "", "-"]) + str(rng.randint(10, 99999)))
    if kind == "date":
        return _until(rng, split, lambda: f"{rng.randint(1, 28)} {rng.choice(MONTHS)}")
    if kind == "integer":
        top = rng.choice([20, 100, 1000, 10000])
        return int(_until(rng, split, lambda: str(rng.randint(1, top))))
    if kind == "number":
        return float(_until(rng, split, lambda: str(round(rng.uniform(0.5, 999), rng.choice([1, 2])))))
    raise ValueError(f"unknown value kind {kind!r}; use city, name, word, code, date, integer or number")
