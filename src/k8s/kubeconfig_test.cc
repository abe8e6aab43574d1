#include "k8s/kubeconfig.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "common/base64.h"
#include "common/testing/temp_dir.h"
#include "net/testing/test_certs.h"

namespace deepbox::k8s {
namespace {

namespace fs = std::filesystem;

class KubeconfigTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& content, int mode = 0600) {
    std::string path = dir_ + "/" + name;
    fs::create_directories(fs::path(path).parent_path());
    std::ofstream(path) << content;
    ::chmod(path.c_str(), mode);
    return path;
  }

  static const net::testing::TestPki& Pki() {
    static const auto* pki = new net::testing::TestPki(net::testing::GenerateTestPki());
    return *pki;
  }

  deepbox::testing::TempDir tmp_{"deepbox-kubeconfig"};
  std::string dir_ = tmp_.path().string();
};

constexpr const char* kFirst = R"(apiVersion: v1
kind: Config
current-context: ctx-a
clusters:
- name: shared
  cluster:
    server: https://first.example:6443
    insecure-skip-tls-verify: true
contexts:
- name: ctx-a
  context:
    cluster: shared
    user: alice
    namespace: team-a
users:
- name: alice
  user:
    token: token-a
)";

constexpr const char* kSecond = R"(apiVersion: v1
kind: Config
current-context: ctx-b
clusters:
- name: shared
  cluster:
    server: https://second.example:6443
- name: other
  cluster:
    server: https://other.example
    insecure-skip-tls-verify: true
contexts:
- name: ctx-a
  context:
    cluster: other
    user: bob
- name: ctx-b
  context:
    cluster: other
    user: bob
users:
- name: bob
  user:
    token: token-b
)";

TEST_F(KubeconfigTest, MergesFilesFirstWinsPerName) {
  auto a = Write("a/config", kFirst);
  auto b = Write("b/config", kSecond);
  KubeconfigOptions opts;
  opts.kubeconfig_env = a + ":" + dir_ + "/missing:" + b;
  auto cfg = LoadKubeconfig(opts);
  ASSERT_TRUE(cfg) << cfg.error().ToString();
  EXPECT_EQ(cfg->context, "ctx-a");                      // the first file's current-context wins
  EXPECT_EQ(cfg->server, "https://first.example:6443");  // ...and its cluster 'shared'
  EXPECT_EQ(cfg->namespace_name, "team-a");
  EXPECT_TRUE(cfg->tls.insecure_skip_verify);
  EXPECT_EQ(cfg->token, "token-a");

  opts.context = "ctx-b";  // --context picks a context from the second file
  cfg = LoadKubeconfig(opts);
  ASSERT_TRUE(cfg) << cfg.error().ToString();
  EXPECT_EQ(cfg->server, "https://other.example");
  EXPECT_EQ(cfg->token, "token-b");
  EXPECT_EQ(cfg->namespace_name, "default");

  opts.namespace_override = "override";
  cfg = LoadKubeconfig(opts);
  ASSERT_TRUE(cfg);
  EXPECT_EQ(cfg->namespace_name, "override");
}

TEST_F(KubeconfigTest, ExplicitFileWinsOverTheList) {
  auto a = Write("a/config", kFirst);
  auto b = Write("b/config", kSecond);
  KubeconfigOptions opts;
  opts.kubeconfig = b;
  opts.kubeconfig_env = a;
  auto cfg = LoadKubeconfig(opts);
  ASSERT_TRUE(cfg);
  EXPECT_EQ(cfg->context, "ctx-b");
  opts.kubeconfig = dir_ + "/nope";
  auto missing = LoadKubeconfig(opts);
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().message, fmt::format("kubeconfig {}/nope: file does not exist", dir_));
}

