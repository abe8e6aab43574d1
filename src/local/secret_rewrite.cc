#include "local/secret_rewrite.h"

#include <fmt/format.h>
#include <nghttp2/nghttp2.h>

#include <algorithm>
#include <cctype>
#include <deque>
#include <optional>
#include <set>

#include "common/strings.h"
#include "sandbox/network_policy.h"

namespace deepbox::local {

namespace {
// A named namespace inside the anonymous one: deepbox_local is built as a
// unity build, where other files' file-local helpers share this TU.
namespace srw {

bool IsControl(unsigned char c) { return c < 0x20 || c == 0x7f; }

bool IsTchar(unsigned char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(static_cast<char>(c)) != std::string_view::npos;
}

bool IsToken(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(),
                                   [](char c) { return IsTchar(static_cast<unsigned char>(c)); });
}

bool IEquals(std::string_view a, std::string_view b) { return AsciiLower(a) == AsciiLower(b); }

std::string_view TrimOws(std::string_view s) { return Trim(s, " \t"); }

// A request's host as the rules compare it: "Name.Example.:443" and
// "name.example" are one host; "[v6]:port" keeps its brackets. "" when the
// text is not host[:port] (userinfo, spaces, an empty host, a bad port...),
// which then matches nothing.
std::string NormalizeHost(std::string_view in) {
  std::string_view host = in;
  std::string_view port;
  bool has_port = false;
  if (!in.empty() && in[0] == '[') {
    size_t close = in.find(']');
    if (close == std::string_view::npos) return "";
    host = in.substr(0, close + 1);
    std::string_view rest = in.substr(close + 1);
    if (!rest.empty()) {
      if (rest[0] != ':') return "";
      has_port = true;
      port = rest.substr(1);
    }
    for (char c : host.substr(1, host.size() - 2)) {
      if (!(std::isxdigit(static_cast<unsigned char>(c)) || c == ':' || c == '.')) return "";
    }
  } else {
    if (size_t colon = in.rfind(':'); colon != std::string_view::npos) {
      host = in.substr(0, colon);
      port = in.substr(colon + 1);
      has_port = true;
    }
    if (!host.empty() && host.back() == '.') host.remove_suffix(1);
    if (host.empty()) return "";
    for (char c : host) {
      bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                c == '-' || c == '.' || c == '_';
      if (!ok) return "";
    }
  }
  if (has_port) {
    if (port.size() > 5) return "";
    for (char c : port) {
      if (c < '0' || c > '9') return "";
    }
  }
  return AsciiLower(host);
}

void AddOnce(std::vector<std::string>* list, const std::string& name) {
  if (std::find(list->begin(), list->end(), name) == list->end()) list->push_back(name);
}

void MergeReport(const RewriteReport& from, RewriteReport* into) {
  if (into == nullptr) return;
  for (const auto& n : from.substituted) AddOnce(&into->substituted, n);
  for (const auto& n : from.withheld) AddOnce(&into->withheld, n);
  into->requests.insert(into->requests.end(), from.requests.begin(), from.requests.end());
}

tl::unexpected<Error> Refuse(std::string message) {
  return MakeError(ErrorCode::kInvalidArgument, std::move(message));
}

Result<void> ValidateBindings(const std::vector<SecretBinding>& bindings) {
  for (size_t i = 0; i < bindings.size(); ++i) {
    const SecretBinding& b = bindings[i];
    if (b.placeholder.empty()) return Refuse(fmt::format("secret {}: empty placeholder", b.name));
    if (auto ok = ValidateSecretValue(b.value); !ok) {
      return Refuse(fmt::format("secret {}: {}", b.name, ok.error().message));
    }
    for (size_t j = 0; j < i; ++j) {
      if (bindings[j].placeholder == b.placeholder) {
        return Refuse(
            fmt::format("secrets {} and {} have the same placeholder", bindings[j].name, b.name));
      }
    }
  }
  return {};
}

// Which bindings the connection's host (normalized) is one of the hosts of.
std::vector<bool> EligibleBindings(const std::vector<SecretBinding>& bindings,
                                   const std::string& connection_host) {
  std::vector<bool> eligible(bindings.size(), false);
  if (connection_host.empty()) return eligible;
  for (size_t i = 0; i < bindings.size(); ++i) {
    eligible[i] = MatchAllowlist(bindings[i].hosts, connection_host, 443).matched;
  }
  return eligible;
}

// One left-to-right pass over a text: each placeholder (the earliest; of
// those starting at one place the longest) is replaced by its value where
// allowed, else kept and reported as withheld. The output is never scanned
// again.
class Substituter {
 public:
  Substituter(const std::vector<SecretBinding>& bindings, const std::vector<bool>& eligible,
              RewriteReport* report)
      : bindings_(bindings), eligible_(eligible), report_(report) {}

