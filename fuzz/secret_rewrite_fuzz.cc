// The egress proxy's secret rewriters (src/local/secret_rewrite.h): an
// HTTP/1.x request head and an HTTP/2 connection's two byte streams.
//
// Input: a flags byte (bits 0-1: the connection's host, bit 2:
// substitute_query, bit 3: put the HTTP/2 client preface first, bits 4-5:
// the chunk size of the second HTTP/2 run), a 2-byte big-endian length and
// that many bytes of HTTP/1 head, then HTTP/2 records: a tag byte (bit 0: from
// the server, else from the client), a 2-byte length, the bytes.
//
// The secrets' values are bytes >= 0x80 (HPACK's Huffman code makes those
// longer, so an encoder writes them raw: a value sent is visible in the
// bytes). Properties:
//  - HTTP/1: an accepted head has the shape the rules ask for (ends in
//    CRLFCRLF, no NUL, no bare CR or LF, at most 64 KiB); the output is the
//    input with some placeholders replaced by their values and nothing else
//    changed; a value appears only for a bound connection host whose Host
//    header names it; the output rewritten again is the same output.
//  - HTTP/2: a failing call appends nothing and every later call fails; the
//    output does not depend on how the client's bytes are split; every header
//    block in the output decodes (a fresh HPACK decoder), no frame we made is
//    padded or over 16384 bytes; a value appears only in a regular field
//    (never a name, a pseudo-header other than :path's query, Host,
//    Content-Length or Transfer-Encoding), marked never-indexed, for a bound
//    connection host, in a block of a stream whose request named that host;
//    no value appears in the frames forwarded as they were.
//  - Errors never contain a value.
#include <nghttp2/nghttp2.h>

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/strings.h"
#include "fuzz/fuzz_util.h"
#include "local/secret_rewrite.h"

