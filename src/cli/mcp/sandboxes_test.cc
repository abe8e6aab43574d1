#include "cli/mcp/sandboxes.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <thread>

#include "cli/mcp/testing/daemon_provider.h"
#include "local/lifecycle/state.h"

namespace deepbox::mcp {
namespace {

using ::testing::HasSubstr;

class BrokerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::access(deepbox::testing::ScopedSandboxd::DefaultBinary().c_str(), X_OK) != 0) {
      GTEST_SKIP() << "no deepbox-sandboxd binary";
    }
    BrokerOptions o;
    o.defaults.ttl = std::chrono::seconds(600);
    Make(o);
  }
  void Make(BrokerOptions o) {
    broker_.reset();
    auto b = std::make_unique<testing::DaemonProvider>();
    provider_ = b.get();
    std::vector<std::unique_ptr<SandboxProvider>> v;
    v.push_back(std::move(b));
    broker_ = std::make_unique<SandboxBroker>(o, std::move(v));
  }
  static std::vector<std::string> Ids(const Result<std::vector<SandboxInfo>>& list) {
    std::vector<std::string> out;
    if (list) {
      for (const auto& i : *list) out.push_back(i.id);
    }
    return out;
  }

  testing::DaemonProvider* provider_ = nullptr;
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
  EXPECT_EQ(provider_->created(), 1);
  for (const auto& id : ids) EXPECT_EQ(id, ids[0]);
  auto listed = broker_->List("", std::string(kMcpDefaultLabel) + "=true", "owner-a");
  ASSERT_TRUE(listed);
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ(listed->at(0).labels.at(kMcpLabel), "true");
  EXPECT_EQ(listed->at(0).labels.at(kMcpServerLabel), broker_->options().instance_id);

  auto other = broker_->Resolve(std::nullopt, "owner-b");
  ASSERT_TRUE(other);
  EXPECT_NE(other->id, ids[0]);
  broker_->ReleaseOwner("owner-a");
  EXPECT_FALSE(provider_->Exists(ids[0]));
  EXPECT_TRUE(provider_->Exists(other->id));
  broker_->ReleaseAll();
  EXPECT_EQ(provider_->count(), 0u);
}

TEST_F(BrokerTest, ExplicitSandboxesOutliveTheirCreator) {
  CreateRequest req;
  req.labels["team"] = "ml";
  auto info = broker_->Create(req, "owner");
  ASSERT_TRUE(info) << info.error().message;
  EXPECT_EQ(info->labels.at("team"), "ml");
  EXPECT_EQ(info->labels.at(kMcpLabel), "true");
  broker_->SetDefault("owner", info->id, /*delete_on_release=*/false);
  auto r = broker_->Resolve(std::nullopt, "owner");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->id, info->id);
  EXPECT_FALSE(r->created);
  broker_->ReleaseOwner("owner");
  EXPECT_TRUE(provider_->Exists(info->id));
  // Its creator is gone: nobody may use it now (its TTL ends it).
  EXPECT_FALSE(broker_->Delete(info->id, "owner"));
  EXPECT_TRUE(provider_->Exists(info->id));
}

TEST_F(BrokerTest, ClearErrors) {
  auto bad = broker_->Get("not-an-id");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, ErrorCode::kInvalidArgument);
  auto missing = broker_->Get("sb-000000000999");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
  CreateRequest k8s;
  k8s.provider = "k8s";
  auto prov = broker_->Create(k8s, "o");
  ASSERT_FALSE(prov);
  EXPECT_EQ(prov.error().code, ErrorCode::kInvalidArgument);
  EXPECT_THAT(prov.error().message, HasSubstr("this server has: local"));
  // A default deleted by its client is replaced on the next call, which says so.
  auto r = broker_->Resolve(std::nullopt, "o");
  ASSERT_TRUE(r);
  ASSERT_TRUE(broker_->Delete(r->id, "o"));
  auto again = broker_->Resolve(std::nullopt, "o");
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_NE(again->id, r->id);
  EXPECT_THAT(again->notice, HasSubstr("new, empty default sandbox (" + again->id + ")"));
  EXPECT_THAT(again->notice, HasSubstr(r->id + " was deleted with sandbox_delete"));
  auto third = broker_->Resolve(std::nullopt, "o");
  ASSERT_TRUE(third);
  EXPECT_EQ(third->notice, "");
}

