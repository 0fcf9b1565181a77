"""Ring attention from torch: meshdma's ring_attention (forward: the ring
kernel; backward: meshdma's flash attention backward block by block)
against the same sequence-parallel attention written in torch (all-gather
the keys and values, matmul, softmax, matmul, autograd, reduce-scatter dk
and dv), in one launch, forward and backward, time and peak memory.

    mpirun -np 2 python3 bench/torch_ring_attention.py [--seqs 2048,4096]
        [--heads 8] [--kv-heads 8] [--head-dim 64] [--causal] [--rounds 3]

(PYTHONPATH=build/python, or after cmake --install; torchrun works too.)
`seq` is the whole sequence; each rank holds seq / n rows (contiguous).
Rank 0 prints, per sequence length, each implementation's median forward
and backward time over `--rounds` steps (after a warm-up step), meshdma's
speed-up on the step, and each one's peak resident memory above what the
process held before the step (Linux's VmHWM, reset before each step), in
MiB: torch's backward holds seq / n x seq logits per head, meshdma's
O(seq x head_dim). float32.
"""
import argparse
import ctypes
import os
import re
import statistics
import time

# torch.set_num_threads does not reach the BLAS Debian's torch calls
# (OpenBLAS, with threads of its own): one thread per rank is set here.
os.environ["OPENBLAS_NUM_THREADS"] = "1"

import torch
import torch.distributed as dist

import meshdma.torch  # (also fills torch's env from mpirun's)


def resident_kib(field):
    status = open("/proc/self/status").read()
    return int(re.search(rf"{field}:\s+(\d+)", status).group(1))


def reset_peak():
    """Memory freed earlier goes back to the system, and the peak restarts."""
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def torch_step(q, k, v, g, causal, scale, group):
    """Sequence-parallel attention in torch: this rank's rows against the
    gathered keys and values; dk and dv reduce-scattered to their owners."""
    world, rank, rows = group.size(), group.rank(), q.shape[2]
    parts = [[torch.empty_like(t) for _ in range(world)] for t in (k, v)]
    for t, p in zip((k, v), parts):
        dist.all_gather(p, t, group=group)
    kk, vv = (torch.cat(p, dim=2).requires_grad_() for p in parts)
    heads_per_kv = q.shape[1] // k.shape[1]
    logits = torch.matmul(q, kk.repeat_interleave(heads_per_kv, 1).transpose(-1, -2)) * scale
    if causal:
        mine = torch.arange(rank * rows, (rank + 1) * rows)
        logits = logits.masked_fill(mine[:, None] < torch.arange(rows * world)[None, :],
                                    float("-inf"))
    out = torch.matmul(torch.softmax(logits, dim=-1), vv.repeat_interleave(heads_per_kv, 1))
    forward_done = time.perf_counter()
    out.backward(g)
    for full, mine in ((kk, k), (vv, v)):
        grad = torch.empty_like(mine)
        dist.reduce_scatter(grad, list(full.grad.chunk(world, dim=2)), group=group)
    return forward_done


def meshdma_step(q, k, v, g, causal, scale, group):
    out = meshdma.torch.ring_attention(q, k, v, group=group, causal=causal, sm_scale=scale)
    forward_done = time.perf_counter()
    out.backward(g)
    return forward_done


def measure(step, tensors, args, group):
    """Median forward and backward seconds, and peak MiB above the start."""
    forward, backward, peak = [], [], []
    for r in range(args.rounds + 1):
        q, k, v, g = (t.detach().clone().requires_grad_(i < 3) for i, t in enumerate(tensors))
        group.barrier()
        reset_peak()
        held = resident_kib("VmRSS")
        start = time.perf_counter()
        mid = step(q, k, v, g, args.causal, args.head_dim ** -0.5, group)
        end = time.perf_counter()
        if r > 0:
            forward.append(mid - start)
            backward.append(end - mid)
            peak.append((resident_kib("VmHWM") - held) / 1024)
    return statistics.median(forward), statistics.median(backward), max(peak)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seqs", default="2048,4096")
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--kv-heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    dist.init_process_group("meshdma")
    group, world = dist.group.WORLD, dist.get_world_size()
    torch.set_num_threads(1)
    if dist.get_rank() == 0:
        print(f"ring attention fwd+bwd, {world} ranks, heads {args.heads}/{args.kv_heads}, "
              f"head_dim {args.head_dim}, causal {args.causal}; ms (median of {args.rounds}), "
              "peak MiB above the step's start")
        print(f"{'seq':>6} {'meshdma fwd':>11} {'bwd':>8} {'torch fwd':>10} {'bwd':>8} "
              f"{'speed-up':>8} {'meshdma MiB':>11} {'torch MiB':>9}")
    for seq in (int(s) for s in args.seqs.split(",")):
        gen = torch.Generator().manual_seed(seq + dist.get_rank())
        rows = seq // world
        shapes = [(1, args.heads, rows, args.head_dim)] + \
            [(1, args.kv_heads, rows, args.head_dim)] * 2 + [(1, args.heads, rows, args.head_dim)]
        tensors = [torch.randn(s, generator=gen) for s in shapes]
        ours = measure(meshdma_step, tensors, args, group)
        theirs = measure(torch_step, tensors, args, group)
        if dist.get_rank() == 0:
            speed_up = (theirs[0] + theirs[1]) / (ours[0] + ours[1])
            print(f"{seq:>6} {ours[0] * 1e3:>11.1f} {ours[1] * 1e3:>8.1f} "
                  f"{theirs[0] * 1e3:>10.1f} {theirs[1] * 1e3:>8.1f} {speed_up:>8.2f} "
                  f"{ours[2]:>11.1f} {theirs[2]:>9.1f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
