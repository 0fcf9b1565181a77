// The channel alone (collectives/internal/channel.h): rows of every
// protocol (flagged rows up to 32 bytes and stored rows above on one host,
// DMA rows with MESHDMA_CHANNEL_PROTOCOL=dma and across hosts) and both flow
// controls, between every member and in a ring shift that runs ahead, each
// payload byte checked against the formula its sender wrote it by; and a
// member making another call named at once.
#include "meshdma/collectives/internal/channel.h"

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "collectives_test_util.h"
#include "gtest/gtest.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/collectives/internal/common.h"
#include "meshdma/dma/runtime.h"
#include "meshdma/topology/launch.h"

namespace meshdma::collectives_internal {
namespace {

const std::vector<std::string> kAxes = {"x"};

// Byte b of what `from` sends `to` at call `call`.
std::byte Expected(int from, int to, int64_t call, int64_t b) {
  return static_cast<std::byte>((from * 31 + to * 7 + call * 13 + b) & 0xFF);
}

// Row lengths that cross the flagged rows' limit and reach the longest row.
std::vector<int64_t> RowLengths(const Group& g) {
  return {0, 8, 32, 33, 1000, Channel::MaxPayloadBytes(g)};
}

// `calls` exchanges with every member, each of the next row length; the
// rows from every member checked.
absl::Status ExchangeWithAll(Channel& channel, const Group& g, int calls,
                             int64_t first_call) {
  const std::vector<int64_t> lengths = RowLengths(g);
  const int n = g.size(), me = g.index;
  std::vector<std::vector<std::byte>> out(n);
  for (int c = 0; c < calls; ++c) {
    const int64_t call = first_call + c;
    const int64_t bytes = lengths[c % lengths.size()];
    for (int j = 0; j < n; ++j) {
      out[j].resize(bytes);
      for (int64_t b = 0; b < bytes; ++b) out[j][b] = Expected(me, j, call, b);
    }
    int64_t wrong = 0;
    MESHDMA_RETURN_IF_ERROR(channel.ExchangeWithAll(
        "channel_test", g,
        CallSignature(CollectiveKind::kAllGather, DType::kU8, bytes, 0,
                      nullptr),
        /*input=*/nullptr, /*output=*/nullptr,
        [&](int j) { return std::pair(out[j].data(), bytes); }, bytes,
        [&](const std::byte* rows) {
          for (int i = 0; i < n; ++i) {
            if (i == me) continue;
            const std::byte* got = channel.Payload(rows, i);
            for (int64_t b = 0; b < bytes; ++b) {
              wrong += got[b] != Expected(i, me, call, b);
            }
          }
        }));
    if (wrong > 0) {
      return absl::InternalError(absl::StrCat("device ", me, " call ", call,
                                              ": ", wrong, " wrong bytes of ",
                                              bytes, " per row"));
    }
  }
  return absl::OkStatus();
}

// `calls` ring shifts: each member sends to the next and receives from the
// previous, so that a sender may run a call ahead of its receiver (the flow
// control's waits).
absl::Status RingShifts(Channel& channel, const Group& g, int calls,
                        int64_t first_call) {
  const std::vector<int64_t> lengths = RowLengths(g);
  const int n = g.size(), me = g.index;
  const int next = (me + 1) % n, prev = (me + n - 1) % n;
  std::vector<std::byte> out;
  for (int c = 0; c < calls; ++c) {
    const int64_t call = first_call + c;
    const int64_t bytes = lengths[(c / 3) % lengths.size()];
    out.resize(bytes);
    for (int64_t b = 0; b < bytes; ++b) out[b] = Expected(me, next, call, b);
    const Channel::Outgoing o[] = {{next, out.data(), bytes}};
    const Channel::Incoming i[] = {{prev, bytes}};
    int64_t wrong = 0;
    MESHDMA_RETURN_IF_ERROR(channel.Exchange(
        "channel_test", g,
        CallSignature(CollectiveKind::kPpermute, DType::kU8, bytes, 0, nullptr),
        /*input=*/nullptr, /*output=*/nullptr, o, i,
        [&](const std::byte* rows) {
          const std::byte* got = channel.Payload(rows, prev);
          for (int64_t b = 0; b < bytes; ++b) {
            wrong += got[b] != Expected(prev, me, call, b);
          }
        }));
    if (wrong > 0) {
      return absl::InternalError(absl::StrCat("device ", me, " shift ", call,
                                              ": ", wrong, " wrong bytes of ",
                                              bytes));
    }
  }
  return absl::OkStatus();
}

// Runs `fn(channel, group)` on every device of a fresh runtime's 1-D mesh
// (3 threads alone, the launch's devices under mpirun), with
// MESHDMA_CHANNEL_PROTOCOL set to `protocol`.
absl::Status RunWithChannel(
    const char* protocol,
    const std::function<absl::Status(Channel&, const Group&)>& fn) {
  setenv("MESHDMA_CHANNEL_PROTOCOL", protocol, 1);
  RuntimeOptions o = testing::OptionsFor(LaunchedByMpi() ? 0 : 3);
  o.wait_timeout = absl::Seconds(10);
  // The channel reads the variable when it is made, in the Run.
  absl::Status status = [&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(auto rt, Runtime::Create(o));
    MESHDMA_ASSIGN_OR_RETURN(Mesh mesh, rt->MakeMesh1D("x"));
    return rt->Run(mesh, [&]() -> absl::Status {
      MESHDMA_ASSIGN_OR_RETURN(Group g, ResolveGroup("channel_test", kAxes));
      MESHDMA_ASSIGN_OR_RETURN(Channel * channel, Channel::For(g));
      return fn(*channel, g);
    });
  }();
  unsetenv("MESHDMA_CHANNEL_PROTOCOL");
  return status;
}

class ChannelTest : public ::testing::TestWithParam<const char*> {};

TEST_P(ChannelTest, RowsOfEveryLength) {
  absl::Status s =
      RunWithChannel(GetParam(), [](Channel& channel, const Group& g) {
        // DMA rows where asked, or where the members do not all reach
        // each other by stores (other hosts).
        if (std::string(GetParam()) == "dma" && channel.by_stores()) {
          return absl::InternalError("dma asked for, stores used");
        }
        MESHDMA_RETURN_IF_ERROR(ExchangeWithAll(channel, g, 30, 0));
        MESHDMA_RETURN_IF_ERROR(RingShifts(channel, g, 60, 30));
        return ExchangeWithAll(channel, g, 12, 90);
      });
  EXPECT_TRUE(s.ok()) << s;
}

// Device 0 sends 4 elements where the others send 8: every receiver of its
// row names both calls.
TEST_P(ChannelTest, AnotherCallIsNamed) {
  absl::Status s =
      RunWithChannel(GetParam(), [](Channel& channel, const Group& g) {
        const int64_t count = g.index == 0 ? 4 : 8;
        std::vector<std::byte> row(8);
        return channel.ExchangeWithAll(
            "channel_test", g,
            CallSignature(CollectiveKind::kAllGather, DType::kU8, count, 0,
                          nullptr),
            /*input=*/nullptr, /*output=*/nullptr,
            [&](int) { return std::pair(row.data(), int64_t{8}); }, 8,
            [](const std::byte*) {});
      });
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(absl::StrContains(s.message(), "all_gather of 4 u8")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "all_gather of 8 u8")) << s;
}

INSTANTIATE_TEST_SUITE_P(Protocols, ChannelTest,
                         ::testing::Values("auto", "dma"));

}  // namespace
}  // namespace meshdma::collectives_internal
