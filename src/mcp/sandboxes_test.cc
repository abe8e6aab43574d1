#include "mcp/sandboxes.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <thread>

#include "mcp/testing/daemon_backend.h"

namespace deepbox::mcp {
namespace {

class BrokerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::access(deepbox::testing::ScopedSandboxd::DefaultBinary().c_str(), X_OK) != 0) {
      GTEST_SKIP() << "no deepbox-sandboxd binary";
    }
    auto b = std::make_unique<testing::DaemonBackend>();
    backend_ = b.get();
    std::vector<std::unique_ptr<SandboxBackend>> v;
    v.push_back(std::move(b));
    BrokerOptions o;
    o.defaults.labels[kMcpLabel] = "true";
    o.defaults.ttl = std::chrono::seconds(600);
    broker_ = std::make_unique<SandboxBroker>(o, std::move(v));
  }
  testing::DaemonBackend* backend_ = nullptr;
  std::unique_ptr<SandboxBroker> broker_;
};

TEST_F(BrokerTest, DefaultSandboxIsCreatedOnceAndDeletedWithItsOwner) {
  // Concurrent first calls of one owner make one sandbox.
  std::vector<std::thread> threads;
  std::vector<std::string> ids(4);
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      auto r = broker_->Resolve(std::nullopt, "owner-a");
      ASSERT_TRUE(r) << r.error().message;
      ids[i] = r->id;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(backend_->created(), 1);
  for (const auto& id : ids) EXPECT_EQ(id, ids[0]);
  auto listed = broker_->List("", std::string(kMcpDefaultLabel) + "=true");
  ASSERT_TRUE(listed);
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ(listed->at(0).labels.at(kMcpLabel), "true");

  auto other = broker_->Resolve(std::nullopt, "owner-b");
  ASSERT_TRUE(other);
  EXPECT_NE(other->id, ids[0]);
  broker_->ReleaseOwner("owner-a");
  EXPECT_FALSE(backend_->Exists(ids[0]));
  EXPECT_TRUE(backend_->Exists(other->id));
  broker_->ReleaseAll();
  EXPECT_EQ(backend_->count(), 0u);
}

TEST_F(BrokerTest, ExplicitSandboxesOutliveTheirCreator) {
  ClaimOptions o;
  o.labels["team"] = "ml";
  auto info = broker_->Create("", o);
  ASSERT_TRUE(info) << info.error().message;
  EXPECT_EQ(info->labels.at("team"), "ml");
  EXPECT_EQ(info->labels.at(kMcpLabel), "true");
  broker_->SetDefault("owner", info->id, /*delete_on_release=*/false);
  auto r = broker_->Resolve(std::nullopt, "owner");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->id, info->id);
  EXPECT_FALSE(r->created);
  broker_->ReleaseOwner("owner");
  EXPECT_TRUE(backend_->Exists(info->id));
  ASSERT_TRUE(broker_->Delete(info->id));
  EXPECT_FALSE(backend_->Exists(info->id));
}

TEST_F(BrokerTest, ClearErrors) {
  auto bad = broker_->Get("not-an-id");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, ErrorCode::kInvalidArgument);
  auto missing = broker_->Get("sb-000000000999");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
  auto prov = broker_->Create("k8s", {});
  ASSERT_FALSE(prov);
  EXPECT_EQ(prov.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(prov.error().message.find("this server has: local"), std::string::npos);
  // A default deleted behind the broker's back is replaced on the next call.
  auto r = broker_->Resolve(std::nullopt, "o");
  ASSERT_TRUE(r);
  ASSERT_TRUE(broker_->Delete(r->id));
  auto again = broker_->Resolve(std::nullopt, "o");
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_NE(again->id, r->id);
}

}  // namespace
}  // namespace deepbox::mcp
