"""Text → ids: byte-level BPE (a readable reference trainer and a fast one, proven equal), the
``Tokenizer`` that encodes and decodes, its JSON file format, and tiktoken's cl100k_base offline."""
