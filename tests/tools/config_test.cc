// The configuration table (meshdma/base/config.h) read through base/env.h,
// and the element loads and stores every test and benchmark fills arrays
// with (base/dtype.h).
#include "meshdma/base/config.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "meshdma/base/dtype.h"
#include "meshdma/base/env.h"

namespace meshdma {
namespace {

using base_internal::EnvBool;
using base_internal::EnvChoice;
using base_internal::EnvInt;
using base_internal::EnvSeconds;
using base_internal::EnvString;

// Sets a variable for the scope of one test step.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    setenv(name, value, 1);
  }
  ~ScopedEnv() { unsetenv(name_); }

 private:
  const char* name_;
};

TEST(ConfigTest, EveryRowIsCompleteAndNamedOnce) {
  std::set<std::string> names;
  for (const config::Variable* v : config::AllVariables()) {
    EXPECT_EQ(std::string(v->name).rfind("MESHDMA_", 0), 0u) << v->name;
    EXPECT_TRUE(names.insert(v->name).second) << v->name << " twice";
    EXPECT_GT(std::strlen(v->doc), 0u) << v->name;
    EXPECT_GT(std::strlen(v->default_value), 0u) << v->name;
    if (v->type == config::Type::kInt) {
      EXPECT_LE(v->min, v->max) << v->name;
    }
    if (v->type == config::Type::kChoice) {
      EXPECT_GT(std::strlen(v->choices), 0u) << v->name;
    }
  }
  EXPECT_EQ(names.size(), 22u);
}

// A MESHDMA_ name that is no row and no script variable is reported with
// the closest known name; rows, the scripts' variables and other names are
// not.
TEST(ConfigTest, UnknownVariablesNameTheClosestKnownOne) {
  char heap_typo[] = "MESHDMA_HEAP_BYTE=1";
  char check_typo[] = "MESHDMA_CHEK=races";
  char row[] = "MESHDMA_HEAP_BYTES=65536";
  char script[] = "MESHDMA_SANITIZERS=asan tsan";
  char fuzz[] = "MESHDMA_FUZZ_RUNS=3";
  char other[] = "OMPI_MESHDMA_X=1";
  char bare[] = "MESHDMA_WAIT_TIMEOUT_S";
  char* environment[] = {heap_typo, row,   script, check_typo,
                         fuzz,      other, bare,   nullptr};
  const std::vector<std::string> lines =
      base_internal::UnknownVariables(environment);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0],
            "MESHDMA_HEAP_BYTE is not a meshdma variable and is ignored; did "
            "you mean MESHDMA_HEAP_BYTES?");
  EXPECT_EQ(lines[1],
            "MESHDMA_CHEK is not a meshdma variable and is ignored; did you "
            "mean MESHDMA_CHECK?");
  for (const config::ScriptVariable& v : config::ScriptVariables()) {
    EXPECT_EQ(std::string(v.name).rfind("MESHDMA_", 0), 0u) << v.name;
    EXPECT_GT(std::strlen(v.read_by), 0u) << v.name;
    EXPECT_GT(std::strlen(v.doc), 0u) << v.name;
    for (const config::Variable* row : config::AllVariables()) {
      EXPECT_STRNE(v.name, row->name) << "a script variable is also a row";
    }
  }
}

TEST(ConfigTest, IntRowsReadTheirRange) {
  const config::Variable& v = config::kDevicesPerProcess;  // [1, 1024]
  unsetenv(v.name);
  EXPECT_EQ(*EnvInt(v), std::nullopt);
  {
    ScopedEnv e(v.name, "1024");
    EXPECT_EQ(*EnvInt(v), 1024);
  }
  for (const char* bad : {"0", "1025", "x", "2.5"}) {
    ScopedEnv e(v.name, bad);
    absl::StatusOr<std::optional<int64_t>> got = EnvInt(v);
    ASSERT_FALSE(got.ok()) << bad;
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(got.status().message().find(v.name), absl::string_view::npos);
    EXPECT_NE(got.status().message().find(bad), absl::string_view::npos);
    EXPECT_NE(got.status().message().find("[1, 1024]"), absl::string_view::npos)
        << got.status();
  }
}

