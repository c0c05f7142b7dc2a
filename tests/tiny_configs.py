"""The tiny model configs the model tests share: one per family, and the mixes a config can make."""
from llmkit.model.config import ModelConfig

TINY = dict(vocab_size=97, context_length=64, d_model=32, n_layers=2, n_heads=4)
FAMILIES = {
    "gpt2": ModelConfig.gpt2(**TINY),
    "llama": ModelConfig.llama(**TINY, n_kv_heads=2),
    "llama_untied_mha": ModelConfig.llama(**TINY, tie_embeddings=False),
    "mixed": ModelConfig(**TINY, norm="rmsnorm", mlp="gelu", positions="rope", bias=False, tie_embeddings=False),
}
