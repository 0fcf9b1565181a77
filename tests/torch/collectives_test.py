"""meshdma's torch.distributed backend against torch reference computations.

Every op of the backend, on ranks started by torch.multiprocessing with a
FileStore (no MPI), checked against what torch computes from every rank's
inputs (each rank can rebuild them: they depend on the rank only): dtypes,
non-contiguous tensors, async work and futures, subgroups, point-to-point,
unequal all_to_all splits, and errors for bad input.

Run: PYTHONPATH=<build>/python /usr/bin/python3 tests/torch/collectives_test.py
(MESHDMA_TORCH_TEST_WORLD=4 for four ranks).
"""
import os
import sys
import tempfile
import time
import traceback
import unittest

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import meshdma.torch  # registers the backend

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16,
          torch.int32, torch.int64, torch.int8, torch.uint8]
WORLD = int(os.environ.get("MESHDMA_TORCH_TEST_WORLD", "2"))


def make(rank, shape, dtype, salt=0):
    """The input of `rank`: small integers, exact in every dtype."""
    n = 1
    for s in shape:
        n *= s
    base = torch.arange(n, dtype=torch.int64).reshape(shape)
    values = (base * 3 + rank * 7 + salt) % 11 - (0 if dtype == torch.uint8 else 5)
    return values.to(dtype)


def reference_reduce(tensors, op):
    stacked = torch.stack([t.to(torch.float64) if t.is_floating_point() else t.to(torch.int64) for t in tensors])
    if op == dist.ReduceOp.SUM:
        out = stacked.sum(0)
    elif op == dist.ReduceOp.MAX:
        out = stacked.max(0).values
    elif op == dist.ReduceOp.MIN:
        out = stacked.min(0).values
    elif op == dist.ReduceOp.PRODUCT:
        out = stacked.prod(0)
    elif op == dist.ReduceOp.AVG:
        out = stacked.sum(0) / len(tensors)
    elif op == dist.ReduceOp.BAND:
        out = tensors[0].clone()
        for t in tensors[1:]:
            out &= t
    elif op == dist.ReduceOp.BOR:
        out = tensors[0].clone()
        for t in tensors[1:]:
            out |= t
    elif op == dist.ReduceOp.BXOR:
        out = tensors[0].clone()
        for t in tensors[1:]:
            out ^= t
    return out.to(tensors[0].dtype)


def check_equal(actual, expected, what):
    if actual.dtype != expected.dtype or actual.shape != expected.shape:
        raise AssertionError(f"{what}: {actual.dtype}{tuple(actual.shape)} vs "
                             f"{expected.dtype}{tuple(expected.shape)}")
    tol = {torch.bfloat16: 1e-2, torch.float16: 1e-3}.get(actual.dtype, 1e-6)
    if actual.is_floating_point():
        ok = torch.allclose(actual.double(), expected.double(), rtol=tol, atol=tol)
    else:
        ok = torch.equal(actual, expected)
    if not ok:
        raise AssertionError(f"{what}: got {actual.flatten()[:8].tolist()} "
                             f"expected {expected.flatten()[:8].tolist()}")


