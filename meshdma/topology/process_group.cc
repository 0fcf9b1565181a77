#include "meshdma/topology/process_group.h"

#include "absl/strings/str_cat.h"

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
    if (absl::Status s = CheckRoot("Gather", root); !s.ok()) return s;
    return AllGather(mine);
  }
  absl::Status Broadcast(std::string& bytes, int root) override {
    if (absl::Status s = CheckRoot("Broadcast", root); !s.ok()) return s;
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

absl::Status ProcessGroup::CheckRoot(absl::string_view call, int root) const {
  if (root >= 0 && root < size()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(call, ": root ", root, " is not a rank of this launch (",
                   size(), size() == 1 ? " process)" : " processes)"));
}

std::unique_ptr<ProcessGroup> MakeSingleProcessGroup() {
  return std::make_unique<SingleProcessGroup>();
}

}  // namespace meshdma