// What became of a sandbox that stopped answering, from the provider's
// WhyGone or, where that cannot tell, from a fresh Attach.
TEST_F(BrokerTest, UnreachableSaysWhatBecameOfTheSandbox) {
  for (bool why_gone : {true, false}) {
    provider_->set_why_gone(why_gone);
    auto r = broker_->Resolve(std::nullopt, "o");
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_THAT(broker_->Unreachable(r->id, "o"),
                HasSubstr("sandbox " + r->id + " stopped answering during this call"));
    EXPECT_EQ(broker_->DefaultId("o"), r->id);  // still there, still the default
    provider_->daemon(r->id)->Kill();
    std::string t = broker_->Unreachable(r->id, "o");
    EXPECT_THAT(t, HasSubstr("Error: sandbox '" + r->id +
                             "' is gone: its daemon was killed. "
                             "Its files are lost; it was this client's default sandbox"))
        << why_gone;
    EXPECT_EQ(broker_->DefaultId("o"), std::nullopt);
    ASSERT_TRUE(broker_->Delete(r->id, "o"));
  }
}

TEST_F(BrokerTest, ClientsSeeUseAndDeleteOnlyTheirOwnSandboxes) {
  auto a_default = broker_->Resolve(std::nullopt, "session:a");
  ASSERT_TRUE(a_default) << a_default.error().message;
  auto a_made = broker_->Create({}, "session:a");
  ASSERT_TRUE(a_made) << a_made.error().message;
  // The server marks the creator; clients cannot.
  std::string a_owner = a_made->labels.at(kMcpOwnerLabel);
  EXPECT_NE(a_owner, "");
  EXPECT_EQ(a_owner.find("session"), std::string::npos);  // never the session id
  CreateRequest forged;
  forged.labels[kMcpOwnerLabel] = "someone-else";
  auto f = broker_->Create(forged, "session:b");
  ASSERT_FALSE(f);
  EXPECT_EQ(f.error().code, ErrorCode::kInvalidArgument);
  EXPECT_THAT(f.error().message, HasSubstr("reserved"));

  EXPECT_EQ(Ids(broker_->List("", "", "session:a")),
            (std::vector<std::string>{a_default->id, a_made->id}));
  EXPECT_TRUE(Ids(broker_->List("", "", "session:b")).empty());
  for (const auto& id : {a_default->id, a_made->id}) {
    auto use = broker_->Resolve(id, "session:b");
    ASSERT_FALSE(use) << id;
    EXPECT_EQ(use.error().code, ErrorCode::kNotFound);
    EXPECT_THAT(use.error().message, HasSubstr("no sandbox '" + id + "' that this client"));
    auto del = broker_->Delete(id, "session:b");
    ASSERT_FALSE(del);
    EXPECT_EQ(del.error().code, ErrorCode::kNotFound);
    EXPECT_TRUE(provider_->Exists(id));
    EXPECT_TRUE(broker_->Resolve(id, "session:a"));
  }
  ASSERT_TRUE(broker_->Delete(a_made->id, "session:a"));

  // --shared: every client of the server.
  BrokerOptions shared;
  shared.shared = true;
  Make(shared);
  auto s = broker_->Create({}, "session:a");
  ASSERT_TRUE(s);
  EXPECT_EQ(Ids(broker_->List("", "", "session:b")), (std::vector<std::string>{s->id}));
  EXPECT_TRUE(broker_->Resolve(s->id, "session:b"));
  EXPECT_TRUE(broker_->Delete(s->id, "session:b"));
}

