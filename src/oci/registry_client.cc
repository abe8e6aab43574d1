#include "oci/registry_client.h"

#include <fmt/format.h>

#include <mutex>

#include "common/base64.h"
#include "common/json.h"
#include "common/strings.h"
#include "common/terminal_text.h"
#include "net/http_client.h"
#include "net/url.h"
#include "oci/digest.h"
#include "oci/manifest.h"

namespace deepbox::oci {

namespace {

constexpr int kMaxRedirects = 5;
constexpr size_t kMaxTokenBytes = 1u << 20;
constexpr size_t kMaxErrorBodyBytes = 64u << 10;

bool IsRedirect(int status) {
  return status == 301 || status == 302 || status == 303 || status == 307 || status == 308;
}

// "scheme://host:port" of an absolute URL, for same-origin checks.
std::string OriginOf(const net::Url& url) {
  std::string host = url.host.find(':') != std::string::npos ? "[" + url.host + "]" : url.host;
  return fmt::format("{}://{}:{}", url.scheme, host, url.port);
}

// The registry's own words from an error body ({"errors":[{"code","message"}]}).
std::string RegistryErrorText(std::string_view body) {
  auto doc = ParseJsonObject(body);
  if (!doc) return "";
  const json::value* errors = doc->if_contains("errors");
  if (errors == nullptr || !errors->is_array()) return "";
  std::vector<std::string> parts;
  for (const auto& e : errors->as_array()) {
    if (!e.is_object()) continue;
    std::string code = GetOptString(e.as_object(), "code").value_or("");
    std::string message = GetOptString(e.as_object(), "message").value_or("");
    parts.push_back(SanitizeLineForTerminal(code.empty() ? message : code + ": " + message));
  }
  return Join(parts, "; ");
}

}  // namespace

std::optional<AuthChallenge> ParseAuthChallenge(std::string_view header) {
  header = Trim(header);
  size_t space = header.find(' ');
  AuthChallenge c;
  c.scheme = AsciiLower(header.substr(0, space));
  if (c.scheme.empty()) return std::nullopt;
  if (space == std::string_view::npos) return c;
  std::string_view rest = header.substr(space + 1);
  while (!rest.empty()) {
    rest = TrimLeft(rest, " \t,");
    size_t eq = rest.find('=');
    if (eq == std::string_view::npos) break;
    std::string key = AsciiLower(Trim(rest.substr(0, eq)));
    rest = rest.substr(eq + 1);
    std::string value;
    if (!rest.empty() && rest.front() == '"') {
      size_t i = 1;
      for (; i < rest.size() && rest[i] != '"'; ++i) {
        if (rest[i] == '\\' && i + 1 < rest.size()) ++i;
        value += rest[i];
      }
      if (i >= rest.size()) return std::nullopt;  // unterminated quote
      rest = rest.substr(i + 1);
    } else {
      size_t comma = rest.find(',');
      value = std::string(Trim(rest.substr(0, comma)));
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma);
    }
    if (key == "realm") c.realm = value;
    if (key == "service") c.service = value;
    if (key == "scope") c.scope = value;
  }
  return c;
}

struct RegistryClient::Impl {
  ImageReference ref;
  RegistryOptions options;
  std::optional<RegistryCredentials> credentials;
  bool credentials_looked_up = false;
  bool plain_http_allowed = false;

  std::mutex mu;
  std::unique_ptr<net::HttpClient> client;  // the registry, once the scheme is known
  std::string base;                         // its base URL
  std::string authorization;                // header value that the registry accepted

  net::ClientOptions ClientOptionsFor(bool registry_host) const {
    net::ClientOptions o;
    o.connect_timeout = options.connect_timeout;
    o.read_idle_timeout = options.read_idle_timeout;
    o.max_response_bytes = kMaxManifestBytes;
    o.tls.insecure_skip_verify = options.insecure && registry_host;
    if (!options.ca_file.empty()) {
      o.tls.ca_file = options.ca_file;
      o.tls.also_system_cas = true;
    }
    return o;
  }

  std::string Describe() const { return ref.registry; }

