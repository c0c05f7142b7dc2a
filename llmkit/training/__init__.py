"""Text → weights: data windows and batches, one run skeleton (resume, report, fit, save) shared by
pretraining and fine-tuning (SFT, DPO), crash-safe checkpoints, and torchrun for several processes."""
from llmkit.training.checkpoint import DamagedFile, read_log
from llmkit.training.config import FinetuneConfig, InvalidConfig, RunConfig, TrainConfig
from llmkit.training.finetune import finetune
from llmkit.training.loop import TrainingDiverged, fit, lm_loss
from llmkit.training.run import ResumeConflict
from llmkit.training.train import bits_per_byte, train

__all__ = ["DamagedFile", "FinetuneConfig", "InvalidConfig", "ResumeConflict", "RunConfig", "TrainConfig",
           "TrainingDiverged", "bits_per_byte", "finetune", "fit", "lm_loss", "read_log", "train"]
