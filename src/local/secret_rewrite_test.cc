// Secret injection: the HTTP/1.x head rewriter case by case, and the HTTP/2
// rewriter between a real nghttp2 client session and a real nghttp2 server
// session (what the server decodes is what an upstream would see).
#include "local/secret_rewrite.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nghttp2/nghttp2.h>

#include <cstring>
#include <map>
#include <tuple>

namespace deepbox::local {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

constexpr char kP1[] = "deepbox-secret-0123456789abcdef0123456789abcdef";
constexpr char kV1[] = "ghp_RealGitHubTokenValue0001";
constexpr char kP2[] = "deepbox-secret-fedcba9876543210fedcba9876543210";
constexpr char kV2[] = "sk-RealApiKeyValue0002";

std::vector<SecretBinding> Bindings() {
  // GH_TOKEN may go into a URL query (;query), API_KEY not.
  return {{"GH_TOKEN", kP1, kV1, {"api.github.com", "*.githubusercontent.com"}, true},
          {"API_KEY", kP2, kV2, {"api.example.com", "api.github.com"}, false}};
}

std::string Sub(std::string s) {  // "{P1}" -> kP1, "{V1}" -> kV1, ...
  for (auto [from, to] : {std::pair{"{P1}", kP1}, {"{V1}", kV1}, {"{P2}", kP2}, {"{V2}", kV2}}) {
    for (size_t at; (at = s.find(from)) != std::string::npos;) s.replace(at, 4, to);
  }
  return s;
}

Result<std::string> Rewrite(const std::string& head, std::string_view host = "api.github.com",
                            bool query = false, RewriteReport* report = nullptr) {
  return RewriteHttp1RequestHead(head, host, Bindings(), query, report);
}

// ---- ValidateSecretValue ----

TEST(SecretRewriteTest, ValidateSecretValue) {
  EXPECT_TRUE(ValidateSecretValue(kV1).has_value());
  EXPECT_TRUE(ValidateSecretValue("a b\tc").has_value());
  EXPECT_TRUE(ValidateSecretValue(std::string(kMaxSecretValue, 'x')).has_value());
  for (std::string bad : {std::string("tok\r\nX-Evil: 1"), std::string("tok\nx"),
                          std::string("tok\rx"), std::string("tok\0x", 5), std::string("tok\x01x"),
                          std::string("tok\x7f"), std::string(" tok"), std::string("tok\t"),
                          std::string(""), std::string(kMaxSecretValue + 1, 'x')}) {
    auto r = ValidateSecretValue(bad);
    ASSERT_FALSE(r.has_value()) << bad;
    if (!bad.empty()) {
      EXPECT_THAT(r.error().message, Not(HasSubstr(bad.substr(0, 3))));
    }
  }
}

// ---- HTTP/1.x ----

TEST(SecretRewriteTest, Http1SubstitutesInEveryHeaderValue) {
  std::string in =
      Sub("GET /repos?x=1 HTTP/1.1\r\nHost: api.github.com\r\nAuthorization: Bearer {P1}\r\n"
          "X-Api-Key: {P1}\r\nCookie: a={P1}; b={P2}\r\nx-custom-thing:  pre{P1}mid{P1}post  \r\n"
          "Accept: */*\r\n\r\n");
  RewriteReport report;
  auto out = Rewrite(in, "api.github.com", false, &report);
  ASSERT_TRUE(out.has_value()) << out.error().ToString();
  EXPECT_EQ(*out, Sub("GET /repos?x=1 HTTP/1.1\r\nHost: api.github.com\r\n"
                      "Authorization: Bearer {V1}\r\nX-Api-Key: {V1}\r\nCookie: a={V1}; b={V2}\r\n"
                      "x-custom-thing:  pre{V1}mid{V1}post  \r\nAccept: */*\r\n\r\n"));
  EXPECT_THAT(report.substituted, ElementsAre("GH_TOKEN", "API_KEY"));
  EXPECT_THAT(report.withheld, IsEmpty());
  // Nothing left to replace: a second pass changes nothing.
  auto again = Rewrite(*out);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(*again, *out);
}

TEST(SecretRewriteTest, Http1OnlyTheSecretsOfTheHost) {
  // api.example.com is API_KEY's only: GH_TOKEN's placeholder goes unchanged.
  std::string in = Sub("GET / HTTP/1.1\r\nHost: api.example.com\r\nA: {P1}\r\nB: {P2}\r\n\r\n");
  RewriteReport report;
  auto out = Rewrite(in, "api.example.com", false, &report);
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(*out, Sub("GET / HTTP/1.1\r\nHost: api.example.com\r\nA: {P1}\r\nB: {V2}\r\n\r\n"));
  EXPECT_THAT(report.substituted, ElementsAre("API_KEY"));
  EXPECT_THAT(report.withheld, ElementsAre("GH_TOKEN"));
}

TEST(SecretRewriteTest, Http1AnotherHostGetsThePlaceholder) {
  std::string in = Sub("POST /x HTTP/1.1\r\nHost: example.org\r\nAuthorization: {P1}\r\n\r\n");
  RewriteReport report;
  auto out = Rewrite(in, "example.org", false, &report);
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(*out, in);
  EXPECT_THAT(report.substituted, IsEmpty());
  EXPECT_THAT(report.withheld, ElementsAre("GH_TOKEN"));
}

TEST(SecretRewriteTest, Http1RequestHostMustBeTheConnectionHost) {
  RewriteReport report;
  // Domain fronting: a connection to the secret's host, a request for another.
  std::string fronted = Sub("GET / HTTP/1.1\r\nHost: evil.example\r\nAuthorization: {P1}\r\n\r\n");
  auto out = Rewrite(fronted, "api.github.com", false, &report);
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(*out, fronted);
  EXPECT_THAT(report.withheld, ElementsAre("GH_TOKEN"));
  // No Host at all.
  std::string no_host = Sub("GET / HTTP/1.0\r\nAuthorization: {P1}\r\n\r\n");
  EXPECT_EQ(*Rewrite(no_host), no_host);
  // An absolute-form target must agree with Host.
  std::string absolute =
      Sub("GET http://evil.example/x HTTP/1.1\r\nHost: api.github.com\r\nA: {P1}\r\n\r\n");
  EXPECT_EQ(*Rewrite(absolute), absolute);
  std::string with_userinfo =
      Sub("GET http://u@api.github.com/x HTTP/1.1\r\nHost: api.github.com\r\nA: {P1}\r\n\r\n");
  EXPECT_EQ(*Rewrite(with_userinfo), with_userinfo);
  std::string agreeing =
      Sub("GET HTTP://API.github.com:443/x?q HTTP/1.1\r\nHost: api.github.com\r\nA: {P1}\r\n\r\n");
  EXPECT_EQ(*Rewrite(agreeing), Sub("GET HTTP://API.github.com:443/x?q HTTP/1.1\r\n"
                                    "Host: api.github.com\r\nA: {V1}\r\n\r\n"));
  // Case, a trailing dot and a port do not matter; on either side.
  std::string dotted = Sub("GET / HTTP/1.1\r\nHost:\tAPI.GitHub.com.:443 \r\nA: {P1}\r\n\r\n");
  EXPECT_EQ(*Rewrite(dotted, "api.github.com:443"),
            Sub("GET / HTTP/1.1\r\nHost:\tAPI.GitHub.com.:443 \r\nA: {V1}\r\n\r\n"));
  // A Host that is not a host matches nothing.
  std::string odd = Sub("GET / HTTP/1.1\r\nHost: api.github.com, x\r\nA: {P1}\r\n\r\n");
  EXPECT_EQ(*Rewrite(odd), odd);
}

TEST(SecretRewriteTest, Http1WildcardHost) {
  std::string in =
      Sub("GET / HTTP/1.1\r\nHost: raw.githubusercontent.com\r\nAuthorization: {P1}\r\n\r\n");
  EXPECT_EQ(
      *Rewrite(in, "raw.githubusercontent.com"),
      Sub("GET / HTTP/1.1\r\nHost: raw.githubusercontent.com\r\nAuthorization: {V1}\r\n\r\n"));
  // "*.githubusercontent.com" is not githubusercontent.com itself.
  std::string apex = Sub("GET / HTTP/1.1\r\nHost: githubusercontent.com\r\nA: {P1}\r\n\r\n");
  EXPECT_EQ(*Rewrite(apex, "githubusercontent.com"), apex);
}

TEST(SecretRewriteTest, Http1Query) {
  std::string in =
      Sub("GET /{P1}/x?token={P1}&k={P2} HTTP/1.1\r\nHost: api.github.com\r\nX-{P1}: {P1}\r\n\r\n");
  RewriteReport report;
  auto off = Rewrite(in, "api.github.com", false, &report);
  ASSERT_TRUE(off.has_value());
  EXPECT_EQ(*off, Sub("GET /{P1}/x?token={P1}&k={P2} HTTP/1.1\r\nHost: api.github.com\r\n"
                      "X-{P1}: {V1}\r\n\r\n"));
  EXPECT_THAT(report.substituted, ElementsAre("GH_TOKEN"));
  EXPECT_THAT(report.withheld, ElementsAre("GH_TOKEN", "API_KEY"));
  RewriteReport on_report;
  auto on = Rewrite(in, "api.github.com", true, &on_report);
  ASSERT_TRUE(on.has_value());
  // The path and the header name never; the query only for a secret that
  // asked for it (API_KEY did not).
  EXPECT_EQ(*on, Sub("GET /{P1}/x?token={V1}&k={P2} HTTP/1.1\r\nHost: api.github.com\r\n"
                     "X-{P1}: {V1}\r\n\r\n"));
  EXPECT_THAT(on_report.withheld, ElementsAre("GH_TOKEN", "API_KEY"));
  // Absolute form: the query after the authority.
  auto absolute = Rewrite(Sub("GET https://api.github.com/p?t={P1} HTTP/1.1\r\n"
                              "Host: api.github.com\r\n\r\n"),
                          "api.github.com", true);
  ASSERT_TRUE(absolute.has_value());
  EXPECT_EQ(*absolute,
            Sub("GET https://api.github.com/p?t={V1} HTTP/1.1\r\nHost: api.github.com\r\n\r\n"));
  // The query of a request to another host: never.
  std::string other = Sub("GET /?t={P1} HTTP/1.1\r\nHost: example.org\r\n\r\n");
  EXPECT_EQ(*Rewrite(other, "example.org", true), other);
}

TEST(SecretRewriteTest, Http1NeverInTheMethodFramingOrHostFields) {
  std::string in =
      Sub("{P1} / HTTP/1.1\r\nHost: api.github.com\r\nContent-Length: {P1}\r\n"
          "Transfer-Encoding: {P1}\r\n\r\n");
  RewriteReport report;
  auto out = Rewrite(in, "api.github.com", true, &report);
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(*out, in);
  EXPECT_THAT(report.withheld, ElementsAre("GH_TOKEN"));
}

TEST(SecretRewriteTest, Http1PlaceholderSplitOrNested) {
  std::string p1 = kP1;
  std::string split = "GET / HTTP/1.1\r\nHost: api.github.com\r\nX-A: " + p1.substr(0, 20) +
                      "\r\nX-B: " + p1.substr(20) + "\r\n\r\n";
  RewriteReport report;
  EXPECT_EQ(*Rewrite(split, "api.github.com", false, &report), split);
  EXPECT_THAT(report.withheld, IsEmpty());
  // A value holding another placeholder is not expanded again.
  std::vector<SecretBinding> nested = {{"A", "PH-A", std::string("va-") + kP2, {"h.example"}},
                                       {"B", kP2, kV2, {"h.example"}}};
  auto out = RewriteHttp1RequestHead("GET / HTTP/1.1\r\nHost: h.example\r\nX: PH-A\r\n\r\n",
                                     "h.example", nested, false, nullptr);
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(*out, Sub("GET / HTTP/1.1\r\nHost: h.example\r\nX: va-{P2}\r\n\r\n"));
}

TEST(SecretRewriteTest, Http1Refusals) {
  const std::string ok = Sub("GET / HTTP/1.1\r\nHost: api.github.com\r\nA: {P1}\r\n\r\n");
  ASSERT_TRUE(Rewrite(ok).has_value());
  std::vector<std::tuple<std::string, std::string, std::string>> cases = {
      {"no end", Sub("GET / HTTP/1.1\r\nHost: api.github.com\r\nA: {P1}\r\n"),
       "does not end with CRLF CRLF"},
      {"LF only", Sub("GET / HTTP/1.1\nHost: api.github.com\nA: {P1}\n\n"),
       "does not end with CRLF CRLF"},
      {"bare LF", Sub("GET / HTTP/1.1\r\nHost: api.github.com\nX: 1\r\nA: {P1}\r\n\r\n"),
       "bare LF"},
      {"bare CR", Sub("GET / HTTP/1.1\r\nHost: api.github.com\rX: 1\r\nA: {P1}\r\n\r\n"),
       "bare CR"},
      {"NUL", Sub(std::string("GET / HTTP/1.1\r\nHost: api.github.com\r\nA: {P1}\0\r\n\r\n", 50)),
       "NUL"},
      {"obs-fold", Sub("GET / HTTP/1.1\r\nHost: api.github.com\r\nA: {P1}\r\n b\r\n\r\n"),
       "obs-fold"},
      {"obs-fold tab", Sub("GET / HTTP/1.1\r\nHost: api.github.com\r\nA: {P1}\r\n\tb\r\n\r\n"),
       "obs-fold"},
      {"space before colon", Sub("GET / HTTP/1.1\r\nHost: api.github.com\r\nA : {P1}\r\n\r\n"),
       "not a token"},
      {"name not a token", Sub("GET / HTTP/1.1\r\nHost: api.github.com\r\nA(b): {P1}\r\n\r\n"),
       "not a token"},
      {"empty name", Sub("GET / HTTP/1.1\r\nHost: api.github.com\r\n: {P1}\r\n\r\n"),
       "not a token"},
      {"no colon", Sub("GET / HTTP/1.1\r\nHost: api.github.com\r\nA {P1}\r\n\r\n"),
       "without a colon"},
      {"control in value", Sub("GET / HTTP/1.1\r\nHost: api.github.com\r\nA: {P1}\x01\r\n\r\n"),
       "control byte in a header value"},
      {"duplicate Host",
       Sub("GET / HTTP/1.1\r\nHost: api.github.com\r\nhost: api.github.com\r\nA: {P1}\r\n\r\n"),
       "more than one Host"},
      {"empty line inside", Sub("GET / HTTP/1.1\r\nHost: api.github.com\r\n\r\nA: {P1}\r\n\r\n"),
       "empty line inside"},
      {"leading empty line", Sub("\r\nGET / HTTP/1.1\r\nHost: api.github.com\r\nA: {P1}\r\n\r\n"),
       "empty line before"},
      {"bad request line", Sub("GET  / HTTP/1.1\r\nHost: api.github.com\r\nA: {P1}\r\n\r\n"),
       "request line"},
      {"bad version", Sub("GET / HTTP/2.0\r\nHost: api.github.com\r\nA: {P1}\r\n\r\n"), "HTTP/1.x"},
      {"space in target", Sub("GET /a b HTTP/1.1\r\nHost: api.github.com\r\nA: {P1}\r\n\r\n"),
       "request line"},
      {"relative target", Sub("GET a HTTP/1.1\r\nHost: api.github.com\r\nA: {P1}\r\n\r\n"),
       "request target"},
      {"too large",
       "GET / HTTP/1.1\r\nHost: api.github.com\r\nA: " + std::string(kMaxHttp1RequestHead, 'a') +
           "\r\n\r\n",
       "larger than 65536"},
  };
  for (const auto& [what, head, why] : cases) {
    auto r = Rewrite(head);
    ASSERT_FALSE(r.has_value()) << what;
    EXPECT_THAT(r.error().message, HasSubstr(why)) << what;
    EXPECT_THAT(r.error().message, Not(HasSubstr(kV1))) << what;
  }
  // A bound value that could split the request is refused, and not shown.
  auto bindings = Bindings();
  bindings[0].value = "tok\r\nX-Injected: 1";
  auto r = RewriteHttp1RequestHead(ok, "api.github.com", bindings, false, nullptr);
  ASSERT_FALSE(r.has_value());
  EXPECT_THAT(r.error().message, HasSubstr("GH_TOKEN"));
  EXPECT_THAT(r.error().message, Not(HasSubstr("tok")));
  bindings = Bindings();
  bindings[1].placeholder = kP1;
  EXPECT_FALSE(RewriteHttp1RequestHead(ok, "api.github.com", bindings, false, nullptr));
  bindings[1].placeholder = "";
  EXPECT_FALSE(RewriteHttp1RequestHead(ok, "api.github.com", bindings, false, nullptr));
}

TEST(SecretRewriteTest, Http1OtherForms) {
  // CONNECT's authority form and OPTIONS * are requests too.
  std::string connect =
      Sub("CONNECT api.github.com:443 HTTP/1.1\r\nHost: api.github.com:443\r\nA: {P1}\r\n\r\n");
  EXPECT_EQ(*Rewrite(connect), Sub("CONNECT api.github.com:443 HTTP/1.1\r\n"
                                   "Host: api.github.com:443\r\nA: {V1}\r\n\r\n"));
  std::string options = Sub("OPTIONS * HTTP/1.1\r\nHost: api.github.com\r\nA: {P1}\r\n\r\n");
  EXPECT_EQ(*Rewrite(options),
            Sub("OPTIONS * HTTP/1.1\r\nHost: api.github.com\r\nA: {V1}\r\n\r\n"));
  // Not a head at all.
  EXPECT_FALSE(Rewrite("\r\n\r\n").has_value());
  EXPECT_FALSE(Rewrite("").has_value());
}

// ---- HTTP/2 ----

std::string Frame(uint8_t type, uint8_t flags, uint32_t stream, std::string_view payload) {
  std::string f;
  size_t n = payload.size();
  f += static_cast<char>(n >> 16);
  f += static_cast<char>(n >> 8);
  f += static_cast<char>(n);
  f += static_cast<char>(type);
  f += static_cast<char>(flags);
  f += static_cast<char>(stream >> 24);
  f += static_cast<char>(stream >> 16);
  f += static_cast<char>(stream >> 8);
  f += static_cast<char>(stream);
  f.append(payload);
  return f;
}

std::string SettingsPayload(std::vector<std::pair<uint16_t, uint32_t>> iv) {
  std::string p;
  for (auto [id, v] : iv) {
    p += static_cast<char>(id >> 8);
    p += static_cast<char>(id);
    for (int s = 24; s >= 0; s -= 8) p += static_cast<char>(v >> s);
  }
  return p;
}

struct FrameInfo {
  uint8_t type, flags;
  uint32_t stream;
  size_t length;
};
// The frames of a client byte stream (after the preface).
std::vector<FrameInfo> Frames(std::string_view bytes) {
  std::vector<FrameInfo> out;
  if (bytes.substr(0, 24) == NGHTTP2_CLIENT_MAGIC) bytes.remove_prefix(24);
  while (bytes.size() >= 9) {
    auto u = [&](size_t i) { return static_cast<uint32_t>(static_cast<uint8_t>(bytes[i])); };
    FrameInfo f{static_cast<uint8_t>(u(3)), static_cast<uint8_t>(u(4)),
                ((u(5) & 0x7f) << 24) | (u(6) << 16) | (u(7) << 8) | u(8),
                (u(0) << 16) | (u(1) << 8) | u(2)};
    out.push_back(f);
    bytes.remove_prefix(std::min(bytes.size(), 9 + f.length));
  }
  return out;
}

struct Field {
  std::string name, value;
  bool never_indexed;
};
using Fields = std::vector<Field>;

std::string Get(const Fields& fields, std::string_view name) {
  for (const auto& f : fields) {
    if (f.name == name) return f.value;
  }
  return "<absent>";
}
bool NeverIndexed(const Fields& fields, std::string_view name) {
  for (const auto& f : fields) {
    if (f.name == name) return f.never_indexed;
  }
  return false;
}

struct Body {
  std::string data;
  size_t offset = 0;
  std::vector<std::pair<std::string, std::string>> trailers;
};

// A real nghttp2 client and server with the rewriter between them.
class H2Pair {
 public:
  explicit H2Pair(std::string connection_host, bool substitute_query = false)
      : rewriter_(std::move(connection_host), Bindings(), substitute_query) {
    nghttp2_session_callbacks* cb;
    nghttp2_session_callbacks_new(&cb);
    nghttp2_session_callbacks_set_send_callback(cb, &H2Pair::OnSend);
    nghttp2_session_callbacks_set_select_padding_callback(cb, &H2Pair::OnPadding);
    nghttp2_session_client_new(&client_, cb, this);
    nghttp2_session_callbacks_del(cb);

    nghttp2_session_callbacks_new(&cb);
    nghttp2_session_callbacks_set_send_callback(cb, &H2Pair::OnSend);
    nghttp2_session_callbacks_set_on_header_callback(cb, &H2Pair::OnHeader);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, &H2Pair::OnFrameRecv);
    nghttp2_session_callbacks_set_on_frame_send_callback(cb, &H2Pair::OnFrameSend);
    nghttp2_session_callbacks_set_on_invalid_frame_recv_callback(cb, &H2Pair::OnInvalidFrame);
    nghttp2_session_callbacks_set_error_callback2(cb, &H2Pair::OnError);
    nghttp2_session_server_new(&server_, cb, this);
    nghttp2_session_callbacks_del(cb);
    nghttp2_submit_settings(client_, NGHTTP2_FLAG_NONE, nullptr, 0);
    nghttp2_submit_settings(server_, NGHTTP2_FLAG_NONE, nullptr, 0);
  }
  ~H2Pair() {
    nghttp2_session_del(client_);
    nghttp2_session_del(server_);
  }

