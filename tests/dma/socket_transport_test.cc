// What the TCP transport says when it cannot make its connections.
#include "meshdma/dma/transport/socket/socket_transport.h"

#include <sys/resource.h>

#include <memory>

#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "meshdma/topology/process_group.h"

namespace meshdma::dma_internal {
namespace {

// Out of file descriptors: a ResourceExhausted that names the limit and
// the command that raises it, instead of a failed connect that retries
// until the start-up timeout.
TEST(SocketTransportTest, OutOfFileDescriptorsNamesTheLimit) {
  std::unique_ptr<ProcessGroup> group = MakeSingleProcessGroup();
  // A sanitizer checks a virtual call's object once and remembers it, but
  // needs descriptors of its own for the first check: made here, before
  // the limit.
  ASSERT_EQ(group->size(), 1);
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
  // Descriptors 0-2 stay open: none is free below the new limit of 3.
  rlimit tight = saved;
  tight.rlim_cur = 3;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &tight), 0);
  std::string running;
  auto transport =
      MakeSocketTransport(/*host=*/nullptr, *group, /*one_machine=*/true,
                          absl::Seconds(5), TcpCongestion{}, &running);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &saved), 0);
  ASSERT_FALSE(transport.ok());
  EXPECT_EQ(transport.status().code(), absl::StatusCode::kResourceExhausted)
      << transport.status();
  EXPECT_THAT(transport.status().message(),
              ::testing::AllOf(::testing::HasSubstr("rank 0"),
                               ::testing::HasSubstr("RLIMIT_NOFILE"),
                               ::testing::HasSubstr("ulimit -n")));
}

}  // namespace
}  // namespace meshdma::dma_internal
