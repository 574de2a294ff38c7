"""The layer every other may import: the user-error base and its wrapper, atomic file writes."""