TEST_F(KubeconfigTest, ContextErrors) {
  auto a = Write("config", kFirst);
  KubeconfigOptions opts;
  opts.kubeconfig = a;
  opts.context = "nope";
  auto cfg = LoadKubeconfig(opts);
  ASSERT_FALSE(cfg);
  EXPECT_NE(cfg.error().message.find("context 'nope' is not defined"), std::string::npos);

  auto no_current = Write("nocurrent", R"(clusters: []
users: []
contexts: []
)");
  opts.kubeconfig = no_current;
  opts.context.clear();
  cfg = LoadKubeconfig(opts);
  ASSERT_FALSE(cfg);
  EXPECT_NE(cfg.error().message.find("no current-context"), std::string::npos);

  auto no_server = Write("noserver", R"(current-context: c
clusters:
- name: k
  cluster: {}
contexts:
- name: c
  context: {cluster: k}
)");
  opts.kubeconfig = no_server;
  cfg = LoadKubeconfig(opts);
  ASSERT_FALSE(cfg);
  EXPECT_EQ(cfg.error().message,
            fmt::format("kubeconfig {}: cluster 'k' server: is required", no_server));
}

TEST_F(KubeconfigTest, InlineAndFileCertificates) {
  const auto& pki = Pki();
  Write("certs/ca.crt", pki.ca_cert_pem);
  Write("certs/client.crt", pki.client_cert_pem);
  Write("certs/client.key", pki.client_key_pem);
  auto files = Write("files/config", R"(current-context: c
clusters:
- name: k
  cluster:
    server: https://127.0.0.1:6443
    certificate-authority: ../certs/ca.crt
    tls-server-name: kubernetes
contexts:
- name: c
  context: {cluster: k, user: u}
users:
- name: u
  user:
    client-certificate: ../certs/client.crt
    client-key: ../certs/client.key
)");
  KubeconfigOptions opts;
  opts.kubeconfig = files;
  auto cfg = LoadKubeconfig(opts);
  ASSERT_TRUE(cfg) << cfg.error().ToString();
  EXPECT_EQ(cfg->tls.ca_pem, pki.ca_cert_pem);
  EXPECT_EQ(cfg->tls.client_cert_pem, pki.client_cert_pem);
  EXPECT_EQ(cfg->tls.client_key_pem, pki.client_key_pem);
  EXPECT_EQ(cfg->tls.server_name, "kubernetes");

  auto inline_cfg = Write(
      "inline/config", fmt::format(R"(current-context: c
clusters:
- name: k
  cluster:
    server: https://127.0.0.1:6443
    certificate-authority-data: {}
contexts:
- name: c
  context: {{cluster: k, user: u}}
users:
- name: u
  user:
    client-certificate-data: {}
    client-key-data: {}
)",
                                   Base64Encode(pki.ca_cert_pem), Base64Encode(pki.client_cert_pem),
                                   Base64Encode(pki.client_key_pem)));
  opts.kubeconfig = inline_cfg;
  cfg = LoadKubeconfig(opts);
  ASSERT_TRUE(cfg) << cfg.error().ToString();
  EXPECT_EQ(cfg->tls.ca_pem, pki.ca_cert_pem);
  EXPECT_EQ(cfg->tls.client_key_pem, pki.client_key_pem);
}

TEST_F(KubeconfigTest, ErrorsNameTheFileAndTheField) {
  auto path = Write("config", R"(current-context: c
clusters:
- name: k
  cluster: {server: "https://127.0.0.1:6443"}
contexts:
- name: c
  context: {cluster: k, user: u}
users:
- name: u
  user:
    client-certificate-data: "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg=="
    client-key-data: "!!!not base64"
)");
  KubeconfigOptions opts;
  opts.kubeconfig = path;
  auto cfg = LoadKubeconfig(opts);
  ASSERT_FALSE(cfg);
  EXPECT_EQ(cfg.error().message,
            fmt::format("kubeconfig {}: user 'u' client-key-data: not valid base64", path));

  auto missing = Write("missing", R"(current-context: c
clusters:
- name: k
  cluster: {server: "https://127.0.0.1:6443", certificate-authority: nope/ca.crt}
contexts:
- name: c
  context: {cluster: k}
)");
  opts.kubeconfig = missing;
  cfg = LoadKubeconfig(opts);
  ASSERT_FALSE(cfg);
  EXPECT_NE(
      cfg.error().message.find(fmt::format(
          "kubeconfig {}: cluster 'k' certificate-authority: open({}/nope/ca.crt)", missing, dir_)),
      std::string::npos)
      << cfg.error().message;

  auto wrong_type = Write("wrongtype", R"(current-context: c
clusters:
- name: k
  cluster: {server: "https://127.0.0.1:6443", insecure-skip-tls-verify: "yes"}
contexts:
- name: c
  context: {cluster: k}
)");
  opts.kubeconfig = wrong_type;
  cfg = LoadKubeconfig(opts);
  ASSERT_FALSE(cfg);
  EXPECT_EQ(cfg.error().message,
            fmt::format("kubeconfig {}: cluster 'k' insecure-skip-tls-verify: must be true or "
                        "false",
                        wrong_type));
}

