"""Prefill -> decode KV-cache handoff, as a disaggregated server makes it,
in PyTorch on meshdma.

    torchrun --nproc_per_node 2 examples/torch/kv_handoff.py
    mpirun -np 4 python3 examples/torch/kv_handoff.py
        [--prompts 16] [--seq-min 64] [--seq-max 256] [--layers 4]
        [--model 256] [--kv-heads 2] [--heads 8] [--page-size 16]
        [--generate 4] [--check | --no-check]

(PYTHONPATH=build/python, or after cmake --install.) On 2m ranks, ranks
0 .. m-1 are prefill servers and ranks m .. 2m-1 decode servers, rank i
handing off to rank i + m: m replicas of a prefill/decode pair, each
serving its own prompts. For each prompt, in arrival order:

1. The decode rank picks free pages of its paged KV cache for the prompt
   (its block table).
2. The prefill rank runs the prompt through the layers (a residual stream
   with a key/value projection per layer); `KvCacheTransfer.transfer`
   streams each layer's keys and values into the decode rank's pages while
   the next layer is computed.
3. Meanwhile, layer by layer as each arrives, the decode rank runs that
   layer of a decode step for every sequence it is generating (continuous
   batching): the next token's keys and values into its pages, then
   attention with `meshdma.torch.paged_attention` over the cache, the new
   prompt's first query included.
4. The new sequence joins the batch; each generates `--generate` tokens,
   then leaves and frees its pages.

With --check (the default), the decode rank checks every attention output
against torch's attention over the sequence's keys and values, rebuilt
from the same seeds. It prints the time per prompt, and the same loop
without the decode work (the transfer alone): their ratio is what the
overlap hides.
"""
import argparse
import time

import torch
import torch.distributed as dist

import meshdma.torch


def seeded(seed, *shape, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g) * scale


class Model:
    """Per layer: a key/value projection of the residual stream and a
    mixing matrix that updates it; the same weights on every rank."""

    def __init__(self, layers, model, kv_heads, head_dim):
        self.layers, self.kv_heads, self.head_dim = layers, kv_heads, head_dim
        self.w_kv = [seeded(10 + l, model, 2 * kv_heads * head_dim, scale=model ** -0.5)
                     for l in range(layers)]
        self.w_mix = [seeded(50 + l, model, model, scale=model ** -0.5) for l in range(layers)]

    def prompt(self, index, seq, model):
        return seeded(1000 + index, seq, model)

    def keys_values(self, x, layer):
        """x [seq, model] -> keys, values [kv_heads, seq, head_dim]."""
        kv = (x @ self.w_kv[layer]).reshape(x.shape[0], 2, self.kv_heads, self.head_dim)
        return kv[:, 0].transpose(0, 1).contiguous(), kv[:, 1].transpose(0, 1).contiguous()

    def next_stream(self, x, layer):
        return x + torch.tanh(x @ self.w_mix[layer])

    def prefill(self, x):
        """The layers' keys and values, layer by layer, as prefill computes
        them: a function of the layer, called in order."""
        state = {"x": x}

        def layer_kv(layer):
            k, v = self.keys_values(state["x"], layer)
            state["x"] = self.next_stream(state["x"], layer)
            return k, v
        return layer_kv

    def all_keys_values(self, x):
        fn = self.prefill(x)
        return [fn(l) for l in range(self.layers)]


class PagePool:
    """The decode server's free pages."""

    def __init__(self, total):
        self.free = list(range(total))

    def take(self, n):
        if n > len(self.free):
            raise RuntimeError(f"kv_handoff: {n} pages wanted, {len(self.free)} free "
                               "(raise --pages)")
        taken, self.free = self.free[:n], self.free[n:]
        return taken

    def give_back(self, pages):
        self.free.extend(pages)


class Sequence:
    """A sequence the decode server generates: its pages, its length, and
    (with --check) its keys and values as torch holds them."""

    def __init__(self, index, length, pages, reference):
        self.index, self.length, self.pages = index, length, pages
        self.reference = reference  # Per layer (keys, values) [kv_heads, len, d], or None.
        self.generated = 0


