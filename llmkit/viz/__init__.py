"""Plots and widgets for the notebooks, one file per topic (tokens, attention, generation, ...).

Kept apart from the logic modules so that ``import llmkit`` never needs a display, matplotlib
backend or ipywidgets front-end.
"""
