"""rlrun: reinforcement learning from verifiable rewards for language models, on Ray."""

__version__ = "0.1.0"
