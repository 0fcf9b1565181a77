"""A tensor-parallel transformer block (attention + MLP) in PyTorch on
meshdma, checked against the same block on one rank.

    torchrun --nproc_per_node 2 examples/torch/tensor_parallel_block.py
    mpirun -np 2 python3 examples/torch/tensor_parallel_block.py
        [--seq 256] [--model 256] [--heads 8] [--ffn 1024] [--steps 5]
        [--backend meshdma|gloo] [--parts]

(PYTHONPATH=build/python, or after cmake --install.) Megatron's split:
the attention's q/k/v projections and the MLP's first linear are
column-parallel (each rank holds heads / n heads and ffn / n columns), the
attention's output projection and the MLP's second linear row-parallel.

With meshdma (the default), the activations are sequence-parallel between
the two halves: each rank holds seq / n rows of the residual stream, and
the collectives fuse with the linears that need them:
`all_gather_matmul` gathers the rows while it multiplies them into the
column-parallel weights, `matmul_reduce_scatter` sums the row-parallel
partial products while it scatters their rows. Attention runs on the local
heads with meshdma's `flash_attention`.

With --backend gloo, the same block in plain torch.distributed: the
residual stream replicated, an all_reduce after each row-parallel linear
(what gloo offers), torch's attention. Both print the step time; each rank
checks its output against the block computed whole on one rank.
"""
import argparse
import os
import time

# torch.set_num_threads does not reach the BLAS Debian's torch calls
# (OpenBLAS, with threads of its own): one thread per rank is set here.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import torch
import torch.distributed as dist

import meshdma.torch


def weights(model, ffn, seed=0):
    g = torch.Generator().manual_seed(seed)
    def w(*shape):
        return torch.randn(*shape, generator=g) / shape[0] ** 0.5
    return {"qkv": w(model, 3 * model), "o": w(model, model),
            "w1": w(model, ffn), "w2": w(ffn, model)}


def attention(q, k, v):
    """[heads, seq, d] -> [heads, seq, d], causal, in torch."""
    logits = torch.matmul(q, k.transpose(-1, -2)) * q.shape[-1] ** -0.5
    n = q.shape[1]
    logits = logits.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    return torch.matmul(torch.softmax(logits, dim=-1), v)


def heads_of(x, heads):
    """[seq, heads * d] -> [heads, seq, d]."""
    return x.reshape(x.shape[0], heads, -1).transpose(0, 1)


def block_whole(x, w, heads):
    """The block on one rank: x [seq, model] -> [seq, model]."""
    q, k, v = (x @ w["qkv"]).chunk(3, dim=1)
    a = attention(heads_of(q, heads), heads_of(k, heads), heads_of(v, heads))
    h = x + a.transpose(0, 1).reshape(x.shape) @ w["o"]
    return h + torch.nn.functional.gelu(h @ w["w1"]) @ w["w2"]


