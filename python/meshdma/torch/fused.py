"""meshdma's fused communication kernels on a meshdma process group.

Each is a collective: every rank of the group calls it, in the same order as
the group's other calls, and the communication overlaps the compute (the
"collective matmul" decomposition of tensor parallelism, ring attention).
They run over the whole launch: ``group`` (default: the default group) must
be a meshdma group of every rank. float32 CPU tensors. A bad argument
raises on its rank before anything runs (``ValueError``, ``TypeError``).

Autograd: the three ops are differentiable. Their backward passes are
collectives too, so every rank runs backward through the same ops in the
same order (as every rank's forward did): the two collective matmuls are
each other's backward (the gradient of a gather is a reduce-scatter), and
ring attention's backward gathers the keys and values and runs meshdma's
flash attention backward over each block of this rank's rows (memory
``O(S x head_dim)`` per head, no ``S / n x S`` logits).
"""
import torch
import torch.distributed as dist

from meshdma.torch import _C


def _meshdma_group(group, op):
    group = group if group is not None else dist.distributed_c10d._get_default_group()
    if not isinstance(group, _C.ProcessGroupMeshdma):
        raise ValueError(f"meshdma.{op}: the group is {type(group).__name__}, "
                         "not a meshdma process group")
    return group


def _gather(t, group):
    """Every rank's ``t``, in rank order (the group's all_gather)."""
    parts = [torch.empty_like(t) for _ in range(group.size())]
    group.allgather([parts], [t.contiguous()]).wait()
    return parts


def _reduce_scatter(blocks, group):
    """This rank's block of the sum over ranks of ``blocks`` (one per rank)."""
    out = torch.empty_like(blocks[group.rank()])
    group.reduce_scatter([out], [[b.contiguous() for b in blocks]]).wait()
    return out


class _AllGatherMatmul(torch.autograd.Function):
    """y = gather(x) @ w. Backward: dx = reduce_scatter(dy @ w^T), fused as
    matmul_reduce_scatter; dw = gather(x)^T @ dy."""

    @staticmethod
    def forward(ctx, x, w, group):
        ctx.group = group
        ctx.save_for_backward(x, w)
        return _C._all_gather_matmul(group, x, w)

    @staticmethod
    def backward(ctx, dy):
        x, w = ctx.saved_tensors
        dy = dy.contiguous()
        dx = _C._matmul_reduce_scatter(ctx.group, dy, w.t().contiguous())
        dw = torch.cat(_gather(x, ctx.group)).t() @ dy
        return dx, dw, None


class _MatmulReduceScatter(torch.autograd.Function):
    """y = this rank's rows of sum_r(x_r @ w_r). Backward: every rank's
    partial product sees the whole dy, so g = gather(dy), dx = g @ w^T and
    dw = x^T @ g."""

    @staticmethod
    def forward(ctx, x, w, group):
        ctx.group = group
        ctx.save_for_backward(x, w)
        return _C._matmul_reduce_scatter(group, x, w)

    @staticmethod
    def backward(ctx, dy):
        x, w = ctx.saved_tensors
        g = torch.cat(_gather(dy, ctx.group))
        return g @ w.t(), x.t() @ g, None


def all_gather_matmul(x, w, group=None):
    """``all_gather(x) @ w``: x ``[m / n, k]`` (this rank's rows), w ``[k,
    n_out]`` (for a column-parallel linear, this rank's columns) ->
    ``[m, n_out]``; each block is multiplied while the next one travels.
    Differentiable in x and w."""
    return _AllGatherMatmul.apply(x, w, _meshdma_group(group, "all_gather_matmul"))


def matmul_reduce_scatter(x, w, group=None):
    """``reduce_scatter(x @ w)`` over rows: x ``[m, k / n]`` and w ``[k / n,
    n_out]`` (a row-parallel linear's slices) -> this rank's rows ``[m / n,
    n_out]`` of the sum; each partial product is computed while the previous
    partial sum travels. Differentiable in x and w."""
    return _MatmulReduceScatter.apply(x, w, _meshdma_group(group, "matmul_reduce_scatter"))