# ---------------------------------------------------------------- the checks
def check_all_reduce(rank, world):
    for dtype in DTYPES:
        ops = [dist.ReduceOp.SUM, dist.ReduceOp.MAX, dist.ReduceOp.MIN,
               dist.ReduceOp.PRODUCT]
        if dtype.is_floating_point:
            ops.append(dist.ReduceOp.AVG)
        else:
            ops += [dist.ReduceOp.BAND, dist.ReduceOp.BOR, dist.ReduceOp.BXOR]
        for op in ops:
            for shape in [(1,), (5, 3), (4096,)]:
                t = make(rank, shape, dtype)
                if op == dist.ReduceOp.PRODUCT:
                    t = (t % 3).to(dtype)
                dist.all_reduce(t, op=op)
                ins = [make(r, shape, dtype) for r in range(world)]
                if op == dist.ReduceOp.PRODUCT:
                    ins = [(i % 3).to(dtype) for i in ins]
                check_equal(t, reference_reduce(ins, op), f"all_reduce {op} {dtype} {shape}")
    # Large enough for the ring kernels, and non-contiguous.
    t = make(rank, (1 << 20,), torch.float32)
    dist.all_reduce(t)
    check_equal(t, sum(make(r, (1 << 20,), torch.float32) for r in range(world)), "all_reduce 4 MiB")
    base = make(rank, (64, 32), torch.float32)
    view = base.t()
    dist.all_reduce(view)
    expected = sum(make(r, (64, 32), torch.float32) for r in range(world)).t()
    check_equal(view, expected, "all_reduce non-contiguous")


def check_all_gather(rank, world):
    for dtype in DTYPES:
        for shape in [(3,), (1000, 3), (0,)]:
            t = make(rank, shape, dtype)
            outs = [torch.empty(shape, dtype=dtype) for _ in range(world)]
            dist.all_gather(outs, t)
            for r in range(world):
                check_equal(outs[r], make(r, shape, dtype), f"all_gather {dtype} {shape} from {r}")
    t = make(rank, (300, 7), torch.float32)
    out = torch.empty(world * 300, 7)
    dist._all_gather_base(out, t)
    check_equal(out, torch.cat([make(r, (300, 7), torch.float32) for r in range(world)]), "_all_gather_base")
    # Non-contiguous output views.
    outs = [torch.empty(7, 300).t() for _ in range(world)]
    dist.all_gather(outs, t)
    for r in range(world):
        check_equal(outs[r], make(r, (300, 7), torch.float32), "all_gather into views")
    # Coalesced: several tensors at once.
    a, b = make(rank, (5,), torch.int64), make(rank, (2, 2), torch.int64, salt=1)
    outs = [[torch.empty(5, dtype=torch.int64), torch.empty(2, 2, dtype=torch.int64)] for _ in range(world)]
    dist.all_gather_coalesced(outs, [a, b])
    for r in range(world):
        check_equal(outs[r][0], make(r, (5,), torch.int64), "all_gather_coalesced a")
        check_equal(outs[r][1], make(r, (2, 2), torch.int64, salt=1), "all_gather_coalesced b")


def check_reduce_scatter(rank, world):
    for dtype in [torch.float32, torch.bfloat16, torch.int64, torch.uint8]:
        for op in [dist.ReduceOp.SUM, dist.ReduceOp.MAX, dist.ReduceOp.MIN]:
            ins = [make(rank, (33,), dtype, salt=j) for j in range(world)]
            out = torch.empty(33, dtype=dtype)
            dist.reduce_scatter(out, ins, op=op)
            expected = reference_reduce([make(r, (33,), dtype, salt=rank) for r in range(world)], op)
            check_equal(out, expected, f"reduce_scatter {op} {dtype}")
    flat = make(rank, (world * 4096,), torch.float32)
    out = torch.empty(4096)
    dist._reduce_scatter_base(out, flat)
    expected = sum(make(r, (world * 4096,), torch.float32) for r in range(world))[rank * 4096:(rank + 1) * 4096]
    check_equal(out, expected, "_reduce_scatter_base")


