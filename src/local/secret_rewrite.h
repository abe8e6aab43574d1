// Secret injection by the egress proxy (egress_proxy.h): the request
// rewriters, pure and fuzzed (fuzz/secret_rewrite_fuzz.cc).
//
// Inside the sandbox a secret's variable ($GH_TOKEN) holds a placeholder
// ("deepbox-secret-<32 lowercase hex>"), never the value. The proxy, which
// has terminated TLS (or sees plain HTTP) and knows the connection's host
// (the CONNECT host, which is also the SNI), hands each request head to these
// rewriters: where the rules below allow it, the placeholder is replaced by
// the real value on its way out; everywhere else the request goes out
// unchanged and the binding is reported as withheld (for the proxy's log).
// The value never reaches the sandbox, so a compromised workload can use the
// secret only against the secret's own hosts, and cannot read it.
//
// The rules, and why:
//  - Only to the secret's hosts, and only when the request names the host
//    its connection goes to. A placeholder is replaced only if the request's
//    own host equals the connection's host (case-insensitive, a trailing dot
//    and a port ignored) AND that host matches one of the binding's `hosts`
//    (MatchAllowlist's grammar: "*.x.com" is any subdomain of x.com, not
//    x.com). The request's host is, for HTTP/1.x, the Host header, which must
//    be there exactly once and, for an absolute-form (or authority-form)
//    target, agree with the target's host; for HTTP/2, every `:authority`
//    and every `host` field of the request (at least one, all equal).
//    Why both: a CDN or a shared front end routes on the Host header (or
//    :authority), not on the TLS server name, so a request that reaches the
//    secret's host over a connection to it but names another site would
//    carry the secret to that other site (domain fronting). An HTTP/2 server
//    is only asked to refuse a `host` that differs from `:authority`
//    (RFC 9113 8.3.1 says SHOULD), so both must name the connection's host.
//  - Only in header values: every field's value (any name, any case: Cookie,
//    Authorization, X-Api-Key, custom ones), anywhere inside the value,
//    several placeholders per value, several secrets; the query component of
//    the request target (HTTP/2: of `:path`) only with `substitute_query`
//    (URLs end up in logs, on both sides). Never the method, the path,
//    header names, HTTP/2 pseudo-header fields other than `:path`'s query,
//    or the body (the proxy never looks into bodies: a secret needed there is
//    not supported). Never either in the fields that frame the message or
//    name its host (Host, Content-Length, Transfer-Encoding; HTTP/2 also
//    `:authority`): a substitution there could make the upstream frame or
//    route the request otherwise than the proxy did.
//    The text is scanned once, left to right: a value is never scanned
//    again, so a secret's value that happens to contain another placeholder
//    is not expanded. A placeholder split across two fields (or two HTTP/1
//    header lines) is not one.
//  - Malformed input is refused (an error; nothing of it is forwarded), not
//    guessed at: when the proxy and the upstream read a head differently,
//    the upstream may see headers, or a host, the proxy did not check
//    (request smuggling). See RewriteHttp1RequestHead and H2RequestRewriter
//    for what is refused.
//  - The value never appears in an error message or a report (only the
//    binding's name does). ValidateSecretValue checks it when it is bound:
//    a value that could end a header line or split a request (CR, LF, NUL,
//    any other control byte but HT), or one with leading or trailing
//    whitespace (HTTP/2 refuses such field values), is refused.
//
// Reports: RewriteReport lists binding names, each at most once per list (a
// call appends to what is there). `withheld` names the bindings whose
// placeholder appeared somewhere in what was read (a header value or name,
// the request target, an HTTP/2 pseudo-header) and was not replaced there:
// the connection's host is not the binding's, the request's host is not the
// connection's, or the place is one that is never substituted. A name can
// be in both lists.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "sandbox/secrets.h"

