"""Notebook 12's picture: what continuous batching buys, and how little KV memory a request holds."""
from __future__ import annotations

import matplotlib.pyplot as plt

from llmkit.course.serving import Load


def plot_loads(loads: list[Load], one_at_a_time: Load, *, block_size: int, pool_blocks: int, window: int):
    """Left: aggregate output tokens/s against concurrent clients (the dashed line is the same
    requests one at a time). Right: the KV blocks each running request held, against the blocks
    a cache of the whole context window would reserve."""
    figure, (speed, memory) = plt.subplots(1, 2, figsize=(11, 4))
    clients = [load.clients for load in loads]
    speed.plot(clients, [load.tokens_per_s for load in loads], marker="o", label="concurrent streaming clients")
    speed.axhline(one_at_a_time.tokens_per_s, linestyle="--", color="grey", label="one request at a time")
    speed.set(title="Continuous batching: throughput", xlabel="concurrent clients", ylabel="output tokens / s",
              xscale="log", xticks=clients, xticklabels=[str(c) for c in clients])
    speed.minorticks_off()
    speed.set_ylim(bottom=0)
    speed.legend()
    held = [b for load in loads for b in load.blocks_per_request]
    memory.hist(held, bins=range(1, max(held, default=1) + 2), align="left", rwidth=0.8,
                label=f"blocks of {block_size} tokens held")
    memory.axvline(window / block_size, color="crimson", linestyle="--",
                   label=f"a whole-window cache ({window // block_size} blocks)")
    memory.set(title=f"Paged KV memory (pool: {pool_blocks} blocks)", xlabel="KV blocks per running request",
               ylabel="samples while the load ran")
    memory.legend()
    figure.tight_layout()
    return figure