def _ring_chunks(rank, world, layout):
    """The global chunks of the sequence rank holds in ``layout``, in its
    order: 1 of ``world`` (contiguous) or 2 of ``2 world`` (zig-zag)."""
    if layout == "contiguous":
        return [rank]
    return [rank, 2 * world - 1 - rank]


def _rows(t, index, size):
    """Chunk ``index`` of ``t``'s sequence rows, ``size`` rows each."""
    return t[:, :, index * size:(index + 1) * size]


class _RingAttention(torch.autograd.Function):
    """Forward: meshdma's ring attention, which also gives its rows'
    log-sum-exp. Backward: meshdma's flash attention backward, one (query
    chunk, key chunk) block at a time, with the forward's output and
    log-sum-exp; each rank's share of dk and dv is then reduce-scattered
    back to the chunks' owners."""

    @staticmethod
    def forward(ctx, q, k, v, group, causal, sm_scale, layout):
        ctx.group, ctx.causal, ctx.layout = group, causal, layout
        ctx.sm_scale = q.shape[-1] ** -0.5 if sm_scale is None else sm_scale
        out, lse = _C._ring_attention(group, q, k, v, causal, sm_scale, layout)
        ctx.save_for_backward(q, k, v, out, lse)
        return out

    @staticmethod
    def backward(ctx, do):
        q, k, v, out, lse = ctx.saved_tensors
        do = do.contiguous()
        group, world = ctx.group, ctx.group.size()
        chunks = [_ring_chunks(r, world, ctx.layout) for r in range(world)]
        size = q.shape[2] // len(chunks[0])

        def block(i, j):
            """Query chunk i against key chunk j: None where all of it is
            masked, else whether the block is causal (its diagonal)."""
            if ctx.causal and j > i:
                return None
            return ctx.causal and j == i

        # 1. Every rank's key and value chunks, by global chunk.
        kv = {}
        for r, (kr, vr) in enumerate(zip(_gather(k, group), _gather(v, group))):
            for t, j in enumerate(chunks[r]):
                kv[j] = (_rows(kr, t, size), _rows(vr, t, size))
        dq = torch.zeros_like(q)
        dkv = {j: (torch.zeros_like(kj), torch.zeros_like(vj)) for j, (kj, vj) in kv.items()}
        # 2. Each block's share of dq, dk and dv: exact with the rows'
        #    output and log-sum-exp over the whole sequence (the forward's).
        for t, i in enumerate(chunks[group.rank()]):
            q_i, o_i, do_i, lse_i = (_rows(x, t, size) for x in (q, out, do, lse))
            for j in (j for j in sorted(kv) if block(i, j) is not None):
                dq_ij, dk_ij, dv_ij = torch.ops.meshdma._flash_attention_backward(
                    do_i, q_i, *kv[j], o_i, lse_i, block(i, j), None, None, ctx.sm_scale,
                    None)
                _rows(dq, t, size).add_(dq_ij)
                dkv[j][0].add_(dk_ij)
                dkv[j][1].add_(dv_ij)
        # 3. Each owner gets the sum over ranks of its chunks' dk and dv.
        dk, dv = (_reduce_scatter([torch.cat([dkv[j][x] for j in chunks[r]], dim=2)
                                   for r in range(world)], group) for x in (0, 1))
        return dq, dk, dv, None, None, None, None


def ring_attention(q, k, v, group=None, causal=False, sm_scale=None, layout="contiguous"):
    """Attention over a sequence sharded across the ranks, the key/value
    blocks passed around the ring while each rank attends to the one in
    hand. q ``[batch, heads, seq / n, head_dim]``, k and v ``[batch,
    kv_heads, seq / n, head_dim]``: this rank's rows in ``layout``
    (``"contiguous"``: rank i holds rows ``[i S/n, (i+1) S/n)``;
    ``"zigzag"``: chunks i and 2n-1-i of 2n, which balances causal work).
    ``sm_scale`` defaults to ``1/sqrt(head_dim)``. Returns this rank's rows
    of the output. Differentiable in q, k and v."""
    return _RingAttention.apply(q, k, v, _meshdma_group(group, "ring_attention"), bool(causal),
                                None if sm_scale is None else float(sm_scale), layout)


