#include "k8s/testing/fake_api_server.h"

#include <fmt/format.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <fstream>
#include <thread>

#include "common/base64.h"
#include "common/strings.h"
#include "k8s/util.h"

namespace deepbox::k8s::testing {

namespace {

struct KindInfo {
  std::string_view group;
  std::string_view plural;
  std::string_view kind;
};

constexpr KindInfo kKinds[] = {
    {"extensions.agents.x-k8s.io", "sandboxclaims", "SandboxClaim"},
    {"extensions.agents.x-k8s.io", "sandboxwarmpools", "SandboxWarmPool"},
    {"extensions.agents.x-k8s.io", "sandboxtemplates", "SandboxTemplate"},
    {"agents.x-k8s.io", "sandboxes", "Sandbox"},
    {"networking.k8s.io", "networkpolicies", "NetworkPolicy"},
    {"", "events", "Event"},  // core/v1 (/api/v1/namespaces/NS/events)
};

const KindInfo* FindKind(std::string_view group, std::string_view plural) {
  for (const auto& k : kKinds) {
    if (k.group == group && k.plural == plural) return &k;
  }
  return nullptr;
}

// Selectors are trimmed of spaces only, as before: a tab stays part of a key.
std::string TrimSpaces(std::string_view s) { return std::string(Trim(s, " ")); }

json::object StatusObject(int code, std::string_view reason, std::string_view message) {
  json::object s;
  s["kind"] = "Status";
  s["apiVersion"] = "v1";
  s["metadata"] = json::object();
  s["status"] = "Failure";
  s["message"] = message;
  s["reason"] = reason;
  s["code"] = code;
  return s;
}

net::Response StatusResponse(int code, std::string_view reason, std::string_view message) {
  return net::Response::Json(code, ToJson(StatusObject(code, reason, message)));
}

// One requirement of a label selector.
struct Requirement {
  enum Op { kEq, kNe, kExists, kNotExists, kIn, kNotIn } op;
  std::string key;
  std::vector<std::string> values;
};

Result<std::vector<Requirement>> ParseLabelSelector(std::string_view text) {
  std::vector<Requirement> out;
  // Split on commas outside parentheses.
  std::vector<std::string> parts;
  std::string cur;
  int depth = 0;
  for (char c : text) {
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if (c == ',' && depth == 0) {
      parts.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(c);
    }
  }
  if (!cur.empty()) parts.push_back(cur);
  for (auto& raw : parts) {
    std::string p = TrimSpaces(raw);
    if (p.empty()) continue;
    Requirement r;
    auto set_values = [&](std::string_view rest) -> bool {
      std::string t = TrimSpaces(rest);
      if (t.size() < 2 || t.front() != '(' || t.back() != ')') return false;
      for (auto& v : Split(std::string_view(t).substr(1, t.size() - 2), ',')) {
        r.values.push_back(TrimSpaces(v));
      }
      return true;
    };
    if (auto pos = p.find(" notin "); pos != std::string::npos) {
      r.op = Requirement::kNotIn;
      r.key = TrimSpaces(p.substr(0, pos));
      if (!set_values(std::string_view(p).substr(pos + 7))) {
        return MakeError(ErrorCode::kInvalidArgument, "bad selector " + p);
      }
    } else if (auto pos2 = p.find(" in "); pos2 != std::string::npos) {
      r.op = Requirement::kIn;
      r.key = TrimSpaces(p.substr(0, pos2));
      if (!set_values(std::string_view(p).substr(pos2 + 4))) {
        return MakeError(ErrorCode::kInvalidArgument, "bad selector " + p);
      }
    } else if (auto ne = p.find("!="); ne != std::string::npos) {
      r.op = Requirement::kNe;
      r.key = TrimSpaces(p.substr(0, ne));
      r.values.push_back(TrimSpaces(p.substr(ne + 2)));
    } else if (auto eq = p.find('='); eq != std::string::npos) {
      r.op = Requirement::kEq;
      r.key = TrimSpaces(p.substr(0, eq));
      size_t vstart = eq + 1;
      if (vstart < p.size() && p[vstart] == '=') ++vstart;
      r.values.push_back(TrimSpaces(p.substr(vstart)));
    } else if (p[0] == '!') {
      r.op = Requirement::kNotExists;
      r.key = TrimSpaces(p.substr(1));
    } else {
      r.op = Requirement::kExists;
      r.key = p;
    }
    if (r.key.empty()) return MakeError(ErrorCode::kInvalidArgument, "bad selector " + p);
    out.push_back(std::move(r));
  }
  return out;
}

bool MatchesLabels(const std::vector<Requirement>& reqs, const json::object& obj) {
  const json::value* labels = Find(obj, {"metadata", "labels"});
  auto get = [&](const std::string& key) -> std::optional<std::string> {
    if (labels == nullptr || !labels->is_object()) return std::nullopt;
    auto it = labels->get_object().find(key);
    if (it == labels->get_object().end() || !it->value().is_string()) return std::nullopt;
    return std::string(it->value().get_string());
  };
  for (const auto& r : reqs) {
    auto v = get(r.key);
    bool in = v && std::find(r.values.begin(), r.values.end(), *v) != r.values.end();
    switch (r.op) {
      case Requirement::kEq:
      case Requirement::kIn:
        if (!in) return false;
        break;
      case Requirement::kNe:
      case Requirement::kNotIn:
        if (in) return false;
        break;
      case Requirement::kExists:
        if (!v) return false;
        break;
      case Requirement::kNotExists:
        if (v) return false;
        break;
    }
  }
  return true;
}

struct FieldReq {
  std::string field;
  std::string value;
  bool negate = false;
};

Result<std::vector<FieldReq>> ParseFieldSelector(std::string_view text) {
  std::vector<FieldReq> out;
  for (auto& raw : Split(text, ',')) {
    std::string p = TrimSpaces(raw);
    if (p.empty()) continue;
    FieldReq f;
    auto ne = p.find("!=");
    auto eq = p.find('=');
    if (ne != std::string::npos) {
      f.negate = true;
      f.field = p.substr(0, ne);
      f.value = p.substr(ne + 2);
    } else if (eq != std::string::npos) {
      f.field = p.substr(0, eq);
      size_t vs = eq + 1;
      if (vs < p.size() && p[vs] == '=') ++vs;
      f.value = p.substr(vs);
    } else {
      return MakeError(ErrorCode::kInvalidArgument, "bad field selector " + p);
    }
    // What the real server supports for the resources served here (core/v1
    // Events: involvedObject.*, reason, type).
    static constexpr std::string_view kFields[] = {"metadata.name",
                                                   "metadata.namespace",
                                                   "involvedObject.kind",
                                                   "involvedObject.name",
                                                   "involvedObject.uid",
                                                   "involvedObject.namespace",
                                                   "involvedObject.apiVersion",
                                                   "reason",
                                                   "type"};
    if (std::find(std::begin(kFields), std::end(kFields), f.field) == std::end(kFields)) {
      return MakeError(ErrorCode::kInvalidArgument,
                       fmt::format("field label not supported: {}", f.field));
    }
    out.push_back(std::move(f));
  }
  return out;
}

// RFC 7386 JSON merge patch: objects merge key by key, null removes, any
// other value replaces.
void ApplyMergePatch(json::value& target, const json::value& patch) {
  if (!patch.is_object()) {
    target = patch;
    return;
  }
  if (!target.is_object()) target = json::object();
  auto& obj = target.as_object();
  for (const auto& kv : patch.get_object()) {
    if (kv.value().is_null()) {
      obj.erase(kv.key());
    } else {
      ApplyMergePatch(obj[kv.key()], kv.value());
    }
  }
}

bool MatchesFields(const std::vector<FieldReq>& reqs, const json::object& obj) {
  for (const auto& f : reqs) {
    std::string v;
    if (auto dot = f.field.find('.'); dot == std::string::npos) {
      v = FindString(obj, {f.field});
    } else {
      v = FindString(obj, {f.field.substr(0, dot), f.field.substr(dot + 1)});
    }
    if ((v == f.value) == f.negate) return false;
  }
  return true;
}

}  // namespace

std::string RecordedRequest::Query(std::string_view name) const {
  for (const auto& [k, v] : query) {
    if (k == name) return v;
  }
  return {};
}

struct FakeApiServer::Impl {
  struct Failure {
    int count;
    int status;
    std::string retry_after;
    std::string method;
    std::string path_contains;
  };
  std::mutex mu;
  std::condition_variable cv;
  size_t open_watches = 0;
  size_t watches_opened = 0;
  std::vector<RecordedRequest> log;
  std::deque<Failure> failures;
  std::set<std::string> tokens;
  std::atomic<bool> stopping{false};
};

Result<std::unique_ptr<FakeApiServer>> FakeApiServer::Start(FakeApiServerOptions options,
                                                            std::shared_ptr<ObjectStore> store) {
  // net::Conn writes TLS records with SSL_write, which can raise SIGPIPE when
  // a watch client has gone; a real apiserver ignores SIGPIPE too.
  ::signal(SIGPIPE, SIG_IGN);
  std::unique_ptr<FakeApiServer> s(new FakeApiServer());
  s->options_ = std::move(options);
  s->pki_ = net::testing::GenerateTestPki("deepbox-test", "system:masters");
  s->store_ = store ? std::move(store) : std::make_shared<ObjectStore>();
  s->impl_ = std::make_shared<Impl>();
  s->impl_->tokens = s->options_.tokens;
  net::TlsServerConfig tls;
  tls.cert_pem = s->pki_.server_cert_pem;
  tls.key_pem = s->pki_.server_key_pem;
  if (s->options_.auth == FakeApiServerOptions::Auth::kClientCert) {
    tls.client_ca_pem = s->pki_.ca_cert_pem;
    tls.require_client_cert = true;
  }
  auto ctx = net::TlsContext::ForServer(tls);
  if (!ctx) return tl::unexpected(ctx.error());
  s->tls_ = *ctx;
  if (auto r = s->Resume(); !r) return tl::unexpected(r.error());
  return s;
}

FakeApiServer::~FakeApiServer() { Stop(); }

Status FakeApiServer::Resume() {
  std::lock_guard lock(mu_);
  if (server_) return {};
  impl_->stopping = false;
  net::ServerOptions opts;
  opts.tls = tls_;
  opts.server_header = "fake-kube-apiserver";
  auto ep = net::Endpoint::Parse(fmt::format("127.0.0.1:{}", port_));
  if (!ep) return tl::unexpected(ep.error());
  auto server = net::HttpServer::Create(
      *ep, [this](net::Request& req, net::ResponseWriter& w) { Handle(req, w); }, opts);
  if (!server) return tl::unexpected(server.error());
  port_ = (*server)->port();
  server_ = std::move(*server);
  server_->Start();
  return {};
}

void FakeApiServer::Stop() {
  std::unique_ptr<net::HttpServer> server;
  {
    std::lock_guard lock(mu_);
    server = std::move(server_);
  }
  if (!server) return;
  impl_->stopping = true;
  for (const auto& sub : store_->watches()) sub->Close(Subscription::CloseKind::kDrop);
  server->Stop(std::chrono::milliseconds(5000));
  server.reset();  // waits until every connection thread has served its last request
  // The connection threads are detached: give them a moment to exit, so that
  // OpenSSL's per-thread state (freed at thread exit) is gone before a test
  // process ends -- else LeakSanitizer may report it. (Proper fix: net's
  // HttpServer calling OPENSSL_thread_stop() or joining its threads.)
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

std::string FakeApiServer::url() const { return fmt::format("https://127.0.0.1:{}", port_); }

RestConfig FakeApiServer::ClientConfig() const {
  RestConfig cfg;
  cfg.server = url();
  cfg.source = "fake apiserver";
  cfg.tls.ca_pem = pki_.ca_cert_pem;
  if (options_.auth == FakeApiServerOptions::Auth::kClientCert) {
    cfg.tls.client_cert_pem = pki_.client_cert_pem;
    cfg.tls.client_key_pem = pki_.client_key_pem;
  } else {
    cfg.token = *options_.tokens.begin();
  }
  return cfg;
}

Status FakeApiServer::WriteKubeconfig(const std::string& path,
                                      const std::string& namespace_name) const {
  std::string user;
  if (options_.auth == FakeApiServerOptions::Auth::kClientCert) {
    user = fmt::format("    client-certificate-data: {}\n    client-key-data: {}\n",
                       Base64Encode(pki_.client_cert_pem), Base64Encode(pki_.client_key_pem));
  } else {
    user = fmt::format("    token: {}\n", *options_.tokens.begin());
  }
  std::ofstream out(path);
  out << fmt::format(R"(apiVersion: v1
kind: Config
current-context: fake
clusters:
- name: fake
  cluster:
    server: {}
    certificate-authority-data: {}
contexts:
- name: fake
  context:
    cluster: fake
    user: fake
    namespace: {}
users:
- name: fake
  user:
{})",
                     url(), Base64Encode(pki_.ca_cert_pem), namespace_name, user);
  if (!out) return MakeSyscallError("write", errno, path);
  return {};
}

void FakeApiServer::SetTokens(std::set<std::string> tokens) {
  std::lock_guard lock(impl_->mu);
  impl_->tokens = std::move(tokens);
}

void FakeApiServer::FailNext(int count, int status, std::string retry_after, std::string method,
                             std::string path_contains) {
  std::lock_guard lock(impl_->mu);
  impl_->failures.push_back(
      {count, status, std::move(retry_after), std::move(method), std::move(path_contains)});
}

void FakeApiServer::ExpireWatches() {
  store_->Compact();
  for (const auto& sub : store_->watches()) sub->Close(Subscription::CloseKind::kExpire);
}

void FakeApiServer::DropWatches() {
  for (const auto& sub : store_->watches()) sub->Close(Subscription::CloseKind::kDrop);
}

void FakeApiServer::EndWatches() {
  for (const auto& sub : store_->watches()) sub->Close(Subscription::CloseKind::kEnd);
}

void FakeApiServer::SendBookmarks() {
  for (const auto& sub : store_->watches()) sub->RequestBookmark();
}

bool FakeApiServer::WaitForWatches(size_t n, std::chrono::milliseconds timeout) {
  std::unique_lock lock(impl_->mu);
  return impl_->cv.wait_for(lock, timeout, [&] { return impl_->open_watches >= n; });
}

bool FakeApiServer::WaitForWatchesOpened(size_t n, std::chrono::milliseconds timeout) {
  std::unique_lock lock(impl_->mu);
  return impl_->cv.wait_for(lock, timeout, [&] { return impl_->watches_opened >= n; });
}

size_t FakeApiServer::watches_opened() const {
  std::lock_guard lock(impl_->mu);
  return impl_->watches_opened;
}

size_t FakeApiServer::open_watches() const {
  std::lock_guard lock(impl_->mu);
  return impl_->open_watches;
}

std::vector<RecordedRequest> FakeApiServer::requests() const {
  std::lock_guard lock(impl_->mu);
  return impl_->log;
}

int FakeApiServer::CountRequests(std::string_view method, std::string_view path_contains) const {
  std::lock_guard lock(impl_->mu);
  int n = 0;
  for (const auto& r : impl_->log) {
    if ((method.empty() || r.method == method) && r.path.find(path_contains) != std::string::npos) {
      ++n;
    }
  }
  return n;
}

void FakeApiServer::Handle(net::Request& req, net::ResponseWriter& w) {
  Impl& impl = *impl_;
  {
    std::lock_guard lock(impl.mu);
    impl.log.push_back(RecordedRequest{req.method, req.path, req.query});
  }
  if (options_.auth == FakeApiServerOptions::Auth::kToken) {
    auto auth = req.Header("Authorization").value_or("");
    bool ok = false;
    {
      std::lock_guard lock(impl.mu);
      for (const auto& t : impl.tokens) {
        if (auth == "Bearer " + t) ok = true;
      }
    }
    if (!ok) {
      (void)w.Send(StatusResponse(401, "Unauthorized", "Unauthorized"));
      return;
    }
  }
  {
    std::lock_guard lock(impl.mu);
    for (auto it = impl.failures.begin(); it != impl.failures.end(); ++it) {
      if ((!it->method.empty() && it->method != req.method) ||
          req.path.find(it->path_contains) == std::string::npos) {
        continue;
      }
      net::Response r =
          StatusResponse(it->status, it->status == 429 ? "TooManyRequests" : "InternalError",
                         fmt::format("injected failure {}", it->status));
      if (!it->retry_after.empty()) r.headers.Set("Retry-After", it->retry_after);
      if (--it->count <= 0) impl.failures.erase(it);
      (void)w.Send(r);
      return;
    }
  }

  const auto parts = Split(req.path, '/');
  std::vector<std::string> seg(parts.begin(), parts.end());
  if (!seg.empty() && seg.front().empty()) seg.erase(seg.begin());
  if (!seg.empty() && seg.back().empty()) seg.pop_back();
  // The core group's collections served here (events) take the same path as
  // the groups': /api/v1/... is read as /apis/<"">/v1/...
  if (seg.size() >= 3 && seg[0] == "api" && seg[1] == "v1") {
    if (options_.events_forbidden) {
      (void)w.Send(StatusResponse(403, "Forbidden",
                                  "events is forbidden: User \"test\" cannot list resource "
                                  "\"events\" in API group \"\""));
      return;
    }
    seg[0] = "apis";
    seg.insert(seg.begin() + 1, "");
  }
  auto not_found_page = [&] { (void)w.Send(net::Response::Text(404, "404 page not found\n")); };
  auto versions_of = [&](std::string_view group) -> const std::vector<std::string>* {
    if (group == "extensions.agents.x-k8s.io") return &options_.extension_versions;
    if (group == "agents.x-k8s.io") return &options_.sandbox_versions;
    static const std::vector<std::string> kNetworking = {"v1"};
    if (group == "networking.k8s.io") return &kNetworking;
    static const std::vector<std::string> kCore = {"v1"};
    if (group.empty()) return &kCore;
    return nullptr;
  };
  auto group_json = [&](std::string_view group, const std::vector<std::string>& versions) {
    json::object g;
    g["name"] = group;
    json::array vs;
    for (const auto& v : versions) {
      json::object e;
      e["groupVersion"] = fmt::format("{}/{}", group, v);
      e["version"] = v;
      vs.push_back(std::move(e));
    }
    g["versions"] = std::move(vs);
    json::object pref;
    pref["groupVersion"] = fmt::format("{}/{}", group, versions.front());
    pref["version"] = versions.front();
    g["preferredVersion"] = std::move(pref);
    return g;
  };

  if (seg.size() == 1 && seg[0] == "api") {
    (void)w.Send(net::Response::Json(200, R"({"kind":"APIVersions","versions":["v1"]})"));
    return;
  }
  if (seg.empty() || seg[0] != "apis") return not_found_page();
  if (seg.size() == 1) {
    json::object list;
    list["kind"] = "APIGroupList";
    list["apiVersion"] = "v1";
    json::array groups;
    for (std::string_view g : {"extensions.agents.x-k8s.io", "agents.x-k8s.io"}) {
      const auto* vs = versions_of(g);
      if (vs != nullptr && !vs->empty()) groups.push_back(group_json(g, *vs));
    }
    list["groups"] = std::move(groups);
    (void)w.Send(net::Response::Json(200, ToJson(list)));
    return;
  }
  const std::string& group = seg[1];
  const auto* versions = versions_of(group);
  if (versions == nullptr || versions->empty()) return not_found_page();
  if (seg.size() == 2) {
    if (options_.discovery_forbidden) {
      (void)w.Send(StatusResponse(403, "Forbidden", "discovery is forbidden"));
      return;
    }
    json::object g = group_json(group, *versions);
    g["kind"] = "APIGroup";
    g["apiVersion"] = "v1";
    (void)w.Send(net::Response::Json(200, ToJson(g)));
    return;
  }
  const std::string& version = seg[2];
  if (std::find(versions->begin(), versions->end(), version) == versions->end()) {
    return not_found_page();
  }
  if (seg.size() == 3) {
    json::object list;
    list["kind"] = "APIResourceList";
    list["apiVersion"] = "v1";
    list["groupVersion"] = group + "/" + version;
    json::array res;
    for (const auto& k : kKinds) {
      if (k.group != group) continue;
      json::object r;
      r["name"] = k.plural;
      r["namespaced"] = true;
      r["kind"] = k.kind;
      res.push_back(std::move(r));
    }
    list["resources"] = std::move(res);
    (void)w.Send(net::Response::Json(200, ToJson(list)));
    return;
  }
  if (seg.size() < 6 || seg.size() > 7 || seg[3] != "namespaces") return not_found_page();
  const std::string& ns = seg[4];
  const KindInfo* kind = FindKind(group, seg[5]);
  if (kind == nullptr) return not_found_page();
  ResourceKey key{group, seg[5], ns};
  std::string api_version = group.empty() ? version : group + "/" + version;
  auto present = [&](json::object obj) {
    obj["apiVersion"] = api_version;
    obj["kind"] = kind->kind;
    return obj;
  };
  auto error_response = [&](const Error& e, std::string_view name) {
    switch (e.code) {
      case ErrorCode::kNotFound:
        return StatusResponse(404, "NotFound", e.message);
      case ErrorCode::kConflict:
        return StatusResponse(409, "AlreadyExists", e.message);
      default:
        return StatusResponse(
            422, "Invalid",
            fmt::format("{}.{} \"{}\" is invalid: {}", kind->kind, group, name, e.message));
    }
  };

  if (seg.size() == 7) {
    const std::string& name = seg[6];
    if (req.method == "GET") {
      auto obj = store_->Get(key, name);
      (void)w.Send(obj ? net::Response::Json(200, ToJson(present(*obj)))
                       : error_response(obj.error(), name));
    } else if (req.method == "DELETE") {
      auto obj = store_->Delete(key, name);
      (void)w.Send(obj ? net::Response::Json(200, ToJson(present(*obj)))
                       : error_response(obj.error(), name));
    } else if (req.method == "PATCH") {
      // Merge patches only (what deepbox sends); the main resource, as for a
      // CRD with a status subresource: status and the server's metadata stay.
      std::string type = req.Header("Content-Type").value_or("");
      if (type != "application/merge-patch+json") {
        (void)w.Send(StatusResponse(415, "UnsupportedMediaType",
                                    fmt::format("the body of the request was in an unknown "
                                                "format - accepted media types include: "
                                                "application/merge-patch+json (got '{}')",
                                                type)));
        return;
      }
      auto patch = ParseJsonObject(req.body);
      if (!patch) {
        (void)w.Send(StatusResponse(400, "BadRequest", patch.error().message));
        return;
      }
      // The CRD's enum (spec.operatingMode: Running|Suspended).
      if (kind->kind == std::string_view("Sandbox")) {
        if (const auto* m = Find(*patch, {"spec", "operatingMode"});
            m != nullptr && !m->is_null() &&
            !(m->is_string() && (m->get_string() == "Running" || m->get_string() == "Suspended"))) {
          (void)w.Send(StatusResponse(
              422, "Invalid",
              fmt::format("Sandbox.{} \"{}\" is invalid: spec.operatingMode: Unsupported value: "
                          "{}: supported values: \"Running\", \"Suspended\"",
                          group, name, ToJson(*m))));
          return;
        }
      }
      std::string want_rv = FindString(*patch, {"metadata", "resourceVersion"});
      bool stale = false;
      auto obj = store_->Update(key, name, [&](json::object& o) {
        if (!want_rv.empty() && FindString(o, {"metadata", "resourceVersion"}) != want_rv) {
          stale = true;
          return;
        }
        json::object kept_meta;
        if (const auto* m = o.if_contains("metadata"); m != nullptr && m->is_object()) {
          kept_meta = m->get_object();
        }
        const json::value* kept_status = o.if_contains("status");
        json::value status = kept_status != nullptr ? *kept_status : json::value();
        json::value whole = o;
        ApplyMergePatch(whole, *patch);
        o = whole.as_object();
        auto& meta = o["metadata"];
        if (!meta.is_object()) meta = json::object();
        for (std::string_view k : {"name", "namespace", "uid", "resourceVersion", "generation",
                                   "creationTimestamp", "deletionTimestamp"}) {
          if (const auto* v = kept_meta.if_contains(k)) {
            meta.as_object()[k] = *v;
          } else {
            meta.as_object().erase(k);
          }
        }
        if (status.is_null()) {
          o.erase("status");
        } else {
          o["status"] = status;
        }
      });
      if (obj && stale) {
        (void)w.Send(StatusResponse(
            409, "Conflict",
            fmt::format("Operation cannot be fulfilled on {}.{} \"{}\": the object has been "
                        "modified; please apply your changes to the latest version and try again",
                        seg[5], group, name)));
        return;
      }
      (void)w.Send(obj ? net::Response::Json(200, ToJson(present(*obj)))
                       : error_response(obj.error(), name));
    } else {
      (void)w.Send(StatusResponse(405, "MethodNotAllowed", "method not allowed"));
    }
    return;
  }

  // Collection.
  auto labels = ParseLabelSelector(req.Query("labelSelector").value_or(""));
  auto fields = ParseFieldSelector(req.Query("fieldSelector").value_or(""));
  if (!labels || !fields) {
    (void)w.Send(StatusResponse(400, "BadRequest",
                                !labels ? labels.error().message : fields.error().message));
    return;
  }
  auto matches = [&](const json::object& o) {
    return MatchesLabels(*labels, o) && MatchesFields(*fields, o);
  };

  if (req.method == "POST") {
    auto body = ParseJsonObject(req.body);
    if (!body) {
      (void)w.Send(StatusResponse(400, "BadRequest", body.error().message));
      return;
    }
    std::string name = FindString(*body, {"metadata", "name"});
    std::string obj_kind = FindString(*body, {"kind"});
    std::string obj_ns = FindString(*body, {"metadata", "namespace"});
    if (!obj_kind.empty() && obj_kind != kind->kind) {
      (void)w.Send(StatusResponse(400, "BadRequest",
                                  fmt::format("kind {} does not match {}", obj_kind, kind->kind)));
      return;
    }
    if (!obj_ns.empty() && obj_ns != ns) {
      (void)w.Send(StatusResponse(400, "BadRequest",
                                  "the namespace of the provided object does not match the "
                                  "namespace sent on the request"));
      return;
    }
    if (kind->kind == "SandboxClaim") {
      std::string_view required = version == "v1alpha1" ? "sandboxTemplateRef" : "warmPoolRef";
      if (FindString(*body, {"spec", std::string(required), "name"}).empty()) {
        (void)w.Send(
            StatusResponse(422, "Invalid",
                           fmt::format("SandboxClaim.{} \"{}\" is invalid: spec.{}: Required value",
                                       group, name, required)));
        return;
      }
    }
    (*body)["apiVersion"] = api_version;
    auto created = store_->Create(key, std::move(*body));
    (void)w.Send(created ? net::Response::Json(201, ToJson(present(*created)))
                         : error_response(created.error(), name));
    return;
  }
  if (req.method != "GET") {
    (void)w.Send(StatusResponse(405, "MethodNotAllowed", "method not allowed"));
    return;
  }
  std::string watch = req.Query("watch").value_or("");
  if (watch != "1" && watch != "true") {
    int64_t rv = 0;
    auto items = store_->List(key, &rv);
    std::sort(items.begin(), items.end(), [](const json::object& a, const json::object& b) {
      return FindString(a, {"metadata", "name"}) < FindString(b, {"metadata", "name"});
    });
    int64_t limit = 0;
    if (auto l = req.Query("limit")) limit = std::atoll(l->c_str());
    std::string cont = req.Query("continue").value_or("");
    json::array out;
    std::string next;
    for (auto& item : items) {
      if (!matches(item)) continue;
      std::string n = FindString(item, {"metadata", "name"});
      if (!cont.empty() && n <= cont) continue;
      if (limit > 0 && static_cast<int64_t>(out.size()) == limit) {
        next = FindString(out.back(), {"metadata", "name"});
        break;
      }
      out.push_back(present(std::move(item)));
    }
    json::object list;
    list["kind"] = std::string(kind->kind) + "List";
    list["apiVersion"] = api_version;
    json::object meta;
    meta["resourceVersion"] = std::to_string(rv);
    if (!next.empty()) meta["continue"] = next;
    list["metadata"] = std::move(meta);
    list["items"] = std::move(out);
    (void)w.Send(net::Response::Json(200, ToJson(list)));
    return;
  }

  // Watch.
  std::string rv = req.Query("resourceVersion").value_or("");
  bool bookmarks = req.Query("allowWatchBookmarks").value_or("") == "true";
  int64_t timeout_s = std::atoll(req.Query("timeoutSeconds").value_or("0").c_str());
  std::vector<StoreEvent> initial;
  auto sub = store_->OpenWatch(key, rv, &initial);
  std::string gone_message =
      fmt::format("too old resource version: {} ({})", rv, store_->resource_version());
  if (!sub && options_.gone_as_http_status) {
    (void)w.Send(StatusResponse(410, "Expired", gone_message));
    return;
  }
  net::Headers headers;
  headers.Set("Content-Type", "application/json");
  if (!w.BeginStream(200, headers)) {
    if (sub) store_->CloseWatch(*sub);
    return;
  }
  auto write_line = [&](std::string_view type, const json::object& obj) {
    json::object ev;
    ev["type"] = type;
    ev["object"] = obj;
    return w.WriteChunk(ToJson(ev) + "\n").has_value();
  };
  if (!sub) {
    if (write_line("ERROR", StatusObject(410, "Expired", gone_message))) (void)w.EndStream();
    return;
  }
  {
    std::lock_guard lock(impl.mu);
    ++impl.open_watches;
    ++impl.watches_opened;
  }
  impl.cv.notify_all();
  auto deadline = timeout_s > 0 ? std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s)
                                : std::chrono::steady_clock::time_point::max();
  enum class Outcome { kEnd, kDrop } outcome = Outcome::kDrop;
  bool ok = true;
  for (auto& e : initial) {
    if (matches(e.object) && !(ok = write_line(e.type, present(e.object)))) break;
  }
  while (ok) {
    if (impl.stopping) break;
    auto batch = (*sub)->Next(std::chrono::milliseconds(50));
    if (batch.close == Subscription::CloseKind::kDrop) break;  // in-flight events are lost
    for (auto& e : batch.events) {
      if (matches(e.object) && !(ok = write_line(e.type, present(e.object)))) break;
    }
    if (!ok) break;
    if (batch.bookmark && bookmarks) {
      json::object bm;
      bm["apiVersion"] = api_version;
      bm["kind"] = kind->kind;
      json::object meta;
      meta["resourceVersion"] = std::to_string(store_->resource_version());
      bm["metadata"] = std::move(meta);
      if (!(ok = write_line("BOOKMARK", bm))) break;
    }
    if (batch.close == Subscription::CloseKind::kEnd) {
      outcome = Outcome::kEnd;
      break;
    }
    if (batch.close == Subscription::CloseKind::kExpire) {
      ok = write_line("ERROR", StatusObject(410, "Expired", "too old resource version"));
      outcome = Outcome::kEnd;
      break;
    }
    if (w.ClientGone()) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      outcome = Outcome::kEnd;
      break;
    }
  }
  store_->CloseWatch(*sub);
  {
    std::lock_guard lock(impl.mu);
    --impl.open_watches;
  }
  impl.cv.notify_all();
  if (ok && outcome == Outcome::kEnd) (void)w.EndStream();
  // kDrop: return without the final chunk; the server closes the connection.
}

}  // namespace deepbox::k8s::testing
