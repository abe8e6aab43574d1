#include "mcp/oauth.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <mutex>

#include "common/base64.h"
#include "common/strings.h"
#include "common/testing/temp_dir.h"
#include "mcp/client.h"
#include "mcp/jsonrpc.h"
#include "mcp/testing/private_key_pem.h"
#include "mcp/testing/redirect_user_agent.h"
#include "net/http_server.h"
#include "net/url.h"

namespace deepbox::mcp {
namespace {

using deepbox::testing::TempDir;

TEST(OAuthTest, ParsesBearerChallenges) {
  auto c = ParseBearerChallenge(
      R"(Bearer error="insufficient_scope", scope="a b", resource_metadata="http://h/x", )"
      R"(error_description="say \"more\"")");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->error, "insufficient_scope");
  EXPECT_EQ(c->scope, "a b");
  EXPECT_EQ(c->resource_metadata, "http://h/x");
  EXPECT_EQ(c->error_description, "say \"more\"");
  auto bare = ParseBearerChallenge("Bearer");
  ASSERT_TRUE(bare);
  EXPECT_EQ(bare->resource_metadata, "");
  EXPECT_TRUE(ParseBearerChallenge("bearer realm=x"));
  EXPECT_FALSE(ParseBearerChallenge("Basic realm=\"x\""));
  EXPECT_FALSE(ParseBearerChallenge("Bearerish x=1"));
}

TEST(OAuthTest, WellKnownUrlsInOrder) {
  EXPECT_EQ(ProtectedResourceMetadataUrls("http://h:8/mcp"),
            (std::vector<std::string>{"http://h:8/.well-known/oauth-protected-resource/mcp",
                                      "http://h:8/.well-known/oauth-protected-resource"}));
  EXPECT_EQ(ProtectedResourceMetadataUrls("https://h/"),
            (std::vector<std::string>{"https://h/.well-known/oauth-protected-resource"}));
  EXPECT_EQ(AuthorizationServerMetadataUrls("https://as"),
            (std::vector<std::string>{"https://as/.well-known/oauth-authorization-server",
                                      "https://as/.well-known/openid-configuration"}));
  // With a path: never the root (another tenant's metadata).
  EXPECT_EQ(AuthorizationServerMetadataUrls("http://as:9/tenant1/"),
            (std::vector<std::string>{"http://as:9/.well-known/oauth-authorization-server/tenant1",
                                      "http://as:9/.well-known/openid-configuration/tenant1",
                                      "http://as:9/tenant1/.well-known/openid-configuration"}));
}

TEST(OAuthTest, ResourceMustNameThisServer) {
  EXPECT_TRUE(ResourceMatches("http://h:8/mcp", "http://h:8/mcp"));
  EXPECT_TRUE(ResourceMatches("http://h:8", "http://h:8/mcp"));
  EXPECT_TRUE(ResourceMatches("http://h:8/", "http://h:8/mcp"));
  EXPECT_TRUE(ResourceMatches("http://h:8/a", "http://h:8/a/mcp"));
  EXPECT_FALSE(ResourceMatches("http://h:8/ab", "http://h:8/a"));
  EXPECT_FALSE(ResourceMatches("http://h:8/a", "http://h:8/ab"));
  EXPECT_FALSE(ResourceMatches("https://evil.example.com/mcp", "http://h:8/mcp"));
  EXPECT_FALSE(ResourceMatches("http://h:9/mcp", "http://h:8/mcp"));
  EXPECT_FALSE(ResourceMatches("https://h:8/mcp", "http://h:8/mcp"));
}

TEST(OAuthTest, PkceAndScopes) {
  // base64url(SHA-256), unpadded (Python's hashlib and base64 agree).
  EXPECT_EQ(PkceChallenge("dBjftJeZ4CVP-mJ92K9lgNuwZ9iHIv6w8rijLtkM9vI"),
            "wj9UXs04AT2ihX5BESkeCbobJwIL2YpxxzOHI6iLgd0");
  EXPECT_EQ(UnionScopes("a b", "b c"), "a b c");
  EXPECT_EQ(UnionScopes("", "x"), "x");
  EXPECT_EQ(UnionScopes("", ""), "");
}

TEST(OAuthTest, FileStoreIsPrivateAndKeepsOtherServers) {
  TempDir dir("deepbox-oauth");
  FileOAuthStore store(dir.Path("state/mcp-oauth.json"));
  auto none = store.Load("http://a/mcp");
  ASSERT_TRUE(none) << none.error().message;
  EXPECT_FALSE(*none);
  OAuthCredentials a;
  a.client_id = "ca";
  a.access_token = "ta";
  a.expires_at = 42;
  OAuthCredentials b;
  b.client_id = "cb";
  ASSERT_TRUE(store.Save("http://a/mcp", a));
  ASSERT_TRUE(store.Save("http://b/mcp", b));
  auto got = store.Load("http://a/mcp");
  ASSERT_TRUE(got && *got);
  EXPECT_EQ((*got)->access_token, "ta");
  EXPECT_EQ((*got)->expires_at, 42);
  struct stat st {};
  ASSERT_EQ(::stat(store.path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(::stat(dir.Path("state").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  ASSERT_TRUE(store.Remove("http://a/mcp"));
  EXPECT_FALSE(*store.Load("http://a/mcp"));
  EXPECT_TRUE(*store.Load("http://b/mcp"));
  // A damaged file is an error that names it, not an empty store.
  FileOAuthStore bad(dir.Path("bad.json"));
  {
    std::FILE* f = std::fopen(dir.Path("bad.json").c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("{oops", f);
    std::fclose(f);
  }
  auto broken = bad.Load("x");
  ASSERT_FALSE(broken);
  EXPECT_NE(broken.error().message.find("bad.json"), std::string::npos);
}

// One loopback HTTP server playing an MCP server (a minimal legacy one: its
// protocol is not what is tested here) that wants a bearer token, its
// protected resource metadata, and an authorization server that grants at
// once (under /as: its metadata is at the path-inserted well-known URL).
class FakeAuthorizedServer {
 public:
  struct Config {
    std::vector<std::string> token_auth_methods = {"none"};
    std::string registration_auth_method;  // what registration answers ("" = none given)
    std::string registration_secret;
    std::vector<std::string> scopes_supported;  // PRM; empty = absent
    std::string prm_resource;                   // "" = the server's URL
    std::string challenge_scope;                // the 401's scope=
    std::string call_scope;                     // tools/call needs it (403 otherwise)
    bool call_never_enough = false;             // tools/call always 403
    std::vector<std::string> signing_algs;      // the AS's JWT algorithms; empty = absent
    // A 2025-03-26 server: no protected resource metadata, the challenge
    // without resource_metadata; its origin is the authorization server, with
    // RFC 8414 metadata at the root (legacy_metadata) or none at all (the
    // default /authorize, /token, /register, served here).
    bool legacy = false;
    bool legacy_metadata = true;
    std::string legacy_metadata_redirect;  // the root metadata answers 302 to it
    // The token endpoint's answer to client_credentials instead of a token.
    std::optional<net::Response> client_credentials_answer;
  };

  explicit FakeAuthorizedServer(Config config) : config_(std::move(config)) {
    auto s = net::HttpServer::Create(
        net::Endpoint::Parse("127.0.0.1:0").value(),
        [this](net::Request& req, net::ResponseWriter& w) { (void)w.Send(Handle(req)); });
    EXPECT_TRUE(s) << s.error().message;
    server_ = std::move(*s);
    server_->Start();
    base_ = fmt::format("http://127.0.0.1:{}", server_->port());
  }
  ~FakeAuthorizedServer() { server_->Stop(std::chrono::milliseconds(100)); }

  std::string url() const { return base_ + "/mcp"; }

  std::mutex mu;
  int registrations = 0;
  int token_requests = 0;
  std::vector<std::string> authorize_queries;
  std::vector<std::string> token_forms;
  std::vector<std::string> token_basic_auth;   // decoded "id:secret", "" when none
  std::vector<std::string> metadata_requests;  // paths
  std::string issued;                          // the valid access token
  std::string issued_scope;
  std::string refresh = "refresh-1";

 private:
  static net::Response Json(int status, const json::object& o) {
    return net::Response::Json(status, ToJson(o));
  }
  net::Response Challenge(int status, const std::string& error, const std::string& scope) {
    net::Response r = Json(status, {{"error", error}});
    std::string h = config_.legacy
                        ? fmt::format("Bearer error=\"{}\"", error)
                        : fmt::format("Bearer error=\"{}\", resource_metadata=\"{}\"", error,
                                      base_ + "/.well-known/oauth-protected-resource/mcp");
    if (!scope.empty()) h += fmt::format(", scope=\"{}\"", scope);
    r.headers.Set("WWW-Authenticate", h);
    return r;
  }
  static std::string Form(const std::string& body, const std::string& key) {
    for (const auto& [k, v] : net::ParseQuery(body)) {
      if (k == key) return v;
    }
    return "";
  }
  static bool HasScope(const std::string& have, const std::string& need) {
    for (std::string_view n : Split(need, ' ')) {
      bool found = false;
      for (std::string_view h : Split(have, ' ')) found = found || h == n;
      if (!n.empty() && !found) return false;
    }
    return true;
  }

  net::Response Handle(net::Request& req) {
    std::lock_guard<std::mutex> lock(mu);
    if (req.path.starts_with("/.well-known/")) metadata_requests.push_back(req.path);
    if (config_.legacy) {
      if (req.path == "/.well-known/oauth-authorization-server" && config_.legacy_metadata) {
        if (!config_.legacy_metadata_redirect.empty()) {
          net::Response r;
          r.status = 302;
          r.headers.Set("Location", config_.legacy_metadata_redirect);
          return r;
        }
        req.path = "/.well-known/oauth-authorization-server/as";
      } else if (req.path.starts_with("/.well-known/")) {
        return net::Response::Text(404, "not found\n");
      } else if (!config_.legacy_metadata &&
                 (req.path == "/authorize" || req.path == "/token" || req.path == "/register")) {
        req.path = "/as" + req.path;
      }
    }
    if (req.method == "GET" && req.path == "/.well-known/oauth-protected-resource/mcp") {
      json::object prm;
      prm["resource"] = config_.prm_resource.empty() ? base_ + "/mcp" : config_.prm_resource;
      prm["authorization_servers"] = json::array{json::value(base_ + "/as")};
      if (!config_.scopes_supported.empty()) {
        json::array a;
        for (const auto& s : config_.scopes_supported) a.emplace_back(s);
        prm["scopes_supported"] = std::move(a);
      }
      return Json(200, prm);
    }
    if (req.method == "GET" && req.path == "/.well-known/oauth-authorization-server/as") {
      json::object m;
      m["issuer"] = base_ + "/as";
      m["authorization_endpoint"] = base_ + "/as/authorize";
      m["token_endpoint"] = base_ + "/as/token";
      m["registration_endpoint"] = base_ + "/as/register";
      m["code_challenge_methods_supported"] = json::array{"S256"};
      json::array methods;
      for (const auto& s : config_.token_auth_methods) methods.emplace_back(s);
      m["token_endpoint_auth_methods_supported"] = std::move(methods);
      if (!config_.signing_algs.empty()) {
        json::array algs;
        for (const auto& a : config_.signing_algs) algs.emplace_back(a);
        m["token_endpoint_auth_signing_alg_values_supported"] = std::move(algs);
      }
      return Json(200, m);
    }
    if (req.method == "POST" && req.path == "/as/register") {
      ++registrations;
      json::object r;
      r["client_id"] = fmt::format("client-{}", registrations);
      if (!config_.registration_secret.empty()) r["client_secret"] = config_.registration_secret;
      if (!config_.registration_auth_method.empty()) {
        r["token_endpoint_auth_method"] = config_.registration_auth_method;
      }
      return Json(201, r);
    }
    if (req.method == "GET" && req.path == "/as/authorize") {
      authorize_queries.push_back(req.target);
      code_challenge_ = req.Query("code_challenge").value_or("");
      granted_scope_ = req.Query("scope").value_or("");
      std::string location = req.Query("redirect_uri").value_or("") + "?code=the-code&state=" +
                             net::PercentEncode(req.Query("state").value_or(""));
      net::Response r;
      r.status = 302;
      r.headers.Set("Location", location);
      return r;
    }
    if (req.method == "POST" && req.path == "/as/token") {
      ++token_requests;
      token_forms.push_back(req.body);
      std::string basic;
      if (auto a = req.Header("Authorization"); a && a->rfind("Basic ", 0) == 0) {
        basic = Base64Decode(a->substr(6)).value_or("?");
      }
      token_basic_auth.push_back(basic);
      const std::string grant = Form(req.body, "grant_type");
      if (grant == "authorization_code") {
        if (PkceChallenge(Form(req.body, "code_verifier")) != code_challenge_ ||
            Form(req.body, "code") != "the-code") {
          return Json(400, {{"error", "invalid_grant"}});
        }
      } else if (grant == "refresh_token") {
        if (Form(req.body, "refresh_token") != refresh) {
          return Json(400, {{"error", "invalid_grant"}});
        }
        refresh = fmt::format("refresh-{}", token_requests);
      } else if (grant == "client_credentials") {
        if (config_.client_credentials_answer) return *config_.client_credentials_answer;
        granted_scope_ = Form(req.body, "scope");
      } else {
        return Json(400, {{"error", "unsupported_grant_type"}});
      }
      issued = fmt::format("token-{}", token_requests);
      issued_scope = granted_scope_;
      json::object t;
      t["access_token"] = issued;
      t["token_type"] = "Bearer";
      t["expires_in"] = 3600;
      t["refresh_token"] = refresh;
      if (!granted_scope_.empty()) t["scope"] = granted_scope_;
      return Json(200, t);
    }
    if (req.path != "/mcp") return net::Response::Text(404, "not found\n");
    if (req.method != "POST") return net::Response::Text(405, "no\n");
    auto m = ParseMessage(req.body);
    if (!m) return Json(400, {{"error", "parse"}});
    auto auth = req.Header("Authorization").value_or("");
    if (issued.empty() || auth != "Bearer " + issued) {
      return Challenge(401, "invalid_token", config_.challenge_scope);
    }
    if (m->is_notification()) return net::Response{202, {}, ""};
    json::object result;
    if (m->method == "initialize") {
      result["protocolVersion"] = "2025-11-25";
      result["capabilities"] = json::object{{"tools", json::object{}}};
      result["serverInfo"] = json::object{{"name", "fake"}, {"version", "1"}};
    } else if (m->method == "tools/list") {
      result["tools"] = json::array{
          json::object{{"name", "t"}, {"inputSchema", json::object{{"type", "object"}}}}};
    } else if (m->method == "tools/call") {
      if (config_.call_never_enough || !HasScope(issued_scope, config_.call_scope)) {
        return Challenge(403, "insufficient_scope",
                         config_.call_never_enough ? "admin" : config_.call_scope);
      }
      result["content"] = json::array{json::object{{"type", "text"}, {"text", "ok"}}};
    } else {
      return net::Response::Json(
          200, SerializeError(m->id, RpcError(kMethodNotFound, "Method not found")));
    }
    return net::Response::Json(200, SerializeResult(m->id, result));
  }

  Config config_;
  std::unique_ptr<net::HttpServer> server_;
  std::string base_;
  std::string code_challenge_;
  std::string granted_scope_;
};

struct Harness {
  TempDir dir{"deepbox-oauth"};
  std::shared_ptr<FileOAuthStore> store =
      std::make_shared<FileOAuthStore>(dir.Path("mcp-oauth.json"));
  std::shared_ptr<testing::RedirectFollowingUserAgent> agent =
      std::make_shared<testing::RedirectFollowingUserAgent>();

  // A machine-to-machine client: the client credentials grant, no user.
  OAuthOptions MachineOptions(std::string client_id, std::string secret, std::string key_pem = "") {
    OAuthOptions o;
    o.store = store;
    o.client_credentials = true;
    o.client_id = std::move(client_id);
    o.client_secret = std::move(secret);
    o.private_key_pem = std::move(key_pem);
    return o;
  }
  ClientOptions Machine(std::string client_id, std::string secret, std::string key_pem = "") {
    ClientOptions c;
    c.oauth = MakeOAuthSessionFactory(
        MachineOptions(std::move(client_id), std::move(secret), std::move(key_pem)));
    return c;
  }

  ClientOptions Options(bool interactive = true, std::string client_id = "",
                        std::string secret = "") {
    OAuthOptions o;
    o.store = store;
    if (interactive) o.user_agent = agent;
    o.client_id = std::move(client_id);
    o.client_secret = std::move(secret);
    ClientOptions c;
    c.oauth = MakeOAuthSessionFactory(std::move(o));
    return c;
  }
};

TEST(OAuthFlowTest, AuthorizesStepsUpAndKeepsTheTokenOnTheHost) {
  FakeAuthorizedServer::Config config;
  config.challenge_scope = "read";
  config.call_scope = "read write";
  FakeAuthorizedServer server(config);
  Harness h;
  auto client = McpClient::ConnectHttp(server.url(), {}, h.Options());
  ASSERT_TRUE(client) << client.error().message;
  EXPECT_EQ((*client)->protocol_version(), "2025-11-25");
  auto call = (*client)->CallTool("t", {});
  ASSERT_TRUE(call) << call.error().message;
  EXPECT_EQ(call->text, "ok");
  std::lock_guard<std::mutex> lock(server.mu);
  ASSERT_EQ(server.authorize_queries.size(), 2u);
  const std::string first = server.authorize_queries[0];
  EXPECT_NE(first.find("code_challenge_method=S256"), std::string::npos) << first;
  EXPECT_TRUE(first.ends_with("&scope=read")) << first;
  EXPECT_NE(first.find("resource=" + net::PercentEncode(server.url())), std::string::npos);
  // Step-up: the union of what it had and what the 403 asked for.
  EXPECT_NE(server.authorize_queries[1].find("scope=read%20write"), std::string::npos)
      << server.authorize_queries[1];
  EXPECT_EQ(server.registrations, 1);  // the registration is reused
  // A public client (the server offers "none"): client_id in the form.
  EXPECT_NE(server.token_forms[0].find("client_id=client-1"), std::string::npos);
  EXPECT_EQ(server.token_basic_auth[0], "");
  // On the host, private, never elsewhere.
  auto stored = h.store->Load(server.url());
  ASSERT_TRUE(stored && *stored);
  EXPECT_EQ((*stored)->access_token, server.issued);
  struct stat st {};
  ASSERT_EQ(::stat(h.store->path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST(OAuthFlowTest, StoredTokensNeedNoUserAndRefreshWhenRejected) {
  FakeAuthorizedServer server({});
  Harness h;
  {
    auto client = McpClient::ConnectHttp(server.url(), {}, h.Options());
    ASSERT_TRUE(client) << client.error().message;
  }
  EXPECT_EQ(h.agent->authorizations, 1);
  // A later, non-interactive run (deepbox run) uses the stored token.
  {
    auto client = McpClient::ConnectHttp(server.url(), {}, h.Options(false));
    ASSERT_TRUE(client) << client.error().message;
  }
  // The server forgets the token: the refresh token gets a new one.
  {
    std::lock_guard<std::mutex> lock(server.mu);
    server.issued = "revoked";
  }
  auto client = McpClient::ConnectHttp(server.url(), {}, h.Options(false));
  ASSERT_TRUE(client) << client.error().message;
  std::lock_guard<std::mutex> lock(server.mu);
  EXPECT_NE(server.token_forms.back().find("grant_type=refresh_token"), std::string::npos);
  EXPECT_EQ(h.agent->authorizations, 1);
  EXPECT_EQ((*h.store->Load(server.url()))->access_token, server.issued);
}

TEST(OAuthFlowTest, WithoutAUserTheErrorSaysHowToLogIn) {
  FakeAuthorizedServer server({});
  Harness h;
  auto client = McpClient::ConnectHttp(server.url(), {}, h.Options(false));
  ASSERT_FALSE(client);
  EXPECT_EQ(client.error().code, ErrorCode::kUnauthenticated);
  EXPECT_NE(client.error().message.find("deepbox mcp login"), std::string::npos)
      << client.error().message;
}

TEST(OAuthFlowTest, ScopesFromMetadataAndSecretMethods) {
  FakeAuthorizedServer::Config config;
  config.scopes_supported = {"a", "b"};
  config.token_auth_methods = {"client_secret_basic"};
  config.registration_secret = "s:cret";
  config.registration_auth_method = "client_secret_basic";
  FakeAuthorizedServer server(config);
  Harness h;
  auto client = McpClient::ConnectHttp(server.url(), {}, h.Options());
  ASSERT_TRUE(client) << client.error().message;
  std::lock_guard<std::mutex> lock(server.mu);
  EXPECT_NE(server.authorize_queries[0].find("scope=a%20b"), std::string::npos);
  // RFC 6749 2.3.1: form-encoded, then base64.
  EXPECT_EQ(server.token_basic_auth[0], "client-1:s%3Acret");
  EXPECT_EQ(server.token_forms[0].find("client_secret"), std::string::npos);
}

TEST(OAuthFlowTest, PreRegisteredClientWithSecretPost) {
  FakeAuthorizedServer::Config config;
  config.token_auth_methods = {"client_secret_post"};
  FakeAuthorizedServer server(config);
  Harness h;
  auto client = McpClient::ConnectHttp(server.url(), {}, h.Options(true, "pre", "sec"));
  ASSERT_TRUE(client) << client.error().message;
  std::lock_guard<std::mutex> lock(server.mu);
  EXPECT_EQ(server.registrations, 0);
  EXPECT_EQ(server.authorize_queries[0].find("scope="), std::string::npos);  // none known
  EXPECT_NE(server.token_forms[0].find("client_id=pre"), std::string::npos);
  EXPECT_NE(server.token_forms[0].find("client_secret=sec"), std::string::npos);
}

TEST(OAuthFlowTest, GivesUpAfterTheRetryLimit) {
  FakeAuthorizedServer::Config config;
  config.call_never_enough = true;
  FakeAuthorizedServer server(config);
  Harness h;
  auto client = McpClient::ConnectHttp(server.url(), {}, h.Options());
  ASSERT_TRUE(client) << client.error().message;
  auto call = (*client)->CallTool("t", {});
  ASSERT_FALSE(call);
  EXPECT_EQ(call.error().code, ErrorCode::kPermissionDenied);
  EXPECT_EQ(h.agent->authorizations, 1 + 3);  // connect's, then the call's three
}

TEST(OAuthFlowTest, RefusesMetadataForAnotherResource) {
  FakeAuthorizedServer::Config config;
  config.prm_resource = "https://evil.example.com/mcp";
  FakeAuthorizedServer server(config);
  Harness h;
  auto client = McpClient::ConnectHttp(server.url(), {}, h.Options());
  ASSERT_FALSE(client);
  EXPECT_NE(client.error().message.find("evil.example.com"), std::string::npos);
  EXPECT_EQ(h.agent->authorizations, 0);
}

// ------------------------------------------------------------ client credentials

std::string FormFieldOf(const std::string& body, const std::string& key) {
  for (const auto& [k, v] : net::ParseQuery(body)) {
    if (k == key) return v;
  }
  return "";
}

// The claims of a compact JWS (the signature is jwt_assertion_test's).
json::object JwtClaimsOf(const std::string& jwt) {
  auto parts = Split(jwt, '.');
  if (parts.size() != 3) return {};
  std::string b(parts[1]);
  for (char& c : b) c = c == '-' ? '+' : (c == '_' ? '/' : c);
  while (b.size() % 4 != 0) b += '=';
  return ParseJsonObject(Base64Decode(b).value_or("")).value_or(json::object{});
}

TEST(OAuthClientCredentialsTest, ASecretGetsATokenWithoutAUserAndAgainWhenRejected) {
  FakeAuthorizedServer::Config config;
  config.token_auth_methods = {"client_secret_basic"};
  config.challenge_scope = "tools";
  FakeAuthorizedServer server(config);
  Harness h;
  {
    auto client = McpClient::ConnectHttp(server.url(), {}, h.Machine("m2m", "s3cret"));
    ASSERT_TRUE(client) << client.error().message;
  }
  {
    std::lock_guard<std::mutex> lock(server.mu);
    ASSERT_EQ(server.token_forms.size(), 1u);
    EXPECT_EQ(FormFieldOf(server.token_forms[0], "grant_type"), "client_credentials");
    EXPECT_EQ(FormFieldOf(server.token_forms[0], "resource"), server.url());
    EXPECT_EQ(FormFieldOf(server.token_forms[0], "scope"), "tools");
    EXPECT_EQ(server.token_basic_auth[0], "m2m:s3cret");
    EXPECT_EQ(server.registrations, 0);
    EXPECT_TRUE(server.authorize_queries.empty());
    // The token expires and cannot be refreshed.
    server.issued = "expired";
    server.refresh = "forgotten";
  }
  auto stored = h.store->Load(server.url());
  ASSERT_TRUE(stored && *stored);
  EXPECT_EQ((*stored)->grant_type, "client_credentials");
  EXPECT_EQ((*stored)->client_secret, "s3cret");
  // A later run (deepbox run: no user agent, no credentials given) gets a
  // new token with the kept client.
  auto client = McpClient::ConnectHttp(server.url(), {}, h.Options(false));
  ASSERT_TRUE(client) << client.error().message;
  std::lock_guard<std::mutex> lock(server.mu);
  EXPECT_EQ(FormFieldOf(server.token_forms.back(), "grant_type"), "client_credentials");
  EXPECT_EQ(server.token_basic_auth.back(), "m2m:s3cret");
  EXPECT_EQ(h.agent->authorizations, 0);
}

TEST(OAuthClientCredentialsTest, AUsersLoginAfterwardsIsAUsersAuthorization) {
  FakeAuthorizedServer::Config config;
  config.token_auth_methods = {"none", "client_secret_basic"};
  FakeAuthorizedServer server(config);
  Harness h;
  OAuthSession machine(server.url(), h.MachineOptions("m2m", "s3cret"));
  ASSERT_TRUE(machine.Login());
  OAuthOptions user;
  user.store = h.store;
  user.user_agent = h.agent;
  OAuthSession session(server.url(), std::move(user));
  auto st = session.Login();
  ASSERT_TRUE(st) << st.error().message;
  EXPECT_EQ(h.agent->authorizations, 1);
  EXPECT_EQ((*h.store->Load(server.url()))->grant_type, "");
  std::lock_guard<std::mutex> lock(server.mu);
  EXPECT_EQ(FormFieldOf(server.token_forms.back(), "grant_type"), "authorization_code");
}

TEST(OAuthClientCredentialsTest, SecretPostWhenTheServerTakesOnlyThat) {
  FakeAuthorizedServer::Config config;
  config.token_auth_methods = {"client_secret_post"};
  FakeAuthorizedServer server(config);
  Harness h;
  auto client = McpClient::ConnectHttp(server.url(), {}, h.Machine("m2m", "s3cret"));
  ASSERT_TRUE(client) << client.error().message;
  std::lock_guard<std::mutex> lock(server.mu);
  EXPECT_EQ(FormFieldOf(server.token_forms[0], "client_id"), "m2m");
  EXPECT_EQ(FormFieldOf(server.token_forms[0], "client_secret"), "s3cret");
  EXPECT_EQ(server.token_basic_auth[0], "");
}

TEST(OAuthClientCredentialsTest, PrivateKeyJwtSendsASignedAssertionForTheIssuer) {
  FakeAuthorizedServer::Config config;
  config.token_auth_methods = {"private_key_jwt"};
  config.signing_algs = {"ES256"};
  FakeAuthorizedServer server(config);
  Harness h;
  const std::string key = testing::EcPrivateKeyPem("P-256");
  auto client = McpClient::ConnectHttp(server.url(), {}, h.Machine("m2m", "", key));
  ASSERT_TRUE(client) << client.error().message;
  std::lock_guard<std::mutex> lock(server.mu);
  const std::string& form = server.token_forms[0];
  EXPECT_EQ(FormFieldOf(form, "client_assertion_type"),
            "urn:ietf:params:oauth:client-assertion-type:jwt-bearer");
  EXPECT_EQ(FormFieldOf(form, "client_secret"), "");
  json::object claims = JwtClaimsOf(FormFieldOf(form, "client_assertion"));
  EXPECT_EQ(GetOptString(claims, "iss").value_or(""), "m2m");
  EXPECT_EQ(GetOptString(claims, "sub").value_or(""), "m2m");
  const std::string base = server.url().substr(0, server.url().size() - 4);
  EXPECT_EQ(GetOptString(claims, "aud").value_or(""), base + "/as");
  // The key stays on the host, in the private store.
  EXPECT_EQ((*h.store->Load(server.url()))->private_key_pem, key);
}

TEST(OAuthClientCredentialsTest, RefusesWhatTheServerDoesNotTake) {
  struct Case {
    std::vector<std::string> methods, algs;
    bool with_key;
    std::string expect;
  };
  for (const Case& c : std::vector<Case>{
           {{"private_key_jwt"}, {"RS256"}, true, "verifies RS256 assertions, not ES256"},
           {{"client_secret_basic"}, {}, true, "does not take private_key_jwt"},
           {{"private_key_jwt"}, {}, false, "neither client_secret_basic nor"},
       }) {
    FakeAuthorizedServer::Config config;
    config.token_auth_methods = c.methods;
    config.signing_algs = c.algs;
    FakeAuthorizedServer server(config);
    Harness h;
    OAuthSession session(server.url(),
                         h.MachineOptions("m2m", c.with_key ? "" : "s",
                                          c.with_key ? testing::EcPrivateKeyPem("P-256") : ""));
    auto st = session.Login();
    ASSERT_FALSE(st) << c.expect;
    EXPECT_NE(st.error().message.find(c.expect), std::string::npos) << st.error().message;
    std::lock_guard<std::mutex> lock(server.mu);
    EXPECT_EQ(server.token_requests, 0);
  }
}

TEST(OAuthClientCredentialsTest, HostileTokenAnswersAreClearErrors) {
  auto json_answer = [](int status, const std::string& body) {
    return net::Response::Json(status, body);
  };
  net::Response redirect;
  redirect.status = 307;
  redirect.headers.Set("Location", "http://127.0.0.2:9/token");
  struct Case {
    net::Response answer;
    std::string expect;
  };
  for (const Case& c : std::vector<Case>{
           {json_answer(200, "{not json"), "HTTP 200: {not json"},
           {json_answer(200, R"({"access_token":"t","token_type":"mac"})"),
            "unsupported token_type 'mac'"},
           {json_answer(200, R"({"token_type":"Bearer"})"), "no access_token"},
           {json_answer(401, R"({"error":"invalid_client","error_description":"who?"})"),
            "HTTP 401: invalid_client: who?"},
           {redirect, "HTTP 307"},
       }) {
    FakeAuthorizedServer::Config config;
    config.token_auth_methods = {"client_secret_basic"};
    config.client_credentials_answer = c.answer;
    FakeAuthorizedServer server(config);
    Harness h;
    OAuthSession session(server.url(), h.MachineOptions("m2m", "s"));
    auto st = session.Login();
    ASSERT_FALSE(st) << c.expect;
    EXPECT_EQ(st.error().code, ErrorCode::kUnauthenticated);
    EXPECT_NE(st.error().message.find(c.expect), std::string::npos) << st.error().message;
    EXPECT_FALSE(*h.store->Load(server.url()));  // nothing half-kept
  }
}

// ------------------------------------------------------------ 2025-03-26 servers

TEST(OAuthLegacyTest, MetadataAtTheServersOriginWithoutResourceMetadata) {
  FakeAuthorizedServer::Config config;
  config.legacy = true;
  FakeAuthorizedServer server(config);
  Harness h;
  auto client = McpClient::ConnectHttp(server.url(), {}, h.Options());
  ASSERT_TRUE(client) << client.error().message;
  std::lock_guard<std::mutex> lock(server.mu);
  EXPECT_EQ(server.metadata_requests,
            (std::vector<std::string>{"/.well-known/oauth-protected-resource/mcp",
                                      "/.well-known/oauth-protected-resource",
                                      "/.well-known/oauth-authorization-server"}));
  ASSERT_EQ(server.authorize_queries.size(), 1u);
  EXPECT_TRUE(server.authorize_queries[0].starts_with("/as/authorize?"));
  EXPECT_NE(server.authorize_queries[0].find("resource=" + net::PercentEncode(server.url())),
            std::string::npos);
}

TEST(OAuthLegacyTest, DefaultEndpointsWhenThereIsNoMetadataAtAll) {
  FakeAuthorizedServer::Config config;
  config.legacy = true;
  config.legacy_metadata = false;
  FakeAuthorizedServer server(config);
  Harness h;
  auto client = McpClient::ConnectHttp(server.url(), {}, h.Options());
  ASSERT_TRUE(client) << client.error().message;
  const std::string base = server.url().substr(0, server.url().size() - 4);
  EXPECT_TRUE(h.agent->last_authorization_url.starts_with(base + "/authorize?"))
      << h.agent->last_authorization_url;
  std::lock_guard<std::mutex> lock(server.mu);
  EXPECT_EQ(server.registrations, 1);   // at /register
  EXPECT_EQ(server.token_requests, 1);  // at /token
}

TEST(OAuthLegacyTest, MetadataIsNotReadThroughARedirect) {
  FakeAuthorizedServer::Config config;
  config.legacy = true;
  config.legacy_metadata_redirect = "http://127.0.0.2:9/.well-known/oauth-authorization-server";
  FakeAuthorizedServer server(config);
  Harness h;
  auto client = McpClient::ConnectHttp(server.url(), {}, h.Options());
  ASSERT_FALSE(client);
  EXPECT_NE(client.error().message.find("a redirect to http://127.0.0.2:9/"), std::string::npos)
      << client.error().message;
  EXPECT_NE(client.error().message.find("not followed"), std::string::npos);
  EXPECT_EQ(h.agent->authorizations, 0);  // no default endpoints guessed either
}

}  // namespace
}  // namespace deepbox::mcp
