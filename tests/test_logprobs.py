"""`response_logprobs` chunked over response positions equals the one-pass [N, L, V] formula.

The reference below is the formula the chunked version replaced; chunks are shrunk to a few
positions so that every batch here spans several of them, with a ragged last one. Both paths
are checked: the model's full logits picked chunk by chunk, and (as for large vocabularies)
the output layer run on the response positions only.
"""

import pytest
import torch

from rlrun import batching, policy_update
from rlrun.config import ModelConfig
from rlrun.models import load_causal_lm, resolve_model_path
from rlrun.policy_update import TensorBatch, collate, response_logprobs

CHUNK_POSITIONS = 4


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return load_causal_lm(resolve_model_path(ModelConfig(), str(tmp_path_factory.mktemp("m"))))


@pytest.fixture
def small_chunks(model, monkeypatch):
    monkeypatch.setattr(
        policy_update, "_LOGPROB_CHUNK_ELEMENTS", CHUNK_POSITIONS * model.config.vocab_size
    )


def reference(
    model: torch.nn.Module, batch: TensorBatch, temperature: float, with_entropy: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    logits = model(
        input_ids=batch.input_ids,
        attention_mask=batch.attention_mask,
        position_ids=batch.position_ids,
    ).logits  # [R, T, V]
    picked = logits[batch.rows.unsqueeze(-1), batch.response_index].float()  # [N, L, V]
    logp_all = torch.log_softmax(picked / temperature, dim=-1)  # [N, L, V]
    logp = torch.gather(logp_all, 2, batch.response_ids.unsqueeze(-1)).squeeze(-1)  # [N, L]
    entropy = -(logp_all.exp() * logp_all).sum(-1) if with_entropy else None  # [N, L]
    return logp * batch.mask, entropy


def samples() -> list[batching.TrainSample]:
    """Three prompts with 2-4 responses each, one of them empty, interleaved."""
    prompts = [[40, 41, 42, 43, 44], [70, 71], [90, 91, 92, 93, 94, 95, 96, 97]]
    lengths = [[3, 1, 6], [5, 0, 5, 2], [2, 4]]
    out = []
    for g, (prompt, lens) in enumerate(zip(prompts, lengths, strict=True)):
        for k, n in enumerate(lens):
            response = [(60 + 7 * g + 3 * k + j) % 250 + 3 for j in range(n)]
            out.append(batching.TrainSample(prompt, response, [0.0] * n, 0.5 - k % 2))
    return out[::2] + out[1::2]


def values_and_grads(fn, model, batch, temperature, with_entropy, differentiate):
    logp, entropy = fn(model, batch, temperature, with_entropy)
    weights = torch.linspace(-1, 1, logp.numel()).view_as(logp)  # [N, L]
    loss = 0.0
    if "logp" in differentiate:
        loss = loss + (logp * weights).sum()
    if "entropy" in differentiate:
        loss = loss + (entropy * weights.flip(0) * batch.mask).sum()
    grads = torch.autograd.grad(loss, list(model.parameters()))
    return logp, entropy, grads


@pytest.mark.usefixtures("small_chunks")
@pytest.mark.parametrize("head", [False, True], ids=["full-logits", "selective-head"])
@pytest.mark.parametrize("share", [False, True], ids=["plain", "shared"])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize(
    "with_entropy, differentiate",
    [(False, ("logp",)), (True, ("logp", "entropy")), (True, ("logp",)), (True, ("entropy",))],
)
def test_chunked_equals_the_one_pass_formula(model, share, temperature, with_entropy,
                                             differentiate, head, monkeypatch):
    if head:  # as for a large vocabulary: the output layer runs on response positions only
        monkeypatch.setattr(policy_update, "_FULL_LOGITS_BYTES", 0)
    batch = collate(samples(), pad_id=0, share_prompts=share)
    assert batch.response_ids.numel() % CHUNK_POSITIONS != 0
    assert (batch.mask.sum(-1) == 0).any()
    want = values_and_grads(reference, model, batch, temperature, with_entropy, differentiate)
    got = values_and_grads(
        response_logprobs, model, batch, temperature, with_entropy, differentiate
    )
    exact = {"atol": 1e-6, "rtol": 0.0}
    torch.testing.assert_close(got[0], want[0], **exact)
    assert (got[1] is None) == (not with_entropy)
    if with_entropy:
        torch.testing.assert_close(got[1], want[1], **exact)
    # The selective head sums the output layer's (tied embedding's) gradient chunk by chunk:
    # the same values up to float32 rounding of that sum, where the full-logits path is exact.
    grads = {"atol": 1e-5 if head else 1e-6, "rtol": 0.0}
    for a, b in zip(got[2], want[2], strict=True):
        torch.testing.assert_close(a, b, **grads)


@pytest.mark.usefixtures("small_chunks")
@pytest.mark.parametrize("head", [False, True], ids=["full-logits", "selective-head"])
def test_entropy_for_the_metric_alone_has_no_gradient_and_leaves_logp_gradients_alone(
    model, head, monkeypatch
):
    if head:
        monkeypatch.setattr(policy_update, "_FULL_LOGITS_BYTES", 0)
    batch = collate(samples(), pad_id=0, share_prompts=True)
    want = values_and_grads(reference, model, batch, 0.7, True, ("logp",))
    logp, entropy = response_logprobs(model, batch, 0.7, True, entropy_grad=False)
    assert not entropy.requires_grad
    torch.testing.assert_close(entropy, want[1], atol=1e-6, rtol=0.0)
    weights = torch.linspace(-1, 1, logp.numel()).view_as(logp)
    grads = torch.autograd.grad((logp * weights).sum(), list(model.parameters()))
    for a, b in zip(grads, want[2], strict=True):
        torch.testing.assert_close(a, b, atol=1e-5 if head else 1e-6, rtol=0.0)


@pytest.mark.usefixtures("small_chunks")
@pytest.mark.parametrize("head", [False, True], ids=["full-logits", "selective-head"])
def test_an_empty_response_gets_zero_logprobs_and_no_gradient(model, head, monkeypatch):
    if head:
        monkeypatch.setattr(policy_update, "_FULL_LOGITS_BYTES", 0)
    empty = batching.TrainSample([40, 41], [], [], 1.0)
    batch = collate([empty, *samples()[:2]], pad_id=0, share_prompts=True)
    logp, _ = response_logprobs(model, batch, 1.0)
    assert torch.equal(logp[0], torch.zeros_like(logp[0]))
    only_empty = torch.autograd.grad(logp[0].sum(), list(model.parameters()), allow_unused=True)
    assert all(g is None or not g.any() for g in only_empty)


@pytest.mark.usefixtures("small_chunks")
def test_fp32_results_are_bit_identical_with_one_thread(model):
    """The seeded CPU demo runs one thread per actor; its numbers must not move."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        batch = collate(samples(), pad_id=0, share_prompts=True)
        args = (model, batch, 0.7, True, ("logp", "entropy"))
        want, got = values_and_grads(reference, *args), values_and_grads(response_logprobs, *args)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert all(torch.equal(a, b) for a, b in zip(got[2], want[2], strict=True))


@pytest.mark.usefixtures("small_chunks")
def test_autograd_keeps_no_vocabulary_sized_fp32_copy(model):
    batch = collate(samples(), pad_id=0)
    vocab = model.config.vocab_size
    saved = []

    def pack(t):
        saved.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
        before = len(saved)
        policy_update._ChunkedLogprobs.apply(
            logits, batch.rows.unsqueeze(-1).expand_as(batch.response_ids).reshape(-1),
            batch.response_index.reshape(-1), batch.response_ids.reshape(-1), 0.7, True, True,
        )
    by_vocab = [t for t in saved[before:] if t.dim() and t.shape[-1] == vocab]
    assert len(by_vocab) == 1 and by_vocab[0] is logits


def test_default_chunks_stay_within_the_element_budget():
    sizes = [len(range(10_000)[part]) for part in policy_update._chunks(10_000, 151_936)]
    assert max(sizes) * 151_936 <= 2**24 < (max(sizes) + 1) * 151_936
    assert sum(sizes) == 10_000


@pytest.mark.usefixtures("small_chunks")
def test_backward_reuses_the_logits_so_runs_once(model):
    batch = collate(samples(), pad_id=0, share_prompts=True)
    logp, _ = response_logprobs(model, batch, 1.0)
    logp.sum().backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="backward ran once already"):
        logp.sum().backward()
    model.zero_grad(set_to_none=True)


def test_leaf_logits_are_left_as_they_are():
    logits = torch.randn(2, 5, 11, requires_grad=True)  # [R, T, V]
    before = logits.detach().clone()
    rows, positions = torch.tensor([0, 0, 1, 1]), torch.tensor([1, 1, 2, 4])  # [M]
    targets = torch.tensor([3, 4, 5, 6])  # [M]
    logp, _ = policy_update._ChunkedLogprobs.apply(logits, rows, positions, targets, 1.0, False,
                                                   False)
    logp.sum().backward()
    assert torch.equal(logits.detach(), before)
    picked = before[rows, positions]  # [M, V]
    expected = torch.zeros_like(before).index_put_(
        (rows, positions), torch.nn.functional.one_hot(targets, 11) - picked.softmax(-1),
        accumulate=True,
    )
    torch.testing.assert_close(logits.grad, expected)
