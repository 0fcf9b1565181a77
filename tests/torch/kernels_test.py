"""meshdma.torch.flash_attention and paged_attention against torch.

References are written from torch.matmul and softmax (flash attention) and
from gathering the pages into contiguous keys and values (paged attention);
the backward is checked against torch's autograd of the reference in
float64 and by torch.autograd.gradcheck. Also: torch.jit.script and
tracing, bad input, and the ops on the device of a meshdma process group,
whose collectives still work after a kernel refused its input.

Run: PYTHONPATH=<build>/python /usr/bin/python3 tests/torch/kernels_test.py
"""
import subprocess
import sys
import unittest

import torch
import torch.distributed as dist

from meshdma.torch import flash_attention, paged_attention
from ranks import run_ranks


def reference_attention(q, k, v, causal=False, q_segment_ids=None,
                        kv_segment_ids=None, sm_scale=1.0, ab=None):
    """softmax(sm_scale * (q k^T + ab), masked) v in float64; a row with
    every key masked gives zeros."""
    q, k, v = q.double(), k.double(), v.double()
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    logits = torch.matmul(q, k.transpose(-1, -2))
    if ab is not None:
        logits = logits + ab.double()
    logits = logits * sm_scale
    sq, skv = q.shape[2], k.shape[2]
    keep = torch.ones(q.shape[0], 1, sq, skv, dtype=torch.bool)
    if causal:
        keep &= torch.ones(sq, skv, dtype=torch.bool).tril()
    if q_segment_ids is not None:
        keep &= (q_segment_ids[:, None, :, None] == kv_segment_ids[:, None, None, :])
    logits = logits.masked_fill(~keep, float("-inf"))
    probs = torch.softmax(logits, dim=-1).nan_to_num(0.0)
    return torch.matmul(probs, v)


