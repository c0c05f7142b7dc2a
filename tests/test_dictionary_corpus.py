"""data/corpus/dictionary.txt (modern English from WordNet) and the corpus stage that mixes it in."""
import hashlib
import importlib.util
import logging
import re

from llmkit.course.recipe_stages import chain_hashes, dictionary_documents, held_out_texts, load_recipe, run_corpus
from llmkit.paths import data_path

ENTRY = re.compile(r'^[^():]+ \((noun|verb|adjective|adverb)\): .+\.( "[^"]+")+$')
DICTIONARY_SHA256 = "4f87a705ce01ae38572220e16f241811ee0c5849e14fa1352f0f9d387d1eb88c"
FOLD = ("00406612 04 n 02 fold 0 folding 0 005 @ 00404403 n 0000 + 01277992 v 0201 + 00564695 v 0101 "
        '+ 01277992 v 0101 ~ 00406800 n 0000 | the act of folding; "he gave the napkins a double fold"  \n')


def dictionary_script():
    spec = importlib.util.spec_from_file_location("dictionary_script", data_path("corpus", "dictionary.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_wordnet_line_becomes_an_entry_with_its_words_definition_and_examples():
    entry = dictionary_script().entry
    assert entry(FOLD, "noun") == 'fold, folding (noun): the act of folding. "he gave the napkins a double fold"'
    adjective = ('00001740 00 a 01 able(p) 0 005 = 05207437 n 0000 | (usually followed by `to\') having the '
                 'necessary means or skill; "able to swim"; "she was able to program her computer"  \n')
    assert entry(adjective, "adjective") == ("able (adjective): (usually followed by `to') having the necessary "
                                             'means or skill. "able to swim" "she was able to program her computer"')
    assert entry("  1 This software and database is being provided to you\n", "noun") is None  # the licence


def test_the_shipped_dictionary_is_one_entry_a_line_each_with_an_example():
    """The bytes are the ones the experiments learned from (a rebuild from wordnet-base 3.0 writes them)."""
    data = data_path("corpus", "dictionary.txt").read_bytes()
    assert hashlib.sha256(data).hexdigest() == DICTIONARY_SHA256
    lines = data.decode("utf-8").splitlines()
    assert len(lines) > 30000
    bad = [line for line in lines if not ENTRY.match(line)]
    assert not bad, bad[:3]
    assert data_path("corpus", "dictionary_LICENSE.txt").read_text().count("Princeton") >= 2


def test_dictionary_documents_hold_entries_out_and_group_the_rest():
    lines = data_path("corpus", "dictionary.txt").read_text(encoding="utf-8").splitlines()
    docs, heldout = dictionary_documents(40, 500, seed=3)
    held = heldout.splitlines()
    train = [line for doc in docs for line in doc.split("\n")]
    assert len(held) == 500 and not set(held) & set(train)
    assert sorted(held + train) == sorted(lines)  # nothing lost, nothing twice
    assert all(len(doc.split("\n")) <= 40 for doc in docs) and len(docs) == -(-len(train) // 40)
    assert dictionary_documents(40, 500, seed=3) == (docs, heldout)  # the same seed, the same split
    assert dictionary_documents(40, 500, seed=4)[1] != heldout


def test_a_corpus_stage_with_the_dictionary_writes_its_held_out_entries(tmp_path):
    settings = {"shakespeare_chars": 20000, "structured_documents": 5, "heldout_structured_documents": 2,
                "dictionary_entries_per_document": 50, "heldout_dictionary_entries": 30, "seed": 2}
    figures = run_corpus(settings, tmp_path, logging.getLogger("test"))
    train = (tmp_path / "train.txt").read_text(encoding="utf-8")
    held = (tmp_path / "heldout_dictionary.txt").read_text(encoding="utf-8").splitlines()
    assert len(held) == 30 and not any(line in train for line in held)
    assert figures["train_chars"] > 4_000_000  # the dictionary's 4 MB went in
    assert set(held_out_texts(tmp_path)) == {"shakespeare", "structured", "dictionary"}
    plain = tmp_path / "plain"
    plain.mkdir()
    run_corpus({k: settings[k] for k in list(settings)[:3]}, plain, logging.getLogger("test"))
    assert set(held_out_texts(plain)) == {"shakespeare", "structured"}


def test_the_english_recipe_is_the_main_recipe_with_a_corpus_and_a_pretrain_stage_after_pretrain():
    main, english = (load_recipe(data_path("models", name)) for name in ("recipe.json", "recipe_english.json"))
    names = [s["name"] for s in english["stages"]]
    assert names == [s["name"] for s in main["stages"][:5]] + ["corpus_english", "pretrain_english"] + [
        s["name"] for s in main["stages"][5:]]
    assert chain_hashes(english["stages"])[:5] == chain_hashes(main["stages"])[:5]  # it restores the same base
    continued = english["stages"][6]["settings"]
    assert continued["grow_from"] == "pretrain" and continued["train_text"] == "corpus_english"

