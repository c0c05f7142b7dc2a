"""Text → weights: data windows and batches, the training loop with checkpoints, and fine-tuning (SFT, DPO)."""
