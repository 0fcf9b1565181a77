// A device's symmetric heap on its own, over a mapping of its own: where
// allocations lie (64-byte aligned, from the top up; persistent memory from
// the end down), what a closing scope gives back (its bytes, zeroed, and only
// its semaphores), the exit checks of semaphore counts, and the errors of a
// full heap, which name the device and the sizes.
#include "meshdma/dma/internal/device_heap.h"

#include <sys/mman.h>

#include <cstring>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace meshdma::dma_internal {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kHeapBytes = int64_t{1} << 20;
constexpr char kOwner[] = "device 3 (rank 1, local 1)";

// A zeroed private mapping, as the runtime's heaps are.
class DeviceHeapTest : public ::testing::Test {
 protected:
  void SetUp() override {
    void* p = mmap(nullptr, kHeapBytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(p, MAP_FAILED);
    base_ = static_cast<std::byte*>(p);
    heap_ = std::make_unique<DeviceHeap>(kOwner, base_, kHeapBytes);
  }
  void TearDown() override { munmap(base_, kHeapBytes); }

  // The number of non-zero bytes in [begin, end) of the heap.
  int64_t NonZero(int64_t begin, int64_t end) const {
    int64_t n = 0;
    for (int64_t i = begin; i < end; ++i) n += base_[i] != std::byte{0};
    return n;
  }

  std::byte* base_ = nullptr;
  std::unique_ptr<DeviceHeap> heap_;
};

TEST_F(DeviceHeapTest, AllocatesAlignedFromTheTopOfTheReservedPart) {
  heap_->PushScope("k", std::nullopt);
  const int64_t a_shape[] = {3};      // 12 bytes: takes one 64-byte line.
  const int64_t b_shape[] = {5, 20};  // 400 bytes: takes 448.
  absl::StatusOr<ArrayRef> a = heap_->Allocate(DType::kF32, a_shape);
  ASSERT_TRUE(a.ok()) << a.status();
  absl::StatusOr<ArrayRef> b = heap_->Allocate(DType::kF32, b_shape);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(a->heap_offset(), kReservedHeapBytes);
  EXPECT_EQ(a->data(), base_ + kReservedHeapBytes);
  EXPECT_EQ(b->heap_offset(), kReservedHeapBytes + 64);
  EXPECT_EQ(heap_->top(), kReservedHeapBytes + 64 + 448);
  EXPECT_EQ(heap_->bytes_free(), kHeapBytes - heap_->top());
  EXPECT_EQ(heap_->allocations().count(), 2);
  // Padding rounds up to 64 and never lowers the top.
  ASSERT_TRUE(heap_->PadTo(heap_->top() + 1).ok());
  EXPECT_EQ(heap_->top(), kReservedHeapBytes + 64 + 448 + 64);
  ASSERT_TRUE(heap_->PadTo(0).ok());
  EXPECT_EQ(heap_->top(), kReservedHeapBytes + 64 + 448 + 64);
  EXPECT_EQ(heap_->allocations().count(), 2);
}

TEST_F(DeviceHeapTest, PersistentMemoryGrowsDownFromTheEnd) {
  const int64_t shape[] = {100};
  absl::StatusOr<ArrayRef> p =
      heap_->AllocatePersistent(DType::kU8, shape, "p");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->heap_offset(), kHeapBytes - 128);
  EXPECT_EQ(heap_->persistent_bottom(), kHeapBytes - 128);
  EXPECT_EQ(heap_->touched_bottom(), kHeapBytes - 128);
  std::memset(base_ + p->heap_offset(), 0x5a, 100);
  heap_->ZeroPersistent();
  EXPECT_EQ(heap_->persistent_bottom(), kHeapBytes);
  EXPECT_EQ(NonZero(kHeapBytes - 128, kHeapBytes), 0);
  // What was touched stays known until a reset after a failure.
  EXPECT_EQ(heap_->touched_bottom(), kHeapBytes - 128);
}

