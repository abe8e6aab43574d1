#include "mcp/oauth.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdlib>
#include <ctime>

#include "common/base64.h"
#include "common/io.h"
#include "common/make_dirs.h"
#include "common/random.h"
#include "common/strings.h"
#include "common/unique_fd.h"
#include "common/utf8.h"
#include "mcp/jwt_assertion.h"
#include "net/http_client.h"
#include "net/http_server.h"
#include "net/token_digest.h"
#include "net/url.h"

namespace deepbox::mcp {
namespace {

std::string UrlOrigin(const net::Url& u) {
  std::string host = u.host.find(':') != std::string::npos ? "[" + u.host + "]" : u.host;
  const bool default_port =
      (u.scheme == "http" && u.port == 80) || (u.scheme == "https" && u.port == 443);
  return default_port ? fmt::format("{}://{}", u.scheme, host)
                      : fmt::format("{}://{}:{}", u.scheme, host, u.port);
}

// The path without a trailing slash ("" for the root).
std::string TrimmedPath(const net::Url& u) {
  std::string p = u.path;
  while (!p.empty() && p.back() == '/') p.pop_back();
  return p;
}

struct Fetched {
  int status = 0;
  net::Headers headers;
  std::string body;
};

Result<Fetched> FetchUrl(const std::string& method, const std::string& url,
                         const net::Headers& headers, std::string body,
                         std::chrono::milliseconds timeout) {
  auto u = net::ParseUrl(url);
  if (!u || (u->scheme != "http" && u->scheme != "https")) {
    return MakeError(ErrorCode::kInvalidArgument, fmt::format("'{}' is not an http(s) URL", url));
  }
  net::ClientOptions co;
  co.max_response_bytes = 1u << 20;  // metadata and tokens are small
  auto http = net::HttpClient::Create(UrlOrigin(*u), co);
  if (!http) return tl::unexpected(http.error());
  net::ClientRequest req;
  req.method = method;
  req.target = u->path.empty() ? "/" : u->path;
  if (!u->query.empty()) req.target += "?" + u->query;
  req.headers = headers;
  req.body = std::move(body);
  req.timeout = timeout;
  auto res = (*http)->Send(req);
  if (!res) {
    return MakeError(res.error().code, fmt::format("{} {}: {}", method, url, res.error().message));
  }
  return Fetched{res->status, res->headers, std::move(res->body)};
}

Result<json::object> FetchJson(const std::string& url, std::chrono::milliseconds timeout) {
  net::Headers h;
  h.Set("Accept", "application/json");
  auto r = FetchUrl("GET", url, h, "", timeout);
  if (!r) return tl::unexpected(r.error());
  if (r->status == 404) {
    return MakeError(ErrorCode::kNotFound, fmt::format("GET {}: HTTP 404", url));
  }
  if (r->status >= 300 && r->status <= 399) {
    // Metadata is read where it is published, never through a redirect (it
    // could lead to another origin's).
    return MakeError(ErrorCode::kUnavailable,
                     fmt::format("GET {}: HTTP {}, a redirect to {} (not followed)", url, r->status,
                                 r->headers.Get("Location").value_or("nowhere")));
  }
  if (r->status != 200) {
    return MakeError(ErrorCode::kUnavailable, fmt::format("GET {}: HTTP {}", url, r->status));
  }
  auto o = ParseJsonObject(r->body);
  if (!o) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("GET {}: not a JSON object: {}", url, o.error().message));
  }
  return o;
}

std::vector<std::string> StringList(const json::object& o, std::string_view key) {
  std::vector<std::string> out;
  if (const json::value* v = o.if_contains(key); v && v->is_array()) {
    for (const auto& e : v->get_array()) {
      if (e.is_string()) out.emplace_back(e.get_string());
    }
  }
  return out;
}

bool Contains(const std::vector<std::string>& list, std::string_view item) {
  for (const auto& s : list) {
    if (s == item) return true;
  }
  return false;
}

std::string FormEncode(const std::vector<std::pair<std::string, std::string>>& fields) {
  std::string out;
  for (const auto& [k, v] : fields) {
    if (!out.empty()) out += '&';
    out += net::PercentEncode(k) + "=" + net::PercentEncode(v);
  }
  return out;
}

std::string QueryParam(std::string_view url, std::string_view name) {
  auto q = url.find('?');
  if (q == std::string_view::npos) return "";
  std::string_view query = url.substr(q + 1);
  if (auto hash = query.find('#'); hash != std::string_view::npos) query = query.substr(0, hash);
  for (const auto& [k, v] : net::ParseQuery(query)) {
    if (k == name) return v;
  }
  return "";
}

