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

from meshdma.torch import _C  # registers torch.ops.meshdma


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


_compiled = {}


def _dialect_kernel(source, name):
    """The compiled kernel of `source` (once per process and text)."""
    if not hasattr(_C, "_DialectKernel"):
        raise RuntimeError("meshdma.make_kernel: this build of meshdma has no "
                           "MLIR JIT (configure with MESHDMA_WITH_MLIR=ON)")
    key = (source, name or "")
    if key not in _compiled:
        _compiled[key] = _C._DialectKernel(source, name or "")
    return _compiled[key]


def make_kernel(kernel, output_shape_dtype_fn, *, name=None, group=None, **attrs):
    """A torch callable from a meshdma kernel, as PyTorch/XLA's
    ``make_kernel_from_pallas(kernel, output_shape_dtype_fn)``.

    ``kernel`` is either the name of an op of meshdma's registry
    (``registered_ops()``: matmul, softmax, flash_attention, ...; ``attrs``
    are its attributes), run on this rank's inputs on this process's meshdma
    device; or the text of a module in meshdma's MLIR dialect, whose kernel
    (``name``, or the module's only one) is proved by meshdma's protocol
    checker for the module's mesh and compiled by the JIT once per process:
    a checker's refusal raises ``ValueError`` with its diagnostics, and
    nothing runs. A dialect kernel runs SPMD on every rank of ``group`` (a
    meshdma process group of the whole launch; default: the default group),
    a collective: every rank calls it with inputs of the same shapes.

    ``output_shape_dtype_fn(*inputs)`` returns a list of ``(shape, dtype)``,
    one per output. The callable takes the kernel's inputs as tensors and
    returns its output (a tuple for several). A dialect kernel's memref
    arguments are its inputs, then its outputs; outputs start zeroed.
    """
    is_dialect = "func.func" in kernel
    compiled = _dialect_kernel(kernel, name) if is_dialect else None

    def call(*inputs):
        specs = [(tuple(shape), dtype) for shape, dtype in output_shape_dtype_fn(*inputs)]
        if compiled is None:
            outputs = _C._call_registered_op(kernel, list(inputs), attrs)
            got = [(tuple(o.shape), o.dtype) for o in outputs]
            if got != specs:
                raise ValueError(f"meshdma.make_kernel('{kernel}'): the op gives "
                                 f"{got}; output_shape_dtype_fn says {specs}")
        else:
            from meshdma.torch.fused import _meshdma_group
            outputs = [torch.zeros(shape, dtype=dtype) for shape, dtype in specs]
            compiled.run(_meshdma_group(group, "make_kernel"), list(inputs) + outputs,
                         len(inputs))
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    call.__name__ = compiled.name if compiled is not None else kernel
    return call


def registered_ops():
    """The ops of meshdma's registry, by name, with their documentation."""
    return dict(_C._registered_ops())