class KvCacheTransfer:
    """Prefill ranks' KV caches, each streamed layer by layer into its
    decode rank's paged cache (disaggregated serving).

    The group (default: the default group) is a meshdma group of every rank
    of the launch, an even number 2m: ranks 0 .. m-1 prefill, ranks m ..
    2m-1 decode, and rank i prefills for rank i + m (each pair meets on its
    own). Every rank makes the object alike (same sizes, in the same order
    as its other heap tensors) and calls ``transfer`` once per prompt, in
    the same order (each pair with its own keys, values and tables).

    ``cache`` is the decode cache, a tensor of meshdma's symmetric heap,
    float32 ``[num_layers, 2, num_kv_heads, total_pages, page_size,
    head_dim]`` (keys at ``[:, 0]``, values at ``[:, 1]``): for layer l,
    ``key_cache(l)`` and ``value_cache(l)`` have the layout that
    ``meshdma.torch.paged_attention`` reads. On the prefill rank it is
    allocated too (the heap is symmetric) but not written.
    """

    def __init__(self, *, num_layers, num_kv_heads, head_dim, page_size,
                 total_pages, group=None):
        self.group = _meshdma_group(group, "KvCacheTransfer")
        if self.group.size() % 2 != 0:
            raise ValueError(f"meshdma.KvCacheTransfer on rank {self.group.rank()}: "
                             f"the group has {self.group.size()} ranks; a KV-cache "
                             "transfer pairs an even number (the first half prefills, "
                             "rank i for rank i + n/2)")
        sizes = dict(num_layers=num_layers, num_kv_heads=num_kv_heads, head_dim=head_dim,
                     page_size=page_size, total_pages=total_pages)
        for name, value in sizes.items():
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"meshdma.KvCacheTransfer: {name} is {value!r}; "
                                 "a positive int is required")
        import meshdma.torch
        self.num_layers, self.page_size = num_layers, page_size
        self.cache = meshdma.torch.zeros(num_layers, 2, num_kv_heads, total_pages,
                                         page_size, head_dim)

    @property
    def is_prefill(self):
        return self.group.rank() < self.group.size() // 2

    @property
    def partner(self):
        """The rank this one sends to (prefill) or receives from (decode)."""
        half = self.group.size() // 2
        return self.group.rank() + (half if self.is_prefill else -half)

    def key_cache(self, layer):
        return self.cache[layer, 0]

    def value_cache(self, layer):
        return self.cache[layer, 1]

    def pages_for(self, seq_len):
        """The number of cache pages a prompt of ``seq_len`` tokens takes."""
        return -(-seq_len // self.page_size)

    def transfer(self, seq_len, *, prefill=None, block_table=None, decode=None):
        """One prompt of ``seq_len`` tokens, on both ranks.

        On the prefill rank, ``prefill(layer)`` returns that layer's keys
        and values, float32 ``[num_kv_heads, seq_len, head_dim]`` each; each
        layer's pages leave while the next layer is computed. On the decode
        rank, ``block_table`` (int32 ``[pages_for(seq_len)]``, distinct
        pages) says where token t goes: page ``block_table[t // page_size]``,
        row ``t % page_size``; ``decode(layer, key_cache, value_cache)``, if
        given, runs as soon as that layer has arrived, while the next ones
        travel. The callbacks run on meshdma's device thread: they may call
        meshdma's kernels (``paged_attention``) but not the group's
        collectives. Bad arguments raise before anything runs; an exception
        in a callback ends the group (as a failed collective does)."""
        import torch
        if self.is_prefill:
            if prefill is None:
                raise ValueError(f"meshdma.KvCacheTransfer.transfer on rank "
                                 f"{self.group.rank()} (prefill): a prefill function "
                                 "is required")
            table = torch.empty(0, dtype=torch.int32)
        else:
            if block_table is None:
                raise ValueError(f"meshdma.KvCacheTransfer.transfer on rank "
                                 f"{self.group.rank()} (decode): a block_table is "
                                 "required")
            table = (block_table if isinstance(block_table, torch.Tensor)
                     else torch.tensor(block_table, dtype=torch.int32))
        _C._kv_cache_transfer(self.group, self.cache, int(seq_len), table,
                              prefill, decode)
