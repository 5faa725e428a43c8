"""Stand-in for the vllm.entrypoints package (only the offline `LLM`)."""