  Result<const std::optional<RegistryCredentials>*> Credentials() {
    if (!credentials_looked_up) {
      credentials_looked_up = true;
      if (options.credentials) {
        credentials = options.credentials;
      } else if (options.lookup_credentials) {
        auto found = LookupCredentials(ref.registry);
        if (!found) return tl::unexpected(found.error());
        credentials = *found;
      }
    }
    return &credentials;
  }

  // Picks https, or http for a loopback registry (or `insecure`) whose https
  // fails for a reason other than its certificate. `probe` is the request.
  Result<net::HttpClient*> Client() {
    if (client) return client.get();
    std::string host = ref.ApiHost();
    auto https = net::HttpClient::Create("https://" + host, ClientOptionsFor(true));
    if (!https) return tl::unexpected(https.error());
    if (!plain_http_allowed) {
      client = std::move(*https);
      base = "https://" + host;
      return client.get();
    }
    net::ClientRequest probe;
    probe.target = "/v2/";
    auto answer = (*https)->Send(probe);
    if (answer || answer.error().reason == kReasonTlsCertificate) {
      client = std::move(*https);
      base = "https://" + host;
      return client.get();
    }
    auto http = net::HttpClient::Create("http://" + host, ClientOptionsFor(true));
    if (!http) return tl::unexpected(http.error());
    net::ClientRequest probe_http;
    probe_http.target = "/v2/";
    auto plain = (*http)->Send(probe_http);
    if (!plain) {
      // Neither spoke: the https failure says more.
      Error e = answer.error();
      e.message = fmt::format("registry {} (tried https and http): {}", Describe(), e.message);
      return tl::unexpected(e);
    }
    client = std::move(*http);
    base = "http://" + host;
    return client.get();
  }

