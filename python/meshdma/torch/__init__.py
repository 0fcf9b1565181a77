"""meshdma as a torch.distributed backend.

``import meshdma.torch`` registers the backend ``"meshdma"``; then
``torch.distributed.init_process_group("meshdma")`` under torchrun,
``torch.multiprocessing`` or ``mpirun`` (with ``MASTER_ADDR``/``MASTER_PORT``
or any ``init_method``) starts meshdma's runtime through torch's store: no
MPI is needed. Every collective of ``torch.distributed`` then runs on
meshdma's kernels (docs/torch.md says what each maps to).
"""
import datetime

import torch
import torch.distributed as dist

from meshdma.torch import _C

ProcessGroupMeshdma = _C.ProcessGroupMeshdma

BACKEND = "meshdma"


def _launch_ranks(store, rank, size):
    """The default group's ranks of this new group's members, in order.

    The default group itself (created first) is the launch; a later group
    learns its members' launch ranks through its own store.
    """
    if not dist.is_initialized():
        return []
    store.set(f"meshdma/launch_rank/{rank}", str(dist.get_rank()))
    return [int(store.get(f"meshdma/launch_rank/{r}")) for r in range(size)]


def _create_process_group(store, rank, size, timeout):
    if isinstance(timeout, (int, float)):
        timeout = datetime.timedelta(seconds=timeout)
    return ProcessGroupMeshdma(store, rank, size, timeout,
                               _launch_ranks(store, rank, size))


if not hasattr(dist.Backend, BACKEND.upper()):
    dist.Backend.register_backend(BACKEND, _create_process_group)

from meshdma.torch.kernels import (  # noqa: E402
    flash_attention, make_kernel, paged_attention, registered_ops)
from meshdma.torch.fused import (  # noqa: E402
    KvCacheTransfer, all_gather_matmul, matmul_reduce_scatter, ring_attention)

__all__ = ["BACKEND", "ProcessGroupMeshdma", "empty", "zeros",
           "flash_attention", "paged_attention", "make_kernel", "registered_ops",
           "all_gather_matmul",
           "matmul_reduce_scatter", "ring_attention", "KvCacheTransfer"]


def empty(*size, dtype=torch.float32):
    """An uninitialised tensor in this process's symmetric heap.

    Collectives read and write such a tensor where it is: an all_reduce on
    it, or an all_gather into it, on the group of every rank copies nothing
    it does not have to. Like every symmetric
    allocation, every rank must allocate (and free) the same sizes in the
    same order; a collective on tensors that landed at different offsets
    fails with meshdma's mismatch message. A meshdma process group must be
    alive, and the tensor must not outlive it.
    """
    if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size)):
        size = tuple(size[0])
    numel = 1
    for s in size:
        numel *= int(s)
    itemsize = torch.empty((), dtype=dtype).element_size()
    return _C._heap_bytes(numel * itemsize).view(dtype).view(size)


def zeros(*size, dtype=torch.float32):
    """`empty`, filled with zeros."""
    return empty(*size, dtype=dtype).zero_()


def _env_from_mpi_launcher():
    """Fills torch's env:// variables from an MPI launcher's, where unset.

    So that ``mpirun -np N python3 prog.py`` runs a program written for
    torchrun: RANK, WORLD_SIZE and LOCAL_RANK come from Open MPI's or
    MPICH's variables, MASTER_ADDR defaults to 127.0.0.1 (set it for a job
    on several hosts) and MASTER_PORT to 29500.
    """
    import os
    env = os.environ
    if "RANK" in env:
        return
    for rank, size, local in [
            ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
            ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID")]:
        if rank in env and size in env:
            env["RANK"], env["WORLD_SIZE"] = env[rank], env[size]
            env.setdefault("LOCAL_RANK", env.get(local, env[rank]))
            env.setdefault("MASTER_ADDR", "127.0.0.1")
            env.setdefault("MASTER_PORT", "29500")
            return


_env_from_mpi_launcher()
