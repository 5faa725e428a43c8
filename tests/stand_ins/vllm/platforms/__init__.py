"""vllm.platforms: the platform the stand-in plays, always CUDA (what the real vLLM resolves
lazily through the module's `__getattr__`). rlrun asks only whether it is the CPU."""


class _CudaPlatform:
    def is_cpu(self) -> bool:
        return False


def __getattr__(name: str):
    if name == "current_platform":
        return _CudaPlatform()
    raise AttributeError(f"module 'vllm.platforms' has no attribute {name!r}")