def shard(w, rank, n, heads):
    """This rank's slices: q, k, v columns of its heads; o's and w2's rows;
    w1's columns."""
    model = w["o"].shape[0]
    cols = model // n
    q, k, v = w["qkv"].chunk(3, dim=1)
    mine = slice(rank * cols, (rank + 1) * cols)
    ffn = w["w1"].shape[1] // n
    f = slice(rank * ffn, (rank + 1) * ffn)
    return {"qkv": torch.cat([q[:, mine], k[:, mine], v[:, mine]], dim=1).contiguous(),
            "o": w["o"][mine].contiguous(), "w1": w["w1"][:, f].contiguous(),
            "w2": w["w2"][f].contiguous(), "heads": heads // n}


def block_meshdma(x_rows, s, mark=lambda part: None):
    """Sequence-parallel: x_rows [seq / n, model] -> [seq / n, model].
    `mark(part)` is called as each part ends (--parts times them)."""
    qkv = meshdma.torch.all_gather_matmul(x_rows, s["qkv"])          # [seq, 3 model / n]
    mark("all_gather_matmul q, k, v")
    q, k, v = (heads_of(t, s["heads"])[None] for t in qkv.chunk(3, dim=1))
    a = meshdma.torch.flash_attention(q, k, v, causal=True, sm_scale=q.shape[-1] ** -0.5)[0]
    a = a.transpose(0, 1).reshape(qkv.shape[0], -1)                 # [seq, model / n]
    mark("flash_attention")
    h = x_rows + meshdma.torch.matmul_reduce_scatter(a, s["o"])      # [seq / n, model]
    mark("matmul_reduce_scatter o")
    up = meshdma.torch.all_gather_matmul(h, s["w1"])
    mark("all_gather_matmul w1")
    up = torch.nn.functional.gelu(up)
    mark("gelu")
    out = h + meshdma.torch.matmul_reduce_scatter(up, s["w2"])
    mark("matmul_reduce_scatter w2")
    return out


def time_parts(x_rows, s, steps, seq, n):
    """Median ms of each part of block_meshdma over `steps` steps, and of
    torch's own matmul of each fused matmul's whole shape (both ranks at
    once): what the one-core matmul rate allows."""
    parts = {}
    def mark(part):
        nonlocal last
        now = time.perf_counter()
        parts.setdefault(part, []).append(now - last)
        last = now
    for _ in range(steps):
        dist.barrier()
        last = time.perf_counter()
        block_meshdma(x_rows, s, mark)
    shapes = {"all_gather_matmul q, k, v": (seq, s["qkv"]), "matmul_reduce_scatter o": (seq, s["o"]),
              "all_gather_matmul w1": (seq, s["w1"]), "matmul_reduce_scatter w2": (seq, s["w2"])}
    torch_mm = {}
    for part, (rows, w) in shapes.items():
        a = torch.randn(rows, w.shape[0])
        times = []
        for _ in range(steps + 1):
            dist.barrier()
            start = time.perf_counter()
            torch.matmul(a, w)
            times.append(time.perf_counter() - start)
        torch_mm[part] = sorted(times[1:])[steps // 2]
    med = lambda t: sorted(t)[len(t) // 2] * 1e3
    return ", ".join(f"{p} {med(t):.2f}" + (f" (torch's matmul {torch_mm[p] * 1e3:.2f})" if p in torch_mm else "")
                     for p, t in parts.items())


def block_replicated(x, s):
    """Replicated activations, an all_reduce after each row-parallel linear."""
    q, k, v = (x @ s["qkv"]).chunk(3, dim=1)
    a = attention(heads_of(q, s["heads"]), heads_of(k, s["heads"]), heads_of(v, s["heads"]))
    partial = a.transpose(0, 1).reshape(x.shape[0], -1) @ s["o"]
    dist.all_reduce(partial)
    h = x + partial
    partial = torch.nn.functional.gelu(h @ s["w1"]) @ s["w2"]
    dist.all_reduce(partial)
    return h + partial


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--model", type=int, default=256)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--ffn", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--backend", choices=["meshdma", "gloo"], default="meshdma")
    parser.add_argument("--parts", action="store_true",
                        help="meshdma: also time each part of the step, and torch's matmul of each "
                             "fused matmul's shape")
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group(args.backend)
    rank, n = dist.get_rank(), dist.get_world_size()
    for what, size in [("--seq", args.seq), ("--model", args.model), ("--heads", args.heads),
                       ("--ffn", args.ffn)]:
        if size % n:
            raise SystemExit(f"{what} {size} must be a multiple of the {n} ranks")
    if args.model % args.heads:
        raise SystemExit(f"--model {args.model} must be a multiple of --heads {args.heads}")

    w = weights(args.model, args.ffn)
    x = torch.randn(args.seq, args.model, generator=torch.Generator().manual_seed(1))
    s = shard(w, rank, n, args.heads)
    rows = slice(rank * args.seq // n, (rank + 1) * args.seq // n)
    step = (lambda: block_meshdma(x[rows].contiguous(), s)) if args.backend == "meshdma" \
        else (lambda: block_replicated(x, s)[rows])
    out = step()
    times = []
    for _ in range(args.steps):
        dist.barrier()
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    want = block_whole(x, w, args.heads)[rows]
    err = (out - want).abs().max().item()
    if err > 1e-3:
        raise SystemExit(f"rank {rank}: the block differs from the one-rank block by {err}")
    times.sort()
    print(f"rank {rank}: tensor-parallel block on {n} ranks ({args.backend}): "
          f"seq {args.seq}, model {args.model}, heads {args.heads}, ffn {args.ffn}: "
          f"step {times[len(times) // 2] * 1e3:.2f} ms (median of {args.steps}); "
          f"matches the one-rank block (max error {err:.1e})", flush=True)
    if args.parts and args.backend == "meshdma":
        parts = time_parts(x[rows].contiguous(), s, args.steps, args.seq, n)
        print(f"rank {rank}: parts, ms (median of {args.steps}): {parts}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