TEST_F(KubeconfigTest, TokenFileIsReadAndRefreshed) {
  Write("secrets/token", "first-token\n");
  auto path = Write("config", R"(current-context: c
clusters:
- name: k
  cluster: {server: "https://127.0.0.1:6443"}
contexts:
- name: c
  context: {cluster: k, user: u}
users:
- name: u
  user: {tokenFile: secrets/token}
)");
  KubeconfigOptions opts;
  opts.kubeconfig = path;
  auto cfg = LoadKubeconfig(opts);
  ASSERT_TRUE(cfg) << cfg.error().ToString();
  EXPECT_EQ(cfg->token_file, dir_ + "/secrets/token");
  auto now = std::chrono::system_clock::now();
  CredentialSource creds(*cfg, [&] { return now; });
  auto c = creds.Get();
  ASSERT_TRUE(c);
  EXPECT_EQ(c->token, "first-token");
  Write("secrets/token", "second-token\n");
  EXPECT_EQ(creds.Get()->token, "first-token");  // cached for a minute
  now += std::chrono::seconds(61);
  EXPECT_EQ(creds.Get()->token, "second-token");
  Write("secrets/token", "third-token\n");
  creds.Invalidate();  // after a 401
  EXPECT_EQ(creds.Get()->token, "third-token");
}

class ExecPluginTest : public KubeconfigTest {
 protected:
  // A credential plugin: logs its environment, prints an ExecCredential.
  std::string Plugin(const std::string& status_json, const std::string& api = "v1",
                     int exit_code = 0) {
    return Write("bin/plugin.sh",
                 fmt::format(R"(#!/bin/sh
echo "run" >> "{dir}/runs"
printf '%s' "$KUBERNETES_EXEC_INFO" > "{dir}/exec_info"
printf '%s %s' "$1" "$PLUGIN_ENV" > "{dir}/args"
if [ {code} -ne 0 ]; then echo "plugin failed: no login" >&2; exit {code}; fi
cat <<'JSON'
{{"apiVersion":"client.authentication.k8s.io/{api}","kind":"ExecCredential","status":{status}}}
JSON
)",
                             fmt::arg("dir", dir_), fmt::arg("code", exit_code),
                             fmt::arg("api", api), fmt::arg("status", status_json)),
                 0755);
  }
  std::string Config(const std::string& api = "v1", const std::string& command = "bin/plugin.sh",
                     const std::string& extra = "") {
    return Write("config", fmt::format(R"(current-context: c
clusters:
- name: k
  cluster:
    server: https://127.0.0.1:6443
    insecure-skip-tls-verify: true
contexts:
- name: c
  context: {{cluster: k, user: u}}
users:
- name: u
  user:
    exec:
      apiVersion: client.authentication.k8s.io/{}
      command: {}
      args: ["--flag"]
      env:
      - name: PLUGIN_ENV
        value: from-config
      provideClusterInfo: true
      interactiveMode: Never
{}
)",
                                       api, command, extra));
  }
  int Runs() {
    std::ifstream in(dir_ + "/runs");
    int n = 0;
    std::string line;
    while (std::getline(in, line)) ++n;
    return n;
  }
  std::string ReadFile(const std::string& name) {
    std::ifstream in(dir_ + "/" + name);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
};

