"""GPU backends. Importing anything here imports torch (and, for ``te``, Transformer Engine)."""