def reference_paged(q, k_pages, v_pages, lengths, page_indices, soft_cap=None):
    """Gather each sequence's pages, then attend (no q.k scaling)."""
    batch, heads, d = q.shape
    kv_heads, _, page_size, _ = k_pages.shape
    out = torch.zeros(batch, heads, d, dtype=torch.float64)
    for b in range(batch):
        n = int(lengths[b])
        if n == 0:
            continue
        pages = page_indices[b, :(n + page_size - 1) // page_size].long()
        k = k_pages[:, pages].reshape(kv_heads, -1, d)[:, :n].double()
        v = v_pages[:, pages].reshape(kv_heads, -1, d)[:, :n].double()
        k = k.repeat_interleave(heads // kv_heads, dim=0)
        v = v.repeat_interleave(heads // kv_heads, dim=0)
        logits = torch.einsum("hd,hnd->hn", q[b].double(), k)
        if soft_cap is not None:
            logits = soft_cap * torch.tanh(logits / soft_cap)
        out[b] = torch.einsum("hn,hnd->hd", torch.softmax(logits, dim=-1), v)
    return out


def qkv(batch, heads, kv_heads, sq, skv, d, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    def r(*shape):
        return torch.randn(*shape, generator=g).to(dtype)
    return r(batch, heads, sq, d), r(batch, kv_heads, skv, d), r(batch, kv_heads, skv, d)


def segments(batch, n, cuts):
    """Segment ids with boundaries at `cuts` (shifted per batch row)."""
    ids = torch.zeros(batch, n, dtype=torch.int32)
    for b in range(batch):
        for c in cuts:
            ids[b, min(n, c + b):] += 1
    return ids


class FlashAttentionTest(unittest.TestCase):
    def check(self, q, k, v, tol, **kw):
        got = flash_attention(q, k, v, **kw)
        want = reference_attention(q, k, v, **kw)
        self.assertEqual(got.dtype, q.dtype)
        self.assertEqual(got.shape, q.shape)
        err = (got.double() - want).abs().max().item()
        self.assertLess(err, tol, f"{q.dtype} {tuple(q.shape)} {tuple(k.shape)} {kw}")

    def test_forward_mha_mqa_gqa_causal_odd_lengths(self):
        for (b, h, hkv, sq, skv, d) in [(2, 4, 4, 64, 64, 32), (1, 4, 1, 37, 37, 16),
                                        (2, 6, 2, 53, 91, 64), (1, 2, 2, 300, 300, 8)]:
            q, k, v = qkv(b, h, hkv, sq, skv, d)
            for causal in (False, True):
                if causal and sq != skv:
                    continue
                self.check(q, k, v, 2e-5, causal=causal)
                self.check(q, k, v, 2e-5, causal=causal, sm_scale=d ** -0.5)

    def test_segment_ids_and_bias(self):
        q, k, v = qkv(2, 4, 2, 45, 45, 16, seed=1)
        seg = segments(2, 45, [10, 29])
        ab = torch.randn(2, 4, 45, 45, generator=torch.Generator().manual_seed(2))
        for causal in (False, True):
            self.check(q, k, v, 2e-5, causal=causal, q_segment_ids=seg,
                       kv_segment_ids=seg, sm_scale=0.3)
            self.check(q, k, v, 2e-5, causal=causal, ab=ab, sm_scale=0.3)
            self.check(q, k, v, 2e-5, causal=causal, ab=ab, q_segment_ids=seg,
                       kv_segment_ids=seg.long())

    def test_low_precision(self):
        for dtype, tol in [(torch.bfloat16, 3e-2), (torch.float16, 4e-3)]:
            q, k, v = qkv(1, 4, 2, 70, 70, 32, dtype=dtype, seed=3)
            self.check(q, k, v, tol, causal=True, sm_scale=32 ** -0.5)

    def test_backward_against_autograd_of_the_reference(self):
        for (b, h, hkv, sq, skv, d, causal) in [(1, 4, 2, 33, 33, 16, True),
                                                (2, 2, 1, 20, 47, 8, False)]:
            q, k, v = qkv(b, h, hkv, sq, skv, d, seed=4)
            seg = segments(b, sq, [7]) if sq == skv else None
            kw = dict(causal=causal, sm_scale=0.25, q_segment_ids=seg,
                      kv_segment_ids=seg)
            dout = torch.randn(b, h, sq, d, generator=torch.Generator().manual_seed(5))
            ours = [t.clone().requires_grad_() for t in (q, k, v)]
            flash_attention(*ours, **kw).backward(dout)
            refs = [t.double().requires_grad_() for t in (q, k, v)]
            reference_attention(*refs, **kw).backward(dout.double())
            for name, a, r in zip("qkv", ours, refs):
                err = (a.grad.double() - r.grad).abs().max().item()
                self.assertLess(err, 1e-4, f"d{name} {kw}")

    def test_gradcheck(self):
        # float64 is computed in float32: finite differences of 1e-3 and
        # tolerances to match.
        q, k, v = qkv(1, 2, 1, 6, 6, 4, dtype=torch.float64, seed=6)
        for causal in (False, True):
            inputs = tuple(t.clone().requires_grad_() for t in (q, k, v))
            self.assertTrue(torch.autograd.gradcheck(
                lambda a, b, c: flash_attention(a, b, c, causal=causal, sm_scale=0.5),
                inputs, eps=1e-3, atol=2e-3, rtol=2e-2))

    def test_script_and_trace(self):
        q, k, v = qkv(1, 2, 2, 16, 16, 8, seed=7)

        @torch.jit.script
        def scripted(q, k, v):
            return torch.ops.meshdma.flash_attention(q, k, v, True, None, None, 0.5, None)

        traced = torch.jit.trace(lambda a, b, c: flash_attention(a, b, c, causal=True, sm_scale=0.5),
                                 (q, k, v))
        want = reference_attention(q, k, v, causal=True, sm_scale=0.5)
        for fn in (scripted, traced):
            self.assertLess((fn(q, k, v).double() - want).abs().max().item(), 2e-5)
        self.assertIn("meshdma::flash_attention", str(scripted.graph))

    def test_bad_input_raises_with_the_kernels_message(self):
        q, k, v = qkv(1, 4, 2, 8, 8, 16)
        with self.assertRaisesRegex(ValueError, r"'q' is \[4, 8, 16\]"):
            flash_attention(q[0], k, v)
        with self.assertRaisesRegex(ValueError, "multiple of Hkv"):
            flash_attention(q[:, :3], k, v)
        with self.assertRaisesRegex(TypeError, "'k' is BFloat16 but 'q' is Float"):
            flash_attention(q, k.bfloat16(), v)
        with self.assertRaisesRegex(TypeError, "'q' is Int"):
            flash_attention(q.int(), k.int(), v.int())
        with self.assertRaisesRegex(ValueError, "come together"):
            flash_attention(q, k, v, q_segment_ids=torch.zeros(1, 8, dtype=torch.int32))
        seg = torch.zeros(1, 8, dtype=torch.int32)
        with self.assertRaisesRegex(ValueError, r"'kv_segment_ids' is i32\[1,7\]"):
            flash_attention(q, k, v, q_segment_ids=seg, kv_segment_ids=seg[:, :7])
        with self.assertRaisesRegex(ValueError, "outside int32"):
            flash_attention(q, k, v, q_segment_ids=seg.long() + 2**40, kv_segment_ids=seg)
        with self.assertRaisesRegex(ValueError, r"'ab' is f32\[1,4,8\]"):
            flash_attention(q, k, v, ab=torch.zeros(1, 4, 8))
        # The device still serves.
        self.assertEqual(flash_attention(q, k, v).shape, q.shape)

    def test_leaves_torch_blas_threads_alone(self):
        # meshdma's products run OpenBLAS on one thread; torch's matmuls in
        # the same process keep the thread count they had. In a fresh
        # interpreter, so that meshdma's kernel is the process's first.
        script = """
import ctypes, torch
from meshdma.torch import flash_attention
try:
    blas = ctypes.CDLL("libopenblas.so.0")
except OSError:
    raise SystemExit(77)
blas.openblas_set_num_threads(2)
q = torch.randn(1, 2, 300, 64)
flash_attention(q, q, q, causal=True).sum()
print(blas.openblas_get_num_threads())
"""
        run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
        if run.returncode == 77:
            self.skipTest("OpenBLAS is not this process's BLAS")
        self.assertEqual(run.returncode, 0, run.stderr)
        self.assertEqual(run.stdout.strip(), "2")


class PagedAttentionTest(unittest.TestCase):
    def make(self, batch, heads, kv_heads, pages, page_size, pps, d, dtype=torch.float32, seed=0):
        g = torch.Generator().manual_seed(seed)
        q = torch.randn(batch, heads, d, generator=g).to(dtype)
        k_pages = torch.randn(kv_heads, pages, page_size, d, generator=g).to(dtype)
        v_pages = torch.randn(kv_heads, pages, page_size, d, generator=g).to(dtype)
        page_indices = torch.randint(0, pages, (batch, pps), generator=g, dtype=torch.int32)
        lengths = torch.randint(0, pps * page_size + 1, (batch,), generator=g, dtype=torch.int32)
        lengths[0] = pps * page_size
        if batch > 2:
            lengths[1], lengths[2] = 0, 1
        return q, k_pages, v_pages, lengths, page_indices

    def test_against_gather_then_attend(self):
        for (b, h, hkv, pages, ps, pps, d, ppcb) in [(4, 8, 2, 40, 16, 8, 64, 4),
                                                     (3, 4, 4, 17, 8, 6, 32, 2),
                                                     (5, 8, 1, 64, 4, 16, 16, 16)]:
            args = self.make(b, h, hkv, pages, ps, pps, d, seed=b)
            for cap in (None, 5.0):
                got = paged_attention(*args, ppcb, attn_logits_soft_cap=cap)
                want = reference_paged(*args, soft_cap=cap)
                err = (got.double() - want).abs().max().item()
                self.assertLess(err, 2e-5, f"b{b} h{h} hkv{hkv} ppcb{ppcb} cap {cap}")

    def test_bfloat16(self):
        args = self.make(3, 4, 2, 20, 16, 4, 32, dtype=torch.bfloat16, seed=9)
        got = paged_attention(*args, 2)
        self.assertEqual(got.dtype, torch.bfloat16)
        self.assertLess((got.double() - reference_paged(*args)).abs().max().item(), 3e-2)

    def test_bad_input(self):
        q, k_pages, v_pages, lengths, page_indices = self.make(2, 4, 2, 10, 8, 6, 16)
        with self.assertRaisesRegex(ValueError, r"pages_per_compute_block \(4\) must .*divide"):
            paged_attention(q, k_pages, v_pages, lengths, page_indices, 4)
        with self.assertRaisesRegex(TypeError, "'lengths' is Float"):
            paged_attention(q, k_pages, v_pages, lengths.float(), page_indices, 2)
        bad = lengths.clone()
        bad[1] = 1000
        with self.assertRaisesRegex(ValueError, r"context_lens'\)\[1\] = 1000"):
            paged_attention(q, k_pages, v_pages, bad, page_indices, 2)
        with self.assertRaisesRegex(ValueError, "logits_soft_cap is -1"):
            paged_attention(q, k_pages, v_pages, lengths, page_indices, 2, attn_logits_soft_cap=-1.0)


def run_on_group(rank, world, store_path):
    """The kernels on the process's own device, then on the process
    group's (which replaces it), next to its collectives; rank 0 alone
    calls one."""
    q, k, v = qkv(1, 2, 2, 24, 24, 8, seed=rank)
    flash_attention(q, k, v)
    dist.init_process_group("meshdma", store=dist.FileStore(store_path, world),
                            rank=rank, world_size=world)
    got = flash_attention(q, k, v, causal=True)
    assert (got.double() - reference_attention(q, k, v, causal=True)).abs().max() < 2e-5
    try:
        flash_attention(q[0], k, v)
        raise AssertionError("a 3-D q was accepted")
    except ValueError:
        pass
    if rank == 0:
        flash_attention(q, k, v)
    t = torch.full((4,), float(rank + 1))
    dist.all_reduce(t)
    assert t.tolist() == [world * (world + 1) / 2] * 4, t
    dist.destroy_process_group()


class OnAProcessGroupTest(unittest.TestCase):
    def test_kernels_share_the_groups_device(self):
        run_ranks(self, run_on_group, 2, init=False)


if __name__ == "__main__":
    unittest.main(verbosity=2)