  // Answers a 401 with what its challenge asks: a bearer token from the
  // realm, or basic credentials. Sets `authorization`.
  Status Authenticate(const net::Response& denied, std::string_view scope_wanted) {
    auto header = denied.headers.Get("WWW-Authenticate");
    auto challenge = header ? ParseAuthChallenge(*header) : std::nullopt;
    auto creds = Credentials();
    if (!creds) return tl::unexpected(creds.error());
    const auto& c = **creds;
    if (!challenge) {
      return MakeError(ErrorCode::kUnauthenticated,
                       fmt::format("registry {} refused the request (401) without a usable "
                                   "WWW-Authenticate challenge",
                                   Describe()));
    }
    const bool identity = c && !c->identity_token.empty();
    std::string basic =
        c && !identity ? "Basic " + Base64Encode(c->username + ":" + c->password) : std::string();
    if (challenge->scheme == "basic" && identity) {
      return MakeError(ErrorCode::kUnauthenticated,
                       fmt::format("registry {} asks for a login (basic auth), and the "
                                   "credential helper holds only an identity token for it",
                                   Describe()));
    }
    if (challenge->scheme == "basic") {
      if (!c) {
        return MakeError(ErrorCode::kUnauthenticated,
                         fmt::format("registry {} requires a login, and no credentials for it "
                                     "were found ($REGISTRY_AUTH_FILE, $DOCKER_CONFIG/config.json, "
                                     "~/.docker/config.json)",
                                     Describe()));
      }
      authorization = basic;
      return {};
    }
    if (challenge->scheme != "bearer" || challenge->realm.empty()) {
      return MakeError(ErrorCode::kUnimplemented,
                       fmt::format("registry {} asks for '{}' authentication, which deepbox does "
                                   "not speak",
                                   Describe(), SanitizeLineForTerminal(challenge->scheme)));
    }
    auto realm = net::ParseUrl(challenge->realm);
    if (!realm || (realm->scheme != "https" && realm->scheme != "http")) {
      return MakeError(ErrorCode::kInvalidArgument,
                       fmt::format("registry {}: token realm '{}' is not an http(s) URL",
                                   Describe(), SanitizeLineForTerminal(challenge->realm)));
    }
    // Credentials never travel in clear text to a host that is not this machine.
    if (realm->scheme == "http" && !options.insecure && !IsLoopbackHost(realm->host)) {
      return MakeError(ErrorCode::kPermissionDenied,
                       fmt::format("registry {}: token realm '{}' is plain http; refused "
                                   "(--insecure allows it)",
                                   Describe(), SanitizeLineForTerminal(challenge->realm)));
    }
    std::vector<std::pair<std::string, std::string>> query;
    if (!challenge->service.empty()) query.emplace_back("service", challenge->service);
    query.emplace_back("scope",
                       challenge->scope.empty() ? std::string(scope_wanted) : challenge->scope);
    std::string origin = OriginOf(*realm);
    auto token_client = net::HttpClient::Create(origin, ClientOptionsFor(origin == OriginOfBase()));
    if (!token_client) return tl::unexpected(token_client.error());
    net::ClientRequest req;
    if (identity) {
      // The OAuth2 form of the token service (as docker does with an
      // identity token): the refresh token travels in a POST body, not a URL.
      query.emplace_back("grant_type", "refresh_token");
      query.emplace_back("client_id", "deepbox");
      query.emplace_back("refresh_token", c->identity_token);
      req.method = "POST";
      req.target = realm->path + (realm->query.empty() ? "" : "?" + realm->query);
      req.headers.Set("Content-Type", "application/x-www-form-urlencoded");
      req.body = net::BuildQuery(query);
    } else {
      req.target = realm->path + "?" + (realm->query.empty() ? "" : realm->query + "&") +
                   net::BuildQuery(query);
      if (c) req.headers.Add("Authorization", basic);
    }
    auto answer = (*token_client)->Send(req);
    if (!answer) {
      Error e = answer.error();
      e.message =
          fmt::format("registry {}: getting a token from {}: {}", Describe(), origin, e.message);
      return tl::unexpected(e);
    }
    if (answer->status == 401 || answer->status == 403) {
      return MakeError(ErrorCode::kUnauthenticated,
                       fmt::format("registry {}: the token service refused {} ({})", Describe(),
                                   identity ? std::string("the credential helper's identity token")
                                   : c      ? "the credentials of user '" + c->username + "'"
                                            : std::string("an anonymous token"),
                                   answer->status));
    }
    if (answer->status != 200 || answer->body.size() > kMaxTokenBytes) {
      return MakeError(
          ErrorCode::kUnavailable,
          fmt::format("registry {}: the token service answered {}", Describe(), answer->status));
    }
    auto doc = ParseJsonObject(answer->body);
    std::string token;
    if (doc)
      token = GetOptString(*doc, "token").value_or(GetOptString(*doc, "access_token").value_or(""));
    if (token.empty()) {
      return MakeError(
          ErrorCode::kUnavailable,
          fmt::format("registry {}: the token service's answer holds no token", Describe()));
    }
    authorization = "Bearer " + token;
    return {};
  }

  std::string OriginOfBase() const {
    auto u = net::ParseUrl(base);
    return u ? OriginOf(*u) : std::string();
  }

  std::string PullScope() const { return fmt::format("repository:{}:pull", ref.repository); }