  // Appends `text` to *out; returns how many placeholders were replaced.
  // `query`: the text is a URL query, where only bindings with in_query are.
  size_t Apply(std::string_view text, bool allowed, std::string* out, bool query = false) {
    // Each binding's next occurrence, searched again only once passed: one
    // pass over the text per binding, however many placeholders it holds.
    std::vector<size_t> next(bindings_.size());
    for (size_t i = 0; i < bindings_.size(); ++i) next[i] = text.find(bindings_[i].placeholder);
    size_t replaced = 0;
    size_t pos = 0;
    for (;;) {
      size_t best = std::string_view::npos;
      size_t which = 0;
      for (size_t i = 0; i < bindings_.size(); ++i) {
        if (next[i] < best ||
            (next[i] == best && next[i] != std::string_view::npos &&
             bindings_[i].placeholder.size() > bindings_[which].placeholder.size())) {
          best = next[i];
          which = i;
        }
      }
      if (best == std::string_view::npos) break;
      const SecretBinding& b = bindings_[which];
      out->append(text.substr(pos, best - pos));
      if (allowed && eligible_[which] && (!query || b.in_query)) {
        out->append(b.value);
        AddOnce(&report_->substituted, b.name);
        ++replaced;
      } else {
        out->append(b.placeholder);
        AddOnce(&report_->withheld, b.name);
      }
      pos = best + b.placeholder.size();
      for (size_t i = 0; i < bindings_.size(); ++i) {
        if (next[i] != std::string_view::npos && next[i] < pos) {
          next[i] = text.find(bindings_[i].placeholder, pos);
        }
      }
    }
    out->append(text.substr(pos));
    return replaced;
  }

  // Reports the placeholders in a text that is never substituted.
  void Scan(std::string_view text) {
    std::string ignored;
    Apply(text, false, &ignored);
  }

