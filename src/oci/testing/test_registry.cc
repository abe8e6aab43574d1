#include "oci/testing/test_registry.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/bn.h>
#include <openssl/ecdsa.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <thread>

#include "common/base64.h"
#include "common/json.h"
#include "common/strings.h"
#include "net/http_client.h"
#include "net/http_server.h"
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

std::string Base64Url(std::string_view data) {
  std::string b = Base64Encode(data);
  for (char& c : b) {
    if (c == '+') c = '-';
    if (c == '/') c = '_';
  }
  while (!b.empty() && b.back() == '=') b.pop_back();
  return b;
}

}  // namespace

// Issues the registry's bearer tokens: ES256 JWTs whose x5c names a
// certificate the registry's rootcertbundle (the test CA) vouches for.
struct TestRegistry::TokenService {
  std::string cert_der;
  EVP_PKEY* key = nullptr;
  std::string username, password, identity_token;
  std::unique_ptr<net::HttpServer> server;
  std::atomic<int> issued{0};

  ~TokenService() {
    if (server) server->Stop();
    EVP_PKEY_free(key);
  }

  // A token for `access` entries: (repository, "pull,push").
  std::string Mint(const std::vector<std::pair<std::string, std::string>>& access) const {
    json::object header;
    header["typ"] = "JWT";
    header["alg"] = "ES256";
    json::array x5c;
    x5c.push_back(json::value(Base64Encode(cert_der)));
    header["x5c"] = std::move(x5c);
    const int64_t now = static_cast<int64_t>(time(nullptr));
    json::object claims;
    claims["iss"] = "deepbox-test-issuer";
    claims["sub"] = username;
    claims["aud"] = "deepbox-test-registry";
    claims["exp"] = now + 600;
    claims["nbf"] = now - 60;
    claims["iat"] = now;
    claims["jti"] = std::to_string(now) + "-" + std::to_string(issued.load());
    json::array grants;
    for (const auto& [name, actions] : access) {
      json::object g;
      g["type"] = "repository";
      g["name"] = name;
      json::array a;
      for (auto action : Split(actions, ',')) a.push_back(json::value(std::string(action)));
      g["actions"] = std::move(a);
      grants.push_back(std::move(g));
    }
    claims["access"] = std::move(grants);
    std::string signing_input = Base64Url(ToJson(header)) + "." + Base64Url(ToJson(claims));
    EVP_MD_CTX* ctx = EVP_MD_CTX_new();
    size_t der_len = 0;
    EVP_DigestSignInit(ctx, nullptr, EVP_sha256(), nullptr, key);
    EVP_DigestSign(ctx, nullptr, &der_len,
                   reinterpret_cast<const unsigned char*>(signing_input.data()),
                   signing_input.size());
    std::string der(der_len, '\0');
    EVP_DigestSign(ctx, reinterpret_cast<unsigned char*>(der.data()), &der_len,
                   reinterpret_cast<const unsigned char*>(signing_input.data()),
                   signing_input.size());
    EVP_MD_CTX_free(ctx);
    const unsigned char* p = reinterpret_cast<const unsigned char*>(der.data());
    ECDSA_SIG* sig = d2i_ECDSA_SIG(nullptr, &p, static_cast<long>(der_len));
    const BIGNUM* r = nullptr;
    const BIGNUM* s = nullptr;
    ECDSA_SIG_get0(sig, &r, &s);
    std::string raw(64, '\0');
    BN_bn2binpad(r, reinterpret_cast<unsigned char*>(raw.data()), 32);
    BN_bn2binpad(s, reinterpret_cast<unsigned char*>(raw.data()) + 32, 32);
    ECDSA_SIG_free(sig);
    return signing_input + "." + Base64Url(raw);
  }

