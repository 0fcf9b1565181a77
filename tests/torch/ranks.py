"""Ranks for the torch tests: processes started by torch.multiprocessing,
joined by a FileStore (no MPI), whose failures reach the test with every
rank's traceback."""
import os
import tempfile
import traceback

import torch.distributed as dist
import torch.multiprocessing as mp


def _rank_main(rank, world, store_path, failures, fn, init):
    try:
        if init:
            dist.init_process_group("meshdma", store=dist.FileStore(store_path, world),
                                    rank=rank, world_size=world)
            fn(rank, world)
            dist.destroy_process_group()
        else:
            fn(rank, world, store_path)
    except Exception:
        failures.put(f"rank {rank}: {traceback.format_exc()}")
        raise


def run_ranks(test, fn, world, init=True):
    """Runs fn(rank, world) on `world` ranks of a meshdma group (with
    init=False, fn(rank, world, store_path) joins the group itself); fails
    `test` with the ranks' tracebacks. `fn` must be a module-level function."""
    failures = mp.get_context("spawn").SimpleQueue()
    with tempfile.TemporaryDirectory() as tmp:
        try:
            mp.spawn(_rank_main, args=(world, os.path.join(tmp, "store"), failures, fn, init),
                     nprocs=world, join=True)
        except Exception:
            messages = []
            while not failures.empty():
                messages.append(failures.get())
            test.fail("\n".join(messages) or "a rank failed")