json::object CredentialsToJson(const OAuthCredentials& c) {
  json::object o;
  o["issuer"] = c.issuer;
  o["client_id"] = c.client_id;
  o["client_secret"] = c.client_secret;
  o["token_endpoint_auth_method"] = c.token_endpoint_auth_method;
  if (!c.grant_type.empty()) o["grant_type"] = c.grant_type;
  if (!c.private_key_pem.empty()) o["private_key_pem"] = c.private_key_pem;
  if (!c.signing_alg.empty()) o["signing_alg"] = c.signing_alg;
  o["redirect_uri"] = c.redirect_uri;
  o["token_endpoint"] = c.token_endpoint;
  o["resource"] = c.resource;
  o["access_token"] = c.access_token;
  o["refresh_token"] = c.refresh_token;
  o["scope"] = c.scope;
  o["expires_at"] = c.expires_at;
  return o;
}

OAuthCredentials CredentialsFromJson(const json::object& o) {
  OAuthCredentials c;
  auto s = [&](const char* k) { return GetOptString(o, k).value_or(""); };
  c.issuer = s("issuer");
  c.client_id = s("client_id");
  c.client_secret = s("client_secret");
  c.token_endpoint_auth_method = s("token_endpoint_auth_method");
  c.grant_type = s("grant_type");
  c.private_key_pem = s("private_key_pem");
  c.signing_alg = s("signing_alg");
  c.redirect_uri = s("redirect_uri");
  c.token_endpoint = s("token_endpoint");
  c.resource = s("resource");
  c.access_token = s("access_token");
  c.refresh_token = s("refresh_token");
  c.scope = s("scope");
  if (const json::value* v = o.if_contains("expires_at"))
    c.expires_at = JsonToInt64(*v).value_or(0);
  return c;
}

// The token endpoint's answer into `c`.
Status ApplyTokenResponse(const Fetched& r, const std::string& what, OAuthCredentials& c) {
  auto o = ParseJsonObject(r.body);
  if (r.status != 200 || !o) {
    std::string why = o ? GetOptString(*o, "error").value_or("") : "";
    if (o) {
      if (auto d = GetOptString(*o, "error_description")) why += ": " + *d;
    }
    if (why.empty()) why = SanitizeUtf8(r.body.substr(0, 200));
    return MakeError(
        ErrorCode::kUnauthenticated,
        fmt::format("{}: the token endpoint answered HTTP {}: {}", what, r.status, why));
  }
  auto token = GetOptString(*o, "access_token");
  if (!token || token->empty()) {
    return MakeError(ErrorCode::kUnauthenticated,
                     what + ": the token endpoint's answer has no access_token");
  }
  auto type = GetOptString(*o, "token_type").value_or("Bearer");
  if (AsciiLower(type) != "bearer") {
    return MakeError(ErrorCode::kUnauthenticated,
                     fmt::format("{}: unsupported token_type '{}'", what, type));
  }
  c.access_token = *token;
  if (auto rt = GetOptString(*o, "refresh_token")) c.refresh_token = *rt;
  if (auto sc = GetOptString(*o, "scope")) c.scope = *sc;
  c.expires_at = 0;
  if (const json::value* e = o->if_contains("expires_in")) {
    if (auto secs = JsonToInt64(*e); secs && *secs > 0) c.expires_at = std::time(nullptr) + *secs;
  }
  return {};
}

// Adds the client's authentication to a token request.
Status AddClientAuth(const OAuthCredentials& c, net::Headers& headers,
                     std::vector<std::pair<std::string, std::string>>& form) {
  if (c.token_endpoint_auth_method == "client_secret_basic" && !c.client_secret.empty()) {
    // RFC 6749 2.3.1: each part form-encoded, then base64.
    headers.Set("Authorization", "Basic " + Base64Encode(net::PercentEncode(c.client_id) + ":" +
                                                         net::PercentEncode(c.client_secret)));
    return {};
  }
  form.emplace_back("client_id", c.client_id);
  if (c.token_endpoint_auth_method == "client_secret_post" && !c.client_secret.empty()) {
    form.emplace_back("client_secret", c.client_secret);
  }
  if (c.token_endpoint_auth_method == "private_key_jwt") {
    // RFC 7523 §2.2; the audience is the authorization server's issuer.
    JwtAssertionClaims claims;
    claims.issuer = c.client_id;
    claims.subject = c.client_id;
    claims.audience = c.issuer;
    auto jwt = SignJwtAssertion(c.private_key_pem, c.signing_alg, claims, std::time(nullptr));
    if (!jwt) {
      return MakeError(jwt.error().code,
                       "signing the client's JWT assertion: " + jwt.error().message);
    }
    form.emplace_back("client_assertion_type",
                      "urn:ietf:params:oauth:client-assertion-type:jwt-bearer");
    form.emplace_back("client_assertion", *jwt);
  }
  return {};
}