 private:
  const std::vector<SecretBinding>& bindings_;
  const std::vector<bool>& eligible_;
  RewriteReport* report_;
};

// Fields a placeholder is never replaced in: what frames the message or
// names its host.
bool NeverSubstituted(std::string_view lower_name) {
  return lower_name == "host" || lower_name == "content-length" ||
         lower_name == "transfer-encoding";
}

// The query of an origin-form path (or of what follows an absolute-form
// target's authority): [prefix incl. '?'][query][rest from '#'].
struct QuerySplit {
  std::string_view before, query, after;
};
QuerySplit SplitQuery(std::string_view target, size_t from) {
  size_t q = target.find('?', from);
  if (q == std::string_view::npos) return {target, {}, {}};
  size_t hash = target.find('#', q + 1);
  if (hash == std::string_view::npos) hash = target.size();
  return {target.substr(0, q + 1), target.substr(q + 1, hash - q - 1), target.substr(hash)};
}

// "scheme://" at the start of a target: the index after it, 0 if none.
size_t SchemeEnd(std::string_view target) {
  size_t sep = target.find("://");
  if (sep == std::string_view::npos || sep == 0) return 0;
  auto alpha = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); };
  if (!alpha(target[0])) return 0;
  for (char c : target.substr(0, sep)) {
    if (!(alpha(c) || (c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.')) return 0;
  }
  return sep + 3;
}

// ---- HTTP/2 ----

constexpr std::string_view kH2Preface = NGHTTP2_CLIENT_MAGIC;
constexpr size_t kH2FrameHeader = 9;
constexpr uint32_t kH2DefaultTable = 4096;
constexpr uint32_t kH2DefaultFrame = 16384;
constexpr uint32_t kH2LargestFrame = (1u << 24) - 1;
constexpr size_t kMaxPendingSettings = 64;
// Open streams whose request named the connection's host, kept for their
// trailers. Beyond this many, a stream is not kept: its trailers get no
// substitution (the safe side).
constexpr size_t kMaxTrackedStreams = 4096;

struct FrameHeader {
  uint32_t length = 0;
  uint8_t type = 0;
  uint8_t flags = 0;
  uint32_t stream = 0;
};

FrameHeader ParseFrameHeader(std::string_view h) {
  auto u8 = [&](size_t i) { return static_cast<uint32_t>(static_cast<uint8_t>(h[i])); };
  FrameHeader f;
  f.length = (u8(0) << 16) | (u8(1) << 8) | u8(2);
  f.type = static_cast<uint8_t>(u8(3));
  f.flags = static_cast<uint8_t>(u8(4));
  f.stream = ((u8(5) & 0x7f) << 24) | (u8(6) << 16) | (u8(7) << 8) | u8(8);
  return f;
}

void AppendFrameHeader(std::string* out, size_t length, uint8_t type, uint8_t flags,
                       uint32_t stream) {
  char h[kH2FrameHeader] = {static_cast<char>((length >> 16) & 0xff),
                            static_cast<char>((length >> 8) & 0xff),
                            static_cast<char>(length & 0xff),
                            static_cast<char>(type),
                            static_cast<char>(flags),
                            static_cast<char>((stream >> 24) & 0x7f),
                            static_cast<char>((stream >> 16) & 0xff),
                            static_cast<char>((stream >> 8) & 0xff),
                            static_cast<char>(stream & 0xff)};
  out->append(h, sizeof h);
}

struct Field {
  std::string name;
  std::string value;
  bool never_index = false;
};

bool HasCrLfNul(std::string_view s) {
  return s.find_first_of(std::string_view("\r\n\0", 3)) != s.npos;
}

struct InflaterDeleter {
  void operator()(nghttp2_hd_inflater* p) const { nghttp2_hd_inflate_del(p); }
};
struct DeflaterDeleter {
  void operator()(nghttp2_hd_deflater* p) const { nghttp2_hd_deflate_del(p); }
};

}  // namespace srw
}  // namespace

Result<std::string> RewriteHttp1RequestHead(std::string_view head, std::string_view connection_host,
                                            const std::vector<SecretBinding>& bindings,
                                            bool substitute_query, RewriteReport* report) {
  using srw::Refuse;
  if (head.size() > kMaxHttp1RequestHead) {
    return Refuse(fmt::format("request head larger than {} bytes", kMaxHttp1RequestHead));
  }
  if (auto ok = srw::ValidateBindings(bindings); !ok) return tl::unexpected(ok.error());
  if (head.size() < 4 || head.substr(head.size() - 4) != "\r\n\r\n") {
    return Refuse("request head does not end with CRLF CRLF");
  }
  for (size_t i = 0; i < head.size(); ++i) {
    char c = head[i];
    if (c == '\0') return Refuse("NUL in the request head");
    if (c == '\r' && (i + 1 == head.size() || head[i + 1] != '\n')) {
      return Refuse("bare CR in the request head");
    }
    if (c == '\n' && (i == 0 || head[i - 1] != '\r')) return Refuse("bare LF in the request head");
  }
  std::vector<std::string_view> lines;
  std::string_view rest = head.substr(0, head.size() - 4);
  for (;;) {
    size_t eol = rest.find("\r\n");
    lines.push_back(rest.substr(0, eol));
    if (eol == std::string_view::npos) break;
    rest.remove_prefix(eol + 2);
  }
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].empty()) {
      return Refuse(i == 0 ? "empty line before the request line"
                           : "empty line inside the request head");
    }
  }

  // Request line: method SP request-target SP HTTP-version.
  std::string_view request_line = lines[0];
  size_t sp1 = request_line.find(' ');
  size_t sp2 = sp1 == std::string_view::npos ? sp1 : request_line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || request_line.find(' ', sp2 + 1) != std::string_view::npos) {
    return Refuse("request line is not 'METHOD SP target SP HTTP/1.x'");
  }
  std::string_view method = request_line.substr(0, sp1);
  std::string_view target = request_line.substr(sp1 + 1, sp2 - sp1 - 1);
  std::string_view version = request_line.substr(sp2 + 1);
  if (!srw::IsToken(method)) return Refuse("request method is not a token");
  if (target.empty()) return Refuse("empty request target");
  for (char c : target) {
    if (srw::IsControl(static_cast<unsigned char>(c))) {
      return Refuse("control byte in the request target");
    }
  }
  if (version.size() != 8 || version.substr(0, 7) != "HTTP/1." || version[7] < '0' ||
      version[7] > '9') {
    return Refuse("request line's version is not HTTP/1.x");
  }
  // The target's form; for absolute and authority form, its host.
  std::optional<std::string> target_host;
  size_t query_from = 0;  // where the path (and so the query) may start
  if (target[0] == '/') {
    // origin-form
  } else if (target == "*") {
    query_from = target.size();
  } else if (size_t auth = srw::SchemeEnd(target); auth != 0) {
    size_t end = target.find_first_of("/?#", auth);
    if (end == std::string_view::npos) end = target.size();
    std::string_view authority = target.substr(auth, end - auth);
    target_host = authority.find('@') == std::string_view::npos ? srw::NormalizeHost(authority)
                                                                : std::string();
    query_from = end;
  } else if (method == "CONNECT") {
    target_host = srw::NormalizeHost(target);
    query_from = target.size();
  } else {
    return Refuse("request target is not in origin, absolute, authority or asterisk form");
  }

  struct Line {
    std::string_view name, value;  // value: everything after the colon
  };
  std::vector<Line> fields;
  std::string host;
  int host_count = 0;
  for (size_t i = 1; i < lines.size(); ++i) {
    std::string_view line = lines[i];
    if (line[0] == ' ' || line[0] == '\t') return Refuse("obs-fold (a folded header line)");
    size_t colon = line.find(':');
    if (colon == std::string_view::npos) return Refuse("header line without a colon");
    Line f{line.substr(0, colon), line.substr(colon + 1)};
    if (!srw::IsToken(f.name)) return Refuse("header name is not a token");
    for (char c : f.value) {
      if (c != '\t' && srw::IsControl(static_cast<unsigned char>(c))) {
        return Refuse("control byte in a header value");
      }
    }
    if (srw::IEquals(f.name, "host")) {
      if (++host_count > 1) return Refuse("more than one Host header");
      host = srw::NormalizeHost(srw::TrimOws(f.value));
    }
    fields.push_back(f);
  }

  std::string connection = srw::NormalizeHost(connection_host);
  bool request_ok = host_count == 1 && !host.empty() && host == connection &&
                    (!target_host || *target_host == host);
  std::vector<bool> eligible = srw::EligibleBindings(bindings, connection);
  RewriteReport local;
  srw::Substituter sub(bindings, eligible, &local);

  std::string out;
  out.reserve(head.size());
  sub.Apply(method, false, &out);
  out += ' ';
  srw::QuerySplit q = srw::SplitQuery(target, query_from);
  sub.Apply(q.before, false, &out);
  sub.Apply(q.query, request_ok && substitute_query, &out, /*query=*/true);
  sub.Apply(q.after, false, &out);
  out += ' ';
  out.append(version);
  out += "\r\n";
  for (const Line& f : fields) {
    sub.Apply(f.name, false, &out);
    out += ':';
    bool allowed = request_ok && !srw::NeverSubstituted(AsciiLower(f.name));
    size_t start = out.size();
    if (sub.Apply(f.value, allowed, &out) > 0) {
      // Values are checked when bound (ValidateSecretValue); this keeps the
      // guarantee local: no substitution can end a line.
      for (size_t i = start; i < out.size(); ++i) {
        if (out[i] != '\t' && srw::IsControl(static_cast<unsigned char>(out[i]))) {
          return Refuse("a substituted header value has a control byte");
        }
      }
    }
    out += "\r\n";
  }
  out += "\r\n";
  srw::MergeReport(local, report);
  return out;
}

