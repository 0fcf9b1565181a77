"""PyTorch's own distributed test suite on a backend: meshdma, or gloo as
the control.

    BACKEND=meshdma WORLD_SIZE=2 python3 tests/torch/torch_suite.py \
        [--results FILE] [--control FILE] [-k PATTERN ...]

Runs `DistributedTest._DistTestBase` from the suite Debian's python3-torch
ships (torch/testing/_internal/distributed/distributed_test.py), each test in
WORLD_SIZE processes that the suite spawns, with a FileStore. meshdma is
registered as a plugin backend with subgroups. `SELECTED` names the tests
this driver runs (collectives, point-to-point, barriers, groups and DDP on
CPU); `EXCLUDED` lists, with the reason, those of them that do not apply to
a plugin backend on this machine. With no -k, every selected test runs.

MESHDMA_SUITE_AS=gloo with BACKEND=gloo runs meshdma under gloo's name: the
suite then runs the tests it keeps for named backends (object collectives,
coalesced all-reduces) on meshdma. --named-run selects those tests
(`NAMED_RUN`); a run with --control leaves them to it.

--results FILE writes each test's outcome (passed, skipped with the reason,
failed) as JSON; --as-control makes the run pass once its results are
written (gloo's own failures are not meshdma's); --control FILE reads the
control's results and fails the run when a test the control passed did not
pass here, except tests that the suite runs for named backends only
(`require_backend({"gloo", "nccl"})`), which it lists. Tests the control
skipped (CUDA, more ranks) are not spawned. tests/torch/gloo_control.json is
gloo's run at 2 ranks on Debian's torch 1.13, made by

    BACKEND=gloo WORLD_SIZE=2 python3 tests/torch/torch_suite.py \
        --results tests/torch/gloo_control.json --as-control

and a full run (no -k) fails when its tests and the control's differ.
"""
import argparse
import json
import os
import re
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "stubs"))
os.environ.setdefault("BACKEND", "meshdma")
os.environ.setdefault("WORLD_SIZE", "2")
if "TEMP_DIR" not in os.environ:
    # Made by the driver (the ranks it spawns inherit it), removed at its exit.
    os.environ["TEMP_DIR"] = tempfile.mkdtemp(prefix="meshdma-torch-suite-")
    if __name__ == "__main__":
        import atexit
        import shutil
        atexit.register(shutil.rmtree, os.environ["TEMP_DIR"], True)

import torch.distributed as dist  # noqa: E402

import meshdma.torch  # noqa: E402,F401  registers "meshdma" (in every spawned rank too)
from torch.testing._internal.common_distributed import DistTestCases  # noqa: E402

# Before the suite's module is imported: its decorators read these sets when
# its test classes are made.
for feature in ("plugin", "subgroup", "ddp"):
    DistTestCases.backend_feature[feature].add("meshdma")

from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest, TestDistBackend)

# MESHDMA_SUITE_AS=gloo: the suite believes it runs gloo (so it runs the
# tests it keeps for gloo by name) while every group it makes is meshdma's.
if os.environ.get("MESHDMA_SUITE_AS") == os.environ["BACKEND"]:
    def _as_meshdma(fn):
        def wrapped(*args, **kwargs):
            if kwargs.get("backend") == os.environ["BACKEND"]:
                kwargs["backend"] = "meshdma"
            elif args and args[0] == os.environ["BACKEND"]:
                args = ("meshdma",) + args[1:]
            return fn(*args, **kwargs)
        return wrapped
    dist.init_process_group = _as_meshdma(dist.init_process_group)
    dist.new_group = _as_meshdma(dist.new_group)

# Skips of the suite that name the backends a test is for: such a test does
# not run on a plugin backend at all, whatever it supports.
NAME_GATED = ("Test requires backend to be one of", "Only Gloo and NCCL backends")
NAMED_RUN_SKIP = "left to the run under gloo's name (--named-run)"