def check_all_to_all(rank, world):
    for dtype in [torch.float32, torch.int8, torch.float16]:
        t = make(rank, (world * 6, 5), dtype)
        out = torch.empty_like(t)
        dist.all_to_all_single(out, t)
        expected = torch.cat([make(r, (world * 6, 5), dtype)[rank * 6:(rank + 1) * 6] for r in range(world)])
        check_equal(out, expected, f"all_to_all_single {dtype}")
    # Unequal splits: rank r sends r + j + 1 rows to rank j.
    in_splits = [rank + j + 1 for j in range(world)]
    out_splits = [r + rank + 1 for r in range(world)]
    t = make(rank, (sum(in_splits), 3), torch.float32)
    out = torch.empty(sum(out_splits), 3)
    dist.all_to_all_single(out, t, out_splits, in_splits)
    parts = []
    for r in range(world):
        src_splits = [r + j + 1 for j in range(world)]
        start = sum(src_splits[:rank])
        parts.append(make(r, (sum(src_splits), 3), torch.float32)[start:start + src_splits[rank]])
    check_equal(out, torch.cat(parts), "all_to_all_single unequal")
    # The list form, unequal sizes.
    ins = [make(rank, (rank + j + 1,), torch.int64, salt=j) for j in range(world)]
    outs = [torch.empty(r + rank + 1, dtype=torch.int64) for r in range(world)]
    dist.all_to_all(outs, ins)
    for r in range(world):
        check_equal(outs[r], make(r, (r + rank + 1,), torch.int64, salt=rank), f"all_to_all list from {r}")


def check_rooted(rank, world):
    for root in range(world):
        for dtype in [torch.float32, torch.int8, torch.bfloat16]:
            t = make(rank, (17, 3), dtype)
            dist.broadcast(t, src=root)
            check_equal(t, make(root, (17, 3), dtype), f"broadcast from {root} {dtype}")
        t = make(rank, (9,), torch.float64)
        dist.reduce(t, dst=root, op=dist.ReduceOp.SUM)
        if rank == root:
            check_equal(t, sum(make(r, (9,), torch.float64) for r in range(world)), "reduce")
        else:
            check_equal(t, make(rank, (9,), torch.float64), "reduce leaves non-roots")
        t = make(rank, (4,), torch.int32)
        outs = [torch.empty(4, dtype=torch.int32) for _ in range(world)] if rank == root else None
        dist.gather(t, outs, dst=root)
        if rank == root:
            for r in range(world):
                check_equal(outs[r], make(r, (4,), torch.int32), "gather")
        out = torch.empty(6, dtype=torch.float32)
        ins = [make(root, (6,), torch.float32, salt=j) for j in range(world)] if rank == root else None
        dist.scatter(out, ins, src=root)
        check_equal(out, make(root, (6,), torch.float32, salt=rank), "scatter")
    dist.barrier()


