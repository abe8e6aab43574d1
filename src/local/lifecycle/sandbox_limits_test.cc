#include "local/lifecycle/sandbox_limits.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "local/lifecycle/state.h"

namespace deepbox::local::lifecycle {
namespace {

using ::testing::HasSubstr;

TEST(ByteSizeTest, AcceptsDockerStyleUnits) {
  struct Case {
    const char* text;
    uint64_t bytes;
  } cases[] = {
      {"1048576", 1048576},   {"0", 0},
      {"512b", 512},          {"64k", 64ULL << 10},
      {"64K", 64ULL << 10},   {"64kb", 64ULL << 10},
      {"64KiB", 64ULL << 10}, {"64M", 64ULL << 20},
      {"64m", 64ULL << 20},   {"64MB", 64ULL << 20},
      {"64MiB", 64ULL << 20}, {"2G", 2ULL << 30},
      {"2g", 2ULL << 30},     {"2GiB", 2ULL << 30},
      {"1.5g", 3ULL << 29},   {"1t", 1ULL << 40},
      {"0.5M", 512ULL << 10}, {"16777216", 16ULL << 20},
  };
  for (const auto& c : cases) {
    auto n = ParseByteSize(c.text, "--memory");
    ASSERT_TRUE(n.has_value()) << c.text << ": " << n.error().message;
    EXPECT_EQ(*n, c.bytes) << c.text;
  }
}

TEST(ByteSizeTest, RejectsWhatIsNotASize) {
  for (const char* bad :
       {"", "M", "64 M", " 64M", "64M ", "-64M", "+64M", "64X", "64mbb", "1e9", "0x10", "1..5G",
        ".", "99999999999999999999", "17179869184G", "nan", "inf"}) {
    auto n = ParseByteSize(bad, "--memory");
    ASSERT_FALSE(n.has_value()) << "'" << bad << "' parsed as " << *n;
    EXPECT_EQ(n.error().code, ErrorCode::kInvalidArgument);
    EXPECT_THAT(n.error().message, HasSubstr("--memory"));
    EXPECT_THAT(n.error().message, HasSubstr("512M"));
  }
}

TEST(ByteSizeTest, FormatsReadably) {
  EXPECT_EQ(FormatBytes(1000), "1000 B");
  EXPECT_EQ(FormatBytes(2ULL << 30), "2 GiB");
  EXPECT_EQ(FormatBytes(64ULL << 20), "64 MiB");
  EXPECT_EQ(FormatBytes(3ULL << 29), "1.5 GiB");
  EXPECT_EQ(FormatBytes(10ULL << 30), "10 GiB");
}

TEST(LimitFlagsTest, ZeroOrNoneMeansNoLimit) {
  for (const char* none : {"0", "none", "unlimited", "NONE"}) {
    EXPECT_EQ(ParseMemoryLimit(none, "--memory").value(), std::nullopt) << none;
    EXPECT_EQ(ParseDiskLimit(none, "--disk").value(), std::nullopt) << none;
    EXPECT_EQ(ParseProcessLimit(none, "--max-processes").value(), std::nullopt) << none;
    EXPECT_EQ(ParseCpuLimit(none, "--cpus").value(), std::nullopt) << none;
  }
  EXPECT_EQ(ParseCpuLimit("0.0", "--cpus").value(), std::nullopt);
}

TEST(LimitFlagsTest, ValuesAndRanges) {
  EXPECT_EQ(ParseMemoryLimit("64M", "--memory").value(), 64ULL << 20);
  EXPECT_EQ(ParseDiskLimit("10G", "--disk").value(), 10ULL << 30);
  EXPECT_EQ(ParseProcessLimit("20", "--max-processes").value(), 20u);
  EXPECT_EQ(ParseCpuLimit("0.5", "--cpus").value(), 0.5);

  // `--memory 1000` used to start a sandbox whose daemon was OOM-killed at once.
  auto m = ParseMemoryLimit("1000", "--memory");
  ASSERT_FALSE(m.has_value());
  EXPECT_EQ(m.error().code, ErrorCode::kInvalidArgument);
  EXPECT_THAT(m.error().message, HasSubstr("--memory 1000"));
  EXPECT_THAT(m.error().message, HasSubstr("too small"));
  EXPECT_THAT(m.error().message, HasSubstr("16 MiB"));
  EXPECT_TRUE(ParseMemoryLimit("16M", "--memory").has_value());
  EXPECT_FALSE(ParseMemoryLimit("15M", "--memory").has_value());

  // `--cpus -1` used to reach cpu.cfs_quota_us as 18446744073709451616.
  for (const char* bad : {"-1", "-0.5", "0.001", "1e9", "abc", "1.5x", "inf", "nan"}) {
    auto c = ParseCpuLimit(bad, "--cpus");
    ASSERT_FALSE(c.has_value()) << bad;
    EXPECT_EQ(c.error().code, ErrorCode::kInvalidArgument) << bad;
    EXPECT_THAT(c.error().message, HasSubstr("--cpus")) << bad;
  }
  for (const char* bad : {"-1", "1.5", "abc", "3", "7"}) {
    auto p = ParseProcessLimit(bad, "--max-processes");
    ASSERT_FALSE(p.has_value()) << bad;
    EXPECT_EQ(p.error().code, ErrorCode::kInvalidArgument) << bad;
  }
  EXPECT_FALSE(ParseDiskLimit("1M", "--disk").has_value());
  EXPECT_FALSE(ParseDiskLimit("-1G", "--disk").has_value());
}

TEST(SandboxLimitsTest, DefaultsAreFiniteAndValid) {
  SandboxLimits d = DefaultSandboxLimits();
  EXPECT_EQ(d.memory_bytes, 2ULL << 30);
  EXPECT_EQ(d.max_processes, 512u);
  EXPECT_EQ(d.cpu_cores, 2.0);
  EXPECT_EQ(d.workspace_bytes, 10ULL << 30);
  EXPECT_TRUE(ValidateSandboxLimits(d).has_value());
  EXPECT_EQ(d.Describe(), "memory 2 GiB, processes 512, CPUs 2, /workspace disk 10 GiB");
  EXPECT_THAT(SandboxLimits{}.Describe(), HasSubstr("memory unlimited"));
}

TEST(SandboxLimitsTest, JsonRoundTripAndOldRecords) {
  SandboxLimits l;
  l.memory_bytes = 64ULL << 20;
  l.cpu_cores = 0.5;
  EXPECT_EQ(SandboxLimits::FromJson(l.ToJson()), l);
  EXPECT_EQ(SandboxLimits::FromJson(DefaultSandboxLimits().ToJson()), DefaultSandboxLimits());
  // Garbage is "no limit", never an exception.
  auto obj = ParseJsonObject(
      R"({"memory_bytes":"lots","max_processes":-3,"cpu_cores":"x","workspace_bytes":1e400})");
  ASSERT_TRUE(obj.has_value());
  EXPECT_EQ(SandboxLimits::FromJson(*obj), SandboxLimits{});

  // A meta.json written before limits were recorded: a sandbox without limits.
  SandboxMeta m;
  m.id = "sb-0123456789ab";
  m.created_at_ms = 1767225600123;
  m.limits = DefaultSandboxLimits();
  m.limits_note = "limits NOT enforced on this host: memory";
  auto back = SandboxMeta::FromJson(m.ToJson());
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->limits, DefaultSandboxLimits());
  EXPECT_EQ(back->limits_note, m.limits_note);
  json::object old = m.ToJson();
  old.erase("limits");
  EXPECT_EQ(SandboxMeta::FromJson(old)->limits, SandboxLimits{});
}

TEST(SandboxLimitsTest, UnenforcedNoteNamesWhatIsMissing) {
  SandboxLimits req = DefaultSandboxLimits();
  LimitSupport got;
  got.memory = {true, Mechanism::kCgroupV1, "memory.limit_in_bytes"};
  got.processes = {true, Mechanism::kCgroupV1, "pids.max"};
  got.cpu_rate = {true, Mechanism::kCgroupV1, "cpu.cfs_quota_us"};
  got.workspace_disk = {true, Mechanism::kLoopImage, ""};
  EXPECT_EQ(UnenforcedLimitsNote(req, got), "");
  got.workspace_disk = {false, Mechanism::kNone, "workspace is a plain host dir: needs root"};
  got.cpu_rate = {false, Mechanism::kNone, ""};
  std::string note = UnenforcedLimitsNote(req, got);
  EXPECT_THAT(note, HasSubstr("NOT enforced"));
  EXPECT_THAT(note, HasSubstr("/workspace disk (workspace is a plain host dir: needs root)"));
  EXPECT_THAT(note, HasSubstr("CPUs"));
  EXPECT_THAT(note, ::testing::Not(HasSubstr("memory")));
  // Nothing asked, nothing missing.
  EXPECT_EQ(UnenforcedLimitsNote(SandboxLimits{}, LimitSupport{}), "");
}

}  // namespace
}  // namespace deepbox::local::lifecycle
