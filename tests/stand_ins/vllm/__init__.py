"""A CPU stand-in for vLLM 0.34.0, for tests only: `import vllm` finds this package when a test
puts tests/stand_ins first on sys.path (see the `vllm` fixture in
tests/engines/test_vllm_api.py).

Why: rlrun's vLLM engine and weight sync need a GPU and vLLM, which CI machines lack. This
package lets their CPU tests run against vLLM 0.34's real API: the names, module paths,
parameter names, defaults and keyword-only-ness of everything here are vLLM's, and
tests/engines/test_vllm_api.py fails when any of them drifts from the real source (parsed
from the vLLM 0.34.0 wheel, never imported). The same test checks them against vLLM 0.33.0, the
release rlrun's `vllm` extra pins; its VERSION_SPECIFIC table lists the few things 0.33.0
declares differently, none of which rlrun uses. Behaviour follows the real code paths that
rlrun uses; each module's docstring names its real counterpart and where it departs from it.

What it covers: `LLM` (generate on a transformers model, sleep/wake_up, `collective_rpc`,
`reset_prefix_cache`, tensor-parallel placement under Ray with logical GPUs, and the native
weight-transfer API), `SamplingParams`, the outputs, `WeightTransferConfig`, the NCCL
weight-transfer init/update info, `nccl_common.trainer_init` and the packed wire format.

Where it departs, deliberately:
- The NCCL group is a gloo group over the same TCPStore rendezvous, with vLLM's ranks and
  world size, so a sender that gets the rank arithmetic wrong fails as it would on GPUs.
- vLLM hangs forever on several protocol mistakes (colliding ranks, a broadcast nobody
  receives, TP workers that cannot be placed); the stand-in raises instead, after at most
  $RLRUN_VLLM_STAND_IN_TIMEOUT_S seconds (vllm/_stand_in.py).
- Things vLLM would crash on or silently accept are errors: generating while asleep or during
  a weight-update session, updating weights whose memory is asleep, sleeping without
  enable_sleep_mode, the CUDA-only "ipc" backend, and any argument the stand-in does not
  implement (NotImplementedError, never silently ignored).
- TP workers all stand for one CPU model; rank 0 writes it.
"""

from vllm.entrypoints.llm import LLM
from vllm.outputs import CompletionOutput, RequestOutput
from vllm.sampling_params import SamplingParams

__version__ = "0.34.0"

__all__ = ["LLM", "CompletionOutput", "RequestOutput", "SamplingParams", "__version__"]
