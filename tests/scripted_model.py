"""A test double shared by the generation and client tests: a real transformer whose next-token
scores are pushed onto a fixed script, so a test knows exactly what the model will "write" while
the real cache, loop, template and client all run."""
from __future__ import annotations

from llmkit.model.transformer import ModelConfig, Transformer


class ScriptedModel(Transformer):
    """Writes ``script`` token by token once ``prompt_length`` tokens have been read."""

    def __init__(self, config: ModelConfig, script: list[int], prompt_length: int = 0):
        super().__init__(config)
        self.script, self.prompt_length = script, prompt_length

    def forward(self, ids, cache=None, start_pos=None, *, last_only=False):
        logits = super().forward(ids, cache, start_pos, last_only=last_only)
        end = cache.length if cache is not None else ids.size(1)  # positions read so far
        for row in range(logits.size(1)):  # every position returned, also when several tokens are read
            step = end - logits.size(1) + row + 1 - self.prompt_length  # the script's token it predicts
            if 0 <= step < len(self.script):
                logits[:, row, self.script[step]] += 1e4
        return logits
