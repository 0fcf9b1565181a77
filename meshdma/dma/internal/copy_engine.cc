#include "meshdma/dma/internal/copy_engine.h"

#include "meshdma/base/thread_name.h"
#include "meshdma/dma/internal/device.h"

namespace meshdma::dma_internal {

CopyEngine::CopyEngine(int num_threads, int64_t chunk_bytes)
    : chunk_bytes_(chunk_bytes) {
  for (int i = 0; i < num_threads; ++i) {
    workers_.emplace_back([this] { WorkerMain(); });
    base_internal::NameThread(workers_.back(), "meshdma-copy");
  }
}

CopyEngine::~CopyEngine() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
  // Anything still queued is copied here so that no DMA is lost.
  while (HelpOnce()) {
  }
}

void CopyEngine::Submit(std::unique_ptr<DmaOp> op) {
  CopyPlan plan(op->src_layout, op->dst_layout, op->elem_bytes);
  op->num_chunks = plan.NumChunks(chunk_bytes_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(op.release());
    queued_.store(static_cast<int64_t>(queue_.size()),
                  std::memory_order_relaxed);
  }
  cv_.notify_one();
}

DmaOp* CopyEngine::Claim(int64_t* chunk) {
  if (queue_.empty()) return nullptr;
  DmaOp* op = queue_.front();
  *chunk = op->next_chunk.fetch_add(1, std::memory_order_relaxed);
  if (*chunk + 1 >= op->num_chunks) {
    queue_.pop_front();
    queued_.store(static_cast<int64_t>(queue_.size()),
                  std::memory_order_relaxed);
  }
  running_.fetch_add(1, std::memory_order_relaxed);
  return op;
}

bool CopyEngine::Idle() {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.empty() && running_.load(std::memory_order_acquire) == 0;
}

bool CopyEngine::HelpOnce() {
  // A DMA submitted just now may be missed here: a worker runs it anyway.
  if (queued_.load(std::memory_order_relaxed) == 0) return false;
  int64_t chunk = 0;
  DmaOp* op;
  {
    std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
    if (!lock.owns_lock()) return false;
    op = Claim(&chunk);
  }
  if (op == nullptr) return false;
  RunChunk(op, chunk);
  return true;
}

void CopyEngine::WorkerMain() {
  for (;;) {
    int64_t chunk = 0;
    DmaOp* op;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      op = Claim(&chunk);
      // More chunks of this op, or more ops: let another worker start too.
      if (!queue_.empty()) cv_.notify_one();
    }
    RunChunk(op, chunk);
  }
}

void CopyEngine::RunChunk(DmaOp* op, int64_t chunk) {
  CopyPlan plan(op->src_layout, op->dst_layout, op->elem_bytes);
  const int64_t num_chunks = op->num_chunks;
  plan.CopyChunk(op->src, op->dst, chunk, num_chunks);
  // Once its chunk is counted, `op` belongs to whichever thread counts the
  // last one, which completes and deletes it: nothing here may touch `op`
  // after the increment unless it counted the last chunk.
  if (op->done_chunks.fetch_add(1, std::memory_order_acq_rel) + 1 ==
      num_chunks) {
    op->issuer->CompleteDma(std::unique_ptr<DmaOp>(op));
  }
  running_.fetch_sub(1, std::memory_order_release);
}

}  // namespace meshdma::dma_internal