  // One request to the registry, authenticated (once more after a 401), with
  // redirects followed. `sink` streams the body of a 200/206; otherwise the
  // body (capped) is in the returned response.
  Result<net::Response> Exchange(net::ClientRequest req, const std::string& what,
                                 const std::function<bool(const net::Response&)>* on_head,
                                 const std::function<bool(std::string_view)>* on_data) {
    net::HttpClient* current = nullptr;
    {
      std::lock_guard lock(mu);
      auto c = Client();
      if (!c) return tl::unexpected(c.error());
      current = *c;
    }
    std::unique_ptr<net::HttpClient> elsewhere;  // a redirect's other origin
    bool send_auth = true;
    bool authenticated_once = false;
    for (int hop = 0; hop <= kMaxRedirects;) {
      net::ClientRequest attempt = req;
      if (send_auth) {
        std::lock_guard lock(mu);
        if (!authorization.empty()) attempt.headers.Set("Authorization", authorization);
      }
      net::Response head;
      bool streamed = false;
      auto head_cb = [&](const net::Response& h) {
        head = h;
        if (h.status == 200 || h.status == 206) {
          streamed = true;
          return on_head == nullptr || (*on_head)(h);
        }
        return true;  // read the (small) error body
      };
      std::string error_body;
      auto data_cb = [&](std::string_view d) {
        if (streamed) return on_data == nullptr || (*on_data)(d);
        if (error_body.size() < kMaxErrorBodyBytes)
          error_body.append(d.substr(0, kMaxErrorBodyBytes));
        return true;
      };
      auto r = current->SendStreaming(attempt, head_cb, data_cb);
      if (!r) {
        Error e = r.error();
        e.message = fmt::format("{} from registry {}: {}", what, Describe(), e.message);
        return tl::unexpected(e);
      }
      head.body = std::move(error_body);
      if (head.status == 401 && send_auth && !authenticated_once) {
        authenticated_once = true;
        std::lock_guard lock(mu);
        if (auto s = Authenticate(head, PullScope()); !s) return tl::unexpected(s.error());
        continue;
      }
      if (head.status == 401 || head.status == 403) {
        std::string detail = RegistryErrorText(head.body);
        return MakeError(ErrorCode::kUnauthenticated,
                         fmt::format("{} from registry {}: access refused ({}){}{}", what,
                                     Describe(), head.status, detail.empty() ? "" : ": ", detail));
      }
      if (IsRedirect(head.status)) {
        auto location = head.headers.Get("Location");
        if (!location || location->empty()) {
          return MakeError(
              ErrorCode::kUnavailable,
              fmt::format("{} from registry {}: redirect without a Location", what, Describe()));
        }
        ++hop;
        if (location->front() == '/') {
          req.target = *location;
          continue;
        }
        auto url = net::ParseUrl(*location);
        if (!url || (url->scheme != "https" && url->scheme != "http")) {
          return MakeError(ErrorCode::kUnavailable,
                           fmt::format("{} from registry {}: redirect to '{}'", what, Describe(),
                                       SanitizeLineForTerminal(location->substr(0, 200))));
        }
        if (url->scheme == "http" && !plain_http_allowed) {
          return MakeError(ErrorCode::kPermissionDenied,
                           fmt::format("{} from registry {}: redirect to plain http refused "
                                       "(--insecure allows it)",
                                       what, Describe()));
        }
        std::string origin = OriginOf(*url);
        bool same = origin == OriginOfBase();
        if (same) {
          std::lock_guard lock(mu);
          current = client.get();
        } else {
          auto other = net::HttpClient::Create(origin, ClientOptionsFor(false));
          if (!other) return tl::unexpected(other.error());
          elsewhere = std::move(*other);
          current = elsewhere.get();
        }
        send_auth = same;  // our credentials stay with our registry
        req.target = url->path + (url->query.empty() ? "" : "?" + url->query);
        continue;
      }
      return head;
    }
    return MakeError(ErrorCode::kUnavailable,
                     fmt::format("{} from registry {}: more than {} redirects", what, Describe(),
                                 kMaxRedirects));
  }
};

RegistryClient::RegistryClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RegistryClient::~RegistryClient() = default;

Result<std::unique_ptr<RegistryClient>> RegistryClient::Create(const ImageReference& ref,
                                                               RegistryOptions options) {
  auto impl = std::make_unique<Impl>();
  impl->ref = ref;
  impl->options = std::move(options);
  impl->plain_http_allowed = impl->options.insecure || IsLoopbackHost(ref.HostName());
  return std::unique_ptr<RegistryClient>(new RegistryClient(std::move(impl)));
}

std::string RegistryClient::base_url() const {
  std::lock_guard lock(impl_->mu);
  return impl_->base;
}