  int32_t Request(const std::vector<std::pair<std::string, std::string>>& headers,
                  Body* body = nullptr, const nghttp2_priority_spec* priority = nullptr,
                  std::vector<std::string> never_index = {}) {
    std::vector<nghttp2_nv> nva;
    for (const auto& [n, v] : headers) {
      bool secret = std::find(never_index.begin(), never_index.end(), n) != never_index.end();
      nva.push_back(
          {const_cast<uint8_t*>(reinterpret_cast<const uint8_t*>(n.data())),
           const_cast<uint8_t*>(reinterpret_cast<const uint8_t*>(v.data())), n.size(), v.size(),
           static_cast<uint8_t>(secret ? NGHTTP2_NV_FLAG_NO_INDEX : NGHTTP2_NV_FLAG_NONE)});
    }
    nghttp2_data_provider provider{};
    provider.source.ptr = body;
    provider.read_callback = &H2Pair::OnRead;
    int32_t id = nghttp2_submit_request(client_, priority, nva.data(), nva.size(),
                                        body ? &provider : nullptr, nullptr);
    EXPECT_GT(id, 0) << nghttp2_strerror(id);
    return id;
  }

  void ServerSettings(std::vector<nghttp2_settings_entry> iv) {
    ASSERT_EQ(nghttp2_submit_settings(server_, NGHTTP2_FLAG_NONE, iv.data(), iv.size()), 0);
  }