TEST_F(BrokerTest, SandboxesTheServerDidNotCreateAreInvisibleUnlessAttached) {
  ClaimOptions cli;
  cli.labels["who"] = "cli";
  auto foreign = provider_->Create(cli);  // as `deepbox sandbox create` would
  ASSERT_TRUE(foreign);
  ClaimOptions other_server;
  other_server.labels[kMcpLabel] = "true";
  other_server.labels[kMcpOwnerLabel] = "stdio";
  auto earlier = provider_->Create(other_server);
  ASSERT_TRUE(earlier);
  for (const char* owner : {kStdioOwner, kStatelessOwner, "session:x"}) {
    EXPECT_TRUE(Ids(broker_->List("", "", owner)).empty()) << owner;
    for (const auto& id : {foreign->id, earlier->id}) {
      auto use = broker_->Resolve(id, owner);
      ASSERT_FALSE(use);
      EXPECT_EQ(use.error().code, ErrorCode::kNotFound);
      EXPECT_FALSE(broker_->Delete(id, owner));
      EXPECT_TRUE(provider_->Exists(id));
    }
  }

  // The operator attaches the CLI's sandboxes by label.
  BrokerOptions o;
  o.attach_selector = "who=cli";
  Make(o);
  auto attached = provider_->Create(cli);
  ASSERT_TRUE(attached);
  auto not_attached = provider_->Create(other_server);
  ASSERT_TRUE(not_attached);
  EXPECT_EQ(Ids(broker_->List("", "", "session:x")), (std::vector<std::string>{attached->id}));
  EXPECT_TRUE(broker_->Resolve(attached->id, "session:y"));
  auto del = broker_->Delete(attached->id, "session:x");
  ASSERT_FALSE(del);
  EXPECT_EQ(del.error().code, ErrorCode::kPermissionDenied);
  EXPECT_THAT(del.error().message, HasSubstr("deepbox sandbox rm " + attached->id));
  EXPECT_TRUE(provider_->Exists(attached->id));
  EXPECT_FALSE(broker_->Resolve(not_attached->id, "session:x"));
}

TEST_F(BrokerTest, StatelessClientsHaveNoDefaultSandbox) {
  auto r = broker_->Resolve(std::nullopt, kStatelessOwner);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
  EXPECT_THAT(r.error().message, HasSubstr("sandbox_id is required"));
  EXPECT_THAT(r.error().message, HasSubstr("Call sandbox_create first"));
  EXPECT_EQ(provider_->created(), 0);
  auto made = broker_->Create({}, kStatelessOwner);
  ASSERT_TRUE(made);
  EXPECT_TRUE(broker_->Resolve(made->id, kStatelessOwner));
  EXPECT_EQ(made->labels.at(kMcpOwnerLabel), "stateless");
}

// What sandbox_create and sandbox_list return: the fields clients read, in
// this order, and nothing the provider knows besides (its limits).
TEST(SandboxInfoJsonTest, TheFieldsClientsRead) {
  SandboxInfo i;
  i.id = "sb-000000000001";
  i.provider = "local";
  i.labels = {{"team", "ml"}, {kMcpLabel, "true"}};
  i.created_at = "2026-01-02T03:04:05Z";
  i.network = "none";
  i.state = "claimed";
  i.limits = "memory 2 GiB";
  i.limits_note = "disk not enforced";
  EXPECT_EQ(ToJson(json::value(SandboxInfoJson(i))),
            R"({"sandbox_id":"sb-000000000001","provider":"local",)"
            R"("labels":{"deepbox.dev/mcp":"true","team":"ml"},)"
            R"("created_at":"2026-01-02T03:04:05Z","expires_at":null,"network":"none",)"
            R"("state":"claimed"})");
  i.expires_at = "2026-01-02T04:04:05Z";
  i.network = "";
  EXPECT_EQ(ToJson(json::value(SandboxInfoJson(i))),
            R"({"sandbox_id":"sb-000000000001","provider":"local",)"
            R"("labels":{"deepbox.dev/mcp":"true","team":"ml"},)"
            R"("created_at":"2026-01-02T03:04:05Z","expires_at":"2026-01-02T04:04:05Z",)"
            R"("network":"","state":"claimed"})");
}