// Which method to use with a secret (or none) against the server's list (RFC
// 8414: client_secret_basic when the list is absent).
std::string ChooseAuthMethod(const std::vector<std::string>& supported, bool has_secret) {
  if (!has_secret) return "none";
  if (supported.empty() || Contains(supported, "client_secret_basic")) {
    return "client_secret_basic";
  }
  if (Contains(supported, "client_secret_post")) return "client_secret_post";
  return "none";
}

}  // namespace

// ---------------------------------------------------------------- challenge

std::optional<BearerChallenge> ParseBearerChallenge(std::string_view header) {
  std::string_view h = Trim(header);
  if (h.size() < 6 || AsciiLower(h.substr(0, 6)) != "bearer") return std::nullopt;
  if (h.size() > 6 && h[6] != ' ' && h[6] != '\t') return std::nullopt;
  BearerChallenge c;
  size_t i = 6;
  while (i < h.size()) {
    while (i < h.size() && (h[i] == ' ' || h[i] == '\t' || h[i] == ',')) ++i;
    size_t name_start = i;
    while (i < h.size() && h[i] != '=' && h[i] != ' ' && h[i] != ',') ++i;
    std::string name = AsciiLower(h.substr(name_start, i - name_start));
    if (i >= h.size() || h[i] != '=') {
      // Another scheme's start (a second challenge): stop.
      if (!name.empty()) break;
      continue;
    }
    ++i;  // '='
    std::string value;
    if (i < h.size() && h[i] == '"') {
      ++i;
      while (i < h.size() && h[i] != '"') {
        if (h[i] == '\\' && i + 1 < h.size()) ++i;
        value.push_back(h[i++]);
      }
      ++i;  // closing quote
    } else {
      while (i < h.size() && h[i] != ',' && h[i] != ' ') value.push_back(h[i++]);
    }
    if (name == "error") {
      c.error = value;
    } else if (name == "error_description") {
      c.error_description = value;
    } else if (name == "scope") {
      c.scope = value;
    } else if (name == "resource_metadata") {
      c.resource_metadata = value;
    }
  }
  return c;
}

// ---------------------------------------------------------------- discovery

std::vector<std::string> ProtectedResourceMetadataUrls(const std::string& server_url) {
  std::vector<std::string> out;
  auto u = net::ParseUrl(server_url);
  if (!u) return out;
  const std::string origin = UrlOrigin(*u);
  const std::string path = TrimmedPath(*u);
  if (!path.empty()) out.push_back(origin + "/.well-known/oauth-protected-resource" + path);
  out.push_back(origin + "/.well-known/oauth-protected-resource");
  return out;
}

std::vector<std::string> AuthorizationServerMetadataUrls(const std::string& issuer) {
  std::vector<std::string> out;
  auto u = net::ParseUrl(issuer);
  if (!u) return out;
  const std::string origin = UrlOrigin(*u);
  const std::string path = TrimmedPath(*u);
  if (path.empty()) {
    out.push_back(origin + "/.well-known/oauth-authorization-server");
    out.push_back(origin + "/.well-known/openid-configuration");
  } else {
    out.push_back(origin + "/.well-known/oauth-authorization-server" + path);
    out.push_back(origin + "/.well-known/openid-configuration" + path);
    out.push_back(origin + path + "/.well-known/openid-configuration");
  }
  return out;
}

bool ResourceMatches(const std::string& resource, const std::string& server_url) {
  auto r = net::ParseUrl(resource);
  auto s = net::ParseUrl(server_url);
  if (!r || !s) return false;
  if (AsciiLower(r->scheme) != AsciiLower(s->scheme) ||
      AsciiLower(r->host) != AsciiLower(s->host) || r->port != s->port) {
    return false;
  }
  const std::string rp = TrimmedPath(*r);
  const std::string sp = TrimmedPath(*s);
  if (rp.empty()) return true;
  return sp == rp ||
         (sp.size() > rp.size() && sp.compare(0, rp.size(), rp) == 0 && sp[rp.size()] == '/');
}

std::string PkceChallenge(std::string_view verifier) {
  return net::Base64UrlEncode(net::Sha256(verifier));
}

std::string UnionScopes(std::string_view a, std::string_view b) {
  std::vector<std::string> out;
  for (std::string_view list : {a, b}) {
    for (std::string_view s : Split(list, ' ')) {
      if (!s.empty() && !Contains(out, s)) out.emplace_back(s);
    }
  }
  return Join(out, " ");
}

// ---------------------------------------------------------------- store