  // Moves bytes both ways until both sides are quiet.
  void Pump() {
    for (int round = 0; round < 50; ++round) {
      bool moved = false;
      sending_ = &from_client_;
      ASSERT_EQ(nghttp2_session_send(client_), 0);
      if (!from_client_.empty()) {
        moved = true;
        std::string c = std::move(from_client_);
        from_client_.clear();
        client_bytes += c;
        std::string up;
        auto ok = rewriter_.FromClient(c, &up, &report);
        ASSERT_TRUE(ok.has_value()) << ok.error().ToString();
        upstream_bytes += up;
        ssize_t rv = nghttp2_session_mem_recv(server_, reinterpret_cast<const uint8_t*>(up.data()),
                                              up.size());
        ASSERT_EQ(rv, static_cast<ssize_t>(up.size())) << nghttp2_strerror(static_cast<int>(rv));
      }
      sending_ = &from_server_;
      ASSERT_EQ(nghttp2_session_send(server_), 0);
      if (!from_server_.empty()) {
        moved = true;
        std::string s = std::move(from_server_);
        from_server_.clear();
        auto ok = rewriter_.FromServer(s);
        ASSERT_TRUE(ok.has_value()) << ok.error().ToString();
        ssize_t rv =
            nghttp2_session_mem_recv(client_, reinterpret_cast<const uint8_t*>(s.data()), s.size());
        ASSERT_EQ(rv, static_cast<ssize_t>(s.size())) << nghttp2_strerror(static_cast<int>(rv));
      }
      if (!moved) return;
    }
    FAIL() << "the sessions kept talking";
  }