TEST(NetworkWithinTest, NoneAllowSubsetPublic) {
  EXPECT_TRUE(NetworkWithin("none", "none"));
  EXPECT_FALSE(NetworkWithin("public", "none"));
  EXPECT_FALSE(NetworkWithin("allow=example.com", "none"));
  EXPECT_TRUE(NetworkWithin("public", "public"));
  EXPECT_TRUE(NetworkWithin("allow=example.com", "public"));
  EXPECT_TRUE(NetworkWithin("none", "allow=example.com"));
  std::string max = "allow=*.example.com,api.test:8443";
  EXPECT_FALSE(NetworkWithin("public", max));
  EXPECT_TRUE(NetworkWithin("allow=a.example.com", max));
  EXPECT_TRUE(NetworkWithin("allow=*.b.example.com", max));
  EXPECT_TRUE(NetworkWithin("allow=*.example.com", max));
  EXPECT_FALSE(NetworkWithin("allow=example.com", max));  // not a subdomain
  EXPECT_FALSE(NetworkWithin("allow=*.com", max));
  EXPECT_TRUE(NetworkWithin("allow=api.test", max));
  EXPECT_TRUE(NetworkWithin("allow=api.test:8443", max));
  EXPECT_FALSE(NetworkWithin("allow=api.test:22", max));
  EXPECT_FALSE(NetworkWithin("allow=a.example.com:22", max));
  EXPECT_FALSE(NetworkWithin("allow=API.test,other.test", max));
  EXPECT_FALSE(NetworkWithin("bogus", "public"));
}

TEST_F(BrokerTest, TheServersNetworkAndTtlAreTheDefaultAndTheMaximum) {
  auto d = broker_->Create({}, "o");
  ASSERT_TRUE(d) << d.error().message;
  EXPECT_EQ(provider_->last_options().network, "none");  // the MCP default
  EXPECT_EQ(provider_->last_options().ttl, std::chrono::seconds(600));
  CreateRequest pub;
  pub.network = "public";
  auto p = broker_->Create(pub, "o");
  ASSERT_FALSE(p);
  EXPECT_EQ(p.error().code, ErrorCode::kInvalidArgument);
  EXPECT_THAT(p.error().message, HasSubstr("network 'public' is not allowed"));
  EXPECT_THAT(p.error().message, HasSubstr("--network none"));
  EXPECT_THAT(p.error().message, HasSubstr("--allow-client-network"));
  CreateRequest allow;
  allow.network = "allow=example.com";
  EXPECT_FALSE(broker_->Create(allow, "o"));
  for (int64_t ttl : {0, 601}) {
    CreateRequest t;
    t.ttl_seconds = ttl;
    auto r = broker_->Create(t, "o");
    ASSERT_FALSE(r) << ttl;
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
    EXPECT_THAT(r.error().message, HasSubstr("at most 600 seconds (deepbox mcp --ttl 600)"));
  }
  CreateRequest t300;
  t300.ttl_seconds = 300;
  ASSERT_TRUE(broker_->Create(t300, "o"));
  EXPECT_EQ(provider_->last_options().ttl, std::chrono::seconds(300));
  EXPECT_EQ(provider_->created(), 2);  // nothing was made for the refused ones

  BrokerOptions open;
  open.defaults.network = "allow=*.example.com";
  open.defaults.ttl = std::chrono::seconds(0);  // the operator allows "never"
  Make(open);
  CreateRequest sub;
  sub.network = "allow=pkg.example.com";
  sub.ttl_seconds = 0;
  ASSERT_TRUE(broker_->Create(sub, "o"));
  EXPECT_EQ(provider_->last_options().network, "allow=pkg.example.com");
  EXPECT_EQ(provider_->last_options().ttl, std::chrono::seconds(0));
  EXPECT_FALSE(broker_->Create(pub, "o"));
  open.allow_client_network = true;
  Make(open);
  ASSERT_TRUE(broker_->Create(pub, "o"));
  EXPECT_EQ(provider_->last_options().network, "public");
}

// The operator's secrets (deepbox mcp --secret) go to every sandbox, each
// with a placeholder of its own; nothing a client sends can add one.
TEST_F(BrokerTest, OperatorSecretsGoToEverySandboxWithItsOwnPlaceholder) {
  BrokerOptions o;
  o.defaults.network = "allow=api.example.com";
  o.defaults.secrets = {
      SecretGrant{"API_TOKEN", {"api.example.com"}, MakeSecretPlaceholder(), "s3cr3t-operator"}};
  Make(o);
  CreateRequest plain;
  ASSERT_TRUE(broker_->Create(plain, "a"));
  ClaimOptions first = provider_->last_options();
  ASSERT_TRUE(broker_->Create(plain, "b"));
  ClaimOptions second = provider_->last_options();
  ASSERT_EQ(first.secrets.size(), 1u);
  ASSERT_EQ(second.secrets.size(), 1u);
  EXPECT_EQ(first.secrets[0].name, "API_TOKEN");
  EXPECT_EQ(first.secrets[0].value, "s3cr3t-operator");
  EXPECT_EQ(first.secrets[0].hosts, std::vector<std::string>{"api.example.com"});
  EXPECT_TRUE(IsSecretPlaceholder(first.secrets[0].placeholder));
  EXPECT_NE(first.secrets[0].placeholder, second.secrets[0].placeholder);
  EXPECT_NE(first.secrets[0].placeholder, o.defaults.secrets[0].placeholder);
}

