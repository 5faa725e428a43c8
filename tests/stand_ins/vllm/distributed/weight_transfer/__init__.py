"""Stand-in for the vllm.distributed.weight_transfer package (the NCCL backend, over gloo)."""