  std::map<int32_t, Fields> request;   // what the server decoded, per stream
  std::map<int32_t, Fields> trailers;  // the same, second header block
  std::map<int32_t, int32_t> weight;   // the server's view of the HEADERS' priority
  std::string server_problems;
  std::string client_bytes, upstream_bytes;
  RewriteReport report;
  bool pad = false;

 private:
  static ssize_t OnSend(nghttp2_session*, const uint8_t* data, size_t length, int, void* user) {
    static_cast<H2Pair*>(user)->sending_->append(reinterpret_cast<const char*>(data), length);
    return static_cast<ssize_t>(length);
  }
  static ssize_t OnPadding(nghttp2_session*, const nghttp2_frame* frame, size_t max, void* user) {
    if (!static_cast<H2Pair*>(user)->pad) return static_cast<ssize_t>(frame->hd.length);
    return static_cast<ssize_t>(std::min(frame->hd.length + 77, max));
  }
  static ssize_t OnRead(nghttp2_session* session, int32_t stream, uint8_t* buf, size_t length,
                        uint32_t* flags, nghttp2_data_source* source, void*) {
    auto* body = static_cast<Body*>(source->ptr);
    size_t n = std::min(length, body->data.size() - body->offset);
    std::memcpy(buf, body->data.data() + body->offset, n);
    body->offset += n;
    if (body->offset == body->data.size()) {
      *flags |= NGHTTP2_DATA_FLAG_EOF;
      if (!body->trailers.empty()) {
        *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
        std::vector<nghttp2_nv> nva;
        for (auto& [name, value] : body->trailers) {
          nva.push_back({reinterpret_cast<uint8_t*>(name.data()),
                         reinterpret_cast<uint8_t*>(value.data()), name.size(), value.size(),
                         NGHTTP2_NV_FLAG_NONE});
        }
        nghttp2_submit_trailer(session, stream, nva.data(), nva.size());
      }
    }
    return static_cast<ssize_t>(n);
  }
  static int OnHeader(nghttp2_session*, const nghttp2_frame* frame, const uint8_t* name,
                      size_t namelen, const uint8_t* value, size_t valuelen, uint8_t flags,
                      void* user) {
    auto* self = static_cast<H2Pair*>(user);
    auto& map = frame->headers.cat == NGHTTP2_HCAT_REQUEST ? self->request : self->trailers;
    map[frame->hd.stream_id].push_back({std::string(reinterpret_cast<const char*>(name), namelen),
                                        std::string(reinterpret_cast<const char*>(value), valuelen),
                                        (flags & NGHTTP2_NV_FLAG_NO_INDEX) != 0});
    return 0;
  }
  static int OnFrameRecv(nghttp2_session*, const nghttp2_frame* frame, void* user) {
    if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST) {
      static_cast<H2Pair*>(user)->weight[frame->hd.stream_id] = frame->headers.pri_spec.weight;
    }
    return 0;
  }
  static int OnFrameSend(nghttp2_session*, const nghttp2_frame* frame, void* user) {
    if (frame->hd.type == NGHTTP2_GOAWAY || frame->hd.type == NGHTTP2_RST_STREAM) {
      static_cast<H2Pair*>(user)->server_problems +=
          "server sent " + std::string(frame->hd.type == NGHTTP2_GOAWAY ? "GOAWAY" : "RST_STREAM") +
          "; ";
    }
    return 0;
  }
  static int OnInvalidFrame(nghttp2_session*, const nghttp2_frame*, int error, void* user) {
    static_cast<H2Pair*>(user)->server_problems +=
        std::string("invalid frame: ") + nghttp2_strerror(error) + "; ";
    return 0;
  }
  static int OnError(nghttp2_session*, int, const char* msg, size_t len, void* user) {
    static_cast<H2Pair*>(user)->server_problems += std::string(msg, len) + "; ";
    return 0;
  }

  H2RequestRewriter rewriter_;
  nghttp2_session* client_ = nullptr;
  nghttp2_session* server_ = nullptr;
  std::string from_client_, from_server_;
  std::string* sending_ = nullptr;
};

