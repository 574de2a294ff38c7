"""Training: the loss, the optimizer and its schedule, one update, and train.py's logic."""
