"""meshdma's attention kernels as torch operators, with PyTorch/XLA's
custom-kernel signatures (``torch_xla.experimental.custom_kernel``).

Both are registered as ``torch.ops.meshdma.*`` (CPU implementations), so
they work under ``torch.jit.script`` and tracing. They run on this process's
meshdma device: the process group's when a meshdma group is initialised,
else one of the process alone (started on first use). Bad input raises
``ValueError`` (shapes, values) or ``TypeError`` (dtypes) with the kernel's
message.
"""
import torch

import meshdma.torch._C  # noqa: F401  registers torch.ops.meshdma


def flash_attention(q, k, v, causal=False, q_segment_ids=None,
                    kv_segment_ids=None, sm_scale=1.0, *, ab=None):
    """softmax(sm_scale * (q k^T + ab), masked) v, without the score matrix.

    q ``[batch, heads, seq_q, head_dim]``; k and v ``[batch, kv_heads,
    seq_kv, head_dim]`` with ``heads`` a multiple of ``kv_heads`` (MQA,
    GQA). ``sm_scale`` defaults to 1.0, as PyTorch/XLA's (not
    1/sqrt(head_dim)). ``causal``: query i attends to keys <= i.
    ``q_segment_ids [batch, seq_q]`` and ``kv_segment_ids [batch, seq_kv]``
    (integers, both or neither): a query attends only to keys of its own
    segment. ``ab [batch, heads, seq_q, seq_kv]``: a bias added to the
    logits before the scale (it gets no gradient). A query row with no key
    left attends to nothing and gets zeros.

    float32, bfloat16 and float16 run as they are (accumulating in
    float32); float64 is computed in float32. Differentiable in q, k and v:
    the backward is meshdma's flash attention backward, which recomputes the
    probabilities blockwise (memory linear in the sequence).
    """
    return torch.ops.meshdma.flash_attention(
        q, k, v, causal, q_segment_ids, kv_segment_ids, float(sm_scale), ab)


def paged_attention(q, k_pages, v_pages, lengths, page_indices,
                    pages_per_compute_block, attn_logits_soft_cap=None):
    """Decode attention over a paged KV cache (vLLM's layout).

    q ``[batch, heads, head_dim]``; k_pages and v_pages ``[kv_heads,
    total_pages, page_size, head_dim]``; ``lengths [batch]`` (int32):
    sequence b attends to its first lengths[b] tokens; ``page_indices
    [batch, pages_per_sequence]`` (int32): token t of sequence b is row
    ``t % page_size`` of page ``page_indices[b, t // page_size]``. No q.k
    scaling (scale q first). ``pages_per_compute_block`` pages are gathered
    and computed at once; it must divide pages_per_sequence.
    ``attn_logits_soft_cap``: logits become ``cap * tanh(logits / cap)``.
    """
    return torch.ops.meshdma.paged_attention(
        q, k_pages, v_pages, lengths, page_indices,
        int(pages_per_compute_block),
        None if attn_logits_soft_cap is None else float(attn_logits_soft_cap))