namespace {

using deepbox::local::RewriteReport;
using deepbox::local::SecretBinding;

const char* const kHosts[] = {"api.example.com", "other.example.org", "cdn.uploads.example.com",
                              "example.net"};

std::string HighBytes(unsigned char first) {
  std::string v;
  for (int i = 0; i < 20; ++i) v += static_cast<char>(first + i);
  return v;
}

const std::vector<SecretBinding>& Bindings() {
  static const std::vector<SecretBinding> b = {{"GH_TOKEN",
                                                "deepbox-secret-0123456789abcdef0123456789abcdef",
                                                HighBytes(0x80),
                                                {"api.example.com", "*.uploads.example.com"},
                                                true},
                                               {"API_KEY",
                                                "deepbox-secret-fedcba9876543210fedcba9876543210",
                                                HighBytes(0xc0),
                                                {"other.example.org"},
                                                false}};
  return b;
}

// Which bindings a connection host choice is bound for (from the lists above).
bool Eligible(size_t binding, size_t host) {
  return binding == 0 ? (host == 0 || host == 2) : host == 1;
}

bool Contains(const std::vector<std::string>& list, const std::string& s) {
  return std::find(list.begin(), list.end(), s) != list.end();
}

// "API.Example.com.:443" -> "api.example.com" (what the rules compare).
std::string HostOf(std::string_view value) {
  std::string h = deepbox::AsciiLower(deepbox::Trim(value, " \t"));
  if (size_t colon = h.rfind(':'); colon != std::string::npos) {
    std::string_view port = std::string_view(h).substr(colon + 1);
    if (std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      h.resize(colon);
    }
  }
  if (!h.empty() && h.back() == '.') h.pop_back();
  return h;
}

void CheckNoValue(const std::string& message) {
  for (const auto& b : Bindings()) {
    FUZZ_CHECK(message.find(b.value) == std::string::npos, "an error message shows a secret");
  }
}

void Http1(std::string_view head, size_t host, bool query) {
  RewriteReport report;
  auto out =
      deepbox::local::RewriteHttp1RequestHead(head, kHosts[host], Bindings(), query, &report);
  if (!out) {
    CheckNoValue(out.error().message);
    return;
  }
  FUZZ_CHECK(head.size() <= deepbox::local::kMaxHttp1RequestHead, "an oversized head accepted");
  FUZZ_CHECK(head.size() >= 4 && head.substr(head.size() - 4) == "\r\n\r\n",
             "a head not ending in CRLFCRLF accepted");
  for (size_t i = 0; i < head.size(); ++i) {
    FUZZ_CHECK(head[i] != '\0', "a head with NUL accepted");
    if (head[i] == '\r') FUZZ_CHECK(i + 1 < head.size() && head[i + 1] == '\n', "bare CR accepted");
    if (head[i] == '\n') FUZZ_CHECK(i > 0 && head[i - 1] == '\r', "bare LF accepted");
  }
  bool input_has_value = false;
  for (const auto& b : Bindings()) input_has_value |= head.find(b.value) != std::string_view::npos;
  if (report.substituted.empty()) FUZZ_CHECK(*out == head, "a head changed without substitution");
  if (!input_has_value) {
    std::string back = *out;
    for (const auto& b : Bindings()) back = deepbox::ReplaceAll(back, b.value, b.placeholder);
    FUZZ_CHECK(back == head, "the output differs from the input beyond the substitutions");
    for (size_t i = 0; i < Bindings().size(); ++i) {
      if (out->find(Bindings()[i].value) == std::string::npos) continue;
      FUZZ_CHECK(Eligible(i, host), "a value sent to a host it is not bound to");
      FUZZ_CHECK(Contains(report.substituted, Bindings()[i].name), "a substitution not reported");
      // An absolute-form target names the connection's host too.
      std::string_view line = std::string_view(*out).substr(0, out->find("\r\n"));
      std::string_view target = line.substr(line.find(' ') + 1);
      target = target.substr(0, target.find(' '));
      if (size_t scheme = target.find("://");
          scheme != std::string_view::npos && target.substr(0, scheme).find('/') == target.npos) {
        std::string_view authority = target.substr(scheme + 3);
        authority = authority.substr(0, authority.find_first_of("/?#"));
        FUZZ_CHECK(HostOf(authority) == kHosts[host],
                   "a value sent for an absolute URL of another host");
      }
      // The one Host line names the connection's host.
      int hosts = 0;
      std::string_view rest = *out;
      rest.remove_prefix(rest.find("\r\n") + 2);
      while (!rest.empty() && rest.substr(0, 2) != "\r\n") {
        std::string_view line = rest.substr(0, rest.find("\r\n"));
        rest.remove_prefix(line.size() + 2);
        size_t colon = line.find(':');
        if (deepbox::AsciiLower(line.substr(0, colon)) != "host") continue;
        ++hosts;
        FUZZ_CHECK(HostOf(line.substr(colon + 1)) == kHosts[host],
                   "a value sent with a Host that is not the connection's");
      }
      FUZZ_CHECK(hosts == 1, "a value sent without exactly one Host");
    }
  }
  if (out->size() <= deepbox::local::kMaxHttp1RequestHead) {
    auto again =
        deepbox::local::RewriteHttp1RequestHead(*out, kHosts[host], Bindings(), query, nullptr);
    FUZZ_CHECK(again.has_value(), "the rewritten head is refused");
    FUZZ_CHECK(*again == *out, "rewriting twice changes the head again");
  }
}

struct Record {
  bool from_server;
  std::string_view bytes;
};

// Runs the records through a rewriter, client records in chunks of `chunk`
// bytes (0: whole). Returns the output of each client record that succeeded
// (in order), and the index of the record that failed (records.size() if
// none).
std::pair<std::vector<std::string>, size_t> RunH2(const std::vector<Record>& records, size_t host,
                                                  bool query, size_t chunk) {
  deepbox::local::H2RequestRewriter rw(kHosts[host], Bindings(), query);
  std::vector<std::string> outputs;
  for (size_t i = 0; i < records.size(); ++i) {
    const Record& r = records[i];
    if (r.from_server) {
      auto ok = rw.FromServer(r.bytes);
      if (!ok) {
        CheckNoValue(ok.error().message);
        FUZZ_CHECK(!rw.FromServer("x") && !rw.FromClient("x", nullptr, nullptr),
                   "a failed rewriter goes on");
        return {outputs, i};
      }
      continue;
    }
    std::string out = "sentinel";
    std::string_view rest = r.bytes;
    do {
      size_t n = chunk == 0 ? rest.size() : std::min(chunk, rest.size());
      std::string before = out;
      RewriteReport report;
      auto ok = rw.FromClient(rest.substr(0, n), &out, &report);
      if (!ok) {
        CheckNoValue(ok.error().message);
        FUZZ_CHECK(out == before, "a failing call appended output");
        std::string ignored;
        FUZZ_CHECK(!rw.FromClient("x", &ignored, nullptr) && ignored.empty() && !rw.FromServer("x"),
                   "a failed rewriter goes on");
        return {outputs, i};
      }
      rest.remove_prefix(n);
    } while (!rest.empty());
    outputs.push_back(out.substr(8));
  }
  return {outputs, records.size()};
}

struct InflaterDeleter {
  void operator()(nghttp2_hd_inflater* p) const { nghttp2_hd_inflate_del(p); }
};

// Decodes the header blocks of what went upstream and checks where the
// values are.
void CheckUpstream(std::string_view up, size_t host, bool query) {
  constexpr std::string_view kPreface = NGHTTP2_CLIENT_MAGIC;
  FUZZ_CHECK(
      up.substr(0, kPreface.size()) == kPreface.substr(0, std::min(up.size(), kPreface.size())),
      "the output does not start with the preface");
  if (up.size() < kPreface.size()) return;
  up.remove_prefix(kPreface.size());
  nghttp2_hd_inflater* raw = nullptr;
  FUZZ_CHECK(nghttp2_hd_inflate_new(&raw) == 0, "nghttp2_hd_inflate_new");
  std::unique_ptr<nghttp2_hd_inflater, InflaterDeleter> inflater(raw);
  std::string passed, block;
  uint32_t block_stream = 0, max_stream = 0;
  bool block_request = false;
  std::set<uint32_t> ok_streams;
  while (up.size() >= 9) {
    auto u = [&](size_t i) { return static_cast<uint32_t>(static_cast<uint8_t>(up[i])); };
    uint32_t length = (u(0) << 16) | (u(1) << 8) | u(2);
    uint8_t type = static_cast<uint8_t>(u(3)), flags = static_cast<uint8_t>(u(4));
    uint32_t stream = ((u(5) & 0x7f) << 24) | (u(6) << 16) | (u(7) << 8) | u(8);
    std::string_view payload = up.substr(9, length);
    up.remove_prefix(std::min(up.size(), 9 + static_cast<size_t>(length)));
    if (type != NGHTTP2_HEADERS && type != NGHTTP2_CONTINUATION) {
      passed.append(payload);
      continue;
    }
    FUZZ_CHECK(payload.size() == length, "a header frame we made is cut");
    FUZZ_CHECK(length <= deepbox::local::kH2EmittedFrameSize, "a header frame over 16384 bytes");
    if (type == NGHTTP2_HEADERS) {
      FUZZ_CHECK(!(flags & NGHTTP2_FLAG_PADDED), "a HEADERS frame we made is padded");
      if (flags & NGHTTP2_FLAG_PRIORITY) payload.remove_prefix(5);
      block_stream = stream;
      block_request = stream > max_stream;
      max_stream = std::max(max_stream, stream);
      block.clear();
    } else {
      FUZZ_CHECK(stream == block_stream, "a CONTINUATION on another stream");
    }
    block.append(payload);
    if (!(flags & NGHTTP2_FLAG_END_HEADERS)) continue;
    struct F {
      std::string name, value;
      bool never_indexed;
    };
    std::vector<F> fields;
    const auto* in = reinterpret_cast<const uint8_t*>(block.data());
    size_t left = block.size();
    for (;;) {
      nghttp2_nv nv;
      int inflate_flags = 0;
      ssize_t rv = nghttp2_hd_inflate_hd2(inflater.get(), &nv, &inflate_flags, in, left, 1);
      FUZZ_CHECK(rv >= 0, "a header block we made does not decode");
      in += rv;
      left -= static_cast<size_t>(rv);
      if (inflate_flags & NGHTTP2_HD_INFLATE_EMIT) {
        fields.push_back({std::string(reinterpret_cast<const char*>(nv.name), nv.namelen),
                          std::string(reinterpret_cast<const char*>(nv.value), nv.valuelen),
                          (nv.flags & NGHTTP2_NV_FLAG_NO_INDEX) != 0});
      }
      if (inflate_flags & NGHTTP2_HD_INFLATE_FINAL) break;
      FUZZ_CHECK(rv > 0 || (inflate_flags & NGHTTP2_HD_INFLATE_EMIT), "the decoder is stuck");
    }
    nghttp2_hd_inflate_end_headers(inflater.get());
    bool host_ok;
    if (block_request) {
      int seen = 0;
      host_ok = true;
      for (const auto& f : fields) {
        std::string name = deepbox::AsciiLower(f.name);
        if (name != ":authority" && name != "host") continue;
        ++seen;
        host_ok = host_ok && HostOf(f.value) == kHosts[host];
      }
      host_ok = host_ok && seen > 0;
      if (host_ok) ok_streams.insert(block_stream);
    } else {
      host_ok = ok_streams.count(block_stream) > 0;
    }
    for (const auto& f : fields) {
      for (size_t i = 0; i < Bindings().size(); ++i) {
        const std::string& v = Bindings()[i].value;
        FUZZ_CHECK(f.name.find(v) == std::string::npos, "a value in a field name");
        size_t at = f.value.find(v);
        if (at == std::string::npos) continue;
        FUZZ_CHECK(Eligible(i, host), "a value sent to a host it is not bound to");
        FUZZ_CHECK(host_ok, "a value sent in a request that does not name the connection's host");
        FUZZ_CHECK(f.never_indexed, "a substituted field is not never-indexed");
        std::string name = deepbox::AsciiLower(f.name);
        FUZZ_CHECK(name != "host" && name != "content-length" && name != "transfer-encoding",
                   "a value in a framing or host field");
        if (!name.empty() && name[0] == ':') {
          FUZZ_CHECK(query && block_request && name == ":path", "a value in a pseudo-header");
          size_t q = f.value.find('?');
          FUZZ_CHECK(q != std::string::npos && q < at, "a value in :path outside the query");
        }
      }
    }
  }
  for (const auto& b : Bindings()) {
    FUZZ_CHECK(passed.find(b.value) == std::string::npos, "a value in a frame forwarded as is");
  }
}

void Http2(std::string_view rest, size_t host, bool query, bool preface, size_t chunk) {
  std::vector<Record> records;
  static const std::string kPreface = NGHTTP2_CLIENT_MAGIC;
  if (preface) records.push_back({false, kPreface});
  while (rest.size() >= 3) {
    bool server = rest[0] & 1;
    size_t n = (static_cast<uint8_t>(rest[1]) << 8) | static_cast<uint8_t>(rest[2]);
    rest.remove_prefix(3);
    records.push_back({server, rest.substr(0, n)});
    rest.remove_prefix(std::min(n, rest.size()));
  }
  for (const auto& r : records) {
    for (const auto& b : Bindings()) {
      if (r.bytes.find(b.value) != std::string_view::npos) return;  // the sandbox knows it
    }
  }
  auto [whole, failed_at] = RunH2(records, host, query, 0);
  auto [split, split_failed_at] = RunH2(records, host, query, chunk);
  FUZZ_CHECK(failed_at == split_failed_at, "splitting the client's bytes changes where it fails");
  FUZZ_CHECK(whole == split, "splitting the client's bytes changes the output");
  std::string up;
  for (const auto& o : whole) up += o;
  CheckUpstream(up, host, query);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  if (input.size() < 3) return 0;
  uint8_t flags = static_cast<uint8_t>(input[0]);
  size_t host = flags & 3;
  bool query = flags & 4;
  bool preface = flags & 8;
  static const size_t kChunks[] = {1, 7, 100, 4096};
  size_t chunk = kChunks[(flags >> 4) & 3];
  size_t head_len = (static_cast<uint8_t>(input[1]) << 8) | static_cast<uint8_t>(input[2]);
  input.remove_prefix(3);
  std::string_view head = input.substr(0, head_len);
  input.remove_prefix(std::min(head_len, input.size()));
  Http1(head, host, query);
  Http2(input, host, query, preface, chunk);
  return 0;
}
