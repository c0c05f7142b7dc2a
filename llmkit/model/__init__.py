"""Ids → logits: the model's config, the Transformer (the readable reference), the fast decode path,
the KV cache, weights on disk (safetensors, Hugging Face import), and hooks to look inside."""
