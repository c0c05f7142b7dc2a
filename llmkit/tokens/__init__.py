"""Text → ids: byte-level BPE and the tokenizer built on it.

``tokenizer`` (the ``Tokenizer``: encode, decode, tiktoken's methods) · ``bpe`` (the readable
reference trainer and the fast one, proven equal) · ``merge`` (BPE inside one chunk: the plain
scan and the heap for long chunks) · ``pattern`` (the pre-split regex and its checks) ·
``special`` (the rules for special tokens) · ``vocab`` (id checks) · ``words`` (a word's tokens
inside a sentence, under either pre-split) · ``file`` (the JSON file) ·
``cl100k`` (tiktoken's cl100k_base, offline) · ``hf`` and ``hf_chat`` (Hugging Face export).
"""
