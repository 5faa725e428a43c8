"""Stand-in for the vllm.v1.worker package."""
