// The clock mailbox that carries checked mode's clocks between processes on
// one host (meshdma/dma/check/clock_mailbox.h): every message posted before a
// drain arrives whole and in order, and a full mailbox gives up instead of
// blocking forever.
#include "meshdma/dma/check/clock_mailbox.h"

#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace meshdma::dma_internal {
namespace {

constexpr int kDevices = 4;
constexpr int64_t kPatienceNs = int64_t{5} * 1000 * 1000 * 1000;

struct Region {
  explicit Region(int devices)
      : bytes(ClockMailbox::BytesFor(devices)),
        data(static_cast<std::byte*>(std::aligned_alloc(4096, bytes))) {}
  ~Region() { std::free(data); }
  size_t bytes;
  std::byte* data;
};

ClockMessage Message(int producer, int i) {
  ClockMessage m;
  m.target = producer;
  m.issuer = i % 2 == 0 ? -1 : producer;
  m.sem_offset = 4096 + i;
  m.dma_seq = static_cast<uint32_t>(i);
  m.has_layout = i % 2 == 1;
  m.dst_offset = 8192 + 8 * i;
  m.elem_bytes = 4;
  m.dst_layout.rank = 2;
  m.dst_layout.shape[0] = i;
  m.dst_layout.shape[1] = 3;
  m.dst_layout.byte_strides[0] = 12;
  m.dst_layout.byte_strides[1] = 4;
  m.clock.assign(2 * kDevices, 0);
  for (int c = 0; c < 2 * kDevices; ++c) m.clock[c] = i * 10 + c;
  return m;
}

TEST(ClockMailboxTest, SizeIsWholePages) {
  EXPECT_EQ(ClockMailbox::BytesFor(kDevices) % 4096, 0u);
  EXPECT_GT(ClockMailbox::BytesFor(64), ClockMailbox::BytesFor(kDevices));
}

// Two producers post 3 times the ring's capacity while one consumer drains:
// each producer's messages arrive in order, every field intact.
TEST(ClockMailboxTest, MessagesFromTwoProducersArriveWholeAndInOrder) {
  Region region(kDevices);
  ClockMailbox box(region.data, kDevices);
  box.Format();
  EXPECT_TRUE(box.Empty());
  constexpr int kEach = 3 * 4096;
  std::vector<std::thread> producers;
  for (int p = 0; p < 2; ++p) {
    producers.emplace_back([&box, p] {
      for (int i = 0; i < kEach; ++i) {
        ASSERT_TRUE(box.Post(Message(p, i), kPatienceNs).ok());
      }
    });
  }
  std::vector<int> next(2, 0);
  auto check = [&](const ClockMessage& m) {
    ASSERT_TRUE(m.target == 0 || m.target == 1);
    const ClockMessage want = Message(m.target, next[m.target]++);
    EXPECT_EQ(m.issuer, want.issuer);
    EXPECT_EQ(m.sem_offset, want.sem_offset);
    EXPECT_EQ(m.dma_seq, want.dma_seq);
    EXPECT_EQ(m.has_layout, want.has_layout);
    EXPECT_EQ(m.dst_offset, want.dst_offset);
    EXPECT_EQ(m.dst_layout.shape[0], want.dst_layout.shape[0]);
    EXPECT_EQ(m.dst_layout.byte_strides[0], 12);
    EXPECT_EQ(m.clock, want.clock);
  };
  while (next[0] < kEach || next[1] < kEach) {
    ASSERT_TRUE(box.Drain(check, kPatienceNs).ok());
  }
  for (auto& t : producers) t.join();
  EXPECT_TRUE(box.Drain(check, kPatienceNs).ok());
  EXPECT_TRUE(box.Empty());
  EXPECT_EQ(next[0], kEach);
  EXPECT_EQ(next[1], kEach);
}

// Nobody drains: once the ring is full a post waits its patience, then
// drops the message and says so; draining makes room again.
TEST(ClockMailboxTest, FullMailboxGivesUp) {
  Region region(kDevices);
  ClockMailbox box(region.data, kDevices);
  box.Format();
  int posted = 0;
  absl::Status s;
  while ((s = box.Post(Message(0, posted), 1000 * 1000)).ok()) ++posted;
  EXPECT_EQ(posted, 4096);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("device 0"), std::string::npos) << s;
  int drained = 0;
  EXPECT_TRUE(
      box.Drain([&](const ClockMessage&) { ++drained; }, kPatienceNs).ok());
  EXPECT_EQ(drained, 4096);
  EXPECT_TRUE(box.Post(Message(0, 0), kPatienceNs).ok());
  EXPECT_FALSE(box.Empty());
}

}  // namespace
}  // namespace meshdma::dma_internal