// ---- HTTP/2 ----

struct H2RequestRewriter::Impl {
  struct Settings {
    uint32_t table = srw::kH2DefaultTable;
    uint32_t max_frame = srw::kH2DefaultFrame;
  };

  std::string connection;  // normalized
  std::vector<SecretBinding> bindings;
  std::vector<bool> eligible;
  bool substitute_query = false;
  std::optional<Error> failed;  // sticky

  // Client to server.
  size_t preface_seen = 0;
  std::string header;      // a frame header being read
  uint64_t pass_left = 0;  // payload bytes of a forwarded frame still to come
  bool collecting = false;
  srw::FrameHeader frame;  // the HEADERS / CONTINUATION being read
  std::string payload;
  bool in_block = false;
  uint32_t block_stream = 0;
  uint8_t block_flags = 0;
  std::string block_priority;
  std::string block;
  uint32_t max_stream = 0;
  std::set<uint32_t> host_ok_streams;

  // The server's SETTINGS: acknowledged by the client, and sent but not yet.
  Settings acked;
  Settings announced;
  std::deque<Settings> pending;
  size_t inflater_cap = srw::kH2DefaultTable;
  size_t deflater_size = kMaxH2ServerHpackTable;
  std::unique_ptr<nghttp2_hd_inflater, srw::InflaterDeleter> inflater;
  std::unique_ptr<nghttp2_hd_deflater, srw::DeflaterDeleter> deflater;

  // Server to client.
  std::string server_header;
  uint64_t server_left = 0;
  bool server_settings = false;
  std::string server_entry;
  Settings server_cur;

  Result<void> Client(std::string_view in, std::string* out, RewriteReport* report);
  Result<void> StartFrame(const srw::FrameHeader& f, std::string_view raw, std::string* out,
                          RewriteReport* report);
  Result<void> HeaderFrame(std::string* out, RewriteReport* report);
  Result<void> RewriteBlock(std::string* out, RewriteReport* report);
  Result<std::vector<srw::Field>> Inflate();
  bool RequestHostOk(const std::vector<srw::Field>& fields) const;
  Result<void> Server(std::string_view in);
  Result<void> SettingsAcked();
  Result<void> UpdateInflaterCap();
  uint32_t IncomingMaxFrame() const {
    uint32_t m = acked.max_frame;
    for (const auto& s : pending) m = std::max(m, s.max_frame);
    return m;
  }
};