# The tests the run under gloo's name covers (-k patterns): those the suite
# keeps for named backends, and their neighbours.
NAMED_RUN = ("object", "coalesced")

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
    r"_cuda|_gpu|multigpu|_nccl|SyncBatchNorm|_sparse_gradients": "needs CUDA (the suite skips it on a machine without)",
    r"test_barrier_timeout": "asks the backend to time out a barrier whose peers never call (gloo only by name)",
    r"test_send_recv_any_source": "a receive from any source is refused with a clear error (name the source)",
    r"test_isend_autograd_profiler|test_send_recv_autograd_profiler|test_.*_profiler|profiling": "the profiler's record names are per backend",
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


def control_outcomes():
    """The control's results when --control names them, else {}."""
    args, _ = _driver_flags().parse_known_args()
    if not args.control:
        return {}
    with open(args.control) as f:
        return json.load(f)


def load_tests(loader, tests, pattern):
    suite = unittest.TestSuite()
    excluded = {}
    control = control_outcomes()
    for name in sorted(loader.getTestCaseNames(TestBackend)):
        why = selected(name)
        if why is None:
            continue
        if why:
            excluded.setdefault(why, []).append(name)
            continue
        if control.get(name, "").startswith("skipped"):
            # The same machine skips it for any backend: no ranks to spawn.
            RecordingResult.outcomes[name] = f"{control[name]} (on the control)"
            continue
        if control and any(p in name for p in NAMED_RUN):
            RecordingResult.outcomes[name] = f"skipped: {NAMED_RUN_SKIP}"
            continue
        suite.addTest(TestBackend(name))
    for why, names in excluded.items():
        print(f"excluded ({why}): {len(names)}: {' '.join(names)}", file=sys.stderr)
    return suite


class RecordingResult(unittest.TextTestResult):
    """Also keeps each test's outcome by name."""

    outcomes = {}

    def _name(self, test):
        return test.id().rsplit(".", 1)[-1]

    def addSuccess(self, test):
        super().addSuccess(test)
        self.outcomes[self._name(test)] = "passed"

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self.outcomes[self._name(test)] = f"skipped: {reason}"

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self.outcomes[self._name(test)] = "failed"

    def addError(self, test, err):
        super().addError(test, err)
        self.outcomes[self._name(test)] = "failed"


def _driver_flags():
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--results")
    parser.add_argument("--control")
    parser.add_argument("--as-control", action="store_true",
                        help="a control run: report failures, exit 0 once results are written")
    parser.add_argument("--named-run", action="store_true",
                        help="only the tests of NAMED_RUN (with MESHDMA_SUITE_AS=gloo)")
    return parser


def main():
    args, rest = _driver_flags().parse_known_args()
    if args.named_run:
        rest = [a for p in NAMED_RUN for a in ("-k", p)] + rest
    runner = unittest.TextTestRunner(verbosity=2, resultclass=RecordingResult)
    program = unittest.main(argv=[sys.argv[0]] + rest, testRunner=runner, exit=False)
    outcomes = RecordingResult.outcomes
    if args.results:
        with open(args.results, "w") as f:
            json.dump(outcomes, f, indent=1, sort_keys=True)
    ok = program.result.wasSuccessful()
    if args.control:
        with open(args.control) as f:
            control = json.load(f)
        backend = os.environ["BACKEND"]
        gated = sorted(n for n, o in control.items()
                       if o == "passed" and any(g in outcomes.get(n, "")
                                                for g in NAME_GATED + (NAMED_RUN_SKIP,)))
        short = sorted(n for n, o in control.items()
                       if o == "passed" and n in outcomes and outcomes[n] != "passed"
                       and n not in gated)
        for name in gated:
            print(f"{name}: passed on the control; the run under gloo's name "
                  f"(--named-run, MESHDMA_SUITE_AS=gloo) runs it on meshdma")
        for name in short:
            print(f"{name}: passed on the control, {outcomes[name]} on {backend}")
        unmatched = sorted(set(outcomes) ^ set(control)) if "-k" not in rest else []
        for name in unmatched:
            where = "the control" if name in control else "this run"
            print(f"{name}: only in {where}: make the control again (this file's docstring)")
        passed = sum(o == "passed" for o in outcomes.values())
        print(f"{backend}: {passed} passed; the control passed "
              f"{sum(o == 'passed' for o in control.values())}, of which {len(gated)} "
              f"are left to the run under gloo's name; short of the rest: {len(short)}")
        ok = ok and not short and not unmatched
    if args.as_control and args.results:
        ok = True
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
