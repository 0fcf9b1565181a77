"""torch.distributed collectives: meshdma's backend against gloo, a
do-nothing backend (the cost of torch's call itself) and mpi4py's MPI
collective, in one launch.

    mpirun -np 2 python3 bench/torch_collectives.py [-b 8] [-e 64M] [-f 4]
        [--ops all_reduce,all_gather,reduce_scatter,all_to_all,broadcast]
        [--backends meshdma,meshdma-heap,gloo,noop,mpi] [--min-time 0.05]
        [--rounds 3]

(PYTHONPATH=build/python, or after cmake --install.) Every process joins a
gloo default group and a meshdma group over the same ranks, so every
backend runs on the same processes, in turn, size by size. For each op,
size and backend rank 0 prints the median time per call over `--rounds`
batches (each at least `--min-time` seconds, after a warm-up), the bus
bandwidth (nccl-tests' convention: the bytes each rank sends and receives
per call over the time), and meshdma's speed-up over each other backend.
`size` is the bytes of each rank's input (all_gather: of each rank's block).
float32 tensors in ordinary memory; `meshdma-heap` is meshdma on tensors
from `meshdma.torch.empty` (the symmetric heap: all_reduce in place and
all_gather into them copy nothing extra; the other ops stage their outputs
as with ordinary tensors). "n/a": the backend
has no such collective (gloo 1.13 has no reduce_scatter nor
_all_gather_base on CPU).
"""
import argparse
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

import meshdma.torch  # (also fills torch's env from mpirun's)


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if text[-1].upper() in units:
        return int(float(text[:-1]) * units[text[-1].upper()])
    return int(text)


def human(n):
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


class NoopWork(dist.Work):
    def wait(self, timeout=None):
        return True


class NoopGroup(dist.ProcessGroup):
    """Returns at once: what torch's call costs with no backend work."""

    def __init__(self, rank, size):
        super().__init__(rank, size)

    def getBackendName(self):
        return "noop"


# Every collective the benchmark calls returns a finished Work at once.
for _call in ("allreduce", "allgather", "_allgather_base", "reduce_scatter",
              "_reduce_scatter_base", "alltoall_base", "broadcast"):
    setattr(NoopGroup, _call, lambda self, *args: NoopWork())


# Per op: (bus bandwidth factor for n ranks, function(group, buffers)).
def make_ops(world):
    def all_reduce(group, t):
        dist.all_reduce(t["in"], group=group)

    def all_gather(group, t):
        dist._all_gather_base(t["gathered"], t["in"], group=group)

    def reduce_scatter(group, t):
        dist._reduce_scatter_base(t["block"], t["in"], group=group)

    def all_to_all(group, t):
        dist.all_to_all_single(t["out"], t["in"], group=group)

    def broadcast(group, t):
        dist.broadcast(t["in"], src=0, group=group)

    n = world
    return {
        "all_reduce": (2 * (n - 1) / n, all_reduce),
        "all_gather": ((n - 1), all_gather),
        "reduce_scatter": ((n - 1) / n, reduce_scatter),
        "all_to_all": ((n - 1) / n, all_to_all),
        "broadcast": (1.0, broadcast),
    }


def mpi_ops(comm):
    from mpi4py import MPI

    def arr(t):
        return t.numpy()

    return {
        "all_reduce": lambda t: comm.Allreduce(MPI.IN_PLACE, arr(t["in"])),
        "all_gather": lambda t: comm.Allgather(arr(t["in"]), arr(t["gathered"])),
        "reduce_scatter": lambda t: comm.Reduce_scatter_block(arr(t["in"]), arr(t["block"])),
        "all_to_all": lambda t: comm.Alltoall(arr(t["in"]), arr(t["out"])),
        "broadcast": lambda t: comm.Bcast(arr(t["in"]), root=0),
    }