Result<std::string> DefaultOAuthStorePath(const EnvGetter& env) {
  if (std::string f = env("DEEPBOX_MCP_OAUTH_FILE"); !f.empty() && f.front() == '/') return f;
  return UserStateDir(env, "mcp-oauth.json", "DEEPBOX_MCP_OAUTH_FILE");
}

Result<std::string> DefaultOAuthStorePath() {
  return DefaultOAuthStorePath([](const char* name) {
    const char* v = std::getenv(name);
    return v != nullptr ? std::string(v) : std::string();
  });
}

Result<json::object> FileOAuthStore::ReadAll() {
  UniqueFd fd(::open(path_.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) {
    if (errno == ENOENT) return json::object{};
    return MakeSyscallError("open", errno, path_);
  }
  auto text = deepbox::ReadAll(fd.get(), path_, 16u << 20);
  if (!text) return tl::unexpected(text.error());
  auto o = ParseJsonObject(*text);
  if (!o) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("{} is not a JSON object ({}); move it away to start afresh",
                                 path_, o.error().message));
  }
  return o;
}

Status FileOAuthStore::WriteAll(const json::object& all) {
  const auto slash = path_.rfind('/');
  if (slash != std::string::npos && slash > 0) {
    if (auto st = MakeDirs(path_.substr(0, slash), 0700); !st) return st;
  }
  const std::string tmp = path_ + ".tmp." + RandomHex(8);
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!fd.valid()) return MakeSyscallError("open", errno, tmp);
  Status st = deepbox::WriteAll(fd.get(), ToJson(all) + "\n", tmp);
  if (st && ::fsync(fd.get()) != 0) st = MakeSyscallError("fsync", errno, tmp);
  fd.reset();
  if (st && ::rename(tmp.c_str(), path_.c_str()) != 0) st = MakeSyscallError("rename", errno, tmp);
  if (!st) ::unlink(tmp.c_str());
  return st;
}

Result<std::optional<OAuthCredentials>> FileOAuthStore::Load(const std::string& server_url) {
  std::lock_guard<std::mutex> lock(mu_);
  auto all = ReadAll();
  if (!all) return tl::unexpected(all.error());
  const json::value* servers = all->if_contains("servers");
  if (!servers || !servers->is_object()) return std::optional<OAuthCredentials>();
  const json::value* c = servers->get_object().if_contains(server_url);
  if (!c || !c->is_object()) return std::optional<OAuthCredentials>();
  return std::optional<OAuthCredentials>(CredentialsFromJson(c->get_object()));
}

Status FileOAuthStore::Save(const std::string& server_url, const OAuthCredentials& credentials) {
  std::lock_guard<std::mutex> lock(mu_);
  auto all = ReadAll();
  if (!all) return tl::unexpected(all.error());
  json::value& servers = (*all)["servers"];
  if (!servers.is_object()) servers = json::object{};
  servers.get_object()[server_url] = CredentialsToJson(credentials);
  return WriteAll(*all);
}

Status FileOAuthStore::Remove(const std::string& server_url) {
  std::lock_guard<std::mutex> lock(mu_);
  auto all = ReadAll();
  if (!all) return tl::unexpected(all.error());
  json::value* servers = all->if_contains("servers");
  if (!servers || !servers->is_object() || !servers->get_object().erase(server_url)) return {};
  return WriteAll(*all);
}

// ---------------------------------------------------------------- user agent

namespace {

class LoopbackUserAgent : public AuthorizationUserAgent {
 public:
  LoopbackUserAgent(std::function<void(const std::string&)> show_url,
                    std::chrono::milliseconds wait)
      : show_url_(std::move(show_url)), wait_(wait) {}
  ~LoopbackUserAgent() override {
    if (server_) server_->Stop(std::chrono::milliseconds(500));
  }

  Status Listen() {
    auto endpoint = net::Endpoint::Parse("127.0.0.1:0");
    if (!endpoint) return tl::unexpected(endpoint.error());
    auto server = net::HttpServer::Create(
        *endpoint, [this](net::Request& req, net::ResponseWriter& w) { OnRequest(req, w); });
    if (!server) return tl::unexpected(server.error());
    server_ = std::move(*server);
    server_->Start();
    return {};
  }

  Result<std::string> RedirectUri() override {
    return fmt::format("http://127.0.0.1:{}/callback", server_->port());
  }

