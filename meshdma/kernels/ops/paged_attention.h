// Paged attention for decode (the PyTorch/XLA and vLLM `paged_attention`
// op): one new query token per sequence attends to that sequence's cached
// keys and values, which live in fixed-size pages scattered through a shared
// cache and are found through a per-sequence block table.
//
// Layouts:
//   query        [num_seqs, num_heads, head_dim]            f32/bf16/f16
//   key_cache    [num_kv_heads, total_pages, page_size, head_dim]  (q's dtype)
//   value_cache  the same as key_cache
//   context_lens i32[num_seqs]: sequence s attends to its first
//                context_lens[s] tokens.
//   block_tables i32[num_seqs, pages_per_sequence]: token t of sequence s
//                lives in page block_tables[s][t / page_size], row
//                t % page_size.
//   out          [num_seqs, num_heads, head_dim] (q's dtype)
// num_heads must be a multiple of num_kv_heads (MHA, GQA; num_kv_heads == 1
// is MQA): query head h reads kv head h / (num_heads / num_kv_heads).
//
// The kernel is a pallas_call over the grid (seq, kv head, compute block).
// Each compute block is `pages_per_compute_block` pages. The query heads
// sharing a kv head are one [group, head_dim] VMEM block; context_lens and
// block_tables are SMEM operands; the caches are ANY operands that the body
// reads in place, where the block table says the pages lie: each key and
// value row of a sequence's context is read once per call, for all the query
// heads of its kv head, the next page prefetched while one is computed on
// (f32 caches with unit column stride; bf16/f16 pages are widened, strided
// ones gathered, one compute block at a time into a small f32 buffer). A
// staging copy of every page into VMEM, as a TPU kernel makes, moved each
// byte through memory twice and bounded decode at about 0.45 of the
// one-core copy bandwidth on the bytes read. The softmax is online over
// compute blocks (running max, sum and an f32 accumulator in scratch).
// Pages at or beyond context_len are not read; positions >= context_len
// within the last page are not computed. A sequence with context_len 0 gets
// a zero output. pages_per_compute_block need not divide pages_per_sequence
// (the last compute block is partial).
//
// Errors name the kernel and the operand: shapes, dtypes, head counts that
// do not divide, context_lens outside [0, pages_per_sequence * page_size],
// block_tables entries (for pages a sequence uses) outside [0, total_pages).
#ifndef MESHDMA_KERNELS_OPS_PAGED_ATTENTION_H_
#define MESHDMA_KERNELS_OPS_PAGED_ATTENTION_H_

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "meshdma/dma/array_ref.h"
#include "meshdma/kernels/pallas_call.h"

namespace meshdma {

struct PagedAttentionOptions {
  int64_t pages_per_compute_block = 4;
  std::optional<float> sm_scale;  // Default 1 / sqrt(head_dim).
  // When set (> 0), scores are capped: cap * tanh(scale * q k / cap), as
  // PyTorch/XLA's `attn_logits_soft_cap`.
  std::optional<float> logits_soft_cap;
  PipelineStats* stats = nullptr;
  // When set, receives the number of pages read from each cache.
  int64_t* pages_read = nullptr;
};

absl::Status PagedAttention(const ArrayRef& query, const ArrayRef& key_cache,
                            const ArrayRef& value_cache,
                            const ArrayRef& context_lens,
                            const ArrayRef& block_tables, const ArrayRef& out,
                            const PagedAttentionOptions& options = {});

}  // namespace meshdma

#endif  // MESHDMA_KERNELS_OPS_PAGED_ATTENTION_H_
