"""meshdma.torch's fused communication kernels against torch's unfused
computation, on ranks started by torch.multiprocessing (FileStore, no MPI).

Every rank rebuilds every rank's inputs from seeds, so each checks its
result against torch on the whole problem: all_gather_matmul against
torch.cat(x blocks) @ w, matmul_reduce_scatter against the rows of the sum
of the partial products, ring_attention (contiguous and zig-zag layouts,
causal or not, MQA) against attention over the whole sequence; at an even
number of ranks (rank i prefills for rank i + n/2, each pair its own prompts),
KvCacheTransfer: every prompt's pages in the decode cache where its block
table puts them and nothing else written, each layer already there when
decode is called for it, and paged_attention called from decode against
attention over the prompt's keys and values. The gradients of the three
differentiable ops against torch's autograd through the unfused computation
on the whole problem. Also: bad arguments raise on
the rank before anything runs, a group that is not the launch is refused
with ValueError naming its ranks, and the group serves after both.

Run: PYTHONPATH=<build>/python /usr/bin/python3 tests/torch/fused_test.py
(MESHDMA_TORCH_TEST_WORLD=4 for four ranks).
"""
import os
import unittest

import torch
import torch.distributed as dist

import meshdma.torch
from ranks import run_ranks

WORLD = int(os.environ.get("MESHDMA_TORCH_TEST_WORLD", "2"))


def rand(seed, *shape):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def close(got, want, what, tol=1e-4):
    err = (got.double() - want.double()).abs().max().item()
    assert got.shape == want.shape, f"{what}: {tuple(got.shape)} vs {tuple(want.shape)}"
    assert err < tol, f"{what}: max error {err}"


def attention(q, k, v, causal, scale):
    group = q.shape[1] // k.shape[1]
    k, v = (t.repeat_interleave(group, dim=1) for t in (k, v))
    logits = torch.matmul(q.double(), k.double().transpose(-1, -2)) * scale
    if causal:
        n = q.shape[2]
        logits = logits.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    return torch.matmul(torch.softmax(logits, dim=-1), v.double())


def rows_of(rank, world, seq, layout):
    """The global rows rank holds in `layout`."""
    if layout == "contiguous":
        per = seq // world
        return list(range(rank * per, (rank + 1) * per))
    chunk = seq // (2 * world)
    return [r for c in (rank, 2 * world - 1 - rank)
            for r in range(c * chunk, (c + 1) * chunk)]