TEST_F(ExecPluginTest, RunsThePluginAndCachesUntilExpiry) {
  Plugin(R"({"token":"exec-token","expirationTimestamp":"2030-01-01T00:00:00Z"})");
  KubeconfigOptions opts;
  opts.kubeconfig = Config();
  auto cfg = LoadKubeconfig(opts);
  ASSERT_TRUE(cfg) << cfg.error().ToString();
  ASSERT_TRUE(cfg->exec);
  EXPECT_EQ(cfg->exec->command, dir_ + "/bin/plugin.sh");
  auto now = std::chrono::system_clock::from_time_t(1800000000);  // 2027
  CredentialSource creds(*cfg, [&] { return now; });
  auto c = creds.Get();
  ASSERT_TRUE(c) << c.error().ToString();
  EXPECT_EQ(c->token, "exec-token");
  EXPECT_EQ(creds.Get()->token, "exec-token");
  EXPECT_EQ(Runs(), 1);
  EXPECT_EQ(ReadFile("args"), "--flag from-config");
  auto info = ParseJsonObject(ReadFile("exec_info"));
  ASSERT_TRUE(info);
  EXPECT_EQ(info->at("apiVersion"), json::value("client.authentication.k8s.io/v1"));
  EXPECT_EQ(info->at("kind"), json::value("ExecCredential"));
  EXPECT_EQ(ToJson(info->at("spec").at("interactive")), "false");
  EXPECT_EQ(info->at("spec").at("cluster").at("server"), json::value("https://127.0.0.1:6443"));
  now = std::chrono::system_clock::from_time_t(1900000000);  // past the expiry
  ASSERT_TRUE(creds.Get());
  EXPECT_EQ(Runs(), 2);
  creds.Invalidate();
  ASSERT_TRUE(creds.Get());
  EXPECT_EQ(Runs(), 3);
}

TEST_F(ExecPluginTest, V1beta1AndClientCertificates) {
  const auto& pki = Pki();
  json::object status;
  status["clientCertificateData"] = pki.client_cert_pem;
  status["clientKeyData"] = pki.client_key_pem;
  Plugin(ToJson(status), "v1beta1");
  KubeconfigOptions opts;
  opts.kubeconfig = Config("v1beta1");
  auto cfg = LoadKubeconfig(opts);
  ASSERT_TRUE(cfg) << cfg.error().ToString();
  CredentialSource creds(*cfg);
  auto c = creds.Get();
  ASSERT_TRUE(c) << c.error().ToString();
  EXPECT_EQ(c->client_cert_pem, pki.client_cert_pem);
  EXPECT_EQ(c->client_key_pem, pki.client_key_pem);
  EXPECT_TRUE(c->token.empty());
}

TEST_F(ExecPluginTest, PluginFailuresAreClear) {
  Plugin(R"({"token":"x"})", "v1", 3);
  KubeconfigOptions opts;
  opts.kubeconfig = Config();
  auto cfg = LoadKubeconfig(opts);
  ASSERT_TRUE(cfg);
  auto c = CredentialSource(*cfg).Get();
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code, ErrorCode::kUnauthenticated);
  EXPECT_NE(c.error().message.find(fmt::format("kubeconfig {}/config: user 'u' exec:", dir_)),
            std::string::npos)
      << c.error().message;
  EXPECT_NE(c.error().message.find("exited with status 3: plugin failed: no login"),
            std::string::npos)
      << c.error().message;

  Plugin(R"({"token":"x"})", "v1beta1");  // answers with the wrong version
  c = CredentialSource(*cfg).Get();
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message.find("apiVersion 'client.authentication.k8s.io/v1beta1'"),
            std::string::npos);

  opts.kubeconfig = Config("v1", "no-such-plugin-deepbox",
                           "      installHint: \"install it with: apt install no-such-plugin\"");
  cfg = LoadKubeconfig(opts);
  ASSERT_TRUE(cfg);
  c = CredentialSource(*cfg).Get();
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message.find("install it with"), std::string::npos) << c.error().message;

  opts.kubeconfig = Config("v1alpha1");
  cfg = LoadKubeconfig(opts);
  ASSERT_FALSE(cfg);
  EXPECT_NE(cfg.error().message.find("user 'u' exec.apiVersion"), std::string::npos);
}