H2RequestRewriter::H2RequestRewriter(std::string connection_host,
                                     std::vector<SecretBinding> bindings, bool substitute_query)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.connection = srw::NormalizeHost(connection_host);
  m.bindings = std::move(bindings);
  m.eligible = srw::EligibleBindings(m.bindings, m.connection);
  m.substitute_query = substitute_query;
  if (auto ok = srw::ValidateBindings(m.bindings); !ok) m.failed = ok.error();
  nghttp2_hd_inflater* inflater = nullptr;
  nghttp2_hd_deflater* deflater = nullptr;
  if (nghttp2_hd_inflate_new(&inflater) != 0 ||
      nghttp2_hd_deflate_new(&deflater, kMaxH2ServerHpackTable) != 0) {
    m.failed = Error(ErrorCode::kResourceExhausted, "HPACK: out of memory");
  }
  m.inflater.reset(inflater);
  m.deflater.reset(deflater);
}

H2RequestRewriter::~H2RequestRewriter() = default;

Result<void> H2RequestRewriter::FromClient(std::string_view bytes, std::string* to_upstream,
                                           RewriteReport* report) {
  Impl& m = *impl_;
  if (m.failed) return tl::unexpected(*m.failed);
  std::string out;
  RewriteReport local;
  if (auto ok = m.Client(bytes, &out, &local); !ok) {
    m.failed = ok.error();
    return ok;
  }
  to_upstream->append(out);
  srw::MergeReport(local, report);
  return {};
}

Result<void> H2RequestRewriter::FromServer(std::string_view bytes) {
  Impl& m = *impl_;
  if (m.failed) return tl::unexpected(*m.failed);
  if (auto ok = m.Server(bytes); !ok) {
    m.failed = ok.error();
    return ok;
  }
  return {};
}

Result<void> H2RequestRewriter::Impl::Client(std::string_view in, std::string* out,
                                             RewriteReport* report) {
  while (!in.empty()) {
    if (preface_seen < srw::kH2Preface.size()) {
      size_t n = std::min(srw::kH2Preface.size() - preface_seen, in.size());
      if (in.substr(0, n) != srw::kH2Preface.substr(preface_seen, n)) {
        return srw::Refuse("not the HTTP/2 client connection preface");
      }
      out->append(in.substr(0, n));
      preface_seen += n;
      in.remove_prefix(n);
      continue;
    }
    if (pass_left > 0) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(pass_left, in.size()));
      out->append(in.substr(0, n));
      pass_left -= n;
      in.remove_prefix(n);
      continue;
    }
    if (collecting) {
      size_t n = std::min(frame.length - payload.size(), in.size());
      payload.append(in.substr(0, n));
      in.remove_prefix(n);
      if (payload.size() == frame.length) {
        collecting = false;
        if (auto ok = HeaderFrame(out, report); !ok) return ok;
      }
      continue;
    }
    size_t n = std::min(srw::kH2FrameHeader - header.size(), in.size());
    header.append(in.substr(0, n));
    in.remove_prefix(n);
    if (header.size() < srw::kH2FrameHeader) break;
    std::string raw = std::move(header);
    header.clear();
    if (auto ok = StartFrame(srw::ParseFrameHeader(raw), raw, out, report); !ok) return ok;
  }
  return {};
}