def check_collective_matmuls(rank, world):
    m, k, n_out = 12 * world, 40, 24
    xs = [rand(10 + r, m // world, k) for r in range(world)]
    w = rand(1, k, n_out)
    got = meshdma.torch.all_gather_matmul(xs[rank], w)
    close(got, torch.cat(xs) @ w, "all_gather_matmul")
    # x in the symmetric heap: ranks of this host read it in place.
    x_heap = meshdma.torch.empty(m // world, k)
    x_heap.copy_(xs[rank])
    got = meshdma.torch.all_gather_matmul(x_heap, w)
    close(got, torch.cat(xs) @ w, "all_gather_matmul of a heap tensor")
    xs = [rand(20 + r, m, k // world) for r in range(world)]
    ws = [rand(30 + r, k // world, n_out) for r in range(world)]
    got = meshdma.torch.matmul_reduce_scatter(xs[rank], ws[rank])
    total = sum(x @ w for x, w in zip(xs, ws))
    per = m // world
    close(got, total[rank * per:(rank + 1) * per], "matmul_reduce_scatter")


def check_ring_attention(rank, world):
    batch, heads, kv_heads, seq, d = 2, 4, 2, 16 * world, 16
    q, k, v = rand(40, batch, heads, seq, d), rand(41, batch, kv_heads, seq, d), \
        rand(42, batch, kv_heads, seq, d)
    for layout, causal in [("contiguous", False), ("contiguous", True), ("zigzag", True)]:
        rows = rows_of(rank, world, seq, layout)
        got = meshdma.torch.ring_attention(q[:, :, rows], k[:, :, rows], v[:, :, rows],
                                           causal=causal, layout=layout)
        want = attention(q, k, v, causal, d ** -0.5)[:, :, rows]
        close(got, want, f"ring_attention {layout} causal={causal}")
    # k and v in the symmetric heap: ranks of this host read them in place.
    rows = rows_of(rank, world, seq, "contiguous")
    k_heap = meshdma.torch.empty(batch, kv_heads, len(rows), d)
    v_heap = meshdma.torch.empty(batch, kv_heads, len(rows), d)
    k_heap.copy_(k[:, :, rows])
    v_heap.copy_(v[:, :, rows])
    got = meshdma.torch.ring_attention(q[:, :, rows], k_heap, v_heap, causal=True)
    close(got, attention(q, k, v, True, d ** -0.5)[:, :, rows], "ring_attention of heap k, v")


def leaf(t):
    return t.clone().requires_grad_()


def check_collective_matmul_grads(rank, world):
    """loss = sum over ranks of <y_r, g_r>; each rank's x.grad and w.grad
    against the same loss on the whole problem."""
    m, k, n_out = 6 * world, 16, 8
    # all_gather_matmul: rank r has x rows block r and its own w_r (columns).
    xs = [rand(50 + r, m // world, k) for r in range(world)]
    ws = [rand(60 + r, k, n_out) for r in range(world)]
    gs = [rand(70 + r, m, n_out) for r in range(world)]
    x, w = leaf(xs[rank]), leaf(ws[rank])
    (meshdma.torch.all_gather_matmul(x, w) * gs[rank]).sum().backward()
    X, W = leaf(torch.cat(xs)), [leaf(t) for t in ws]
    sum(((X @ W[r]) * gs[r]).sum() for r in range(world)).backward()
    per = m // world
    close(x.grad, X.grad[rank * per:(rank + 1) * per], "all_gather_matmul dx", 1e-3)
    close(w.grad, W[rank].grad, "all_gather_matmul dw", 1e-3)
    # matmul_reduce_scatter: rank r has x_r [m, k/n], w_r [k/n, n_out].
    xs = [rand(80 + r, m, k // world) for r in range(world)]
    ws = [rand(90 + r, k // world, n_out) for r in range(world)]
    gs = [rand(95 + r, per, n_out) for r in range(world)]
    x, w = leaf(xs[rank]), leaf(ws[rank])
    (meshdma.torch.matmul_reduce_scatter(x, w) * gs[rank]).sum().backward()
    X, W = [leaf(t) for t in xs], [leaf(t) for t in ws]
    total = sum(a @ b for a, b in zip(X, W))
    (total * torch.cat(gs)).sum().backward()
    close(x.grad, X[rank].grad, "matmul_reduce_scatter dx", 1e-3)
    close(w.grad, W[rank].grad, "matmul_reduce_scatter dw", 1e-3)


def check_ring_attention_grads(rank, world):
    batch, heads, kv_heads, seq, d = 1, 4, 2, 8 * world, 8
    q, k, v = rand(140, batch, heads, seq, d), rand(141, batch, kv_heads, seq, d), \
        rand(142, batch, kv_heads, seq, d)
    g = rand(143, batch, heads, seq, d)
    for layout, causal in [("contiguous", False), ("contiguous", True), ("zigzag", True)]:
        rows = rows_of(rank, world, seq, layout)
        mine = [leaf(t[:, :, rows]) for t in (q, k, v)]
        out = meshdma.torch.ring_attention(*mine, causal=causal, layout=layout, sm_scale=0.3)
        (out * g[:, :, rows]).sum().backward()
        whole = [leaf(t.double()) for t in (q, k, v)]
        (attention(*whole, causal, 0.3) * g.double()).sum().backward()
        for name, got, ref in zip("qkv", mine, whole):
            close(got.grad, ref.grad[:, :, rows].float(),
                  f"ring_attention {layout} causal={causal} d{name}", 1e-3)


def check_refusals(rank, world):
    w = torch.ones(8, 4)
    for call, error, text in [
            (lambda: meshdma.torch.all_gather_matmul(torch.ones(2, 8, dtype=torch.float64), w),
             TypeError, "'x' is Double"),
            (lambda: meshdma.torch.all_gather_matmul(torch.ones(2, 7), w),
             ValueError, "x's columns must be w's rows"),
            (lambda: meshdma.torch.matmul_reduce_scatter(torch.ones(2 * world + 1, 8), w),
             ValueError, f"multiple of the group's {world} ranks"),
            (lambda: meshdma.torch.ring_attention(*[torch.ones(1, 2, 4, 8)] * 3, layout="spiral"),
             ValueError, "layout 'spiral'")]:
        try:
            call()
            raise AssertionError(f"accepted: {text}")
        except error as e:
            assert text in str(e) and f"rank {rank}" in str(e) or "layout" in text, str(e)
    part = dist.new_group([0])
    if rank == 0:
        try:
            meshdma.torch.all_gather_matmul(torch.ones(2, 8), w, group=part)
            raise AssertionError("a group that is not the launch was accepted")
        except ValueError as e:
            assert "is not the launch" in str(e) and "launch ranks [0]" in str(e), str(e)
    # The group still serves.
    t = torch.ones(3)
    dist.all_reduce(t)
    assert t.tolist() == [world] * 3


KV_LAYERS, KV_HEADS, KV_DIM, PAGE, PAGES = 3, 2, 8, 4, 16


def prompt_kv(prompt, layer, seq):
    """Prompt `prompt`'s keys and values of `layer`: [KV_HEADS, seq, KV_DIM]."""
    return (rand(100 * prompt + 2 * layer, KV_HEADS, seq, KV_DIM),
            rand(100 * prompt + 2 * layer + 1, KV_HEADS, seq, KV_DIM))


def check_kv_cache_transfer(rank, world):
    """Every pair (rank i prefills for rank i + world/2) moves prompts of its
    own into its decode rank's cache."""
    kv = meshdma.torch.KvCacheTransfer(num_layers=KV_LAYERS, num_kv_heads=KV_HEADS,
                                       head_dim=KV_DIM, page_size=PAGE, total_pages=PAGES)
    half = world // 2
    pair, decoding = rank % half, rank >= half
    assert kv.is_prefill != decoding and kv.partner == (rank + half) % world
    # Prompt 0 takes a run of consecutive pages then a scattered one, prompt
    # 1 two scattered pages with a partial last page.
    prompts = [(10, [5, 6, 2]), (7, [9, 0])]
    ids = [10 * pair + i for i in range(len(prompts))]  # Each pair's own data.
    want = torch.zeros(KV_LAYERS, 2, KV_HEADS, PAGES, PAGE, KV_DIM)
    heads = 2 * KV_HEADS  # Query heads: GQA over the kv heads.
    for prompt, (seq, table) in enumerate(prompts):
        for layer in range(KV_LAYERS):
            k, v = prompt_kv(ids[prompt], layer, seq)
            for t in range(seq):
                want[layer, 0, :, table[t // PAGE], t % PAGE] = k[:, t]
                want[layer, 1, :, table[t // PAGE], t % PAGE] = v[:, t]
        decoded = []

        def decode(layer, key_cache, value_cache, seq=seq, table=table):
            # The layer is whole when decode is called for it.
            close(key_cache, want[layer, 0], f"key cache of layer {layer} at decode")
            close(value_cache, want[layer, 1], f"value cache of layer {layer} at decode")
            q = rand(7 + layer, 1, heads, KV_DIM)
            got = meshdma.torch.paged_attention(
                q, key_cache, value_cache, torch.tensor([seq], dtype=torch.int32),
                torch.tensor([table], dtype=torch.int32), 1)
            k, v = prompt_kv(ids[prompt], layer, seq)
            ref = attention(q.unsqueeze(2), k.unsqueeze(0), v.unsqueeze(0), False, 1.0)
            close(got, ref.squeeze(2).float(), f"paged attention of layer {layer}")
            decoded.append(layer)

        kv.transfer(seq, prefill=lambda layer, p=ids[prompt], s=seq: prompt_kv(p, layer, s),
                    block_table=table, decode=decode)
        if decoding:
            assert decoded == list(range(KV_LAYERS)), decoded
    if decoding:
        close(kv.cache, want, "the decode cache after both prompts")
        # Bad tables raise on the decode rank alone, before anything runs.
        for table, text in [([5, 6], "block_table has 2 entries"),
                            ([5, 16, 2], "names page 16 of a cache of 16"),
                            ([5, 5, 2], "names page 5 twice")]:
            try:
                kv.transfer(10, block_table=table)
                raise AssertionError(f"accepted: {text}")
            except ValueError as e:
                assert text in str(e) and f"rank {rank}" in str(e), str(e)
    # The pair still transfers, and the group serves.
    kv.transfer(4, prefill=lambda layer: prompt_kv(5, layer, 4), block_table=[15])
    if decoding:
        close(kv.cache[:, 0, :, 15], torch.stack([prompt_kv(5, l, 4)[0] for l in range(KV_LAYERS)]),
              "keys of the prompt after the refusals")
    t = torch.ones(3)
    dist.all_reduce(t)
    assert t.tolist() == [world] * 3


def run_checks(rank, world):
    checks = [check_collective_matmuls, check_ring_attention, check_collective_matmul_grads,
              check_ring_attention_grads, check_refusals]
    if world % 2 == 0:
        checks.append(check_kv_cache_transfer)
    for check in checks:
        check(rank, world)


class FusedTest(unittest.TestCase):
    def test_fused_kernels_against_torch(self):
        run_ranks(self, run_checks, WORLD)


if __name__ == "__main__":
    unittest.main(verbosity=2)
