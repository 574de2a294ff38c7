"""Timing and cost: the data, training and decoding benchmarks, FLOP counts and memory."""