namespace deepbox::local {

struct SecretBinding {
  std::string name;         // the environment variable's name, for reports
  std::string placeholder;  // what the sandbox holds (non-empty, unique per request)
  std::string value;        // the real secret: never in an error message or a report
  // Lower-case host names without ports; "*.x.com" = any subdomain of x.com
  // (not x.com). Matched with deepbox::MatchAllowlist (sandbox/network_policy.h).
  std::vector<std::string> hosts;
  // Also in the URL query (when the rewriter's substitute_query is on too):
  // `--secret ...;query`. Off by default: a URL ends up in logs.
  bool in_query = false;
};

struct RewriteReport {
  std::vector<std::string> substituted;  // names whose placeholder was replaced
  std::vector<std::string> withheld;     // names whose placeholder was seen and not replaced
  // HTTP/2: one per request (a stream's first header block; trailers count
  // in the totals above only), in order: what the egress log records.
  struct Request {
    std::string method;
    std::vector<std::string> substituted;
    std::vector<std::string> withheld;
  };
  std::vector<Request> requests;
};

inline constexpr size_t kMaxSecretValue = kMaxSecretValueBytes;
inline constexpr size_t kMaxHttp1RequestHead = 64 * 1024;
// HTTP/2: the decoded header list of one block (RFC 9113's size: name +
// value + 32 per field), and the HPACK-encoded block as received.
inline constexpr size_t kMaxH2HeaderList = 256 * 1024;
inline constexpr size_t kMaxH2HeaderBlock = 256 * 1024;
// The largest HPACK dynamic table the client's encoder may use towards us,
// whatever the server announces (memory per connection; the usual clients'
// encoders stay at 4096).
inline constexpr size_t kMaxH2ClientHpackTable = 64 * 1024;
// The HPACK dynamic table our encoder uses at most towards the server (less
// when the server's SETTINGS_HEADER_TABLE_SIZE is less).
inline constexpr size_t kMaxH2ServerHpackTable = 4096;
// The frames we make (HEADERS, CONTINUATION) have at most this payload: the
// smallest SETTINGS_MAX_FRAME_SIZE a server may announce, so it never
// exceeds the server's, whenever its SETTINGS take effect.
inline constexpr size_t kH2EmittedFrameSize = 16384;

// A secret's value is checked with deepbox::ValidateSecretValue
// (sandbox/secrets.h): non-empty, at most kMaxSecretValue bytes, no control
// byte (NUL, CR, LF, ...; HT is allowed inside), no leading or trailing space
// or HT. The error never shows the value.

// HTTP/1.x: `head` is one request head, the request line through the final
// CRLFCRLF (the proxy frames the body itself, from the head it sends);
// returns the head to send: the same bytes with the allowed placeholders
// replaced (it may be longer than kMaxHttp1RequestHead). `connection_host`
// is the CONNECT host (for plain HTTP: the URL's host the proxy checked).
// Refused (an error, the head must not be forwarded): a head over
// kMaxHttp1RequestHead or not ending in CRLFCRLF or with an empty line before
// its end; a bare CR or LF; NUL; a request line that is not
// "METHOD SP target SP HTTP/1.d" (token method; no control byte or space in
// the target); obs-fold (a line starting with SP or HT); a field name that is
// not an RFC 9110 token (which includes whitespace before the colon); a field
// value with a control byte other than HT; more than one Host; a binding
// with an empty or duplicate placeholder or an invalid value. `report` may
// be null.
Result<std::string> RewriteHttp1RequestHead(std::string_view head, std::string_view connection_host,
                                            const std::vector<SecretBinding>& bindings,
                                            bool substitute_query, RewriteReport* report);

// HTTP/2, one connection (cleartext prior knowledge or after TLS with ALPN
// h2). The client's bytes go through FromClient, which forwards every frame
// byte for byte except HEADERS and CONTINUATION: those header blocks are
// decoded (HPACK, nghttp2's decoder), the values substituted by the rules
// above, encoded again (nghttp2's encoder, our own dynamic table) and sent as
// a HEADERS frame (same stream, same flags but PADDED, the PRIORITY fields
// kept) followed by CONTINUATIONs, none over kH2EmittedFrameSize. Fields
// keep their never-indexed flag, and substituted ones are sent
// never-indexed (RFC 7541 7.1.3: intermediaries keep such values out of
// compression tables). A second HEADERS on a stream (trailers) follows the
// rules with the host of the stream's request; a HEADERS block on a stream
// the client opened before but whose request did not name the connection's
// host, or that is not being tracked, gets no substitution.
//
// The server's bytes pass unchanged, but must be shown to FromServer BEFORE
// they are written to the client: its SETTINGS decide how large the client's
// frames and HPACK table may be. SETTINGS_HEADER_TABLE_SIZE and
// SETTINGS_MAX_FRAME_SIZE are followed as the two peers see them: a larger
// value is accepted from the client as soon as the server sends it, a
// smaller one only once the client acknowledges that SETTINGS (its SETTINGS
// ACK), when our encoder's table towards the server changes too (the server
// applies its own new value when it receives that ACK). The table sizes are
// capped (kMaxH2ClientHpackTable, kMaxH2ServerHpackTable).
//
// Refused, and then every later call fails too (the proxy closes both
// connections; nothing of the failing call is appended to `to_upstream`):
// a client preface other than "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"; a frame
// longer than the server's SETTINGS_MAX_FRAME_SIZE (16384 until the server
// says otherwise); HEADERS on stream 0, with padding or priority fields
// longer than the frame; a CONTINUATION that does not continue a header block
// (RFC 9113 6.10: any other frame, or a frame of another stream, inside a
// block is a connection error); PUSH_PROMISE (a client never sends it, and
// its header block would change the HPACK state without being rewritten);
// an HPACK error; a block over kMaxH2HeaderBlock or a header list over
// kMaxH2HeaderList; a field name or value with NUL, CR or LF; from the
// server: a SETTINGS frame whose length is not a multiple of 6, on a stream
// other than 0, with a SETTINGS_MAX_FRAME_SIZE outside [16384, 2^24-1], or
// more than 64 of them the client has not acknowledged.
// Not thread-safe: the proxy calls it from one thread (or under a lock).
class H2RequestRewriter {
 public:
  H2RequestRewriter(std::string connection_host, std::vector<SecretBinding> bindings,
                    bool substitute_query);
  ~H2RequestRewriter();
  H2RequestRewriter(const H2RequestRewriter&) = delete;
  H2RequestRewriter& operator=(const H2RequestRewriter&) = delete;

  // Appends to *to_upstream what to send to the server for `bytes` (any
  // split: a partial frame is kept until the rest comes). `report` may be
  // null.
  Result<void> FromClient(std::string_view bytes, std::string* to_upstream, RewriteReport* report);
  // Observes the server's bytes (any split); they are forwarded unchanged.
  Result<void> FromServer(std::string_view bytes);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace deepbox::local