Result<FetchedManifest> RegistryClient::GetManifest(std::string_view reference) {
  net::ClientRequest req;
  req.target = fmt::format("/v2/{}/manifests/{}", impl_->ref.repository, reference);
  req.headers.Add("Accept", ManifestAcceptHeader());
  std::string body;
  bool too_big = false;
  std::function<bool(const net::Response&)> on_head = [](const net::Response&) { return true; };
  std::function<bool(std::string_view)> on_data = [&](std::string_view d) {
    if (body.size() + d.size() > kMaxManifestBytes) {
      too_big = true;
      return false;
    }
    body.append(d);
    return true;
  };
  std::string what = fmt::format("manifest {}:{}", impl_->ref.repository, reference);
  auto head = impl_->Exchange(req, what, &on_head, &on_data);
  if (!head) return tl::unexpected(head.error());
  if (too_big) {
    return MakeError(ErrorCode::kResourceExhausted,
                     fmt::format("{} from registry {}: larger than {} bytes", what,
                                 impl_->Describe(), kMaxManifestBytes));
  }
  if (head->status == 404) {
    std::string detail = RegistryErrorText(head->body);
    return MakeError(ErrorCode::kNotFound,
                     fmt::format("registry {} has no {}{}{}", impl_->Describe(), what,
                                 detail.empty() ? "" : ": ", detail));
  }
  if (head->status != 200) {
    std::string detail = RegistryErrorText(head->body);
    return MakeError(ErrorCode::kUnavailable,
                     fmt::format("{} from registry {}: status {}{}{}", what, impl_->Describe(),
                                 head->status, detail.empty() ? "" : ": ", detail));
  }
  FetchedManifest m;
  m.digest = Sha256Digest(body);
  if (ValidDigest(reference) && m.digest != reference) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("{} from registry {}: its content has digest {}, not the {} "
                                 "asked for",
                                 what, impl_->Describe(), m.digest, reference));
  }
  if (auto announced = head->headers.Get("Docker-Content-Digest");
      announced && ValidDigest(*announced) && *announced != m.digest) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("{} from registry {}: its content has digest {}, the registry "
                                 "announced {}",
                                 what, impl_->Describe(), m.digest, *announced));
  }
  m.media_type = ManifestMediaType(body, head->headers.Get("Content-Type").value_or(""));
  m.body = std::move(body);
  return m;
}

Status RegistryClient::FetchBlob(std::string_view digest, uint64_t offset, const BlobSink& sink) {
  if (auto s = CheckDigest(digest, "blob digest"); !s) return s;
  net::ClientRequest req;
  req.target = fmt::format("/v2/{}/blobs/{}", impl_->ref.repository, digest);
  if (offset > 0) req.headers.Add("Range", fmt::format("bytes={}-", offset));
  Status failure;
  std::function<bool(const net::Response&)> on_head = [&](const net::Response& h) {
    uint64_t from = 0;
    if (h.status == 206) {
      // "bytes START-END/TOTAL": must start where we asked.
      std::string range = h.headers.Get("Content-Range").value_or("");
      if (!range.starts_with(fmt::format("bytes {}-", offset))) {
        failure = MakeError(ErrorCode::kUnavailable,
                            fmt::format("blob {}: the registry answered the range from {} with "
                                        "'{}'",
                                        digest, offset, SanitizeLineForTerminal(range)));
        return false;
      }
      from = offset;
    }
    if (auto s = sink.start(from); !s) {
      failure = s;
      return false;
    }
    return true;
  };
  std::function<bool(std::string_view)> on_data = [&](std::string_view d) {
    if (auto s = sink.data(d); !s) {
      failure = s;
      return false;
    }
    return true;
  };
  std::string what = fmt::format("blob {}", digest);
  auto head = impl_->Exchange(req, what, &on_head, &on_data);
  if (!head) return tl::unexpected(head.error());
  if (!failure) return failure;
  if (head->status == 200 || head->status == 206) return {};
  if (head->status == 416 && offset > 0) {
    // Our partial file is at least as long as the blob: start over.
    if (auto s = sink.start(0); !s) return s;
    return FetchBlob(digest, 0, sink);
  }
  std::string detail = RegistryErrorText(head->body);
  return MakeError(head->status == 404 ? ErrorCode::kNotFound : ErrorCode::kUnavailable,
                   fmt::format("{} from registry {}: status {}{}{}", what, impl_->Describe(),
                               head->status, detail.empty() ? "" : ": ", detail));
}

}  // namespace deepbox::oci