std::vector<std::pair<std::string, std::string>> Get(
    std::string authority, std::string path,
    std::vector<std::pair<std::string, std::string>> more = {}) {
  std::vector<std::pair<std::string, std::string>> h = {
      {":method", "GET"}, {":scheme", "https"}, {":authority", authority}, {":path", path}};
  h.insert(h.end(), more.begin(), more.end());
  return h;
}

TEST(SecretRewriteTest, H2SubstitutesForTheBoundHost) {
  H2Pair pair("api.github.com");
  std::string big(40000, 'x');
  for (size_t i = 0; i < big.size(); ++i) big[i] = "abcdefghijklmnopqrstuvwxyz0123456789-_"[i % 38];
  pair.pad = true;
  nghttp2_priority_spec priority;
  nghttp2_priority_spec_init(&priority, 0, 42, 0);
  int32_t s1 = pair.Request(Get("api.github.com", "/user",
                                {{"authorization", Sub("Bearer {P1}")},
                                 {"cookie", Sub("a={P1}; b={P2}")},
                                 {"x-api-key", kP2},
                                 {"x-big", big + kP1},
                                 {"x-private", "kept-never-indexed"},
                                 {"accept", "*/*"}}),
                            nullptr, &priority, {"x-private"});
  // nghttp2 pads only a block that fits one frame.
  int32_t small = pair.Request(Get("api.github.com", "/small", {{"x-api-key", kP2}}));
  pair.Pump();
  pair.pad = false;
  ASSERT_EQ(pair.server_problems, "");
  const Fields& got = pair.request[s1];
  EXPECT_EQ(Get(got, "authorization"), Sub("Bearer {V1}"));
  EXPECT_EQ(Get(got, "cookie"), Sub("a={V1}; b={V2}"));
  EXPECT_EQ(Get(got, "x-api-key"), kV2);
  EXPECT_EQ(Get(got, "x-big"), big + kV1);
  EXPECT_EQ(Get(got, "accept"), "*/*");
  EXPECT_EQ(Get(got, ":authority"), "api.github.com");
  EXPECT_TRUE(NeverIndexed(got, "authorization"));
  EXPECT_TRUE(NeverIndexed(got, "x-private"));
  EXPECT_FALSE(NeverIndexed(got, "accept"));
  EXPECT_EQ(pair.weight[s1], 42);
  EXPECT_EQ(Get(pair.request[small], "x-api-key"), kV2);
  EXPECT_THAT(pair.report.substituted, ElementsAre("GH_TOKEN", "API_KEY"));
  EXPECT_THAT(pair.report.withheld, IsEmpty());

  // The client padded a HEADERS and needed CONTINUATIONs for the other;
  // what went up is unpadded and no frame is over 16384 bytes.
  int padded_in = 0, continuations_out = 0;
  for (const auto& f : Frames(pair.client_bytes)) {
    if (f.type == NGHTTP2_HEADERS && (f.flags & NGHTTP2_FLAG_PADDED)) ++padded_in;
  }
  for (const auto& f : Frames(pair.upstream_bytes)) {
    EXPECT_LE(f.length, kH2EmittedFrameSize);
    if (f.type == NGHTTP2_HEADERS) {
      EXPECT_FALSE(f.flags & NGHTTP2_FLAG_PADDED);
      EXPECT_EQ((f.flags & NGHTTP2_FLAG_PRIORITY) != 0, f.stream == static_cast<uint32_t>(s1));
    }
    if (f.type == NGHTTP2_CONTINUATION) ++continuations_out;
  }
  EXPECT_EQ(padded_in, 1);
  EXPECT_GE(continuations_out, 1);

  // The same request again (now from the client's dynamic table), twice.
  for (int i = 0; i < 2; ++i) {
    int32_t again = pair.Request(
        Get("api.github.com", "/user", {{"authorization", Sub("Bearer {P1}")}, {"accept", "*/*"}}));
    pair.Pump();
    ASSERT_EQ(pair.server_problems, "");
    EXPECT_EQ(Get(pair.request[again], "authorization"), Sub("Bearer {V1}"));
    EXPECT_EQ(Get(pair.request[again], "accept"), "*/*");
  }
}

