"""meshdma's fused communication kernels on a meshdma process group.

Each is a collective: every rank of the group calls it, in the same order as
the group's other calls, and the communication overlaps the compute (the
"collective matmul" decomposition of tensor parallelism, ring attention).
They run over the whole launch: ``group`` (default: the default group) must
be a meshdma group of every rank. float32 CPU tensors; no autograd. A bad
argument raises on its rank before anything runs (``ValueError``,
``TypeError``).
"""
import torch.distributed as dist

from meshdma.torch import _C


def _meshdma_group(group, op):
    group = group if group is not None else dist.distributed_c10d._get_default_group()
    if not isinstance(group, _C.ProcessGroupMeshdma):
        raise ValueError(f"meshdma.{op}: the group is {type(group).__name__}, "
                         "not a meshdma process group")
    return group


def all_gather_matmul(x, w, group=None):
    """``all_gather(x) @ w``: x ``[m / n, k]`` (this rank's rows), w ``[k,
    n_out]`` (for a column-parallel linear, this rank's columns) ->
    ``[m, n_out]``; each block is multiplied while the next one travels."""
    return _C._all_gather_matmul(_meshdma_group(group, "all_gather_matmul"), x, w)


def matmul_reduce_scatter(x, w, group=None):
    """``reduce_scatter(x @ w)`` over rows: x ``[m, k / n]`` and w ``[k / n,
    n_out]`` (a row-parallel linear's slices) -> this rank's rows ``[m / n,
    n_out]`` of the sum; each partial product is computed while the previous
    partial sum travels."""
    return _C._matmul_reduce_scatter(_meshdma_group(group, "matmul_reduce_scatter"), x, w)


def ring_attention(q, k, v, group=None, causal=False, sm_scale=None, layout="contiguous"):
    """Attention over a sequence sharded across the ranks, the key/value
    blocks passed around the ring while each rank attends to the one in
    hand. q ``[batch, heads, seq / n, head_dim]``, k and v ``[batch,
    kv_heads, seq / n, head_dim]``: this rank's rows in ``layout``
    (``"contiguous"``: rank i holds rows ``[i S/n, (i+1) S/n)``;
    ``"zigzag"``: chunks i and 2n-1-i of 2n, which balances causal work).
    ``sm_scale`` defaults to ``1/sqrt(head_dim)``. Returns this rank's rows
    of the output."""
    return _C._ring_attention(_meshdma_group(group, "ring_attention"), q, k, v,
                              bool(causal), None if sm_scale is None else float(sm_scale),
                              layout)
