#include "oci/testing/test_registry.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <thread>

#include "common/base64.h"
#include "net/http_client.h"
#include "net/testing/test_certs.h"
#include "net/url.h"
#include "oci/digest.h"

namespace deepbox::oci::testing {

namespace {

int FreeLoopbackPort() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    close(fd);
    return 0;
  }
  close(fd);
  return ntohs(addr.sin_port);
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

bool Installed(const char* path) { return access(path, X_OK) == 0; }

}  // namespace

Result<std::unique_ptr<TestRegistry>> TestRegistry::Start(const TestRegistryOptions& options) {
  if (!Installed("/usr/bin/docker-registry") ||
      (!options.username.empty() && !Installed("/usr/bin/htpasswd"))) {
    return MakeError(ErrorCode::kUnavailable,
                     "docker-registry (and htpasswd, apache2-utils) are not installed: run "
                     "scripts/install-deps.sh");
  }
  std::unique_ptr<TestRegistry> r(new TestRegistry());
  r->port_ = FreeLoopbackPort();
  const std::string dir = r->dir_.path().string();
  std::string config = "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\n";
  config += "storage:\n  filesystem:\n    rootdirectory: " + dir + "/data\n";
  config += "  delete:\n    enabled: true\n";
  config += "http:\n  addr: 127.0.0.1:" + std::to_string(r->port_) + "\n";
  net::TlsClientConfig tls;
  if (options.tls) {
    auto pki = net::testing::GenerateTestPki();
    WriteText(dir + "/ca.pem", pki.ca_cert_pem);
    WriteText(dir + "/cert.pem", pki.server_cert_pem);
    WriteText(dir + "/key.pem", pki.server_key_pem);
    r->ca_file_ = dir + "/ca.pem";
    tls.ca_pem = pki.ca_cert_pem;
    config += "  tls:\n    certificate: " + dir + "/cert.pem\n    key: " + dir + "/key.pem\n";
  }
  net::ClientOptions client_options;
  client_options.tls = tls;
  client_options.max_response_bytes = 64u << 20;
  if (!options.username.empty()) {
    SubprocessOptions htpasswd;
    htpasswd.argv = {"/usr/bin/htpasswd", "-Bbn", options.username, options.password};
    htpasswd.capture_stdout = true;
    htpasswd.capture_stderr = true;
    auto out = RunCommand(htpasswd, std::chrono::seconds(30));
    if (!out) return tl::unexpected(out.error());
    if (!out->exited_ok()) return MakeError(ErrorCode::kInternal, "htpasswd: " + out->err);
    WriteText(dir + "/htpasswd", out->out);
    config += "auth:\n  htpasswd:\n    realm: deepbox-test\n    path: " + dir + "/htpasswd\n";
    client_options.default_headers.Add(
        "Authorization", "Basic " + Base64Encode(options.username + ":" + options.password));
  }
  WriteText(dir + "/config.yml", config);
  SubprocessOptions serve;
  serve.argv = {"/usr/bin/docker-registry", "serve", dir + "/config.yml"};
  serve.stdout_to.path = dir + "/registry.log";
  serve.stderr_to.path = dir + "/registry.err";
  serve.parent_death_signal = SIGKILL;
  auto process = Subprocess::Spawn(serve);
  if (!process) return tl::unexpected(process.error());
  r->process_ = std::move(*process);
  auto client =
      net::HttpClient::Create((options.tls ? "https://" : "http://") + r->host(), client_options);
  if (!client) return tl::unexpected(client.error());
  r->client_ = std::move(*client);
  // Ready when it answers /v2/ (a startup wait, not a timing assertion).
  for (int i = 0; i < 400; ++i) {
    net::ClientRequest probe;
    probe.target = "/v2/";
    auto answer = r->client_->Send(probe);
    if (answer && (answer->status == 200 || answer->status == 401)) return r;
    if (r->process_.HasExited()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::ifstream err(dir + "/registry.err");
  std::string text((std::istreambuf_iterator<char>(err)), std::istreambuf_iterator<char>());
  return MakeError(ErrorCode::kUnavailable, "docker-registry did not start: " + text);
}

TestRegistry::~TestRegistry() { Stop(); }

void TestRegistry::Stop() {
  if (process_.running()) process_.Terminate(std::chrono::seconds(5));
}

Result<std::string> TestRegistry::PushBlob(const std::string& repository,
                                           const std::string& bytes) {
  std::string digest = Sha256Digest(bytes);
  net::ClientRequest start;
  start.method = "POST";
  start.target = "/v2/" + repository + "/blobs/uploads/";
  auto started = client_->Send(start);
  if (!started) return tl::unexpected(started.error());
  auto location = started->headers.Get("Location");
  if (started->status != 202 || !location) {
    return MakeError(ErrorCode::kInternal,
                     "upload start: " + std::to_string(started->status) + " " + started->body);
  }
  std::string target = *location;
  if (target.find("://") != std::string::npos) {
    auto url = net::ParseUrl(target);
    if (!url) return tl::unexpected(url.error());
    target = url->path + (url->query.empty() ? "" : "?" + url->query);
  }
  net::ClientRequest put;
  put.method = "PUT";
  put.target = target + (target.find('?') == std::string::npos ? "?" : "&") +
               "digest=" + net::PercentEncode(digest);
  put.headers.Add("Content-Type", "application/octet-stream");
  put.body = bytes;
  auto done = client_->Send(put);
  if (!done) return tl::unexpected(done.error());
  if (done->status != 201) {
    return MakeError(ErrorCode::kInternal,
                     "upload: " + std::to_string(done->status) + " " + done->body);
  }
  return digest;
}

Status TestRegistry::PushManifest(const std::string& repository, const std::string& reference,
                                  const std::string& media_type, const std::string& body) {
  net::ClientRequest put;
  put.method = "PUT";
  put.target = "/v2/" + repository + "/manifests/" + reference;
  put.headers.Add("Content-Type", media_type);
  put.body = body;
  auto done = client_->Send(put);
  if (!done) return tl::unexpected(done.error());
  if (done->status != 201) {
    return MakeError(ErrorCode::kInternal,
                     "manifest put: " + std::to_string(done->status) + " " + done->body);
  }
  return {};
}

Status TestRegistry::CorruptBlob(const std::string& digest, const std::string& bytes) {
  std::string hex(DigestHex(digest));
  std::string path = dir_.path().string() + "/data/docker/registry/v2/blobs/sha256/" +
                     hex.substr(0, 2) + "/" + hex + "/data";
  if (access(path.c_str(), F_OK) != 0) return MakeSyscallError("access", errno, path);
  WriteText(path, bytes);
  return {};
}

}  // namespace deepbox::oci::testing