Result<void> H2RequestRewriter::Impl::StartFrame(const srw::FrameHeader& f, std::string_view raw,
                                                 std::string* out, RewriteReport* report) {
  if (f.length > IncomingMaxFrame()) {
    return srw::Refuse(fmt::format("HTTP/2 frame of {} bytes: the server's maximum is {}", f.length,
                                   IncomingMaxFrame()));
  }
  if (in_block && (f.type != NGHTTP2_CONTINUATION || f.stream != block_stream)) {
    return srw::Refuse(fmt::format(
        "HTTP/2 frame of type {} on stream {} inside the header block of stream {} (RFC 9113 6.10)",
        f.type, f.stream, block_stream));
  }
  // Padding and priority fields aside, a header frame's payload is block.
  if ((f.type == NGHTTP2_HEADERS || f.type == NGHTTP2_CONTINUATION) &&
      block.size() + f.length > kMaxH2HeaderBlock + 256 + 5) {
    return srw::Refuse(fmt::format("HTTP/2 header block over {} bytes", kMaxH2HeaderBlock));
  }
  switch (f.type) {
    case NGHTTP2_CONTINUATION:
      if (!in_block) return srw::Refuse("HTTP/2 CONTINUATION frame outside a header block");
      [[fallthrough]];
    case NGHTTP2_HEADERS:
      frame = f;
      payload.clear();
      if (f.length == 0) return HeaderFrame(out, report);
      collecting = true;
      return {};
    case NGHTTP2_PUSH_PROMISE:
      return srw::Refuse("HTTP/2 PUSH_PROMISE from the client");
    case NGHTTP2_SETTINGS:
      if (f.flags & NGHTTP2_FLAG_ACK) {
        if (auto ok = SettingsAcked(); !ok) return ok;
      }
      break;
    case NGHTTP2_DATA:
      if (f.flags & NGHTTP2_FLAG_END_STREAM) host_ok_streams.erase(f.stream);
      break;
    case NGHTTP2_RST_STREAM:
      host_ok_streams.erase(f.stream);
      break;
    default:
      break;
  }
  out->append(raw);
  pass_left = f.length;
  return {};
}

Result<void> H2RequestRewriter::Impl::HeaderFrame(std::string* out, RewriteReport* report) {
  std::string_view p = payload;
  if (frame.type == NGHTTP2_HEADERS) {
    if (frame.stream == 0) return srw::Refuse("HTTP/2 HEADERS frame on stream 0");
    size_t pad = 0;
    if (frame.flags & NGHTTP2_FLAG_PADDED) {
      if (p.empty()) return srw::Refuse("HTTP/2 HEADERS frame too short for its padding");
      pad = static_cast<uint8_t>(p[0]);
      p.remove_prefix(1);
    }
    std::string_view priority;
    if (frame.flags & NGHTTP2_FLAG_PRIORITY) {
      if (p.size() < 5) return srw::Refuse("HTTP/2 HEADERS frame too short for its priority");
      priority = p.substr(0, 5);
      p.remove_prefix(5);
    }
    if (pad > p.size()) return srw::Refuse("HTTP/2 HEADERS frame's padding exceeds the frame");
    p.remove_suffix(pad);
    in_block = true;
    block_stream = frame.stream;
    block_flags = frame.flags;
    block_priority = std::string(priority);
    block.clear();
  }
  if (block.size() + p.size() > kMaxH2HeaderBlock) {
    return srw::Refuse(fmt::format("HTTP/2 header block over {} bytes", kMaxH2HeaderBlock));
  }
  block.append(p);
  if (!(frame.flags & NGHTTP2_FLAG_END_HEADERS)) return {};
  in_block = false;
  return RewriteBlock(out, report);
}

Result<std::vector<srw::Field>> H2RequestRewriter::Impl::Inflate() {
  std::vector<srw::Field> fields;
  size_t list_size = 0;
  const auto* in = reinterpret_cast<const uint8_t*>(block.data());
  size_t left = block.size();
  for (;;) {
    nghttp2_nv nv{};
    int flags = 0;
    ssize_t rv = nghttp2_hd_inflate_hd2(inflater.get(), &nv, &flags, in, left, 1);
    if (rv < 0) {
      return srw::Refuse(fmt::format("HTTP/2 header block does not decode (HPACK: {})",
                                     nghttp2_strerror(static_cast<int>(rv))));
    }
    in += rv;
    left -= static_cast<size_t>(rv);
    if (flags & NGHTTP2_HD_INFLATE_EMIT) {
      list_size += nv.namelen + nv.valuelen + 32;
      if (list_size > kMaxH2HeaderList) {
        return srw::Refuse(fmt::format("HTTP/2 header list over {} bytes", kMaxH2HeaderList));
      }
      srw::Field f{std::string(reinterpret_cast<const char*>(nv.name), nv.namelen),
                   std::string(reinterpret_cast<const char*>(nv.value), nv.valuelen),
                   (nv.flags & NGHTTP2_NV_FLAG_NO_INDEX) != 0};
      if (srw::HasCrLfNul(f.name) || srw::HasCrLfNul(f.value)) {
        return srw::Refuse("HTTP/2 header field with NUL, CR or LF");
      }
      fields.push_back(std::move(f));
    }
    if (flags & NGHTTP2_HD_INFLATE_FINAL) {
      nghttp2_hd_inflate_end_headers(inflater.get());
      return fields;
    }
    if (!(flags & NGHTTP2_HD_INFLATE_EMIT) && rv == 0) {
      return srw::Refuse("HTTP/2 header block ends inside a field (HPACK)");
    }
  }
}

