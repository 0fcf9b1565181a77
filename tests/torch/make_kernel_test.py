"""meshdma.torch.make_kernel against torch.

A registered op (matmul, softmax) on this rank's inputs against torch; the
Pallas tutorial's four distributed kernels in meshdma's MLIR dialect
(mlir/test/kernels: right permute, ring all-gather, double-buffered ring
psum, bidirectional reduce-scatter), proved by the checker and run by the
JIT on every rank of a meshdma process group at 2 and 4 ranks, against
torch's computation from every rank's inputs; a kernel the checker rejects
raises with the checker's message and runs nowhere.

Run: PYTHONPATH=<build>/python /usr/bin/python3 tests/torch/make_kernel_test.py
"""
import os
import unittest

import torch
import torch.distributed as dist

import meshdma.torch
from ranks import run_ranks

KERNELS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                       "mlir", "test", "kernels")


def kernel_text(name, world):
    with open(os.path.join(KERNELS, f"{name}.mlir")) as f:
        return f.read().replace("@N@", str(world))


def block(rank, *shape):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(100 + rank))


def check_tutorial_kernels(rank, world):
    f32 = torch.float32
    right_permute = meshdma.torch.make_kernel(
        kernel_text("right_permute", world), lambda x: [(x.shape, f32)])
    got = right_permute(block(rank, 8, 128))
    assert torch.equal(got, block((rank - 1) % world, 8, 128)), "right_permute"

    all_gather = meshdma.torch.make_kernel(
        kernel_text("all_gather", world), lambda x: [((world,) + tuple(x.shape), f32)])
    got = all_gather(block(rank, 8, 128))
    assert torch.equal(got, torch.stack([block(r, 8, 128) for r in range(world)])), "all_gather"

    psum = meshdma.torch.make_kernel(kernel_text("ring_psum", world), lambda x: [(x.shape, f32)])
    x = block(rank, 8, 128)
    got = psum(x)
    assert torch.equal(x, block(rank, 8, 128)), "ring_psum wrote into its input"
    want = sum(block(r, 8, 128).double() for r in range(world))
    assert (got.double() - want).abs().max() < 1e-5, "ring_psum"

    reduce_scatter = meshdma.torch.make_kernel(
        kernel_text("reduce_scatter", world), lambda x: [((2, 64), f32)])
    x = block(rank, world, 2, 64)
    got = reduce_scatter(x)
    assert torch.equal(x, block(rank, world, 2, 64)), "reduce_scatter wrote into its input"
    want = sum(block(r, world, 2, 64).double() for r in range(world))[rank]
    assert (got.double() - want).abs().max() < 1e-5, "reduce_scatter"


def check_rejected_kernel(rank, world):
    broken = kernel_text("right_permute", world).replace(
        "  meshdma.dma_wait_recv %recv, %out : !dma, memref<8x128xf32>\n", "")
    try:
        meshdma.torch.make_kernel(broken, lambda x: [(x.shape, torch.float32)])
        raise AssertionError("a kernel that never waits for its DMA was accepted")
    except ValueError as e:
        assert "meshdma.make_kernel" in str(e) and "recv" in str(e), str(e)
    # The group serves on.
    t = torch.ones(2)
    dist.all_reduce(t)
    assert t.tolist() == [world, world]


def run_group(rank, world):
    check_tutorial_kernels(rank, world)
    check_rejected_kernel(rank, world)


class MakeKernelTest(unittest.TestCase):
    def test_registered_ops_against_torch(self):
        g = torch.Generator().manual_seed(0)
        a, b = torch.randn(33, 20, generator=g), torch.randn(20, 17, generator=g)
        matmul = meshdma.torch.make_kernel(
            "matmul", lambda x, y: [((x.shape[0], y.shape[1]), torch.float32)])
        self.assertLess((matmul(a, b) - a @ b).abs().max().item(), 1e-4)
        relu = meshdma.torch.make_kernel(
            "matmul", lambda x, y: [((x.shape[0], y.shape[1]), torch.float32)],
            activation="relu")
        self.assertLess((relu(a, b) - torch.relu(a @ b)).abs().max().item(), 1e-4)
        softmax = meshdma.torch.make_kernel("softmax", lambda x: [(x.shape, torch.float32)])
        self.assertLess((softmax(a) - torch.softmax(a, dim=-1)).abs().max().item(), 1e-5)
        self.assertIn("matmul", meshdma.torch.registered_ops())

    def test_registered_op_errors(self):
        a = torch.ones(4, 4)
        wrong = meshdma.torch.make_kernel("matmul", lambda x, y: [((5, 5), torch.float32)])
        with self.assertRaisesRegex(ValueError, "output_shape_dtype_fn says"):
            wrong(a, a)
        unknown = meshdma.torch.make_kernel("no_such_op", lambda x: [(x.shape, torch.float32)])
        with self.assertRaisesRegex(ValueError, "no_such_op"):
            unknown(a)
        arity = meshdma.torch.make_kernel("matmul", lambda *x: [((4, 4), torch.float32)])
        with self.assertRaisesRegex(ValueError, "takes 2 inputs, got 3"):
            arity(a, a, a)

    def test_tutorial_kernels_on_2_ranks(self):
        run_ranks(self, run_group, 2)

    def test_tutorial_kernels_on_4_ranks(self):
        run_ranks(self, run_group, 4)


if __name__ == "__main__":
    unittest.main(verbosity=2)
