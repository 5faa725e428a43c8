"""Stand-in for vllm.distributed.device_communicators (only `pynccl`)."""