  Result<std::string> Authorize(const std::string& authorization_url) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      callback_.reset();
    }
    show_url_(authorization_url);
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, wait_, [&] { return callback_.has_value(); })) {
      return MakeError(
          ErrorCode::kTimeout,
          fmt::format("no authorization arrived within {} s",
                      std::chrono::duration_cast<std::chrono::seconds>(wait_).count()));
    }
    return *callback_;
  }

 private:
  void OnRequest(net::Request& req, net::ResponseWriter& w) {
    if (req.method != "GET" || req.path != "/callback") {
      (void)w.Send(net::Response::Text(404, "not found\n"));
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      callback_ = fmt::format("http://127.0.0.1:{}{}", server_->port(), req.target);
    }
    cv_.notify_all();
    (void)w.Send(net::Response::Text(
        200, "deepbox received the authorization; you can close this window.\n"));
  }

  std::function<void(const std::string&)> show_url_;
  std::chrono::milliseconds wait_;
  std::unique_ptr<net::HttpServer> server_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<std::string> callback_;
};

}  // namespace

Result<std::unique_ptr<AuthorizationUserAgent>> MakeLoopbackUserAgent(
    std::function<void(const std::string&)> show_url, std::chrono::milliseconds wait) {
  auto agent = std::make_unique<LoopbackUserAgent>(std::move(show_url), wait);
  if (auto st = agent->Listen(); !st) return tl::unexpected(st.error());
  return std::unique_ptr<AuthorizationUserAgent>(std::move(agent));
}

// ---------------------------------------------------------------- session

OAuthSession::OAuthSession(std::string server_url, OAuthOptions options)
    : server_url_(std::move(server_url)), options_(std::move(options)) {}

Status OAuthSession::LoadStored() {
  if (loaded_) return {};
  loaded_ = true;
  if (!options_.store) return {};
  auto c = options_.store->Load(server_url_);
  if (!c) return tl::unexpected(c.error());
  credentials_ = std::move(*c);
  return {};
}

std::string OAuthSession::AuthorizationHeader() {
  std::lock_guard<std::mutex> lock(mu_);
  (void)LoadStored();  // an unreadable store means no token; the challenge says why
  if (!credentials_ || credentials_->access_token.empty()) return "";
  return "Bearer " + credentials_->access_token;
}

Status OAuthSession::HandleChallenge(int status, std::string_view www_authenticate,
                                     int& authorizations) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto st = LoadStored(); !st) return st;
  BearerChallenge challenge = ParseBearerChallenge(www_authenticate).value_or(BearerChallenge{});
  const bool insufficient_scope = status == 403 && challenge.error == "insufficient_scope";
  if (status == 403 && !insufficient_scope) {
    return MakeError(
        ErrorCode::kPermissionDenied,
        fmt::format(
            "the MCP server {} refused the request (HTTP 403{}{})", server_url_,
            challenge.error.empty() ? "" : ": ",
            challenge.error_description.empty() ? challenge.error : challenge.error_description));
  }
  // An expired or revoked token: a refresh costs the user nothing.
  if (!insufficient_scope && credentials_ && !credentials_->refresh_token.empty() &&
      authorizations == 0) {
    if (Refresh()) {
      ++authorizations;
      return {};
    }
  }
  if (authorizations >= options_.max_authorizations) {
    return MakeError(ErrorCode::kPermissionDenied,
                     fmt::format("the MCP server {} still refuses the request after {} "
                                 "authorizations (HTTP {}{}{})",
                                 server_url_, authorizations, status,
                                 challenge.error.empty() ? "" : ": ", challenge.error));
  }
  ++authorizations;
  if (insufficient_scope && credentials_) {
    challenge.scope = UnionScopes(credentials_->scope, challenge.scope);
  }
  return Authorize(challenge);
}

Status OAuthSession::Refresh() {
  OAuthCredentials& c = *credentials_;
  if (c.token_endpoint.empty()) return MakeError(ErrorCode::kUnavailable, "no token endpoint");
  std::vector<std::pair<std::string, std::string>> form = {{"grant_type", "refresh_token"},
                                                           {"refresh_token", c.refresh_token}};
  if (!c.resource.empty()) form.emplace_back("resource", c.resource);
  net::Headers h;
  h.Set("Content-Type", "application/x-www-form-urlencoded");
  h.Set("Accept", "application/json");
  if (auto st = AddClientAuth(c, h, form); !st) return st;
  auto r = FetchUrl("POST", c.token_endpoint, h, FormEncode(form), options_.http_timeout);
  if (!r) return tl::unexpected(r.error());
  OAuthCredentials next = c;
  if (auto st = ApplyTokenResponse(*r, "refresh", next); !st) return st;
  c = std::move(next);
  if (options_.store) return options_.store->Save(server_url_, c);
  return {};
}