bool H2RequestRewriter::Impl::RequestHostOk(const std::vector<srw::Field>& fields) const {
  int seen = 0;
  for (const auto& f : fields) {
    std::string name = AsciiLower(f.name);  // a lenient server might take "Host" too
    if (name != ":authority" && name != "host") continue;
    ++seen;
    if (connection.empty() || srw::NormalizeHost(f.value) != connection) return false;
  }
  return seen > 0;
}

Result<void> H2RequestRewriter::Impl::RewriteBlock(std::string* out, RewriteReport* report) {
  auto fields = Inflate();
  if (!fields) return tl::unexpected(fields.error());
  bool end_stream = (block_flags & NGHTTP2_FLAG_END_STREAM) != 0;
  bool request = block_stream > max_stream;  // else trailers (or a stream id the server refuses)
  bool host_ok;
  if (request) {
    max_stream = block_stream;
    host_ok = RequestHostOk(*fields);
    if (host_ok && !end_stream && host_ok_streams.size() < srw::kMaxTrackedStreams) {
      host_ok_streams.insert(block_stream);
    }
  } else {
    host_ok = host_ok_streams.count(block_stream) > 0;
    if (end_stream) host_ok_streams.erase(block_stream);
  }

  RewriteReport block_report;
  srw::Substituter sub(bindings, eligible, &block_report);
  std::string method;
  std::vector<srw::Field> rewritten;
  rewritten.reserve(fields->size());
  for (auto& f : *fields) {
    sub.Scan(f.name);
    if (request && f.name == ":method") method = f.value.substr(0, 16);
    srw::Field r{std::move(f.name), {}, f.never_index};
    size_t replaced = 0;
    if (!r.name.empty() && r.name[0] == ':') {
      if (r.name == ":path" && request) {
        srw::QuerySplit q = srw::SplitQuery(f.value, 0);
        sub.Apply(q.before, false, &r.value);
        replaced = sub.Apply(q.query, host_ok && substitute_query, &r.value, /*query=*/true);
        sub.Apply(q.after, false, &r.value);
      } else {
        sub.Apply(f.value, false, &r.value);
      }
    } else {
      replaced =
          sub.Apply(f.value, host_ok && !srw::NeverSubstituted(AsciiLower(r.name)), &r.value);
    }
    if (replaced > 0) {
      r.never_index = true;
      if (srw::HasCrLfNul(r.value)) {
        return srw::Refuse("a substituted HTTP/2 header value has NUL, CR or LF");
      }
    }
    rewritten.push_back(std::move(r));
  }
  if (request)
    block_report.requests.push_back({method, block_report.substituted, block_report.withheld});
  srw::MergeReport(block_report, report);

  std::vector<nghttp2_nv> nva;
  nva.reserve(rewritten.size());
  for (auto& f : rewritten) {
    nva.push_back(
        {reinterpret_cast<uint8_t*>(f.name.data()), reinterpret_cast<uint8_t*>(f.value.data()),
         f.name.size(), f.value.size(),
         static_cast<uint8_t>(f.never_index ? NGHTTP2_NV_FLAG_NO_INDEX : NGHTTP2_NV_FLAG_NONE)});
  }
  std::string encoded(nghttp2_hd_deflate_bound(deflater.get(), nva.data(), nva.size()), '\0');
  ssize_t n = nghttp2_hd_deflate_hd(deflater.get(), reinterpret_cast<uint8_t*>(encoded.data()),
                                    encoded.size(), nva.data(), nva.size());
  if (n < 0) {
    return MakeError(ErrorCode::kInternal, fmt::format("HPACK: encoding a header block failed: {}",
                                                       nghttp2_strerror(static_cast<int>(n))));
  }
  encoded.resize(static_cast<size_t>(n));

  // HEADERS (its flags but PADDED, END_HEADERS on the last frame of the
  // block; the priority fields first), then CONTINUATIONs.
  std::string_view rest = encoded;
  uint8_t flags = block_flags & ~(NGHTTP2_FLAG_PADDED | NGHTTP2_FLAG_END_HEADERS);
  size_t room = kH2EmittedFrameSize - block_priority.size();
  size_t take = std::min(room, rest.size());
  bool last = take == rest.size();
  srw::AppendFrameHeader(out, block_priority.size() + take, NGHTTP2_HEADERS,
                         flags | (last ? NGHTTP2_FLAG_END_HEADERS : 0), block_stream);
  out->append(block_priority);
  out->append(rest.substr(0, take));
  rest.remove_prefix(take);
  while (!last) {
    take = std::min(kH2EmittedFrameSize, rest.size());
    last = take == rest.size();
    srw::AppendFrameHeader(out, take, NGHTTP2_CONTINUATION, last ? NGHTTP2_FLAG_END_HEADERS : 0,
                           block_stream);
    out->append(rest.substr(0, take));
    rest.remove_prefix(take);
  }
  block.clear();
  block.shrink_to_fit();
  return {};
}