TEST(ConfigTest, ChoiceRowsAcceptTheirChoicesOnly) {
  const config::Variable& v = config::kRemoteTransport;
  for (const char* ok : {"auto", "tcp", "mpi"}) {
    ScopedEnv e(v.name, ok);
    EXPECT_EQ(*EnvChoice(v), std::string(ok));
  }
  ScopedEnv e(v.name, "rdma");
  absl::StatusOr<std::optional<std::string>> got = EnvChoice(v);
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("one of auto, tcp, mpi"),
            absl::string_view::npos)
      << got.status();
}

TEST(ConfigTest, SecondsAndBoolRows) {
  {
    ScopedEnv e(config::kWaitTimeout.name, "inf");
    EXPECT_EQ(*EnvSeconds(config::kWaitTimeout), absl::InfiniteDuration());
  }
  {
    ScopedEnv e(config::kWaitTimeout.name, "2e9");
    EXPECT_FALSE(EnvSeconds(config::kWaitTimeout).ok());
  }
  {
    ScopedEnv e(config::kForceInterhost.name, "Yes");
    EXPECT_EQ(*EnvBool(config::kForceInterhost), true);
  }
  ScopedEnv e(config::kTrace.name, "/tmp/x.json");
  EXPECT_EQ(EnvString(config::kTrace), "/tmp/x.json");
}

TEST(ConfigTest, ReadingARowAsAnotherTypeIsABug) {
  ScopedEnv e(config::kDmaMode.name, "eager");
  absl::StatusOr<std::optional<int64_t>> got = EnvInt(config::kDmaMode);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInternal);
}

TEST(ConfigTest, RangeTextPerType) {
  EXPECT_EQ(config::RangeText(config::kDevicesPerProcess), "[1, 1024]");
  EXPECT_EQ(config::RangeText(config::kDmaMode), "async, eager");
  EXPECT_EQ(config::RangeText(config::kWaitTimeout), "(0, 1000000000] or inf");
  EXPECT_EQ(config::RangeText(config::kTrace), "");
}

// Each type's bytes against the C++ value written directly.
TEST(DTypeElementsTest, StoreThenLoadMatchesTheType) {
  float f32[2];
  base_internal::StoreFromDouble(DType::kF32, f32, 1, -3.25);
  EXPECT_EQ(f32[1], -3.25f);
  EXPECT_EQ(base_internal::LoadAsDouble(DType::kF32, f32, 1), -3.25);

  double f64[1];
  base_internal::StoreFromDouble(DType::kF64, f64, 0, 0.1);
  EXPECT_EQ(f64[0], 0.1);

  int32_t i32[1];
  base_internal::StoreFromDouble(DType::kI32, i32, 0, -7.9);
  EXPECT_EQ(i32[0], -7);

  int64_t i64[1];
  base_internal::StoreFromDouble(DType::kI64, i64, 0, 1e12);
  EXPECT_EQ(i64[0], int64_t{1000000000000});
  EXPECT_EQ(base_internal::LoadAsDouble(DType::kI64, i64, 0), 1e12);

  uint8_t u8[1];
  base_internal::StoreFromDouble(DType::kU8, u8, 0, 257);
  EXPECT_EQ(u8[0], 1);  // The low 8 bits.
  base_internal::StoreFromDouble(DType::kU8, u8, 0, -1);
  EXPECT_EQ(u8[0], 255);

  Half h[1];
  base_internal::StoreFromDouble(DType::kF16, h, 0, 1.5);
  EXPECT_EQ(h[0].bits, 0x3E00);  // 1.5 in IEEE half.
  EXPECT_EQ(base_internal::LoadAsDouble(DType::kF16, h, 0), 1.5);

  BFloat16 b[1];
  base_internal::StoreFromDouble(DType::kBF16, b, 0, -2.0);
  EXPECT_EQ(b[0].bits, 0xC000);  // -2.0 in bfloat16.
  EXPECT_EQ(base_internal::LoadAsDouble(DType::kBF16, b, 0), -2.0);
}

}  // namespace
}  // namespace meshdma