def check_point_to_point(rank, world):
    # A ring of sends and receives, small and above one chunk (1 MiB).
    for numel in [3, (1 << 20) // 4 * 3]:
        right, left = (rank + 1) % world, (rank - 1) % world
        send = make(rank, (numel,), torch.float32)
        recv = torch.empty(numel)
        reqs = [dist.isend(send, right, tag=5), dist.irecv(recv, left, tag=5)]
        for req in reqs:
            req.wait()
        check_equal(recv, make(left, (numel,), torch.float32), f"isend/irecv {numel}")
    if rank == 0:
        dist.send(make(0, (10,), torch.int64), 1)
    elif rank == 1:
        t = torch.empty(10, dtype=torch.int64)
        dist.recv(t, 0)
        check_equal(t, make(0, (10,), torch.int64), "send/recv")


def check_async(rank, world):
    works, tensors = [], []
    for i in range(4):
        t = make(rank, (1000,), torch.float32, salt=i)
        works.append(dist.all_reduce(t, async_op=True))
        tensors.append(t)
    fut = works[-1].get_future()
    for i, w in enumerate(works):
        w.wait()
        assert w.is_completed() and w.is_success()
        check_equal(tensors[i], sum(make(r, (1000,), torch.float32, salt=i) for r in range(world)), "async all_reduce")
    value = fut.wait()
    check_equal(value[0], tensors[-1], "future's value")


def check_subgroups(rank, world):
    evens = list(range(0, world, 2))
    odds = list(range(1, world, 2))
    g_even = dist.new_group(evens, backend="meshdma")
    g_odd = dist.new_group(odds, backend="meshdma")
    g_all = dist.new_group(list(range(world)), backend="meshdma")
    mine, group = (evens, g_even) if rank % 2 == 0 else (odds, g_odd)
    t = make(rank, (100,), torch.float32)
    dist.all_reduce(t, group=group)
    check_equal(t, sum(make(r, (100,), torch.float32) for r in mine), "subgroup all_reduce")
    outs = [torch.empty(3, dtype=torch.int64) for _ in mine]
    dist.all_gather(outs, make(rank, (3,), torch.int64), group=group)
    for i, r in enumerate(mine):
        check_equal(outs[i], make(r, (3,), torch.int64), "subgroup all_gather")
    t = make(rank, (8,), torch.float64)
    dist.broadcast(t, src=mine[-1], group=group)
    check_equal(t, make(mine[-1], (8,), torch.float64), "subgroup broadcast")
    t = make(rank, (5,), torch.float32)
    dist.all_reduce(t, group=g_all)
    check_equal(t, sum(make(r, (5,), torch.float32) for r in range(world)), "group of all ranks")
    dist.barrier(group=group)


def check_heap_tensors(rank, world):
    """Tensors in the symmetric heap: the same answers, in place."""
    for dtype in [torch.float32, torch.bfloat16, torch.int64]:
        t = meshdma.torch.empty(300, 7, dtype=dtype)
        t.copy_(make(rank, (300, 7), dtype))
        dist.all_reduce(t)
        check_equal(t, reference_reduce([make(r, (300, 7), dtype) for r in range(world)],
                                        dist.ReduceOp.SUM), f"heap all_reduce {dtype}")
    big = meshdma.torch.zeros(1 << 20)
    big += rank + 1
    dist.all_reduce(big, op=dist.ReduceOp.MAX)
    check_equal(big, torch.full((1 << 20,), float(world)), "heap all_reduce 4 MiB")
    out = meshdma.torch.empty(world * 5, dtype=torch.int32)
    dist._all_gather_base(out, make(rank, (5,), torch.int32))
    check_equal(out, torch.cat([make(r, (5,), torch.int32) for r in range(world)]), "heap all_gather")
    src = make(rank, (world * 4,), torch.float32)
    out = meshdma.torch.empty(world * 4)
    dist.all_to_all_single(out, src)
    check_equal(out, torch.cat([make(r, (world * 4,), torch.float32)[rank * 4:(rank + 1) * 4]
                                for r in range(world)]), "heap all_to_all")
    del t, big, out


CHECKS = [check_all_reduce, check_all_gather, check_reduce_scatter,
          check_all_to_all, check_rooted, check_point_to_point, check_async,
          check_subgroups, check_heap_tensors]


def run_checks(rank, world, store_path, failures):
    try:
        store = dist.FileStore(store_path, world)
        dist.init_process_group("meshdma", store=store, rank=rank, world_size=world)
        for check in CHECKS:
            check(rank, world)
        dist.destroy_process_group()
    except Exception:
        failures.put(f"rank {rank}: {traceback.format_exc()}")
        raise


# ----------------------------------------------------------- bad input
def run_bad_input(rank, world, store_path, results):
    store = dist.FileStore(store_path, world)
    dist.init_process_group("meshdma", store=store, rank=rank, world_size=world)
    # torch checks that dtypes agree before meshdma sees them: the group's
    # own method reaches meshdma's check.
    pg = dist.distributed_c10d._get_default_group()
    got = []
    # Refused on the caller's thread, before anything is queued: a dtype
    # meshdma lacks, dtypes that differ, a bitwise op on floats, a list that
    # is not one tensor per rank, sizes that differ, a root outside the group.
    for call in [lambda: dist.all_reduce(torch.zeros(3, dtype=torch.int16)),
                 lambda: pg.allgather([[torch.zeros(2, dtype=torch.float64)] * world],
                                      [torch.zeros(2)]),
                 lambda: dist.all_reduce(torch.zeros(3), op=dist.ReduceOp.BAND),
                 lambda: dist.all_gather([torch.zeros(2)], torch.zeros(2)),
                 lambda: dist.all_gather([torch.zeros(3)] * world, torch.zeros(2)),
                 lambda: dist.broadcast(torch.zeros(2), src=world + 3)]:
        try:
            call()
            got.append(("no error", ""))
        except Exception as e:
            got.append((type(e).__name__, str(e)))
    # Nothing ran: the group still serves.
    t = torch.ones(3)
    dist.all_reduce(t)
    assert t.tolist() == [world] * 3, t
    # Shapes that differ across ranks: the call runs and fails on every rank.
    try:
        dist.all_reduce(torch.ones(100 + 50 * rank))
        got.append(("no error", ""))
    except Exception as e:
        got.append((type(e).__name__, str(e)))
    results.put((rank, got))
    dist.destroy_process_group()


# ------------------------------------------------------------ a dead peer
def run_dead_peer(rank, world, store_path, results):
    store = dist.FileStore(store_path, world)
    dist.init_process_group("meshdma", store=store, rank=rank, world_size=world)
    dist.barrier()
    if rank == 1:
        os._exit(3)  # Dies without a word.
    start = time.monotonic()
    try:
        dist.all_reduce(torch.ones(1000))
        results.put(("no error", time.monotonic() - start))
    except RuntimeError as e:
        results.put((str(e), time.monotonic() - start))
    os._exit(0)


class BackendTest(unittest.TestCase):
    def spawn(self, fn, world, queue):
        with tempfile.TemporaryDirectory() as tmp:
            mp.spawn(fn, args=(world, os.path.join(tmp, "store"), queue), nprocs=world, join=True)

    def test_every_op_against_torch(self):
        failures = mp.get_context("spawn").SimpleQueue()
        try:
            self.spawn(run_checks, WORLD, failures)
        except Exception:
            msgs = []
            while not failures.empty():
                msgs.append(failures.get())
            self.fail("\n".join(msgs) or "a rank failed")

    def test_a_dead_peer_is_an_error_within_the_timeout(self):
        ctx = mp.get_context("spawn")
        results = ctx.SimpleQueue()
        with tempfile.TemporaryDirectory() as tmp:
            procs = [ctx.Process(target=run_dead_peer,
                                 args=(r, 2, os.path.join(tmp, "store"), results))
                     for r in range(2)]
            for p in procs:
                p.start()
            for p in procs:
                p.join(120)
        message, seconds = results.get()
        self.assertNotEqual(message, "no error")
        self.assertRegex(message, r"(?i)rank 1|process|exited|died|lost")
        self.assertLess(seconds, 30, message)

    def test_bad_input_raises_value_or_type_error_naming_the_problem(self):
        results = mp.get_context("spawn").SimpleQueue()
        self.spawn(run_bad_input, 2, results)
        got = dict(results.get() for _ in range(2))
        for rank, errors in got.items():
            want = [("TypeError", "the tensor: tensor of dtype Short"),
                    ("TypeError", "an output has dtype Double, the input Float"),
                    ("TypeError", "bitwise reductions need an integer or bool tensor"),
                    ("ValueError", "needs one list of 2 output tensors"),
                    ("ValueError", "output of 3 elements for an input of 2"),
                    ("ValueError", "root 5 is not a rank of the group of 2")]
            for (kind, text), (got_kind, message) in zip(want, errors):
                self.assertEqual(got_kind, kind, message)
                self.assertIn(text, message)
                self.assertIn(f"on rank {rank}", message)
            # A fault of the running call: RuntimeError with meshdma's message.
            kind, message = errors[len(want)]
            self.assertEqual(kind, "RuntimeError", message)
            self.assertRegex(message, r"(?i)count|elements|differ|mismatch")


if __name__ == "__main__":
    unittest.main(verbosity=2)