class DecodeServer:
    def __init__(self, args, model, transfer):
        self.args, self.model, self.transfer = args, model, transfer
        self.pool = PagePool(args.pages)
        self.batch = []
        self.checked = 0

    def step_layer(self, layer, sequences, lengths):
        """One attention step of `layer` for `sequences` (of `lengths`
        tokens): a query per sequence against its pages, checked against
        torch."""
        a = self.args
        width = max(len(s.pages) for s in sequences)
        table = torch.zeros(len(sequences), width, dtype=torch.int32)
        for i, s in enumerate(sequences):
            table[i, :len(s.pages)] = torch.tensor(s.pages, dtype=torch.int32)
        q = torch.stack([seeded(7 * s.index + 100003 * s.generated + layer, a.heads, a.head_dim,
                                scale=a.head_dim ** -0.5) for s in sequences])
        out = meshdma.torch.paged_attention(q, self.transfer.key_cache(layer),
                                            self.transfer.value_cache(layer),
                                            torch.tensor(lengths, dtype=torch.int32), table, 1)
        if not a.check:
            return
        group = a.heads // a.kv_heads
        for i, s in enumerate(sequences):
            k, v = (t.repeat_interleave(group, dim=0) for t in s.reference[layer])
            logits = torch.einsum("hd,hsd->hs", q[i].double(), k.double())
            want = torch.einsum("hs,hsd->hd", torch.softmax(logits, dim=-1), v.double())
            err = (out[i].double() - want).abs().max().item()
            if err > 1e-4:
                raise AssertionError(f"sequence {s.index}, layer {layer}: attention differs "
                                     f"from torch by {err}")
            self.checked += 1

    def append_token(self, s, layer):
        """The keys and values of the token `s` generates next, of `layer`,
        into its pages (the page was reserved by `reserve_token`)."""
        a, ps = self.args, self.args.page_size
        page, row = s.pages[s.length // ps], s.length % ps
        k = seeded(31 * s.index + 7 * s.generated + layer, a.kv_heads, a.head_dim)
        v = seeded(37 * s.index + 7 * s.generated + layer, a.kv_heads, a.head_dim)
        self.transfer.key_cache(layer)[:, page, row] = k
        self.transfer.value_cache(layer)[:, page, row] = v
        if s.reference is not None:
            rk, rv = s.reference[layer]
            s.reference[layer] = (torch.cat([rk, k[:, None]], 1), torch.cat([rv, v[:, None]], 1))

    def reserve_token(self, s):
        if s.length == len(s.pages) * self.args.page_size:
            s.pages += self.pool.take(1)

    def serve(self, index, seq, decode_work):
        """Steps 1, 3 and 4 for prompt `index`."""
        a = self.args
        pages = self.pool.take(self.transfer.pages_for(seq))
        if not decode_work:
            self.transfer.transfer(seq, block_table=pages)
            self.pool.give_back(pages)
            return
        reference = None
        if a.check:
            reference = self.model.all_keys_values(self.model.prompt(index, seq, a.model))
        new = Sequence(index, seq, pages, reference)
        for s in self.batch:
            self.reserve_token(s)
        sequences = self.batch + [new]
        lengths = [s.length + 1 for s in self.batch] + [seq]

        def decode(layer, key_cache, value_cache):
            # A decode step of the batch at this layer (its token's keys and
            # values, then attention), the new prompt's first query with it.
            for s in self.batch:
                self.append_token(s, layer)
            self.step_layer(layer, sequences, lengths)
        self.transfer.transfer(seq, block_table=pages, decode=decode)
        for s in self.batch:
            s.length += 1
            s.generated += 1
        self.batch.append(new)
        for s in [s for s in self.batch if s.generated >= a.generate]:
            self.batch.remove(s)
            self.pool.give_back(s.pages)


def run(args, transfer, decode_work):
    """The serving loop of this rank's pair over its prompts; returns
    seconds per prompt and the decode server (None on a prefill rank)."""
    model = Model(args.layers, args.model, args.kv_heads, args.head_dim)
    # Every pair serves prompts of the same lengths, its own contents.
    lengths = torch.randint(args.seq_min, args.seq_max + 1, (args.prompts,),
                            generator=torch.Generator().manual_seed(3)).tolist()
    pair = min(dist.get_rank(), transfer.partner)
    server = None if transfer.is_prefill else DecodeServer(args, model, transfer)
    dist.barrier()
    start = time.perf_counter()
    for index, seq in enumerate(lengths):
        prompt = pair * args.prompts + index
        if transfer.is_prefill:
            x = model.prompt(prompt, seq, args.model)
            transfer.transfer(seq, prefill=model.prefill(x))
        else:
            server.serve(prompt, seq, decode_work)
    dist.barrier()
    return (time.perf_counter() - start) / args.prompts, server


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--prompts", type=int, default=16)
    p.add_argument("--seq-min", type=int, default=64)
    p.add_argument("--seq-max", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--model", type=int, default=256)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--head-dim", type=int, default=32)
    p.add_argument("--page-size", type=int, default=16)
    p.add_argument("--generate", type=int, default=4)
    p.add_argument("--pages", type=int, default=0,
                   help="pages of the decode cache per layer (default: enough for the batch)")
    p.add_argument("--check", action=argparse.BooleanOptionalAction, default=True)
    args = p.parse_args()
    if not 0 < args.seq_min <= args.seq_max:
        p.error(f"--seq-min {args.seq_min} and --seq-max {args.seq_max}: "
                "0 < seq-min <= seq-max required")
    if args.heads % args.kv_heads:
        p.error(f"--heads {args.heads} must be a multiple of --kv-heads {args.kv_heads}")
    if args.pages == 0:
        per_sequence = -(-(args.seq_max + args.generate) // args.page_size)
        args.pages = per_sequence * (args.generate + 2)
    dist.init_process_group("meshdma")
    if dist.get_world_size() % 2:
        raise SystemExit(f"kv_handoff: run it on an even number of ranks, not "
                         f"{dist.get_world_size()} (the first half prefills, rank i "
                         "for rank i + n/2)")
    # One cache for both loops: both ranks allocate it alike, once.
    transfer = meshdma.torch.KvCacheTransfer(
        num_layers=args.layers, num_kv_heads=args.kv_heads, head_dim=args.head_dim,
        page_size=args.page_size, total_pages=args.pages)
    with_decode, server = run(args, transfer, decode_work=True)
    alone, _ = run(args, transfer, decode_work=False)
    rank = dist.get_rank()
    role = "prefill" if transfer.is_prefill else "decode"
    if not transfer.is_prefill:
        print(f"kv_handoff rank {rank}: {args.prompts} prompts of {args.seq_min}-{args.seq_max} tokens, "
              f"{args.layers} layers: {with_decode * 1e3:.2f} ms per prompt with decode, "
              f"{alone * 1e3:.2f} ms for the transfer alone ({with_decode / alone:.2f}x)")
    checked = f", {server.checked} attention outputs match torch" if server and args.check else ""
    print(f"kv_handoff rank {rank} ({role}, pair of rank {transfer.partner}): "
          f"{args.prompts} prompts handed off{checked}; OK", flush=True)
    del transfer, server
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
