#include "meshdma/topology/process_group.h"

namespace meshdma {
namespace {

class SingleProcessGroup : public ProcessGroup {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  absl::StatusOr<std::vector<std::string>> AllGather(
      absl::string_view mine) override {
    return std::vector<std::string>{std::string(mine)};
  }
  absl::StatusOr<std::vector<std::string>> Gather(absl::string_view mine,
                                                  int root) override {
    if (root != 0) {
      return absl::InvalidArgumentError(
          "Gather: root must be 0 in a single-process group");
    }
    return AllGather(mine);
  }
  absl::Status Broadcast(std::string& bytes, int root) override {
    if (root != 0) {
      return absl::InvalidArgumentError(
          "Broadcast: root must be 0 in a single-process group");
    }
    return absl::OkStatus();
  }
  absl::Status Barrier(absl::string_view, absl::Duration) override {
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<int64_t>> BarrierExchange(
      absl::string_view, absl::Duration,
      std::span<const int64_t> mine) override {
    return std::vector<int64_t>(mine.begin(), mine.end());
  }
};

}  // namespace

std::unique_ptr<ProcessGroup> MakeSingleProcessGroup() {
  return std::make_unique<SingleProcessGroup>();
}

}  // namespace meshdma
