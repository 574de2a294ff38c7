"""Evaluation: where data and model meet (runs loaded, sentences translated, scores compared)."""