TEST_F(DeviceHeapTest, ClosingAScopeFreesAndZeroesOnlyItsBytes) {
  heap_->PushScope("outer", 7);
  const int64_t shape[] = {64};
  absl::StatusOr<ArrayRef> outer = heap_->Allocate(DType::kU8, shape);
  ASSERT_TRUE(outer.ok());
  std::memset(outer->data(), 1, 64);
  heap_->PushScope("inner", std::nullopt);
  EXPECT_EQ(heap_->depth(), 2);
  EXPECT_EQ(heap_->kernel_name(), "inner");
  EXPECT_EQ(heap_->collective_id(), 7);  // The innermost that has one.
  // Large enough for the line-skipping zeroing (64 KiB and more): write a
  // scattered byte, a whole block and the ragged end.
  const int64_t big[] = {100'000 + 17};
  absl::StatusOr<ArrayRef> inner = heap_->Allocate(DType::kU8, big);
  ASSERT_TRUE(inner.ok());
  const int64_t begin = inner->heap_offset();
  base_[begin + 5000] = std::byte{9};
  std::memset(base_ + begin + 8192, 3, 4096);
  base_[begin + 100'000 + 16] = std::byte{4};
  ASSERT_GT(NonZero(begin, heap_->top()), 0);
  const int64_t top = heap_->top();
  const DeviceHeap::Freed freed = heap_->PopScope(/*zero=*/true);
  EXPECT_EQ(freed.begin, begin);
  EXPECT_EQ(freed.end, top);
  EXPECT_EQ(freed.kernel_name, "inner");
  EXPECT_EQ(heap_->top(), begin);
  EXPECT_EQ(NonZero(begin, top), 0);
  EXPECT_EQ(NonZero(outer->heap_offset(), outer->heap_offset() + 64), 64);
  EXPECT_EQ(heap_->allocations().count(), 1);
  EXPECT_EQ(heap_->kernel_name(), "outer");
  // The next allocation takes the same, zeroed, bytes.
  heap_->PushScope("again", std::nullopt);
  absl::StatusOr<ArrayRef> again = heap_->Allocate(DType::kU8, big);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->heap_offset(), begin);
}

TEST_F(DeviceHeapTest, ClosingWithoutZeroingLeavesTheBytesForRecovery) {
  heap_->PushScope("k", std::nullopt);
  const int64_t shape[] = {256};
  absl::StatusOr<ArrayRef> a = heap_->Allocate(DType::kU8, shape);
  ASSERT_TRUE(a.ok());
  std::memset(a->data(), 2, 256);
  heap_->PopScope(/*zero=*/false);
  EXPECT_EQ(heap_->top(), kReservedHeapBytes);
  EXPECT_EQ(NonZero(a->heap_offset(), a->heap_offset() + 256), 256);
  EXPECT_EQ(heap_->touched_top(), kReservedHeapBytes + 256);
  base_[0] = std::byte{1};  // A reserved cell a late signal moved.
  heap_->ResetAfterFailure(heap_->touched_top(), heap_->touched_bottom());
  EXPECT_EQ(NonZero(0, kReservedHeapBytes + 256), 0);
  EXPECT_EQ(heap_->depth(), 0);
  EXPECT_EQ(heap_->touched_top(), kReservedHeapBytes);
}

TEST_F(DeviceHeapTest, SemaphoresAreLiveInTheirScopeAndNamed) {
  heap_->PushScope("k", std::nullopt);
  absl::StatusOr<int64_t> sems =
      heap_->AllocateSemaphores(SemaphoreType::kDma, 3, "recv");
  ASSERT_TRUE(sems.ok()) << sems.status();
  const int64_t second = *sems + kSemaphoreBytes;
  const DeviceHeap::SemaphoreRecord* rec = heap_->FindSemaphore(second);
  ASSERT_NE(rec, nullptr);
  EXPECT_EQ(rec->name, "recv");
  EXPECT_EQ(rec->count, 3);
  EXPECT_EQ(heap_->SemaphoreName(Semaphore(second, SemaphoreType::kDma)),
            absl::StrCat("'recv'[1] DMA semaphore @", second));
  EXPECT_EQ(heap_->SemaphoreName(
                Semaphore(kCollectiveCellsOffset, SemaphoreType::kBarrier)),
            absl::StrCat("'collective id 0' BARRIER semaphore @",
                         kCollectiveCellsOffset));
  // A count left at close is reported; a count of 0 is not.
  std::vector<std::string> problems;
  heap_->CheckScopeSemaphores(problems);
  EXPECT_TRUE(problems.empty());
  heap_->CellAt(second)->count.store(2);
  heap_->CheckScopeSemaphores(problems);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0], absl::StrCat("'recv'[1] DMA semaphore @", second,
                                      " (count 2) is 2, expected 0"));
  heap_->CellAt(second)->count.store(0);
  heap_->PopScope(/*zero=*/true);
  EXPECT_EQ(heap_->FindSemaphore(second), nullptr);
}

