// The k8s provider's settings: a value given over its AGENT_SANDBOX_*
// variable over the default, bad values named by where they came from, the
// provider options they make (the way to the daemons, kubectl's flags), and
// a confined provider (`deepbox mcp`) refusing ids of other namespaces before
// any API request, against the fake API server.
#include "k8s/settings.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/testing/temp_dir.h"
#include "k8s/testing/fake_api_server.h"

namespace deepbox::k8s {
namespace {

using namespace std::chrono_literals;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Sets (value) or unsets (nullopt) an environment variable for the scope;
// restores what was there.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name); old != nullptr) old_ = old;
    Set(value);
  }
  ~ScopedEnv() { Set(old_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  void Set(const std::optional<std::string>& value) {
    if (value) {
      ::setenv(name_.c_str(), value->c_str(), 1);
    } else {
      ::unsetenv(name_.c_str());
    }
  }

 private:
  std::string name_;
  std::optional<std::string> old_;
};

// A private temporary directory, removed at the end.
using deepbox::testing::TempDir;

// Every variable the settings (and the choice of connection) read, unset for
// each test whatever the environment running it has.
class SettingsTest : public ::testing::Test {
 protected:
  ScopedEnv namespace_{"AGENT_SANDBOX_NAMESPACE", std::nullopt};
  ScopedEnv warm_pool_{"AGENT_SANDBOX_WARMPOOL", std::nullopt};
  ScopedEnv router_url_{"AGENT_SANDBOX_ROUTER_URL", std::nullopt};
  ScopedEnv router_token_{"AGENT_SANDBOX_ROUTER_TOKEN", std::nullopt};
  ScopedEnv ready_timeout_{"AGENT_SANDBOX_READY_TIMEOUT", std::nullopt};
  ScopedEnv kubeconfig_env_{"KUBECONFIG", std::nullopt};
  ScopedEnv service_host_{"KUBERNETES_SERVICE_HOST", std::nullopt};  // not in a pod
  TempDir dir_;

  // A kubeconfig whose current context is "ctx" in namespace "from-context".
  std::string WriteKubeconfig() {
    std::string path = dir_.Path("kubeconfig");
    std::ofstream(path) << R"(apiVersion: v1
kind: Config
current-context: ctx
clusters:
- name: c
  cluster:
    server: https://127.0.0.1:9
    insecure-skip-tls-verify: true
contexts:
- name: ctx
  context:
    cluster: c
    user: u
    namespace: from-context
users:
- name: u
  user:
    token: t
)";
    return path;
  }
};

TEST_F(SettingsTest, DefaultsWithNothingGiven) {
  auto s = K8sSettingsFrom({});
  ASSERT_TRUE(s) << s.error().ToString();
  EXPECT_EQ(s->namespace_name, "");
  EXPECT_EQ(s->context, "");
  EXPECT_EQ(s->kubeconfig, "");
  EXPECT_EQ(s->warm_pool, "deepagents-warmpool");
  EXPECT_EQ(s->router_url, "");
  EXPECT_EQ(s->router_token, "");
  EXPECT_EQ(s->ready_timeout, 180s);
}

TEST_F(SettingsTest, AGivenValueWinsOverTheVariableWhichWinsOverTheDefault) {
  namespace_.Set("env-ns");
  warm_pool_.Set("env-pool");
  router_url_.Set("http://env-router:8080");
  router_token_.Set("env-token");
  ready_timeout_.Set("30");
  auto env = K8sSettingsFrom({});
  ASSERT_TRUE(env) << env.error().ToString();
  EXPECT_EQ(env->namespace_name, "env-ns");
  EXPECT_EQ(env->warm_pool, "env-pool");
  EXPECT_EQ(env->router_url, "http://env-router:8080");
  EXPECT_EQ(env->router_token, "env-token");
  EXPECT_EQ(env->ready_timeout, 30s);

  ProviderRequest request;
  request.settings = {{"namespace", "flag-ns"},
                      {"context", "flag-ctx"},
                      {"kubeconfig", "/flag/kubeconfig"},
                      {"warm-pool", "flag-pool"},
                      {"router-url", "http://flag-router"},
                      {"router-token", "flag-token"},
                      {"ready-timeout", "2.5"}};
  auto flags = K8sSettingsFrom(request);
  ASSERT_TRUE(flags) << flags.error().ToString();
  EXPECT_EQ(flags->namespace_name, "flag-ns");
  EXPECT_EQ(flags->context, "flag-ctx");
  EXPECT_EQ(flags->kubeconfig, "/flag/kubeconfig");
  EXPECT_EQ(flags->warm_pool, "flag-pool");
  EXPECT_EQ(flags->router_url, "http://flag-router");
  EXPECT_EQ(flags->router_token, "flag-token");
  EXPECT_EQ(flags->ready_timeout, 2500ms);

  // An empty variable is no value.
  warm_pool_.Set("");
  ready_timeout_.Set("");
  auto empty = K8sSettingsFrom({});
  ASSERT_TRUE(empty) << empty.error().ToString();
  EXPECT_EQ(empty->warm_pool, "deepagents-warmpool");
  EXPECT_EQ(empty->ready_timeout, 180s);
}

TEST_F(SettingsTest, ContextAndKubeconfigHaveNoVariableOfOurs) {
  // KUBECONFIG is the loader's (a list of files), not the setting's value.
  kubeconfig_env_.Set("/from/env");
  auto s = K8sSettingsFrom({});
  ASSERT_TRUE(s);
  EXPECT_EQ(s->kubeconfig, "");
  auto r = K8sProviderRegistration();
  for (const auto& setting : r.settings) {
    if (setting.name == "context" || setting.name == "kubeconfig") {
      EXPECT_EQ(setting.env, "") << setting.name;
    }
  }
}

TEST_F(SettingsTest, ReadyTimeoutValues) {
  EXPECT_EQ(*ParseReadyTimeout("1", "--ready-timeout"), 1s);
  EXPECT_EQ(*ParseReadyTimeout("0.5", "--ready-timeout"), 500ms);
  EXPECT_EQ(*ParseReadyTimeout("86400", "--ready-timeout"), 86400s);
  EXPECT_EQ(*ParseReadyTimeout("0.0001", "--ready-timeout"), 1ms);  // rounded up, never 0
  for (const char* bad : {"", "0", "-1", "abc", "3m", "1 ", " 1", "nan", "-inf"}) {
    auto r = ParseReadyTimeout(bad, "AGENT_SANDBOX_READY_TIMEOUT");
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
    EXPECT_THAT(r.error().message, HasSubstr("AGENT_SANDBOX_READY_TIMEOUT must be seconds")) << bad;
  }
  for (const char* big : {"86401", "1e9", "inf"}) {
    auto r = ParseReadyTimeout(big, "--ready-timeout");
    ASSERT_FALSE(r) << big;
    EXPECT_THAT(r.error().message, HasSubstr("--ready-timeout: at most 86400 seconds")) << big;
  }
}

TEST_F(SettingsTest, BadValuesNameWhereTheyCameFrom) {
  ready_timeout_.Set("3m");
  auto env = K8sSettingsFrom({});
  ASSERT_FALSE(env);
  EXPECT_EQ(env.error().code, ErrorCode::kInvalidArgument);
  EXPECT_THAT(env.error().message, HasSubstr("AGENT_SANDBOX_READY_TIMEOUT"));
  EXPECT_THAT(env.error().message, HasSubstr("'3m'"));

  // The flag wins: the variable is not read.
  ProviderRequest request;
  request.settings = {{"ready-timeout", "90000"}};
  auto flag = K8sSettingsFrom(request);
  ASSERT_FALSE(flag);
  EXPECT_THAT(flag.error().message, HasSubstr("--ready-timeout: at most 86400 seconds"));
  request.settings = {{"ready-timeout", "60"}};
  auto ok = K8sSettingsFrom(request);
  ASSERT_TRUE(ok) << ok.error().ToString();
  EXPECT_EQ(ok->ready_timeout, 60s);

  // Names go into URL paths: checked before any request.
  ready_timeout_.Set(std::nullopt);
  namespace_.Set("../kube-system");
  auto ns = K8sSettingsFrom({});
  ASSERT_FALSE(ns);
  EXPECT_EQ(ns.error().code, ErrorCode::kInvalidArgument);
  EXPECT_THAT(ns.error().message, HasSubstr("AGENT_SANDBOX_NAMESPACE"));
  request.settings = {{"warm-pool", "Pool_1"}};
  namespace_.Set(std::nullopt);
  auto pool = K8sSettingsFrom(request);
  ASSERT_FALSE(pool);
  EXPECT_THAT(pool.error().message, HasSubstr("--warm-pool"));
}

TEST_F(SettingsTest, PortForwardUsesTheSameKubeconfigAndContext) {
  K8sSettings s;
  s.kubeconfig = WriteKubeconfig();
  s.router_token = "secret";
  s.warm_pool = "pool";
  s.ready_timeout = 42s;
  K8sProviderContext context;
  context.created_by = "deepbox-test";
  auto o = K8sProviderOptionsFor(s, context);
  ASSERT_TRUE(o) << o.error().ToString();
  EXPECT_EQ(o->connection.mode, ConnectionMode::kPortForward);
  EXPECT_THAT(o->connection.port_forward.kubectl_args,
              ElementsAre("--kubeconfig=" + s.kubeconfig, "--context=ctx"));
  EXPECT_EQ(o->connection.router_token, "secret");
  EXPECT_EQ(o->rest.namespace_name, "from-context");
  EXPECT_EQ(o->namespace_name, "");  // the context's, through rest
  EXPECT_EQ(o->warm_pool, "pool");
  EXPECT_EQ(o->ready_timeout, 42s);
  EXPECT_EQ(o->created_by, "deepbox-test");
  EXPECT_EQ(o->client.max_retries, ClientOptions{}.max_retries);  // a running agent's budget
  EXPECT_FALSE(o->confine_to_namespace);

  // A one-shot command gives up on an unreachable API server soon.
  context.one_shot = true;
  s.namespace_name = "given";
  auto one_shot = K8sProviderOptionsFor(s, context);
  ASSERT_TRUE(one_shot);
  EXPECT_EQ(one_shot->client.max_retries, 2);
  EXPECT_EQ(one_shot->namespace_name, "given");
  EXPECT_EQ(one_shot->rest.namespace_name, "given");
}

TEST_F(SettingsTest, ARouterUrlIsDialledDirectly) {
  K8sSettings s;
  s.kubeconfig = WriteKubeconfig();
  s.router_url = "http://router.example:8080";
  auto o = K8sProviderOptionsFor(s, {});
  ASSERT_TRUE(o) << o.error().ToString();
  EXPECT_EQ(o->connection.mode, ConnectionMode::kDirect);
  EXPECT_EQ(o->connection.direct_url, "http://router.example:8080");
  EXPECT_TRUE(o->connection.port_forward.kubectl_args.empty());
}

TEST_F(SettingsTest, AMissingKubeconfigIsAFailedCommandNotAMissingSandbox) {
  K8sSettings s;
  s.kubeconfig = dir_.Path("no-such-kubeconfig");
  auto o = K8sProviderOptionsFor(s, {});
  ASSERT_FALSE(o);
  EXPECT_EQ(o.error().code, ErrorCode::kUnavailable);
  EXPECT_THAT(o.error().message, HasSubstr("no-such-kubeconfig"));
}

TEST_F(SettingsTest, Registration) {
  ProviderRegistration r = K8sProviderRegistration();
  EXPECT_EQ(r.name, "k8s");
  EXPECT_FALSE(r.summary.empty());
  std::vector<std::string> names, envs;
  for (const auto& s : r.settings) {
    names.push_back(s.name);
    envs.push_back(s.env);
    EXPECT_FALSE(s.help.empty()) << s.name;
    // --help lines: at most 80 columns.
    size_t start = 0;
    for (size_t nl = s.help.find('\n'); start <= s.help.size(); nl = s.help.find('\n', start)) {
      size_t end = nl == std::string::npos ? s.help.size() : nl;
      EXPECT_LE(end - start, 80u) << s.name;
      start = end + 1;
    }
  }
  EXPECT_THAT(names, ElementsAre("namespace", "context", "kubeconfig", "warm-pool", "template",
                                 "router-url", "router-token", "router-token-secret-file",
                                 "ready-timeout"));
  EXPECT_THAT(envs,
              ElementsAre("AGENT_SANDBOX_NAMESPACE", "", "", "AGENT_SANDBOX_WARMPOOL",
                          "AGENT_SANDBOX_TEMPLATE", "AGENT_SANDBOX_ROUTER_URL",
                          "AGENT_SANDBOX_ROUTER_TOKEN", "AGENT_SANDBOX_ROUTER_TOKEN_SECRET_FILE",
                          "AGENT_SANDBOX_READY_TIMEOUT"));
  ASSERT_TRUE(r.owns_id);
  ASSERT_TRUE(r.make);
  EXPECT_TRUE(r.owns_id("default/sandbox-claim-1a2b3c4d"));
  EXPECT_FALSE(r.owns_id("sb-1a2b3c"));
  // Made through the registration: a bad setting fails before any cluster is asked.
  ProviderRequest request;
  request.settings = {{"ready-timeout", "soon"}};
  auto made = r.make(request);
  ASSERT_FALSE(made);
  EXPECT_EQ(made.error().code, ErrorCode::kInvalidArgument);
  // The check says the same without making anything.
  ASSERT_TRUE(r.check);
  EXPECT_EQ(r.check(request).error().message, made.error().message);
  request.settings = {{"ready-timeout", "5"}};
  EXPECT_TRUE(r.check(request).has_value());
  // -n on the commands that have the letter free; the settings only used to
  // make sandboxes are not offered to ls, rm, suspend...
  for (const auto& s : r.settings) {
    EXPECT_EQ(s.short_flag, s.name == "namespace" ? 'n' : 0) << s.name;
    EXPECT_EQ(s.creation_only,
              s.name == "warm-pool" || s.name == "template" || s.name == "ready-timeout")
        << s.name;
    EXPECT_EQ(s.env_over_file, s.name == "kubeconfig" ? "KUBECONFIG" : "") << s.name;
  }
}

// `deepbox run`'s config file: below the environment, above the defaults,
// and named in errors by its key.
TEST_F(SettingsTest, AConfigFileValueIsBelowTheEnvironmentAndNamedByItsKey) {
  ProviderRequest request;
  request.file_settings = {
      {"namespace", "file-ns"}, {"warm-pool", "file-pool"}, {"kubeconfig", "/file/kubeconfig"}};
  request.file_name = "deepbox.yaml";
  std::map<std::string, std::string> vars = {{"AGENT_SANDBOX_NAMESPACE", "env-ns"}};
  request.getenv = [&vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
  auto s = K8sSettingsFrom(request);
  ASSERT_TRUE(s.has_value()) << s.error().message;
  EXPECT_EQ(s->namespace_name, "env-ns");
  EXPECT_EQ(s->warm_pool, "file-pool");
  EXPECT_EQ(s->kubeconfig, "/file/kubeconfig");
  // KUBECONFIG set: the loader reads it, and the file's kubeconfig gives way.
  vars["KUBECONFIG"] = "/a:/b";
  EXPECT_EQ(K8sSettingsFrom(request)->kubeconfig, "");
  request.file_settings["warm-pool"] = "Bad_Pool";
  auto bad = K8sSettingsFrom(request);
  ASSERT_FALSE(bad.has_value());
  EXPECT_THAT(bad.error().message, HasSubstr("config deepbox.yaml: warm_pool"));
}

TEST(IsK8sSandboxIdTest, TwoObjectNamesAroundOneSlash) {
  EXPECT_TRUE(IsK8sSandboxId("default/sandbox-claim-1a2b3c4d"));
  EXPECT_TRUE(IsK8sSandboxId("team.a/x"));
  EXPECT_FALSE(IsK8sSandboxId("sandbox-claim-1a2b3c4d"));
  EXPECT_FALSE(IsK8sSandboxId("sb-1a2b3c"));
  EXPECT_FALSE(IsK8sSandboxId("/claim"));
  EXPECT_FALSE(IsK8sSandboxId("ns/"));
  EXPECT_FALSE(IsK8sSandboxId("a/b/c"));
  EXPECT_FALSE(IsK8sSandboxId("Team/claim"));
  EXPECT_FALSE(IsK8sSandboxId("ns/cl aim"));
  EXPECT_FALSE(IsK8sSandboxId("ns/" + std::string(254, 'a')));
  EXPECT_FALSE(IsK8sSandboxId("../etc"));  // object names: never a path
  EXPECT_FALSE(IsK8sSandboxId("ns/-claim"));
  EXPECT_FALSE(IsK8sSandboxId("ns./claim"));
}

// What `deepbox mcp` needs (it used to be its K8sBackend's check): claim ids
// outside the provider's namespace are refused before any API request (the
// server's kubeconfig may reach other namespaces; its clients may not).
TEST_F(SettingsTest, AConfinedProviderRefusesOtherNamespacesBeforeAnyRequest) {
  auto server = testing::FakeApiServer::Start();
  ASSERT_TRUE(server) << server.error().message;
  std::string kubeconfig = dir_.Path("fake-kubeconfig");
  ASSERT_TRUE((*server)->WriteKubeconfig(kubeconfig, "team-a"));
  ProviderRequest request;
  request.settings = {{"kubeconfig", kubeconfig},
                      {"namespace", "team-a"},
                      {"router-url", "http://127.0.0.1:9"}};  // never reached
  request.confined = true;
  auto provider = MakeK8sProvider(request);
  ASSERT_TRUE(provider) << provider.error().message;
  SandboxProvider& p = **provider;
  EXPECT_EQ(p.description(), "k8s sandbox from warm pool team-a/deepagents-warmpool");
  EXPECT_TRUE(p.OwnsId("team-b/claim-1"));  // an id, but not ours
  EXPECT_FALSE(p.enforces_network());

  int before = static_cast<int>((*server)->requests().size());
  auto refused = [](ErrorCode code, const std::string& message) {
    EXPECT_EQ(code, ErrorCode::kPermissionDenied) << message;
    EXPECT_THAT(message, HasSubstr("is outside namespace 'team-a', the only one this server uses"));
  };
  for (const char* id : {"team-b/claim-1", "team-a-other/claim-1", "team/claim-1"}) {
    SCOPED_TRACE(id);
    auto attach = p.Attach(id);
    ASSERT_FALSE(attach);
    refused(attach.error().code, attach.error().message);
    auto inspect = p.Inspect(id);
    ASSERT_FALSE(inspect);
    refused(inspect.error().code, inspect.error().message);
    auto del = p.Delete(id);
    ASSERT_FALSE(del);
    refused(del.error().code, del.error().message);
    auto why = p.WhyGone(id);
    ASSERT_TRUE(why);
    refused(why->code, why->message);
    bool called = false;
    auto watch = p.Watch(id, [&](const Error&) { called = true; });
    ASSERT_FALSE(watch);
    refused(watch.error().code, watch.error().message);
    EXPECT_FALSE(called);
  }
  auto removed = (*provider)->RemoveBySelector("a=b", "team-b");
  ASSERT_FALSE(removed);
  EXPECT_EQ(removed.error().code, ErrorCode::kPermissionDenied);
  auto all = p.DeleteMatching("");  // refused whatever the namespace
  ASSERT_FALSE(all);
  EXPECT_EQ(all.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(static_cast<int>((*server)->requests().size()), before);  // the API was not asked
  EXPECT_EQ((*server)->CountRequests("", "team-b"), 0);

  // In its own namespace the API is asked (and there is no such claim); a
  // bare claim name is in the provider's namespace.
  auto own = p.Delete("team-a/claim-1");
  ASSERT_FALSE(own);
  EXPECT_EQ(own.error().code, ErrorCode::kNotFound) << own.error().message;
  EXPECT_EQ((*server)->CountRequests("DELETE", "/namespaces/team-a/"), 1);
  auto bare = p.Inspect("claim-1");
  ASSERT_FALSE(bare);
  EXPECT_EQ(bare.error().code, ErrorCode::kNotFound) << bare.error().message;
  EXPECT_THAT(bare.error().message, HasSubstr("no SandboxClaim claim-1 in namespace team-a"));
  auto attach = p.Attach("team-a/claim-1");
  ASSERT_FALSE(attach);
  EXPECT_EQ(attach.error().code, ErrorCode::kNotFound) << attach.error().message;
  auto listed = p.List("");
  ASSERT_TRUE(listed) << listed.error().message;
  EXPECT_TRUE(listed->empty());

  // Unconfined, the same kubeconfig reaches the other namespace.
  request.confined = false;
  auto open = MakeK8sProvider(request);
  ASSERT_TRUE(open) << open.error().message;
  auto other = (*open)->Delete("team-b/claim-1");
  ASSERT_FALSE(other);
  EXPECT_EQ(other.error().code, ErrorCode::kNotFound) << other.error().message;
  EXPECT_EQ((*server)->CountRequests("DELETE", "/namespaces/team-b/"), 1);
}

}  // namespace
}  // namespace deepbox::k8s