TEST(SecretRewriteTest, H2OtherHostsGetThePlaceholder) {
  H2Pair pair("api.github.com");
  int32_t fronted = pair.Request(Get("evil.example", "/", {{"authorization", kP1}}));
  int32_t host_differs =
      pair.Request(Get("api.github.com", "/", {{"host", "evil.example"}, {"authorization", kP1}}));
  int32_t good = pair.Request(Get("API.GitHub.com:443", "/", {{"authorization", kP1}}));
  int32_t authority_in_value = pair.Request(Get("api.github.com", "/", {{"x-a", kP1}}));
  pair.Pump();
  ASSERT_EQ(pair.server_problems, "");
  EXPECT_EQ(Get(pair.request[fronted], "authorization"), kP1);
  EXPECT_EQ(Get(pair.request[host_differs], "authorization"), kP1);
  EXPECT_EQ(Get(pair.request[good], "authorization"), kV1);
  EXPECT_EQ(Get(pair.request[authority_in_value], "x-a"), kV1);
  EXPECT_THAT(pair.report.substituted, ElementsAre("GH_TOKEN"));
  EXPECT_THAT(pair.report.withheld, ElementsAre("GH_TOKEN"));
  // One entry per request, in order, for the egress log.
  ASSERT_EQ(pair.report.requests.size(), 4u);
  for (const auto& r : pair.report.requests) EXPECT_EQ(r.method, "GET");
  EXPECT_THAT(pair.report.requests[0].withheld, ElementsAre("GH_TOKEN"));
  EXPECT_THAT(pair.report.requests[0].substituted, IsEmpty());
  EXPECT_THAT(pair.report.requests[1].withheld, ElementsAre("GH_TOKEN"));
  EXPECT_THAT(pair.report.requests[2].substituted, ElementsAre("GH_TOKEN"));
  EXPECT_THAT(pair.report.requests[3].substituted, ElementsAre("GH_TOKEN"));

  H2Pair unbound("example.org");
  int32_t s = unbound.Request(Get("example.org", "/", {{"authorization", kP1}, {"x", kP2}}));
  unbound.Pump();
  ASSERT_EQ(unbound.server_problems, "");
  EXPECT_EQ(Get(unbound.request[s], "authorization"), kP1);
  EXPECT_EQ(Get(unbound.request[s], "x"), kP2);
  EXPECT_THAT(unbound.report.substituted, IsEmpty());
  EXPECT_THAT(unbound.report.withheld, ElementsAre("GH_TOKEN", "API_KEY"));
}

TEST(SecretRewriteTest, H2QueryAndPseudoHeaders) {
  for (bool query : {false, true}) {
    H2Pair pair("api.github.com", query);
    int32_t s = pair.Request(Get("api.github.com", Sub("/{P1}/x?t={P1}")));
    pair.Pump();
    ASSERT_EQ(pair.server_problems, "");
    EXPECT_EQ(Get(pair.request[s], ":path"), query ? Sub("/{P1}/x?t={V1}") : Sub("/{P1}/x?t={P1}"));
    EXPECT_THAT(pair.report.withheld, ElementsAre("GH_TOKEN"));
  }
}

TEST(SecretRewriteTest, H2Trailers) {
  H2Pair pair("api.github.com");
  Body good{"payload", 0, {{"x-sig", Sub("sig={P1}")}, {"host", "evil.example"}}};
  Body fronted{"payload", 0, {{"x-sig", Sub("sig={P1}")}, {"host", "api.github.com"}}};
  int32_t s1 = pair.Request(Get("api.github.com", "/up"), &good);
  int32_t s2 = pair.Request(Get("evil.example", "/up"), &fronted);
  pair.Pump();
  ASSERT_EQ(pair.server_problems, "");
  EXPECT_EQ(Get(pair.trailers[s1], "x-sig"), Sub("sig={V1}"));
  EXPECT_EQ(Get(pair.trailers[s2], "x-sig"), Sub("sig={P1}"));
}

TEST(SecretRewriteTest, H2ServerSettingsAreFollowed) {
  H2Pair pair("api.github.com");
  int32_t s1 = pair.Request(Get("api.github.com", "/1", {{"authorization", kP1}, {"x-a", "aaa"}}));
  pair.Pump();
  ASSERT_EQ(pair.server_problems, "");
  // The server shrinks its HPACK table to nothing: the client's encoder and
  // ours both have to say so before the next block.
  pair.ServerSettings(
      {{NGHTTP2_SETTINGS_HEADER_TABLE_SIZE, 0}, {NGHTTP2_SETTINGS_MAX_FRAME_SIZE, 16384}});
  pair.Pump();
  ASSERT_EQ(pair.server_problems, "");
  int32_t s2 = pair.Request(Get("api.github.com", "/2", {{"authorization", kP1}, {"x-a", "aaa"}}));
  int32_t s3 = pair.Request(Get("api.github.com", "/3", {{"authorization", kP1}, {"x-a", "aaa"}}));
  pair.Pump();
  ASSERT_EQ(pair.server_problems, "");
  for (int32_t s : {s1, s2, s3}) {
    EXPECT_EQ(Get(pair.request[s], "authorization"), kV1) << s;
    EXPECT_EQ(Get(pair.request[s], "x-a"), "aaa") << s;
  }
  // And back to a table.
  pair.ServerSettings({{NGHTTP2_SETTINGS_HEADER_TABLE_SIZE, 8192}});
  pair.Pump();
  int32_t s4 = pair.Request(Get("api.github.com", "/4", {{"authorization", kP1}, {"x-a", "b"}}));
  int32_t s5 = pair.Request(Get("api.github.com", "/5", {{"authorization", kP1}, {"x-a", "b"}}));
  pair.Pump();
  ASSERT_EQ(pair.server_problems, "");
  EXPECT_EQ(Get(pair.request[s4], "authorization"), kV1);
  EXPECT_EQ(Get(pair.request[s5], "x-a"), "b");
}

