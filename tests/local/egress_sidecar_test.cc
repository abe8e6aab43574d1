// `deepbox egress-proxy`, the secrets proxy as a pod's sidecar (issue 26,
// deploy/k8s/sandbox-template-secrets.yaml), run as a process in a test world
// (the world netns stands in for the pod's): the agent side (curl as uid
// 65534 in the same netns) trusts --share-dir's bundle and takes its
// placeholder from secrets.env; the server receives the value only from the
// secret host's requests; the log (stdout) names the secret, never its value;
// deepbox-sandboxd --env-file exports the placeholder to its commands.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "cli_fixture.h"
#include "common/random.h"
#include "common/subprocess.h"
#include "common/testing/temp_dir.h"
#include "local/namespaces.h"
#include "local/testing/test_pki.h"
#include "local/testing/test_world.h"
#include "local/testing/tls_echo_server.h"
#include "sandbox/testing/scoped_sandboxd.h"

namespace deepbox::local {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing::TestWorld;
namespace fs = std::filesystem;

constexpr int kEchoPort = 8443;
constexpr const char* kProxy = "127.0.0.1:39128";

std::string Slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class EgressSidecarTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "building the test world needs root";
    for (const char* bin : {"/usr/sbin/ip", "/usr/bin/curl"}) {
      if (access(bin, X_OK) != 0) GTEST_SKIP() << bin << " missing";
    }
    if (access(lifecycle::testing::kDeepbox.c_str(), X_OK) != 0) GTEST_SKIP() << "no deepbox";
    ASSERT_EQ(world_.Build("dbxsidecar" + std::to_string(getpid())), "");
    pki_ = testing::MakeTestPki("allowed.test,other.test");
    testing::TlsEchoConfig echo{pki_.chain_pem, pki_.key_pem, true};
    echo_ = std::make_unique<testing::WorldServer>(
        world_.hosts().fd(), [] { return testing::BindAny(SOCK_STREAM, kEchoPort); },
        [echo](int s) { testing::ServeTlsEcho(s, echo); });
    ASSERT_TRUE(echo_->ready());
    dir_ = tmp_.path();
    chmod(dir_.c_str(), 0755);  // the agent side (uid 65534) reads the share dir
    std::ofstream(dir_ / "upstream-ca.pem") << pki_.ca_pem;
    chmod((dir_ / "upstream-ca.pem").c_str(), 0644);
    value_ = "s3cr3t-" + RandomHex(40);
  }

  void TearDown() override {
    if (proxy_ > 0) {
      kill(proxy_, SIGKILL);  // our child, not reaped yet
      waitpid(proxy_, nullptr, 0);
    }
  }

  // Starts the proxy in the world netns; its stdout (the log) to dir_/log.
  void StartProxy() {
    proxy_ = fork();
    ASSERT_GE(proxy_, 0);
    if (proxy_ == 0) {
      if (setns(world_.ns().fd(), CLONE_NEWNET) != 0) _exit(120);
      int out = open((dir_ / "log").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      int err = open((dir_ / "stderr").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      dup2(out, 1);
      dup2(err, 2);
      setenv("SIDECAR_VALUE", value_.c_str(), 1);
      setenv("DEEPBOX_NETWORK_ALLOW_CIDRS", "203.0.113.0/25,2001:db8:1::/48", 1);
      std::string share = (dir_ / "share").string(), ca = (dir_ / "upstream-ca.pem").string();
      execl(lifecycle::testing::kDeepbox.c_str(), "deepbox", "egress-proxy", "--listen", kProxy,
            "--network", "allow=allowed.test:8443,other.test:8443", "--secret",
            "API_TOKEN=env:SIDECAR_VALUE@allowed.test", "--share-dir", share.c_str(),
            "--upstream-ca", ca.c_str(), "--nameserver", TestWorld::kDns4,
            static_cast<char*>(nullptr));
      _exit(127);
    }
    for (int i = 0; i < 500 && Slurp(dir_ / "stderr").find("listening") == std::string::npos; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ASSERT_THAT(Slurp(dir_ / "stderr"), HasSubstr("listening on 127.0.0.1:39128"))
        << Slurp(dir_ / "stderr");
  }

  TestWorld world_;
  testing::TestPki pki_;
  std::unique_ptr<testing::WorldServer> echo_;
  deepbox::testing::TempDir tmp_;
  fs::path dir_;
  std::string value_;
  pid_t proxy_ = -1;
};

TEST_F(EgressSidecarTest, AgentSideHoldsThePlaceholderServerGetsTheValue) {
  StartProxy();
  fs::path share = dir_ / "share";
  std::string env = Slurp(share / "secrets.env");
  ASSERT_THAT(env, HasSubstr("API_TOKEN=deepbox-secret-"));
  std::string placeholder = env.substr(env.find('=') + 1, 47);
  for (const char* f : {"secrets.env", "sandbox-ca.pem", "bundle.pem"}) {
    EXPECT_THAT(Slurp(share / f), Not(HasSubstr(value_))) << f;
    EXPECT_THAT(Slurp(share / f), Not(HasSubstr("PRIVATE KEY"))) << f;
  }
  EXPECT_THAT(Slurp(share / "bundle.pem"), HasSubstr(Slurp(share / "sandbox-ca.pem")));

  // The agent container: another uid in the same network namespace.
  std::string bundle = (share / "bundle.pem").string();
  std::string test_ca = (dir_ / "upstream-ca.pem").string();
  auto run = testing::RunAsUserInNetns(world_.ns().fd(), 65534, [&](int fd) {
    dup2(fd, 1);
    dup2(fd, 2);
    std::string script =
        // What the template gives the agent container (curl reads CURL_CA_BUNDLE,
        // not SSL_CERT_FILE).
        "export HTTPS_PROXY=http://" + std::string(kProxy) + " SSL_CERT_FILE=" + bundle +
        " CURL_CA_BUNDLE=" + bundle + "; export API_TOKEN=" + placeholder +
        "; curl -sS --http2 -H \"Authorization: Bearer $API_TOKEN\" "
        "https://allowed.test:8443/a https://allowed.test:8443/b; echo curl_secret=$?"
        "; curl -sS --cacert " +
        test_ca +
        " -H \"Authorization: Bearer $API_TOKEN\" https://other.test:8443/o; echo curl_other=$?";
    execl("/bin/sh", "sh", "-c", script.c_str(), static_cast<char*>(nullptr));
    return 127;
  });
  EXPECT_THAT(run.output, HasSubstr("curl_secret=0")) << run.output;
  EXPECT_THAT(run.output, HasSubstr("protocol h2 request 2")) << run.output;
  EXPECT_THAT(run.output, HasSubstr("header authorization: Bearer " + value_)) << run.output;
  EXPECT_THAT(run.output, HasSubstr("curl_other=0")) << run.output;
  EXPECT_THAT(run.output, HasSubstr("header authorization: Bearer " + placeholder)) << run.output;

  // SIGTERM ends it cleanly; its log named the secret, never the value.
  ASSERT_EQ(kill(proxy_, SIGTERM), 0);
  int status = 0;
  ASSERT_EQ(waitpid(proxy_, &status, 0), proxy_);
  proxy_ = -1;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  std::string log = Slurp(dir_ / "log");
  EXPECT_THAT(log, HasSubstr("\"secrets\":[\"API_TOKEN\"]")) << log;
  EXPECT_THAT(log, HasSubstr("\"host\":\"other.test\"")) << log;
  EXPECT_THAT(log, Not(HasSubstr(value_)));

  // The daemon of the agent container exports the placeholder to its commands.
  deepbox::testing::SandboxdOptions o;
  o.extra_args = {"--env-file", (share / "secrets.env").string()};
  auto daemon = deepbox::testing::ScopedSandboxd::Start(o);
  ASSERT_TRUE(daemon.has_value()) << daemon.error().ToString();
  auto client = (*daemon)->Connect();
  ASSERT_TRUE(client.has_value()) << client.error().ToString();
  ExecRequest req;
  req.shell = "echo token=$API_TOKEN";
  auto r = (*client)->Exec(req);
  ASSERT_TRUE(r.has_value()) << r.error().ToString();
  EXPECT_EQ(r->stdout_data, "token=" + placeholder + "\n");
}

TEST_F(EgressSidecarTest, BadConfigurationsAreRefused) {
  auto run = [&](std::vector<std::string> args) {
    lifecycle::testing::CliResult r;
    SubprocessOptions o;
    o.argv = {lifecycle::testing::kDeepbox, "egress-proxy"};
    o.argv.insert(o.argv.end(), args.begin(), args.end());
    auto done = RunCommand(o, std::chrono::seconds(30));
    if (done) {
      r.code = WIFEXITED(done->wait_status) ? WEXITSTATUS(done->wait_status) : -1;
      r.err = done->err;
    }
    return r;
  };
  auto none = run({"--network", "none"});
  EXPECT_EQ(none.code, 2);
  EXPECT_THAT(none.err, HasSubstr("lets nothing through"));
  setenv("SIDECAR_TEST_VALUE", "v", 1);
  auto not_allowed = run(
      {"--network", "allow=a.example.test", "--secret", "T=env:SIDECAR_TEST_VALUE@b.example.test"});
  EXPECT_EQ(not_allowed.code, 2);
  EXPECT_THAT(not_allowed.err, HasSubstr("is not allowed by --network"));
  auto bad_listen = run({"--listen", "localhost:3128"});
  EXPECT_EQ(bad_listen.code, 2);
  EXPECT_THAT(bad_listen.err, HasSubstr("must be an IP address"));
  unsetenv("SIDECAR_TEST_VALUE");
}

}  // namespace
}  // namespace deepbox::local
