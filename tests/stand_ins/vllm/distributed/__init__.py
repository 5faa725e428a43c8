"""Stand-in for the vllm.distributed package (only the modules weight transfer uses)."""
