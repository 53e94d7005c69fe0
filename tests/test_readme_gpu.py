"""The README's Python examples run as written on a GPU and give what the README says they give."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

README = Path(__file__).resolve().parent.parent / "README.md"


def _example(heading: str) -> dict:
    """Runs the first ```python block under the README's `## heading` and returns its namespace."""
    text = README.read_text()
    assert f"\n## {heading}\n" in text, f"the README has no section '{heading}'"
    section = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```python\n(.*?)```", section, re.S)
    assert block, f"the README's section '{heading}' has no python block"
    ns: dict = {}
    exec(compile(block.group(1), f"README.md: {heading}", "exec"), ns)
    ns["torch"].cuda.synchronize()
    return ns


def test_readme_own_kernel_example():
    """`Your own kernel`: the scale kernel writes 2 x and the timer returns positive microsecond samples."""
    ns = _example("Your own kernel")
    torch = ns["torch"]
    assert torch.equal(ns["y"], 2.0 * ns["x"])
    assert ns["ck"].resources.spill_store_bytes == 0
    samples = ns["samples"]
    assert len(samples) > 0 and float(samples.min()) > 0


def test_readme_search_and_gram_example():
    """`Vector search and Gram matrices`: the streamed search (the block's last) answers as the in-memory one, bit for
    bit, with an fp32 reference's top 10 scores at the indices it returns; the l2 distances ascend and are cdist's 10
    smallest; the Gram matrix is symmetric and matches a complex128 product on every 32nd row."""
    ns = _example("Vector search and Gram matrices")
    torch, tunelab = ns["torch"], ns["tunelab"]
    q, c = ns["q"], ns["c"]
    scores, idx = ns["scores"], ns["idx"]  # the streamed call's
    assert scores.shape == (100, 10) and idx.shape == (100, 10) and scores.is_cuda and idx.dtype == torch.int64
    mem_scores, mem_idx = tunelab.ops.similarity_search(q, c, k=10)
    assert torch.equal(scores, mem_scores) and torch.equal(idx, mem_idx)
    ref = q.float() @ c.float().T
    top = torch.topk(ref, 10, dim=1).values
    torch.testing.assert_close(scores, top, rtol=0, atol=5e-3)  # fp16 products are exact, sums in fp32
    torch.testing.assert_close(ref.gather(1, idx), scores, rtol=0, atol=5e-3)
    dist = ns["dist"]
    assert bool((dist[:, 1:] >= dist[:, :-1]).all())
    d_ref = torch.cdist(q.float(), c.float()).square()
    torch.testing.assert_close(dist, torch.topk(d_ref, 10, dim=1, largest=False).values, rtol=1e-4, atol=1e-2)
    x, K = ns["x"], ns["K"]
    assert K.shape == (2048, 2048) and K.dtype == torch.float32
    assert torch.equal(K, K.T)  # mirror=True writes the lower triangle as the upper one
    rows = torch.arange(0, 2048, 32, device="cuda")
    xd = x.to(torch.complex128)
    ref = (xd[rows].conj() @ xd.T).abs().square()
    torch.testing.assert_close(K[rows].double(), ref, rtol=1e-6, atol=0.25)  # diagonal ~2.6e5, the rest ~5e2