TEST(SecretRewriteTest, H2AnySplitGivesTheSameBytes) {
  H2Pair pair("api.github.com");
  pair.pad = true;
  pair.Request(
      Get("api.github.com", "/", {{"authorization", kP1}, {"x-big", std::string(20000, 'q')}}));
  pair.Pump();
  ASSERT_EQ(pair.server_problems, "");
  H2RequestRewriter bytewise("api.github.com", Bindings(), false);
  std::string out;
  for (char c : pair.client_bytes) {
    auto ok = bytewise.FromClient(std::string_view(&c, 1), &out, nullptr);
    ASSERT_TRUE(ok.has_value()) << ok.error().ToString();
  }
  EXPECT_EQ(out, pair.upstream_bytes);
}

TEST(SecretRewriteTest, H2MaxFrameSize) {
  const std::string preface = NGHTTP2_CLIENT_MAGIC;
  std::string data = Frame(NGHTTP2_DATA, 0, 1, std::string(20000, 'd'));
  std::string ack = Frame(NGHTTP2_SETTINGS, NGHTTP2_FLAG_ACK, 0, "");
  {
    H2RequestRewriter rw("api.github.com", Bindings(), false);
    std::string out = "kept";
    auto r = rw.FromClient(preface + data, &out, nullptr);
    ASSERT_FALSE(r.has_value());
    EXPECT_THAT(r.error().message, HasSubstr("20000"));
    EXPECT_EQ(out, "kept");                                           // nothing of a failing call
    EXPECT_FALSE(rw.FromClient(preface, &out, nullptr).has_value());  // and it stays failed
    EXPECT_FALSE(rw.FromServer("").has_value());
  }
  H2RequestRewriter rw("api.github.com", Bindings(), false);
  auto larger =
      Frame(NGHTTP2_SETTINGS, 0, 0, SettingsPayload({{NGHTTP2_SETTINGS_MAX_FRAME_SIZE, 65536}}));
  ASSERT_TRUE(rw.FromServer(larger).has_value());
  std::string out;
  // Allowed as soon as the server said so; forwarded as is.
  ASSERT_TRUE(rw.FromClient(preface + data + ack, &out, nullptr).has_value());
  EXPECT_EQ(out, preface + data + ack);
  // A smaller maximum applies once the client acknowledged it.
  auto smaller =
      Frame(NGHTTP2_SETTINGS, 0, 0, SettingsPayload({{NGHTTP2_SETTINGS_MAX_FRAME_SIZE, 16384}}));
  ASSERT_TRUE(rw.FromServer(smaller).has_value());
  ASSERT_TRUE(rw.FromClient(data, &out, nullptr).has_value());
  ASSERT_TRUE(rw.FromClient(ack, &out, nullptr).has_value());
  EXPECT_FALSE(rw.FromClient(data, &out, nullptr).has_value());
  // The server's own nonsense.
  H2RequestRewriter bad("api.github.com", Bindings(), false);
  EXPECT_FALSE(bad.FromServer(Frame(NGHTTP2_SETTINGS, 0, 0,
                                    SettingsPayload({{NGHTTP2_SETTINGS_MAX_FRAME_SIZE, 100}})))
                   .has_value());
  H2RequestRewriter odd("api.github.com", Bindings(), false);
  EXPECT_FALSE(odd.FromServer(Frame(NGHTTP2_SETTINGS, 0, 0, "12345")).has_value());
}

// An HPACK integer (RFC 7541 5.1) with `bits` prefix bits after `first`.
std::string HpackInt(uint32_t value, int bits, uint8_t first) {
  uint32_t top = (1u << bits) - 1;
  if (value < top) return std::string(1, static_cast<char>(first | value));
  std::string out(1, static_cast<char>(first | top));
  for (value -= top; value >= 128; value >>= 7) out += static_cast<char>(0x80 | (value & 0x7f));
  out += static_cast<char>(value);
  return out;
}

TEST(SecretRewriteTest, H2TableSizeFollowsTheServerAndTheAck) {
  const std::string preface = NGHTTP2_CLIENT_MAGIC;
  const std::string request = std::string("\x82\x84\x87\x41\x0e", 5) + "api.github.com";
  const std::string add_x = std::string("\x40\x01x\x01y", 5);  // "x: y", into the table
  auto headers = [](uint32_t stream, const std::string& block) {
    return Frame(NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS | NGHTTP2_FLAG_END_STREAM, stream,
                 block);
  };
  auto settings = [](uint32_t table) {
    return Frame(NGHTTP2_SETTINGS, 0, 0,
                 SettingsPayload({{NGHTTP2_SETTINGS_HEADER_TABLE_SIZE, table}}));
  };
  const std::string ack = Frame(NGHTTP2_SETTINGS, NGHTTP2_FLAG_ACK, 0, "");
  std::string out;
  {
    // A larger table is usable as soon as the server announces it.
    H2RequestRewriter rw("api.github.com", Bindings(), false);
    ASSERT_TRUE(rw.FromServer(settings(8192)).has_value());
    auto r = rw.FromClient(preface + headers(1, HpackInt(8192, 5, 0x20) + request), &out, nullptr);
    EXPECT_TRUE(r.has_value()) << r.error().ToString();
  }
  {
    // Never beyond kMaxH2ClientHpackTable, whatever the server says.
    H2RequestRewriter rw("api.github.com", Bindings(), false);
    ASSERT_TRUE(rw.FromServer(settings(1 << 20)).has_value());
    auto r =
        rw.FromClient(preface + headers(1, HpackInt(kMaxH2ClientHpackTable + 1, 5, 0x20) + request),
                      &out, nullptr);
    EXPECT_FALSE(r.has_value());
  }
  {
    // A smaller one only from the client's ACK on: before it, a block may
    // still use the old table; after it, the next block must start with the
    // size update.
    H2RequestRewriter rw("api.github.com", Bindings(), false);
    ASSERT_TRUE(rw.FromClient(preface + headers(1, request + add_x), &out, nullptr).has_value());
    ASSERT_TRUE(rw.FromServer(settings(0)).has_value());
    auto r = rw.FromClient(headers(3, request + "\xbe"), &out, nullptr);  // index 62: "x: y"
    EXPECT_TRUE(r.has_value()) << r.error().ToString();
    ASSERT_TRUE(rw.FromClient(ack, &out, nullptr).has_value());
    H2RequestRewriter copy_without_update("api.github.com", Bindings(), false);
    ASSERT_TRUE(copy_without_update.FromServer(settings(0)).has_value());
    ASSERT_TRUE(copy_without_update.FromClient(preface + ack, &out, nullptr).has_value());
    EXPECT_FALSE(copy_without_update.FromClient(headers(1, request), &out, nullptr).has_value());
    r = rw.FromClient(headers(5, "\x20" + request), &out, nullptr);
    EXPECT_TRUE(r.has_value()) << r.error().ToString();
  }
}