TEST_F(DeviceHeapTest, PersistentSemaphoresOutliveScopes) {
  absl::StatusOr<int64_t> sem =
      heap_->AllocatePersistentSemaphores(SemaphoreType::kRegular, 1, "ready");
  ASSERT_TRUE(sem.ok()) << sem.status();
  heap_->PushScope("k", std::nullopt);
  heap_->PopScope(/*zero=*/true);
  ASSERT_NE(heap_->FindSemaphore(*sem), nullptr);
  heap_->CellAt(*sem)->count.store(1);
  std::vector<std::string> problems;
  heap_->CheckPersistentSemaphores(problems);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_THAT(problems[0], HasSubstr("'ready' REGULAR semaphore"));
  heap_->CellAt(*sem)->count.store(0);
  heap_->ZeroPersistent();
  EXPECT_EQ(heap_->FindSemaphore(*sem), nullptr);
}

TEST_F(DeviceHeapTest, AFullHeapNamesTheDeviceAndTheSizes) {
  heap_->PushScope("k", std::nullopt);
  const int64_t huge[] = {kHeapBytes};
  absl::StatusOr<ArrayRef> a = heap_->Allocate(DType::kU8, huge);
  ASSERT_EQ(a.status().code(), absl::StatusCode::kResourceExhausted);
  const int64_t left = kHeapBytes - kReservedHeapBytes;
  EXPECT_EQ(a.status().message(),
            absl::StrCat("symmetric heap of ", kOwner,
                         " exhausted: request u8[", kHeapBytes, "] needs ",
                         kHeapBytes, " bytes, ", left, " of ", kHeapBytes,
                         " bytes left (raise RuntimeOptions::heap_bytes or "
                         "MESHDMA_HEAP_BYTES)"));
  absl::StatusOr<ArrayRef> p =
      heap_->AllocatePersistent(DType::kU8, huge, "cache");
  ASSERT_EQ(p.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(p.status().message(), HasSubstr("persistent 'cache' u8["));
  absl::Status pad = heap_->PadTo(kHeapBytes + 1);
  ASSERT_EQ(pad.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(pad.message(), HasSubstr(kOwner));
  // Nothing was taken by the failed requests.
  EXPECT_EQ(heap_->top(), kReservedHeapBytes);
  EXPECT_EQ(heap_->persistent_bottom(), kHeapBytes);
}

TEST_F(DeviceHeapTest, BadRequestsNameTheDevice) {
  const int64_t shape[] = {4};
  absl::StatusOr<ArrayRef> a = heap_->Allocate(DType::kF32, shape);
  EXPECT_EQ(a.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(a.status().message(), HasSubstr(kOwner));
  heap_->PushScope("k", std::nullopt);
  const int64_t negative[] = {2, -1};
  a = heap_->Allocate(DType::kF32, negative);
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(a.status().message(), HasSubstr("negative dimension -1"));
  absl::StatusOr<int64_t> s =
      heap_->AllocateSemaphores(SemaphoreType::kDma, 0, "none");
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), HasSubstr(kOwner));
}

}  // namespace
}  // namespace meshdma::dma_internal