def buffers(op, nbytes, world, heap=False):
    numel = max(nbytes // 4, world)
    numel -= numel % world
    new = meshdma.torch.empty if heap else torch.empty
    t = {"in": new(numel).fill_(1)}
    if op == "all_gather":
        t["gathered"] = new(numel * world)
    if op == "reduce_scatter":
        t["block"] = new(numel // world)
    if op == "all_to_all":
        t["out"] = new(numel)
    return t, numel * 4


def time_calls(call, barrier, min_time, rounds):
    """Median seconds per call over `rounds` batches of equal length."""
    for _ in range(3):
        call()
    barrier()
    # Every rank runs the same number of calls: rank 0's estimate decides.
    start = time.perf_counter()
    for _ in range(5):
        call()
    per = torch.tensor([(time.perf_counter() - start) / 5], dtype=torch.float64)
    dist.broadcast(per, src=0)
    batch = max(1, int(min_time / max(per.item(), 1e-9)))
    times = []
    for _ in range(rounds):
        barrier()
        start = time.perf_counter()
        for _ in range(batch):
            call()
        times.append((time.perf_counter() - start) / batch)
    return statistics.median(times)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-b", default="8")
    p.add_argument("-e", default="64M")
    p.add_argument("-f", type=int, default=4)
    p.add_argument("--ops", default="all_reduce,all_gather,reduce_scatter,all_to_all,broadcast")
    p.add_argument("--backends", default="meshdma,meshdma-heap,gloo,noop,mpi")
    p.add_argument("--min-time", type=float, default=0.05)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    lo, hi = parse_size(args.b), parse_size(args.e)
    if lo <= 0 or hi < lo or args.f < 2:
        p.error(f"need 0 < -b <= -e and -f >= 2 (got -b {args.b} -e {args.e} -f {args.f})")
    backends = args.backends.split(",")
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    groups = {"gloo": None, "meshdma": dist.new_group(backend="meshdma")}
    groups["meshdma-heap"] = groups["meshdma"]
    if not hasattr(dist.Backend, "NOOP"):
        dist.Backend.register_backend("noop", lambda store, r, n, timeout: NoopGroup(r, n))
    groups["noop"] = dist.new_group(backend="noop")
    ops = make_ops(world)
    comm = None
    if "mpi" in backends:
        try:
            from mpi4py import MPI
            comm = MPI.COMM_WORLD if MPI.COMM_WORLD.Get_size() == world else None
        except ImportError:
            comm = None
        if comm is None:
            backends.remove("mpi")
            if rank == 0:
                print("# mpi: not measured (needs mpi4py under mpirun)")
    mpi_calls = mpi_ops(comm) if comm is not None else {}

    def barrier():
        dist.barrier(group=groups["meshdma"])

    if rank == 0:
        print(f"# {world} processes; float32; median of {args.rounds} batches of >= {args.min_time} s")
        cols = " ".join(f"{b + '_us':>11} {b + '_GB/s':>10}" for b in backends)
        ratios = " ".join(f"{'vs_' + b:>9}" for b in backends if b != "meshdma")
        print(f"{'op':>15} {'size':>10} {cols} {ratios}")
    for name in args.ops.split(","):
        factor, fn = ops[name]
        size = lo
        while size <= hi:
            t, nbytes = buffers(name, size, world)
            heap_t = buffers(name, size, world, heap=True)[0] if "meshdma-heap" in backends else None
            row = {}
            for b in backends:
                if b == "gloo" and name in ("reduce_scatter", "all_gather"):
                    row[b] = None
                    continue
                if b == "mpi":
                    call = lambda: mpi_calls[name](t)  # noqa: E731
                else:
                    bufs = heap_t if b == "meshdma-heap" else t
                    call = lambda g=groups[b], bufs=bufs: fn(g, bufs)  # noqa: E731
                row[b] = time_calls(call, barrier, args.min_time, args.rounds)
            if rank == 0:
                cells = []
                for b in backends:
                    s = row[b]
                    if s is None:
                        cells.append(f"{'n/a':>11} {'n/a':>10}")
                    else:
                        busbw = nbytes * factor / s / 1e9 if b != "noop" else float("nan")
                        cells.append(f"{s * 1e6:>11.2f} {busbw:>10.3f}")
                ours = row.get("meshdma")
                rs = []
                for b in backends:
                    if b == "meshdma":
                        continue
                    rs.append(f"{row[b] / ours:>9.2f}" if row[b] and ours else f"{'n/a':>9}")
                print(f"{name:>15} {human(nbytes):>10} {' '.join(cells)} {' '.join(rs)}", flush=True)
            del t, heap_t
            size *= args.f
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
