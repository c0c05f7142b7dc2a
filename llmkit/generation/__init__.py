"""Logits → text: sampling, the generate/stream loop with its stop reasons, and prompt (prefix) caching."""
