#include "meshdma/topology/store_process_group.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "meshdma/base/status_macros.h"

namespace meshdma {
namespace {

class StoreProcessGroup : public ProcessGroup {
 public:
  StoreProcessGroup(std::shared_ptr<KeyValueStore> store,
                    StoreProcessGroupOptions options)
      : store_(std::move(store)), options_(std::move(options)) {}

  int rank() const override { return options_.rank; }
  int size() const override { return options_.size; }

  absl::StatusOr<std::vector<std::string>> AllGather(
      absl::string_view mine) override {
    return Exchange("all-gather", options_.exchange_timeout, mine);
  }

  absl::StatusOr<std::vector<std::string>> Gather(absl::string_view mine,
                                                  int root) override {
    MESHDMA_RETURN_IF_ERROR(CheckRoot("Gather", root));
    MESHDMA_ASSIGN_OR_RETURN(
        std::vector<std::string> all,
        Exchange("gather", options_.exchange_timeout, mine));
    if (rank() != root) all.clear();
    return all;
  }

  absl::Status Broadcast(std::string& bytes, int root) override {
    MESHDMA_RETURN_IF_ERROR(CheckRoot("Broadcast", root));
    MESHDMA_ASSIGN_OR_RETURN(
        std::vector<std::string> all,
        Exchange("broadcast", options_.exchange_timeout,
                 rank() == root ? absl::string_view(bytes) : ""));
    bytes = std::move(all[root]);
    return absl::OkStatus();
  }

  absl::Status Barrier(absl::string_view what,
                       absl::Duration timeout) override {
    return Exchange(what, timeout, "").status();
  }

  absl::StatusOr<std::vector<int64_t>> BarrierExchange(
      absl::string_view what, absl::Duration timeout,
      std::span<const int64_t> mine) override {
    if (mine.size() > static_cast<size_t>(kMaxExchangeWords)) {
      return absl::InvalidArgumentError(
          absl::StrCat("BarrierExchange '", what, "': ", mine.size(),
                       " words, at most ", kMaxExchangeWords));
    }
    std::string bytes(mine.size() * sizeof(int64_t), '\0');
    std::memcpy(bytes.data(), mine.data(), bytes.size());
    MESHDMA_ASSIGN_OR_RETURN(std::vector<std::string> all,
                             Exchange(what, timeout, bytes));
    std::vector<int64_t> words(mine.size() * all.size());
    for (size_t r = 0; r < all.size(); ++r) {
      if (all[r].size() != bytes.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("BarrierExchange '", what, "': rank ", r, " passed ",
                         all[r].size() / sizeof(int64_t), " words, rank ",
                         rank(), " passed ", mine.size()));
      }
      std::memcpy(words.data() + r * mine.size(), all[r].data(), all[r].size());
    }
    return words;
  }

 private:
  std::string Key(int64_t exchange, int r) const {
    return absl::StrCat(options_.prefix, "/", exchange, "/", r);
  }

  // Every exchange: (1) publish this rank's bytes, (2) read every rank's
  // within `timeout`, naming the ranks that never wrote, (3) drop this
  // rank's key of the previous exchange, which every rank has now read.
  absl::StatusOr<std::vector<std::string>> Exchange(absl::string_view what,
                                                    absl::Duration timeout,
                                                    absl::string_view mine) {
    const int64_t k = next_exchange_++;
    MESHDMA_RETURN_IF_ERROR(store_->Set(Key(k, rank()), std::string(mine)));
    const absl::Time deadline = timeout == absl::InfiniteDuration()
                                    ? absl::InfiniteFuture()
                                    : absl::Now() + timeout;
    std::vector<std::string> all(size());
    for (int r = 0; r < size(); ++r) {
      if (r == rank()) {
        all[r] = std::string(mine);
        continue;
      }
      absl::StatusOr<std::string> got = store_->Get(
          Key(k, r), std::max(absl::ZeroDuration(), deadline - absl::Now()));
      if (!got.ok()) return Missing(what, k, timeout, got.status());
      all[r] = *std::move(got);
    }
    if (k > 0) store_->Delete(Key(k - 1, rank())).IgnoreError();
    return all;
  }

  absl::Status Missing(absl::string_view what, int64_t k,
                       absl::Duration timeout, const absl::Status& cause) {
    std::vector<int> missing;
    for (int r = 0; r < size(); ++r) {
      absl::StatusOr<bool> there = store_->Contains(Key(k, r));
      if (there.ok() && !*there) missing.push_back(r);
    }
    return absl::DeadlineExceededError(absl::StrCat(
        "rank ", rank(), ": '", what, "' through the launch's store: rank",
        missing.size() == 1 ? " " : "s ",
        missing.empty() ? "?" : absl::StrJoin(missing, ", "),
        " did not arrive within ", absl::FormatDuration(timeout), " (",
        cause.message(), ")"));
  }

  std::shared_ptr<KeyValueStore> store_;
  StoreProcessGroupOptions options_;
  int64_t next_exchange_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ProcessGroup>> MakeStoreProcessGroup(
    std::shared_ptr<KeyValueStore> store, StoreProcessGroupOptions options) {
  if (store == nullptr) {
    return absl::InvalidArgumentError("MakeStoreProcessGroup: no store");
  }
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MakeStoreProcessGroup: rank ", options.rank, " of ", options.size,
        " processes (the rank must lie in [0, size))"));
  }
  return std::unique_ptr<ProcessGroup>(
      new StoreProcessGroup(std::move(store), std::move(options)));
}

}  // namespace meshdma
