"""meshdma.torch's attention kernels against torch's own implementations,
on one core, in one run.

    python3 bench/torch_kernels.py [--seqs 1024,2048,4096,8192]
        [--head-dims 64,128] [--heads 1] [--causal] [--rounds 3] [--pairs 3]
        [--paged-batch 8] [--paged-seq 4096]

(PYTHONPATH=build/python, or after cmake --install.)

flash_attention: the forward plus backward of `meshdma.torch.flash_attention`
against the same attention written in torch (matmul, softmax, matmul under
autograd), float32, [1, heads, seq, head_dim]; the median of `--rounds`
timed steps after a warm-up, and each one's peak resident memory, measured
in a fresh process per case (ru_maxrss less the process's RSS before the
step). Each case runs `--pairs` such pairs of processes, the two in turn
(which goes first alternates), so that a slow spell of a shared machine
falls on both: the times are the medians over the pairs, `speedup` the
median [min-max] over the pairs of torch's time / meshdma's.

paged_attention: decode over a paged KV cache against torch's gather then
attend (index_select of the pages, matmul, softmax, matmul), and the KV
bytes read per second against the one-core copy bandwidth of this machine
(a single-threaded copy of 256 MiB: bytes read), timed in turn with the two
in each round; each figure is the median over `--rounds`.

torch runs with one thread (torch.set_num_threads(1), and
OPENBLAS_NUM_THREADS=1 for the BLAS it calls); meshdma's kernels run on its
device thread, one core.
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

# torch.set_num_threads does not reach the BLAS Debian's torch calls
# (OpenBLAS, with threads of its own): one thread per process is set here.
os.environ["OPENBLAS_NUM_THREADS"] = "1"

import torch


def rss_kib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def torch_attention(q, k, v, causal, sm_scale):
    logits = torch.matmul(q, k.transpose(-1, -2)) * sm_scale
    if causal:
        n = q.shape[2]
        logits = logits.masked_fill(
            torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    return torch.matmul(torch.softmax(logits, dim=-1), v)


def flash_case(impl, seq, d, heads, causal, rounds):
    """One case in this process: (median seconds per fwd+bwd, peak KiB)."""
    import meshdma.torch
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    q, k, v, dout = (torch.randn(1, heads, seq, d, generator=g) for _ in range(4))
    scale = d ** -0.5
    fn = (lambda a, b, c: meshdma.torch.flash_attention(a, b, c, causal=causal, sm_scale=scale)) \
        if impl == "meshdma" else (lambda a, b, c: torch_attention(a, b, c, causal, scale))

    def step():
        a, b, c = (t.detach().requires_grad_() for t in (q, k, v))
        fn(a, b, c).backward(dout)

    step()  # warm-up (and the meshdma device's start)
    base = rss_kib()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return statistics.median(times), max(0, peak - base)


def run_flash(args):
    print("flash_attention forward+backward, float32, one core "
          f"(heads {args.heads}{', causal' if args.causal else ''}; "
          "peak = the step's resident memory above the process's before it)")
    print(f"{'seq':>6} {'d':>4} {'meshdma ms':>11} {'torch ms':>9} {'speedup [range]':>20} "
          f"{'meshdma MiB':>12} {'torch MiB':>10}")
    for seq in args.seqs:
        for d in args.head_dims:
            runs = {"meshdma": [], "torch": []}
            for pair in range(args.pairs):
                order = ("meshdma", "torch") if pair % 2 == 0 else ("torch", "meshdma")
                for impl in order:
                    cmd = [sys.executable, __file__, "--one", impl, str(seq), str(d),
                           str(args.heads), str(int(args.causal)), str(args.rounds)]
                    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
                    runs[impl].append(json.loads(out.stdout.strip().splitlines()[-1]))
            ratios = [t[0] / m[0] for m, t in zip(runs["meshdma"], runs["torch"])]
            mt, tt = (statistics.median(r[0] for r in runs[i]) for i in ("meshdma", "torch"))
            mm, tm = (max(r[1] for r in runs[i]) for i in ("meshdma", "torch"))
            speedup = f"{statistics.median(ratios):.2f} [{min(ratios):.2f}-{max(ratios):.2f}]"
            print(f"{seq:>6} {d:>4} {mt * 1e3:>11.1f} {tt * 1e3:>9.1f} {speedup:>20} "
                  f"{mm / 1024:>12.1f} {tm / 1024:>10.1f}", flush=True)


def torch_paged(q, k_pages, v_pages, lengths, page_indices):
    """Gather each sequence's pages (index_select), then attend."""
    batch, heads, d = q.shape
    kv_heads, _, page_size, _ = k_pages.shape
    out = torch.empty_like(q)
    for b in range(batch):
        n = int(lengths[b])
        pages = page_indices[b, :(n + page_size - 1) // page_size].long()
        k = k_pages.index_select(1, pages).reshape(kv_heads, -1, d)[:, :n]
        v = v_pages.index_select(1, pages).reshape(kv_heads, -1, d)[:, :n]
        qb = q[b].reshape(kv_heads, heads // kv_heads, d)
        p = torch.softmax(torch.matmul(qb, k.transpose(-1, -2)), dim=-1)
        out[b] = torch.matmul(p, v).reshape(heads, d)
    return out


def run_paged(args):
    import meshdma.torch
    torch.set_num_threads(1)
    heads, kv_heads, d, page_size = 32, 8, 128, 16
    pps = args.paged_seq // page_size
    pages = args.paged_batch * pps
    g = torch.Generator().manual_seed(1)
    q = torch.randn(args.paged_batch, heads, d, generator=g) * d ** -0.5
    k_pages = torch.randn(kv_heads, pages, page_size, d, generator=g)
    v_pages = torch.randn(kv_heads, pages, page_size, d, generator=g)
    page_indices = torch.randperm(pages, generator=g).reshape(args.paged_batch, pps).int()
    lengths = torch.full((args.paged_batch,), args.paged_seq, dtype=torch.int32)
    kv_bytes = 2 * kv_heads * args.paged_batch * args.paged_seq * d * 4
    src = torch.ones(64 << 20)
    dst = torch.empty_like(src)
    print(f"\npaged_attention decode, float32, one core: batch {args.paged_batch}, "
          f"{args.paged_seq} tokens each, heads {heads}/{kv_heads}, head_dim {d}, "
          f"page {page_size} ({kv_bytes / 2**20:.0f} MiB of KV read per call); "
          f"the bound: a one-thread copy of 256 MiB, timed in turn with each round; "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"{'pages/block':>11} {'meshdma ms':>11} {'torch ms':>9} {'speedup':>8} "
          f"{'GB/s':>6} {'copy GB/s':>9} {'of copy bw':>10}")
    for ppcb in [n for n in (8, 16, 32) if pps % n == 0]:
        fns = {"meshdma": lambda: meshdma.torch.paged_attention(
                   q, k_pages, v_pages, lengths, page_indices, ppcb),
               "torch": lambda: torch_paged(q, k_pages, v_pages, lengths, page_indices),
               "copy": lambda: dst.copy_(src)}
        times = {name: [] for name in fns}
        for fn in fns.values():
            fn()
        for _ in range(args.rounds):
            for name, fn in fns.items():
                start = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - start)
        m, t, c = (statistics.median(times[n]) for n in ("meshdma", "torch", "copy"))
        bound = src.numel() * 4 / c
        print(f"{ppcb:>11} {m * 1e3:>11.2f} {t * 1e3:>9.2f} {t / m:>8.2f} "
              f"{kv_bytes / m / 1e9:>6.2f} {bound / 1e9:>9.2f} {kv_bytes / m / bound:>10.2f}",
              flush=True)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--one":
        impl, seq, d, heads, causal, rounds = sys.argv[2:8]
        print(json.dumps(flash_case(impl, int(seq), int(d), int(heads), causal == "1",
                                    int(rounds))))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ints = lambda s: [int(x) for x in s.split(",")]  # noqa: E731
    parser.add_argument("--seqs", type=ints, default=[1024, 2048, 4096, 8192])
    parser.add_argument("--head-dims", type=ints, default=[64, 128])
    parser.add_argument("--heads", type=int, default=1)
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pairs", type=int, default=3,
                        help="flash_attention: process pairs per case, in turn")
    parser.add_argument("--paged-batch", type=int, default=8)
    parser.add_argument("--paged-seq", type=int, default=4096)
    parser.add_argument("--skip", default="", help="flash, paged")
    args = parser.parse_args()
    if "flash" not in args.skip:
        run_flash(args)
    if "paged" not in args.skip:
        run_paged(args)


if __name__ == "__main__":
    main()