Result<void> H2RequestRewriter::Impl::UpdateInflaterCap() {
  size_t cap = acked.table;
  for (const auto& s : pending) cap = std::max<size_t>(cap, s.table);
  cap = std::min(cap, kMaxH2ClientHpackTable);
  if (cap == inflater_cap) return {};
  // Called between header blocks only (a block is decoded whole).
  int rv = nghttp2_hd_inflate_change_table_size(inflater.get(), cap);
  if (rv != 0) {
    return MakeError(ErrorCode::kInternal, fmt::format("HPACK: changing the table size failed: {}",
                                                       nghttp2_strerror(rv)));
  }
  inflater_cap = cap;
  return {};
}

// The client acknowledged the oldest SETTINGS of the server it had not: from
// now on its encoder and frames follow it, and the server applies it to
// what we send once this ACK reaches it.
Result<void> H2RequestRewriter::Impl::SettingsAcked() {
  if (pending.empty()) return {};  // not ours to judge: the server will
  acked = pending.front();
  pending.pop_front();
  if (auto ok = UpdateInflaterCap(); !ok) return ok;
  size_t size = std::min<size_t>(acked.table, kMaxH2ServerHpackTable);
  if (size != deflater_size) {
    int rv = nghttp2_hd_deflate_change_table_size(deflater.get(), size);
    if (rv != 0) {
      return MakeError(
          ErrorCode::kInternal,
          fmt::format("HPACK: changing the table size failed: {}", nghttp2_strerror(rv)));
    }
    deflater_size = size;
  }
  return {};
}

Result<void> H2RequestRewriter::Impl::Server(std::string_view in) {
  auto settings_done = [&]() -> Result<void> {
    if (pending.size() >= srw::kMaxPendingSettings) {
      return srw::Refuse(fmt::format(
          "the HTTP/2 server sent more than {} SETTINGS frames the client did not acknowledge",
          srw::kMaxPendingSettings));
    }
    announced = server_cur;
    pending.push_back(server_cur);
    return UpdateInflaterCap();
  };
  while (!in.empty()) {
    if (server_left == 0) {
      size_t n = std::min(srw::kH2FrameHeader - server_header.size(), in.size());
      server_header.append(in.substr(0, n));
      in.remove_prefix(n);
      if (server_header.size() < srw::kH2FrameHeader) break;
      srw::FrameHeader f = srw::ParseFrameHeader(server_header);
      server_header.clear();
      server_settings = f.type == NGHTTP2_SETTINGS && !(f.flags & NGHTTP2_FLAG_ACK);
      if (server_settings) {
        if (f.stream != 0) return srw::Refuse("HTTP/2 SETTINGS from the server on a stream");
        if (f.length % 6 != 0) {
          return srw::Refuse("HTTP/2 SETTINGS from the server: length not a multiple of 6");
        }
        server_cur = announced;
        server_entry.clear();
      }
      if (f.type == NGHTTP2_RST_STREAM) host_ok_streams.erase(f.stream);
      server_left = f.length;
      if (server_settings && server_left == 0) {
        if (auto ok = settings_done(); !ok) return ok;
      }
      continue;
    }
    size_t n = static_cast<size_t>(std::min<uint64_t>(server_left, in.size()));
    if (server_settings) {
      for (char c : in.substr(0, n)) {
        server_entry += c;
        if (server_entry.size() < 6) continue;
        auto u8 = [&](size_t i) {
          return static_cast<uint32_t>(static_cast<uint8_t>(server_entry[i]));
        };
        uint32_t id = (u8(0) << 8) | u8(1);
        uint32_t value = (u8(2) << 24) | (u8(3) << 16) | (u8(4) << 8) | u8(5);
        server_entry.clear();
        if (id == NGHTTP2_SETTINGS_HEADER_TABLE_SIZE) {
          server_cur.table = value;
        } else if (id == NGHTTP2_SETTINGS_MAX_FRAME_SIZE) {
          if (value < srw::kH2DefaultFrame || value > srw::kH2LargestFrame) {
            return srw::Refuse(fmt::format(
                "HTTP/2 SETTINGS from the server: SETTINGS_MAX_FRAME_SIZE {} out of range", value));
          }
          server_cur.max_frame = value;
        }
      }
    }
    server_left -= n;
    in.remove_prefix(n);
    if (server_settings && server_left == 0) {
      if (auto ok = settings_done(); !ok) return ok;
    }
  }
  return {};
}

}  // namespace deepbox::local