TEST_F(ExecPluginTest, OddPluginAnswersAreErrorsNotCrashes) {
  KubeconfigOptions opts;
  opts.kubeconfig = Config();
  auto cfg = LoadKubeconfig(opts);
  ASSERT_TRUE(cfg);
  // A time beyond the clock's range, wrong kinds, a status that is not an object.
  for (std::string status :
       {R"({"token":"x","expirationTimestamp":"9999-12-31T23:59:59Z"})",
        R"({"token":"x","expirationTimestamp":"0001-01-01T00:00:00Z"})",
        R"({"token":"x","expirationTimestamp":7})", R"({"token":["x"]})", R"("token")",
        R"({"token":"x","clientCertificateData":5,"clientKeyData":"k"})"}) {
    Plugin(status);
    auto c = CredentialSource(*cfg).Get();
    if (status.find(R"("expirationTimestamp":7)") != std::string::npos) {
      // Not a string: no expiry (as a missing one), the token is used.
      ASSERT_TRUE(c) << status;
      continue;
    }
    ASSERT_FALSE(c) << status;
    EXPECT_EQ(c.error().code, ErrorCode::kUnauthenticated) << c.error().message;
  }
}

TEST_F(KubeconfigTest, AnExecThatIsNotAMappingIsAnError) {
  std::string path = Write("config", R"(current-context: c
clusters:
- name: k
  cluster: {server: "https://127.0.0.1:6443"}
contexts:
- name: c
  context: {cluster: k, user: u}
users:
- name: u
  user:
    exec: [1, 2]
)");
  KubeconfigOptions opts;
  opts.kubeconfig = path;
  auto cfg = LoadKubeconfig(opts);
  ASSERT_FALSE(cfg);
  EXPECT_NE(cfg.error().message.find("user 'u' exec: must be a mapping"), std::string::npos)
      << cfg.error().message;
}

TEST_F(KubeconfigTest, InClusterConfig) {
  const auto& pki = Pki();
  Write("sa/token", "sa-token\n");
  Write("sa/ca.crt", pki.ca_cert_pem);
  Write("sa/namespace", "agents\n");
  InClusterOptions opts;
  opts.service_account_dir = dir_ + "/sa";
  opts.host = "10.96.0.1";
  opts.port = "443";
  EXPECT_TRUE(InClusterAvailable(opts));
  auto cfg = LoadInClusterConfig(opts);
  ASSERT_TRUE(cfg) << cfg.error().ToString();
  EXPECT_EQ(cfg->server, "https://10.96.0.1:443");
  EXPECT_EQ(cfg->namespace_name, "agents");
  EXPECT_EQ(cfg->tls.ca_pem, pki.ca_cert_pem);
  EXPECT_EQ(CredentialSource(*cfg).Get()->token, "sa-token");

  opts.host = "fd00::1";
  cfg = LoadInClusterConfig(opts);
  ASSERT_TRUE(cfg);
  EXPECT_EQ(cfg->server, "https://[fd00::1]:443");

  // LoadDefaultConfig prefers an explicit kubeconfig, else in-cluster.
  KubeconfigOptions kopts;
  kopts.kubeconfig_env = "";
  kopts.home = dir_ + "/nohome";
  auto def = LoadDefaultConfig(kopts, opts);
  ASSERT_TRUE(def);
  EXPECT_EQ(def->source, "in-cluster config");
  kopts.kubeconfig_env = Write("kc", kFirst);
  def = LoadDefaultConfig(kopts, opts);
  ASSERT_TRUE(def);
  EXPECT_EQ(def->context, "ctx-a");

  fs::remove(dir_ + "/sa/token");
  EXPECT_FALSE(InClusterAvailable(opts));
  auto bad = LoadInClusterConfig(opts);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("in-cluster config: token"), std::string::npos);
  opts.host = "";
  bad = LoadInClusterConfig(opts);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("KUBERNETES_SERVICE_HOST"), std::string::npos);
}

}  // namespace
}  // namespace deepbox::k8s
