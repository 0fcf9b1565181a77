"""DistributedDataParallel on the meshdma backend matches gloo.

Two ranks train the same small model for a few steps on rank-dependent data,
once with gloo and once with meshdma (each in its own launch through
torch.multiprocessing and a FileStore); the parameters after training must
agree to float tolerance, and both must differ from the initial ones.
"""
import os
import tempfile
import unittest

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn

import meshdma.torch  # noqa: F401

WORLD = 2
STEPS = 5


def train(rank, backend, store_path, out_path):
    store = dist.FileStore(store_path, WORLD)
    dist.init_process_group(backend, store=store, rank=rank, world_size=WORLD)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.001)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(100 + rank)
    for _ in range(STEPS):
        x = torch.randn(8, 16, generator=gen)
        y = torch.randn(8, 4, generator=gen)
        opt.zero_grad()
        nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()
    if rank == 0:
        torch.save([p.detach().clone() for p in model.parameters()], out_path)
    dist.destroy_process_group()


def launch(backend, tmp):
    out = os.path.join(tmp, f"{backend}.pt")
    mp.spawn(train, args=(backend, os.path.join(tmp, f"{backend}.store"), out),
             nprocs=WORLD, join=True)
    return torch.load(out)


class DdpTest(unittest.TestCase):
    def test_parameters_match_gloo(self):
        with tempfile.TemporaryDirectory() as tmp:
            gloo = launch("gloo", tmp)
            ours = launch("meshdma", tmp)
        torch.manual_seed(0)
        initial = list(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).parameters())
        for g, m, i in zip(gloo, ours, initial):
            self.assertTrue(torch.allclose(g, m, rtol=1e-5, atol=1e-6),
                            f"max difference {(g - m).abs().max().item()}")
            self.assertFalse(torch.allclose(m, i.detach()), "training changed nothing")


if __name__ == "__main__":
    unittest.main(verbosity=2)
