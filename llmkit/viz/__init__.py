"""Plots and widgets for the notebooks, one file per topic: tokens, embeddings, attention,
sampling, generation, pretraining, post_training, chat, agents, trace, limitations, serving, first_taste.

Kept apart from the logic modules so that ``import llmkit`` never needs a display, matplotlib
backend or ipywidgets front-end; the data a picture shows is computed in llmkit, not here.
"""