TEST_F(BrokerTest, LiveSandboxesAreCappedPerClientAndPerServer) {
  BrokerOptions o;
  o.max_per_client = 2;
  o.max_per_server = 3;
  Make(o);
  auto a1 = broker_->Resolve(std::nullopt, "a");  // the default counts
  ASSERT_TRUE(a1);
  auto a2 = broker_->Create({}, "a");
  ASSERT_TRUE(a2);
  auto a3 = broker_->Create({}, "a");
  ASSERT_FALSE(a3);
  EXPECT_EQ(a3.error().code, ErrorCode::kResourceExhausted);
  EXPECT_THAT(a3.error().message,
              HasSubstr("this client already has 2 live sandboxes, the most this server allows "
                        "per client (deepbox mcp --max-sandboxes-per-client 2)"));
  auto b1 = broker_->Create({}, "b");
  ASSERT_TRUE(b1);
  auto c1 = broker_->Resolve(std::nullopt, "c");
  ASSERT_FALSE(c1);
  EXPECT_EQ(c1.error().code, ErrorCode::kResourceExhausted);
  EXPECT_THAT(c1.error().message, HasSubstr("(deepbox mcp --max-sandboxes 3)"));
  EXPECT_EQ(provider_->created(), 3);
  // Deleted ones free their place, including those gone behind the server's back.
  ASSERT_TRUE(broker_->Delete(a2->id, "a"));
  ASSERT_TRUE(broker_->Create({}, "a"));
  ASSERT_TRUE(provider_->Delete(b1->id));  // e.g. its TTL
  EXPECT_TRUE(broker_->Create({}, "c"));
}

// A process's instance id once that process is gone.
std::string DeadInstance() {
  pid_t pid = ::fork();
  if (pid == 0) {
    ::pause();
    ::_exit(0);
  }
  auto start = local::lifecycle::ProcessStartTime(pid);
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  struct stat st {};
  ::stat("/proc/self/ns/pid", &st);
  return fmt::format("{}-{}-{}", pid, start.value_or(0), st.st_ino);
}

TEST_F(BrokerTest, DefaultSandboxesOfServersThatAreGoneAreReaped) {
  BrokerOptions o;
  o.instance_id = "this-server";
  Make(o);
  std::string dead = DeadInstance();
  EXPECT_TRUE(ServerInstanceGone(dead));
  EXPECT_FALSE(ServerInstanceGone(ServerInstanceId()));  // this very process
  auto make = [&](std::string server, bool is_default) {
    ClaimOptions c;
    c.labels[kMcpLabel] = "true";
    c.labels[kMcpServerLabel] = server;
    if (is_default) c.labels[kMcpDefaultLabel] = "true";
    auto r = provider_->Create(c);
    EXPECT_TRUE(r);
    return r ? r->id : "";
  };
  std::string orphan = make(dead, true);
  std::string explicit_one = make(dead, false);  // lives until its TTL
  std::string alive = make(ServerInstanceId(), true);
  // Another pid namespace: its pids mean nothing here, so it is left alone.
  std::string elsewhere = make(dead.substr(0, dead.rfind('-')) + "-1", true);
  std::string malformed = make("x-y", true);
  auto reaped = broker_->ReapOrphanedDefaults();
  EXPECT_EQ(reaped, (std::vector<std::string>{orphan}));
  EXPECT_FALSE(provider_->Exists(orphan));
  for (const auto& id : {explicit_one, alive, elsewhere, malformed}) {
    EXPECT_TRUE(provider_->Exists(id)) << id;
  }
}

}  // namespace
}  // namespace deepbox::mcp
