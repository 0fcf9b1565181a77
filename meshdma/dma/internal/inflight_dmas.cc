#include "meshdma/dma/internal/inflight_dmas.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace meshdma::dma_internal {

void InflightDmas::Add(DmaOp* op) {
  std::lock_guard<std::mutex> lock(mu_);
  ops_.push_back(op);
}

void InflightDmas::Remove(const DmaOp* op) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = std::find(ops_.begin(), ops_.end(), op);
  if (it != ops_.end()) {
    *it = ops_.back();
    ops_.pop_back();
  }
}

size_t InflightDmas::Count(int min_depth) const {
  std::lock_guard<std::mutex> lock(mu_);
  return std::count_if(ops_.begin(), ops_.end(), [&](const DmaOp* op) {
    return op->scope_depth >= min_depth;
  });
}

std::string InflightDmas::Describe(
    int min_depth,
    absl::FunctionRef<absl::string_view(int)> transport_to) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> parts;
  for (const DmaOp* op : ops_) {
    if (op->scope_depth < min_depth) continue;
    parts.push_back(absl::StrCat("#", op->event.id, " to device ",
                                 op->event.dst_device, " (", op->event.bytes,
                                 " bytes, ", transport_to(op->event.dst_device),
                                 ", recv_sem @", op->event.recv_sem, ")"));
  }
  return parts.empty() ? "none" : absl::StrJoin(parts, ", ");
}

}  // namespace meshdma::dma_internal
