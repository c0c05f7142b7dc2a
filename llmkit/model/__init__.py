"""Ids → logits: the model's config, the Transformer (the readable reference), the fast decode path,
the KV cache, weights on disk (safetensors, Hugging Face import), hooks to look inside, and
``grow`` (a deeper copy of a trained model that computes exactly what it did).

Save, load and import weights through ``llmkit.model.weights`` (``save``, ``load``, ``from_hf``,
``load_model``); the model class itself knows nothing of files."""
from llmkit.model.config import CostEstimate, ModelConfig, count_params, estimate_cost
from llmkit.model.fast import FastModel, fast_path, why_not_fast
from llmkit.model.grow import grow
from llmkit.model.inspect import Ablation, Activations, ablate, ablation_effects, capture, mlp_neurons
from llmkit.model.kvcache import KVCache
from llmkit.model.transformer import Transformer

__all__ = ["Ablation", "Activations", "CostEstimate", "FastModel", "KVCache", "ModelConfig", "Transformer", "ablate",
           "ablation_effects", "capture", "count_params", "estimate_cost", "fast_path", "grow", "mlp_neurons",
           "why_not_fast"]