  void Handle(net::Request& request, net::ResponseWriter& writer) {
    std::string expected = "Basic " + Base64Encode(username + ":" + password);
    // The OAuth2 form: POST grant_type=refresh_token with an identity token.
    const bool oauth = request.method == "POST";
    auto params = oauth ? net::ParseQuery(request.body) : request.query;
    auto param = [&](std::string_view name) {
      for (const auto& [k, v] : params) {
        if (k == name) return v;
      }
      return std::string();
    };
    const bool authorized = oauth ? !identity_token.empty() &&
                                        param("grant_type") == "refresh_token" &&
                                        param("refresh_token") == identity_token
                                  : request.Header("Authorization").value_or("") == expected;
    if (request.path != "/token" || !authorized) {
      (void)writer.Send(net::Response::Json(401, R"({"details":"bad login"})"));
      return;
    }
    // scope=repository:NAME:ACTIONS
    std::vector<std::pair<std::string, std::string>> access;
    for (const auto& [k, v] : params) {
      if (k != "scope" || !v.starts_with("repository:")) continue;
      size_t last = v.rfind(':');
      access.emplace_back(v.substr(11, last - 11), v.substr(last + 1));
    }
    ++issued;
    json::object body;
    body[oauth ? "access_token" : "token"] = Mint(access);
    (void)writer.Send(net::Response::Json(200, ToJson(body)));
  }
};

int TestRegistry::tokens_issued() const {
  return token_service_ ? token_service_->issued.load() : 0;
}

std::string TestRegistry::PushAuthorization(const std::string& repository) const {
  if (token_service_) return "Bearer " + token_service_->Mint({{repository, "pull,push"}});
  return basic_authorization_;
}

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
  if (options.token_auth) {
    auto pki = net::testing::GenerateTestPki();
    WriteText(dir + "/token-ca.pem", pki.ca_cert_pem);
    auto service = std::make_unique<TokenService>();
    service->username = options.username;
    service->password = options.password;
    service->identity_token = options.identity_token;
    BIO* bio =
        BIO_new_mem_buf(pki.server_key_pem.data(), static_cast<int>(pki.server_key_pem.size()));
    service->key = PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr);
    BIO_free(bio);
    bio = BIO_new_mem_buf(pki.server_cert_pem.data(), static_cast<int>(pki.server_cert_pem.size()));
    X509* cert = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
    BIO_free(bio);
    unsigned char* der = nullptr;
    int len = cert != nullptr ? i2d_X509(cert, &der) : -1;
    if (service->key == nullptr || len <= 0) {
      X509_free(cert);
      return MakeError(ErrorCode::kInternal, "token service: cannot load the signing key");
    }
    service->cert_der.assign(reinterpret_cast<char*>(der), static_cast<size_t>(len));
    OPENSSL_free(der);
    X509_free(cert);
    auto endpoint = net::Endpoint::Parse("127.0.0.1:0");
    if (!endpoint) return tl::unexpected(endpoint.error());
    TokenService* raw = service.get();
    auto server = net::HttpServer::Create(
        *endpoint, [raw](net::Request& req, net::ResponseWriter& w) { raw->Handle(req, w); });
    if (!server) return tl::unexpected(server.error());
    service->server = std::move(*server);
    service->server->Start();
    config +=
        "auth:\n  token:\n    realm: http://127.0.0.1:" + std::to_string(service->server->port()) +
        "/token\n    service: deepbox-test-registry\n    issuer: deepbox-test-issuer\n" +
        "    rootcertbundle: " + dir + "/token-ca.pem\n";
    r->token_service_ = std::move(service);
  } else if (!options.username.empty()) {
    SubprocessOptions htpasswd;
    htpasswd.argv = {"/usr/bin/htpasswd", "-Bbn", options.username, options.password};
    htpasswd.capture_stdout = true;
    htpasswd.capture_stderr = true;
    auto out = RunCommand(htpasswd, std::chrono::seconds(30));
    if (!out) return tl::unexpected(out.error());
    if (!out->exited_ok()) return MakeError(ErrorCode::kInternal, "htpasswd: " + out->err);
    WriteText(dir + "/htpasswd", out->out);
    config += "auth:\n  htpasswd:\n    realm: deepbox-test\n    path: " + dir + "/htpasswd\n";
    r->basic_authorization_ = "Basic " + Base64Encode(options.username + ":" + options.password);
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

TestRegistry::TestRegistry() = default;
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
  if (auto a = PushAuthorization(repository); !a.empty()) start.headers.Add("Authorization", a);
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
  if (auto a = PushAuthorization(repository); !a.empty()) put.headers.Add("Authorization", a);
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
  if (auto a = PushAuthorization(repository); !a.empty()) put.headers.Add("Authorization", a);
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
