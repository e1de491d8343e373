"""The models and their checkpoints: config, weights on disk, the memory they need, networks."""
