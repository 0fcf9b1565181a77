// The process group of a launch without MPI, over an in-memory store that
// threads share (each thread one "process"): every exchange against what
// each rank contributed, timeouts that name the missing ranks, and the
// store's keys cleaned up behind the exchanges.
#include "meshdma/topology/store_process_group.h"

#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace meshdma {
namespace {

using ::testing::HasSubstr;

class MemoryStore : public KeyValueStore {
 public:
  absl::Status Set(const std::string& key, const std::string& value) override {
    std::lock_guard<std::mutex> lock(mu_);
    values_[key] = value;
    cv_.notify_all();
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> Get(const std::string& key,
                                  absl::Duration timeout) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, absl::ToChronoMilliseconds(timeout),
                      [&] { return values_.count(key) > 0; })) {
      return absl::DeadlineExceededError(absl::StrCat("no key ", key));
    }
    return values_[key];
  }
  absl::StatusOr<bool> Contains(const std::string& key) override {
    std::lock_guard<std::mutex> lock(mu_);
    return values_.count(key) > 0;
  }
  absl::Status Delete(const std::string& key) override {
    std::lock_guard<std::mutex> lock(mu_);
    values_.erase(key);
    return absl::OkStatus();
  }
  size_t size() {
    std::lock_guard<std::mutex> lock(mu_);
    return values_.size();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> values_;
};

// Runs `body(group)` on `n` threads, one group of rank r each.
void OnRanks(int n, std::shared_ptr<MemoryStore> store,
             const std::function<void(ProcessGroup&)>& body,
             absl::Duration timeout = absl::Seconds(10)) {
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      auto group = MakeStoreProcessGroup(
          store,
          {.rank = r, .size = n, .prefix = "t", .exchange_timeout = timeout});
      ASSERT_TRUE(group.ok()) << group.status();
      body(**group);
    });
  }
  for (auto& t : threads) t.join();
}

TEST(StoreProcessGroupTest, ExchangesGiveEveryRanksContribution) {
  auto store = std::make_shared<MemoryStore>();
  static constexpr int kRanks = 4;
  OnRanks(kRanks, store, [](ProcessGroup& g) {
    const int me = g.rank();
    for (int round = 0; round < 5; ++round) {
      auto all = g.AllGather(absl::StrCat("r", me, "/", round));
      ASSERT_TRUE(all.ok()) << all.status();
      ASSERT_EQ(all->size(), kRanks);
      for (int r = 0; r < kRanks; ++r) {
        EXPECT_EQ((*all)[r], absl::StrCat("r", r, "/", round));
      }
      auto gathered = g.Gather(absl::StrCat("g", me), /*root=*/2);
      ASSERT_TRUE(gathered.ok()) << gathered.status();
      if (me == 2) {
        ASSERT_EQ(gathered->size(), kRanks);
        EXPECT_EQ((*gathered)[3], "g3");
      } else {
        EXPECT_TRUE(gathered->empty());
      }
      std::string bytes = me == 1 ? "from one" : "junk";
      ASSERT_TRUE(g.Broadcast(bytes, 1).ok());
      EXPECT_EQ(bytes, "from one");
      const int64_t words[2] = {me, 100 + round};
      auto exchanged = g.BarrierExchange("words", absl::Seconds(10), words);
      ASSERT_TRUE(exchanged.ok()) << exchanged.status();
      ASSERT_EQ(exchanged->size(), 2 * kRanks);
      for (int r = 0; r < kRanks; ++r) {
        EXPECT_EQ((*exchanged)[2 * r], r);
        EXPECT_EQ((*exchanged)[2 * r + 1], 100 + round);
      }
    }
    EXPECT_TRUE(g.Barrier("end", absl::Seconds(10)).ok());
  });
  // Each rank keeps at most its last two exchanges' keys.
  EXPECT_LE(store->size(), 2u * kRanks);
}

TEST(StoreProcessGroupTest, TimeoutNamesTheRanksThatNeverCame) {
  auto store = std::make_shared<MemoryStore>();
  std::vector<absl::Status> results(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {  // Rank 2 of 3 never calls.
    threads.emplace_back([&, r] {
      auto g = MakeStoreProcessGroup(store, {.rank = r, .size = 3});
      ASSERT_TRUE(g.ok());
      results[r] = (*g)->Barrier("the meeting", absl::Milliseconds(200));
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(results[r].code(), absl::StatusCode::kDeadlineExceeded);
    EXPECT_THAT(results[r].message(), HasSubstr("'the meeting'"));
    EXPECT_THAT(results[r].message(), HasSubstr("rank 2 did not arrive"));
  }
}

TEST(StoreProcessGroupTest, RefusesBadRanksAndRoots) {
  auto store = std::make_shared<MemoryStore>();
  EXPECT_EQ(
      MakeStoreProcessGroup(store, {.rank = 3, .size = 3}).status().code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MakeStoreProcessGroup(nullptr, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto g = MakeStoreProcessGroup(store, {.rank = 0, .size = 1});
  ASSERT_TRUE(g.ok());
  std::string bytes;
  absl::Status s = (*g)->Broadcast(bytes, 4);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("root 4"));
}

}  // namespace
}  // namespace meshdma
