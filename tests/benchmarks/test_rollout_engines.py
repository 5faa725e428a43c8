"""benchmarks/rollout_engines.py: the medians, the table and the sentence drawn from them."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from rollout_engines import ENGINES, summarise, table, verdict  # noqa: E402


def call(elapsed_s: float, steps: int, samples: int = 128, tokens: int = 10240) -> dict:
    return {"elapsed_s": elapsed_s, "cpu_s": 2 * elapsed_s, "samples": samples,
            "tokens": tokens, "steps": steps, "stopped": 0, "threads": 2}


def results(hf_s: float, vllm_s: float) -> dict:
    out = {}
    for name, s in zip(ENGINES, (hf_s, vllm_s), strict=True):
        out[name] = {
            "startup_s": 2.0 if name == "hf" else 6.0,
            # the middle of three repeats is the median
            "runs": [call(s * f, 96) for f in (1.0, 3.0, 0.5)],
            "single": [call(s / 100, 100, samples=4, tokens=100)] * 3,
        }
    summarise(out)
    return out


def test_medians_and_ratios():
    r = results(hf_s=0.5, vllm_s=1.0)
    assert r["hf"]["samples_per_s"] == 128 / 0.5
    assert r["vllm"]["tokens_per_s"] == 10240 / 1.0
    assert r["hf"]["step_ms"] == 1000 * 0.5 / 96
    assert r["hf"]["single_step_ms"] == 1000 * 0.005 / 100
    text = table(r, 128)
    assert "| vLLM / HF | 3.0x | 0.50x | 0.50x |" in text
    assert len(text.splitlines()) == 5


def test_the_sentence_names_the_faster_engine():
    assert verdict(results(hf_s=0.5, vllm_s=1.0), 128).startswith(
        "The HF engine is the faster one here: 2.00x vLLM's tokens/s")
    assert verdict(results(hf_s=1.0, vllm_s=0.5), 128).startswith(
        "vLLM is the faster one here: 2.00x the HF engine's tokens/s")
