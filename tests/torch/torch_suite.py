"""PyTorch's own distributed test suite on a backend: meshdma, or gloo as
the control.

    BACKEND=meshdma WORLD_SIZE=2 python3 tests/torch/torch_suite.py [-k PATTERN ...]

Runs `DistributedTest._DistTestBase` from the suite Debian's python3-torch
ships (torch/testing/_internal/distributed/distributed_test.py), each test in
WORLD_SIZE processes that the suite spawns, with a FileStore. meshdma is
registered as a plugin backend with subgroups. `SELECTED` names the tests
this driver runs (collectives, point-to-point, barriers, groups and DDP on
CPU); `EXCLUDED` lists, with the reason, those of them that do not apply to
a plugin backend on this machine. With no -k, every selected test runs.
"""
import os
import re
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "stubs"))
os.environ.setdefault("BACKEND", "meshdma")
os.environ.setdefault("WORLD_SIZE", "2")
if "TEMP_DIR" not in os.environ:
    os.environ["TEMP_DIR"] = tempfile.mkdtemp(prefix="meshdma-torch-suite-")

import torch.distributed as dist  # noqa: E402

import meshdma.torch  # noqa: E402,F401  registers "meshdma" (in every spawned rank too)
from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest, DistTestCases, TestDistBackend)

DistTestCases.backend_feature["plugin"].add("meshdma")
DistTestCases.backend_feature["subgroup"].add("meshdma")

# The suite's tests of what a CPU backend does (names are regexes).
SELECTED = [
    r"test_(all_reduce|reduce|broadcast|all_gather|gather|scatter|barrier)(_|$)",
    r"test_(send_recv|isend|irecv)(_|$)",
    r"test_(all_to_all|reduce_scatter)",
    r"test_(new_group|get_rank|get_backend|destroy|backend_group|backend_full_group)",
    r"test_DistributedDataParallel(_|$)",
    r"test_ddp_(grad_div|comm_hook_allreduce|uneven_inputs$|uneven_inputs_stop_iteration_sync_bn|sync_bn|hook_parity_allreduce$)",
]

# Selected tests that do not apply here, with the reason.
EXCLUDED = {
    r"_cuda|_nccl|_gpu|_multigpu|_full_group_cuda": "needs CUDA",
    r"test_barrier_timeout": "asks the backend to time out a barrier whose peers never call (gloo only by name)",
    r"test_send_recv_any_source": "a receive from any source is refused with a clear error (name the source)",
    r"test_isend_autograd_profiler|test_send_recv_autograd_profiler|test_.*_profiler|profiling": "the profiler's record names are per backend",
    r"test_DistributedDataParallel_SyncBatchNorm": "SyncBatchNorm needs CUDA",
}


def selected(name):
    if not any(re.search(p, name) for p in SELECTED):
        return None
    for pattern, why in EXCLUDED.items():
        if re.search(pattern, name):
            return why
    return ""


class TestBackend(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        self._spawn_processes()


def load_tests(loader, tests, pattern):
    suite = unittest.TestSuite()
    for name in sorted(loader.getTestCaseNames(TestBackend)):
        why = selected(name)
        if why is None:
            continue
        if why:
            print(f"excluded: {name}: {why}", file=sys.stderr)
            continue
        suite.addTest(TestBackend(name))
    return suite


if __name__ == "__main__":
    unittest.main(verbosity=2)