TEST(SecretRewriteTest, H2Refusals) {
  const std::string preface = NGHTTP2_CLIENT_MAGIC;
  // An HPACK block a real encoder made: ":method GET" (static index 2),
  // ":path /" (4), ":scheme https" (7), ":authority api.github.com".
  const std::string block = std::string("\x82\x84\x87\x41\x0e", 5) + "api.github.com";
  std::vector<std::tuple<std::string, std::string, std::string>> cases = {
      {"bad preface", "GET / HTTP/1.1\r\nHost: api.github.com\r\n\r\n", "preface"},
      {"preface then garbage", preface.substr(0, 10) + "X", "preface"},
      {"oversized frame", preface + Frame(NGHTTP2_PING, 0, 0, std::string(16385, 0)),
       "16385 bytes"},
      {"CONTINUATION without HEADERS",
       preface + Frame(NGHTTP2_CONTINUATION, NGHTTP2_FLAG_END_HEADERS, 1, block),
       "outside a header block"},
      {"frame inside a header block",
       preface + Frame(NGHTTP2_HEADERS, 0, 1, block) + Frame(NGHTTP2_PING, 0, 0, "12345678"),
       "inside the header block"},
      {"CONTINUATION of another stream",
       preface + Frame(NGHTTP2_HEADERS, 0, 1, block) +
           Frame(NGHTTP2_CONTINUATION, NGHTTP2_FLAG_END_HEADERS, 3, ""),
       "inside the header block"},
      {"HPACK garbage: index 0",
       preface + Frame(NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS, 1, "\x80"), "HPACK"},
      {"HPACK garbage: index beyond the tables",
       preface + Frame(NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS, 1, "\xff\x7f"), "HPACK"},
      {"HPACK garbage: truncated literal",
       preface + Frame(NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS, 1,
                       "\x40\x05"
                       "ab"),
       "HPACK"},
      {"HPACK garbage: table size over the setting",
       preface + Frame(NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS, 1, "\x3f\xe2\x1f" + block),
       "HPACK"},
      {"HEADERS on stream 0", preface + Frame(NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS, 0, block),
       "stream 0"},
      {"padding beyond the frame",
       preface + Frame(NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS | NGHTTP2_FLAG_PADDED, 1,
                       "\x40" + block),
       "padding"},
      {"PUSH_PROMISE",
       preface + Frame(NGHTTP2_PUSH_PROMISE, NGHTTP2_FLAG_END_HEADERS, 1,
                       std::string("\0\0\0\2", 4) + block),
       "PUSH_PROMISE"},
      {"CR in a value",
       preface + Frame(NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS, 1,
                       block + std::string("\x40\x01x\x03"
                                           "a\rb",
                                           7)),
       "NUL, CR or LF"},
  };
  for (const auto& [what, bytes, why] : cases) {
    H2RequestRewriter rw("api.github.com", Bindings(), false);
    std::string out;
    auto r = rw.FromClient(bytes, &out, nullptr);
    ASSERT_FALSE(r.has_value()) << what;
    EXPECT_THAT(r.error().message, HasSubstr(why)) << what;
    EXPECT_EQ(out, "") << what;
    EXPECT_THAT(r.error().message, Not(HasSubstr(kV1))) << what;
  }
  // The same block, well framed, passes (the cases above fail for their reason).
  H2RequestRewriter rw("api.github.com", Bindings(), false);
  std::string out;
  auto r =
      rw.FromClient(preface + Frame(NGHTTP2_HEADERS, 0, 1, block.substr(0, 3)) +
                        Frame(NGHTTP2_CONTINUATION, NGHTTP2_FLAG_END_HEADERS, 1, block.substr(3)),
                    &out, nullptr);
  ASSERT_TRUE(r.has_value()) << r.error().ToString();
  // A bad binding: refused on first use, without its value.
  auto bindings = Bindings();
  bindings[0].value = "tok\nX: 1";
  H2RequestRewriter bad_binding("api.github.com", bindings, false);
  r = bad_binding.FromClient(preface, &out, nullptr);
  ASSERT_FALSE(r.has_value());
  EXPECT_THAT(r.error().message, Not(HasSubstr("tok")));
}

TEST(SecretRewriteTest, H2HeaderListIsCapped) {
  const std::string preface = NGHTTP2_CLIENT_MAGIC;
  // One literal field added to the table, then referenced until the decoded
  // list passes kMaxH2HeaderList (a small block, a large list).
  // A literal "x: v{4000}" added to the dynamic table (value length 4000 =
  // 127 + 3873 as an HPACK integer: 0x7f, 0x80 | (3873 & 0x7f), 3873 >> 7).
  std::string block = std::string("\x40\x01x\x7f", 4);
  block += static_cast<char>(0x80 | (3873 & 0x7f));
  block += static_cast<char>(3873 >> 7);
  block += std::string(4000, 'v');
  for (int i = 0; i < 80; ++i) block += '\xbe';  // index 62: that entry again
  H2RequestRewriter rw("api.github.com", Bindings(), false);
  std::string out;
  auto r = rw.FromClient(preface + Frame(NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS, 1, block), &out,
                         nullptr);
  ASSERT_FALSE(r.has_value());
  EXPECT_THAT(r.error().message, HasSubstr("header list"));
}

}  // namespace
}  // namespace deepbox::local
