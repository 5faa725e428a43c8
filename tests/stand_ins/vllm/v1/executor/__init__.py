"""Stand-in for the vllm.v1.executor package."""
