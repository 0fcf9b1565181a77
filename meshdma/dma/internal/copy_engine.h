// Copy workers for the asynchronous DMA mode. A submitted DMA is split into
// chunks that any worker, or any waiting device thread (`HelpOnce`), may
// execute; whoever finishes the last chunk completes the DMA.
#ifndef MESHDMA_DMA_INTERNAL_COPY_ENGINE_H_
#define MESHDMA_DMA_INTERNAL_COPY_ENGINE_H_

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "meshdma/dma/transport/transport.h"

namespace meshdma::dma_internal {

class CopyEngine {
 public:
  // `complete(op)` is called once per DMA after its last chunk is copied.
  CopyEngine(int num_threads, int64_t chunk_bytes);
  ~CopyEngine();

  // `op->src`, `op->dst` and the layouts are set; takes ownership.
  void Submit(std::unique_ptr<DmaOp> op);
  // Runs one queued chunk on the calling thread. False if none was queued.
  bool HelpOnce();
  // True when no chunk is queued or being copied (and so no DMA of this
  // engine is about to complete).
  bool Idle();

 private:
  void WorkerMain();
  // Claims a chunk of the oldest op under `mu_`; null when the queue is empty.
  DmaOp* Claim(int64_t* chunk);
  void RunChunk(DmaOp* op, int64_t chunk);

  const int64_t chunk_bytes_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<DmaOp*> queue_;
  // queue_.size(), written under mu_ and read without it: a waiting device
  // that finds the queue empty leaves mu_ alone, so threads polling in
  // waits do not pass its cache line between them.
  std::atomic<int64_t> queued_{0};
  // Chunks claimed (under mu_) and not yet done.
  std::atomic<int> running_{0};
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace meshdma::dma_internal

#endif  // MESHDMA_DMA_INTERNAL_COPY_ENGINE_H_