Status OAuthSession::Authorize(const BearerChallenge& challenge) {
  const auto timeout = options_.http_timeout;
  auto fail = [&](const std::string& what) {
    return MakeError(ErrorCode::kUnauthenticated,
                     fmt::format("OAuth for the MCP server {}: {}", server_url_, what));
  };
  // 1. Protected resource metadata.
  std::optional<json::object> prm;
  std::vector<std::string> prm_urls;
  if (!challenge.resource_metadata.empty()) {
    prm_urls.push_back(challenge.resource_metadata);
  } else {
    prm_urls = ProtectedResourceMetadataUrls(server_url_);
  }
  std::string prm_errors;
  for (const auto& url : prm_urls) {
    auto m = FetchJson(url, timeout);
    if (m) {
      prm = std::move(*m);
      break;
    }
    prm_errors += (prm_errors.empty() ? "" : "; ") + m.error().message;
  }
  std::string resource = server_url_;
  std::string issuer;
  std::string scope = challenge.scope;
  if (prm) {
    if (auto r = GetOptString(*prm, "resource"); r && !r->empty()) {
      if (!ResourceMatches(*r, server_url_)) {
        return fail(fmt::format(
            "its protected resource metadata names the resource {}, not this server", *r));
      }
      resource = *r;
    }
    auto servers = StringList(*prm, "authorization_servers");
    if (servers.empty())
      return fail("its protected resource metadata names no authorization_servers");
    issuer = servers.front();
    if (scope.empty()) scope = Join(StringList(*prm, "scopes_supported"), " ");
  } else if (!challenge.resource_metadata.empty()) {
    return fail("no protected resource metadata: " + prm_errors);
  } else {
    // 2025-03-26 servers: the server's origin is the authorization server.
    auto u = net::ParseUrl(server_url_);
    if (!u) return fail("not a URL");
    issuer = UrlOrigin(*u);
  }
  if (auto pos = resource.find('#'); pos != std::string::npos) resource.resize(pos);

  // 2. Authorization server metadata.
  std::optional<json::object> as;
  std::string as_errors;
  bool every_url_404 = true;
  for (const auto& url : AuthorizationServerMetadataUrls(issuer)) {
    auto m = FetchJson(url, timeout);
    if (m) {
      as = std::move(*m);
      break;
    }
    every_url_404 = every_url_404 && m.error().code == ErrorCode::kNotFound;
    as_errors += (as_errors.empty() ? "" : "; ") + m.error().message;
  }
  std::string authorization_endpoint, token_endpoint, registration_endpoint;
  std::vector<std::string> auth_methods, signing_algs, pkce_methods;
  bool cimd_supported = false;
  if (as) {
    authorization_endpoint = GetOptString(*as, "authorization_endpoint").value_or("");
    token_endpoint = GetOptString(*as, "token_endpoint").value_or("");
    registration_endpoint = GetOptString(*as, "registration_endpoint").value_or("");
    auth_methods = StringList(*as, "token_endpoint_auth_methods_supported");
    if (const json::value* v = as->if_contains("client_id_metadata_document_supported")) {
      cimd_supported = v->is_bool() && v->get_bool();
    }
    signing_algs = StringList(*as, "token_endpoint_auth_signing_alg_values_supported");
    pkce_methods = StringList(*as, "code_challenge_methods_supported");
    if (scope.empty() && !prm) scope = Join(StringList(*as, "scopes_supported"), " ");
  } else if (!prm && every_url_404) {
    // 2025-03-26: no metadata at all means the default endpoints.
    authorization_endpoint = issuer + "/authorize";
    token_endpoint = issuer + "/token";
    registration_endpoint = issuer + "/register";
    pkce_methods = {"S256"};
  } else {
    return fail(fmt::format("no authorization server metadata for {}: {}", issuer, as_errors));
  }
  if (token_endpoint.empty()) {
    return fail(fmt::format("the metadata of {} has no token_endpoint", issuer));
  }
  // A kept machine client is used when nobody is there to authorize (a run);
  // `deepbox mcp login` without --client-credentials means a user's login.
  if (options_.client_credentials ||
      (credentials_ && credentials_->grant_type == "client_credentials" && !options_.user_agent)) {
    return ClientCredentialsGrant(issuer, token_endpoint, auth_methods, signing_algs, resource,
                                  scope);
  }
  if (authorization_endpoint.empty()) {
    return fail(fmt::format("the metadata of {} has no authorization_endpoint", issuer));
  }
  if (!Contains(pkce_methods, "S256")) {
    return fail(fmt::format("the authorization server {} does not offer PKCE S256", issuer));
  }
  if (!options_.user_agent) {
    return MakeError(ErrorCode::kUnauthenticated,
                     fmt::format("the MCP server {} needs an OAuth authorization: run `deepbox "
                                 "mcp login {}` once",
                                 server_url_, server_url_));
  }
  auto redirect_uri = options_.user_agent->RedirectUri();
  if (!redirect_uri) return tl::unexpected(redirect_uri.error());

  // 3. The client's registration.
  OAuthCredentials c;
  if (credentials_ && credentials_->issuer == issuer && !credentials_->client_id.empty() &&
      credentials_->redirect_uri == *redirect_uri) {
    c = *credentials_;
  } else if (!options_.client_id.empty()) {
    c.client_id = options_.client_id;
    c.client_secret = options_.client_secret;
    c.token_endpoint_auth_method = ChooseAuthMethod(auth_methods, !c.client_secret.empty());
  } else if (cimd_supported && !options_.client_id_metadata_url.empty()) {
    c.client_id = options_.client_id_metadata_url;
    c.token_endpoint_auth_method = "none";
  } else if (!registration_endpoint.empty()) {
    json::object reg;
    reg["client_name"] = options_.client_name;
    reg["redirect_uris"] = json::array{json::value(*redirect_uri)};
    reg["grant_types"] = json::array{"authorization_code", "refresh_token"};
    reg["response_types"] = json::array{"code"};
    const std::string wanted =
        auth_methods.empty() || Contains(auth_methods, "none")
            ? "none"
            : (Contains(auth_methods, "client_secret_basic") ? "client_secret_basic"
                                                             : auth_methods.front());
    reg["token_endpoint_auth_method"] = wanted;
    if (!scope.empty()) reg["scope"] = scope;
    net::Headers h;
    h.Set("Content-Type", "application/json");
    h.Set("Accept", "application/json");
    auto r = FetchUrl("POST", registration_endpoint, h, ToJson(reg), timeout);
    if (!r) return tl::unexpected(r.error());
    auto o = ParseJsonObject(r->body);
    if ((r->status != 200 && r->status != 201) || !o) {
      return fail(fmt::format("client registration at {} answered HTTP {}: {}",
                              registration_endpoint, r->status,
                              SanitizeUtf8(r->body.substr(0, 200))));
    }
    c.client_id = GetOptString(*o, "client_id").value_or("");
    if (c.client_id.empty()) return fail("the client registration's answer has no client_id");
    c.client_secret = GetOptString(*o, "client_secret").value_or("");
    c.token_endpoint_auth_method =
        GetOptString(*o, "token_endpoint_auth_method")
            .value_or(ChooseAuthMethod(auth_methods, !c.client_secret.empty()));
  } else {
    return fail(
        fmt::format("the authorization server {} offers no client registration; give "
                    "deepbox a pre-registered client id",
                    issuer));
  }
  c.issuer = issuer;
  c.redirect_uri = *redirect_uri;
  c.token_endpoint = token_endpoint;
  c.resource = resource;

  // 4. The authorization request, PKCE S256.
  const std::string verifier = RandomHex(64);
  const std::string state = RandomHex(32);
  std::vector<std::pair<std::string, std::string>> q = {{"response_type", "code"},
                                                        {"client_id", c.client_id},
                                                        {"redirect_uri", c.redirect_uri},
                                                        {"code_challenge", PkceChallenge(verifier)},
                                                        {"code_challenge_method", "S256"},
                                                        {"state", state},
                                                        {"resource", resource}};
  if (!scope.empty()) q.emplace_back("scope", scope);
  const std::string authorization_url =
      authorization_endpoint + (authorization_endpoint.find('?') == std::string::npos ? "?" : "&") +
      FormEncode(q);
  auto callback = options_.user_agent->Authorize(authorization_url);
  if (!callback) return tl::unexpected(callback.error());
  if (QueryParam(*callback, "state") != state) {
    return fail("the authorization's redirect carries another state (a forged redirect?)");
  }
  if (std::string e = QueryParam(*callback, "error"); !e.empty()) {
    std::string d = QueryParam(*callback, "error_description");
    return fail("authorization denied: " + e + (d.empty() ? "" : ": " + d));
  }
  const std::string code = QueryParam(*callback, "code");
  if (code.empty()) return fail("the authorization's redirect carries no code");

  // 5. The token.
  std::vector<std::pair<std::string, std::string>> form = {{"grant_type", "authorization_code"},
                                                           {"code", code},
                                                           {"redirect_uri", c.redirect_uri},
                                                           {"code_verifier", verifier},
                                                           {"resource", resource}};
  net::Headers h;
  h.Set("Content-Type", "application/x-www-form-urlencoded");
  h.Set("Accept", "application/json");
  if (auto st = AddClientAuth(c, h, form); !st) return st;
  auto r = FetchUrl("POST", token_endpoint, h, FormEncode(form), timeout);
  if (!r) return tl::unexpected(r.error());
  c.refresh_token.clear();
  c.scope = scope;
  if (auto st = ApplyTokenResponse(*r, "OAuth for the MCP server " + server_url_, c); !st) {
    return st;
  }
  credentials_ = c;
  if (options_.store) return options_.store->Save(server_url_, c);
  return {};
}

Status OAuthSession::ClientCredentialsGrant(const std::string& issuer,
                                            const std::string& token_endpoint,
                                            const std::vector<std::string>& auth_methods,
                                            const std::vector<std::string>& signing_algs,
                                            const std::string& resource, const std::string& scope) {
  auto fail = [&](const std::string& what) {
    return MakeError(
        ErrorCode::kUnauthenticated,
        fmt::format("OAuth client credentials for the MCP server {}: {}", server_url_, what));
  };
  // The client: given now (`deepbox mcp login --client-credentials`), else kept.
  OAuthCredentials c;
  if (options_.client_credentials) {
    c.client_id = options_.client_id;
    c.client_secret = options_.client_secret;
    c.private_key_pem = options_.private_key_pem;
    c.signing_alg = options_.signing_alg;
  } else {
    c = *credentials_;
  }
  if (c.client_id.empty()) return fail("no client id (the grant needs a pre-registered client)");
  if (!c.private_key_pem.empty()) {
    if (!auth_methods.empty() && !Contains(auth_methods, "private_key_jwt")) {
      return fail(
          fmt::format("the authorization server {} does not take private_key_jwt (it "
                      "takes {})",
                      issuer, Join(auth_methods, ", ")));
    }
    auto alg = c.signing_alg.empty() ? JwtAlgorithmForKey(c.private_key_pem)
                                     : Result<std::string>(c.signing_alg);
    if (!alg) return fail("the private key: " + alg.error().message);
    if (!signing_algs.empty() && !Contains(signing_algs, *alg)) {
      return fail(fmt::format("the authorization server {} verifies {} assertions, not {}", issuer,
                              Join(signing_algs, ", "), *alg));
    }
    c.token_endpoint_auth_method = "private_key_jwt";
  } else if (!c.client_secret.empty()) {
    c.token_endpoint_auth_method = ChooseAuthMethod(auth_methods, true);
    if (c.token_endpoint_auth_method == "none") {
      return fail(
          fmt::format("the authorization server {} takes neither client_secret_basic nor "
                      "client_secret_post (it takes {})",
                      issuer, Join(auth_methods, ", ")));
    }
  } else {
    return fail("no client secret or private key to authenticate the client with");
  }
  c.grant_type = "client_credentials";
  c.issuer = issuer;
  c.token_endpoint = token_endpoint;
  c.resource = resource;
  c.redirect_uri.clear();
  std::vector<std::pair<std::string, std::string>> form = {{"grant_type", "client_credentials"},
                                                           {"resource", resource}};
  if (!scope.empty()) form.emplace_back("scope", scope);
  net::Headers h;
  h.Set("Content-Type", "application/x-www-form-urlencoded");
  h.Set("Accept", "application/json");
  if (auto st = AddClientAuth(c, h, form); !st) return fail(st.error().message);
  auto r = FetchUrl("POST", token_endpoint, h, FormEncode(form), options_.http_timeout);
  if (!r) return tl::unexpected(r.error());
  c.access_token.clear();
  c.refresh_token.clear();
  c.scope = scope;
  if (auto st =
          ApplyTokenResponse(*r, "OAuth client credentials for the MCP server " + server_url_, c);
      !st) {
    return st;
  }
  credentials_ = c;
  if (options_.store) return options_.store->Save(server_url_, c);
  return {};
}

Status OAuthSession::Login() {
  // The server's own challenge: an unauthenticated request.
  net::Headers h;
  h.Set("Content-Type", "application/json");
  h.Set("Accept", "application/json, text/event-stream");
  auto r = FetchUrl("POST", server_url_, h, R"({"jsonrpc":"2.0","id":1,"method":"ping"})",
                    options_.http_timeout);
  if (!r) return tl::unexpected(r.error());
  std::string header = r->headers.Get("WWW-Authenticate").value_or("");
  if (r->status != 401 && header.empty()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("the MCP server {} asks for no authorization (HTTP {})",
                                 server_url_, r->status));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (auto st = LoadStored(); !st) return st;
  return Authorize(ParseBearerChallenge(header).value_or(BearerChallenge{}));
}

OAuthSessionFactory MakeOAuthSessionFactory(OAuthOptions options) {
  return [options = std::move(options)](const std::string& url) {
    return std::make_shared<OAuthSession>(url, options);
  };
}

}  // namespace deepbox::mcp
