// TLS for the egress proxy's secret injection (egress_proxy.h): for a
// sandbox's "secret hosts" the host-side proxy ends the sandbox's TLS itself,
// with certificates of a CA minted for that one sandbox, and opens its own,
// fully verified TLS upstream. OpenSSL 3.0.
//
// The CA (SandboxCa::Create), one per sandbox:
//   - key: EC P-256, generated here; it never leaves this process (no API
//     returns it, cert_pem() holds only the certificate). A sandbox that dies
//     takes its CA with it: nothing to revoke, nothing on disk.
//   - certificate: self-signed X.509 v3, subject and issuer
//     "CN=deepbox sandbox <label> secrets CA", a random 128-bit serial (two
//     CAs never share issuer+serial, RFC 5280's uniqueness), valid from 1 h
//     ago (clock skew between host and sandbox) for 400 days: longer than any
//     sandbox should live, and within the 398 days browsers cap TLS
//     certificates at (a CA in a private store is not bound by that, but no
//     client should ever find a reason to object).
//   - basicConstraints critical CA:TRUE, pathlen:0 (it can sign leaves, no
//     intermediate CA); keyUsage critical keyCertSign, cRLSign;
//     subjectKeyIdentifier (the leaves' authorityKeyIdentifier).
//   - nameConstraints, critical: permitted DNS subtrees for exactly the secret
//     hosts, and every IPv4 and IPv6 address excluded (0.0.0.0/0, ::/0:
//     without that a constraint of DNS names says nothing about IP SANs), so
//     even a leaked CA key mints nothing a sandbox client would accept
//     outside those subtrees. The subtree of "api.example.com" is
//     "api.example.com", of "*.example.com" it is "example.com": RFC 5280
//     gives a DNS subtree no other form, and it matches the name and every
//     name under it (OpenSSL: "api.example.com", "v1.api.example.com", never
//     "xapi.example.com"). A leading dot (".example.com", subdomains only) is
//     honoured by OpenSSL and Go, but it is not RFC 5280 DNS syntax (linters
//     flag it) and Java verified it wrongly until JDK-8311546 (2023), so it
//     is not used: a wildcard's subtree also admits the bare domain and
//     deeper names. The leaves minted here are narrower still (below); the
//     subtrees bound what a stolen key could do. An empty list of hosts is an
//     error (it would leave DNS names unconstrained).
//
// Leaves (SandboxCa::ServerContext), minted on demand per SNI host:
//   - the host must be one of the names: exactly, or under a "*.x" entry
//     (a.x and b.a.x, not x: the allowlist's rule, network_policy.h),
//     case-insensitive, a trailing dot ignored; else kPermissionDenied
//     (kInvalidArgument if it is not a DNS name at all). The leaf names the
//     exact host, never the wildcard.
//   - one EC P-256 key for every leaf of a CA (generated with the CA, never
//     exported): minting is then a signature, not a key generation.
//   - subjectAltName DNS:<host> (the exact host, never a wildcard), subject
//     CN=<host> (when it fits CN's 64 characters; else an empty subject and a
//     critical SAN, as RFC 5280 asks); extendedKeyUsage serverAuth; keyUsage
//     critical digitalSignature (ECDHE-ECDSA needs nothing else);
//     basicConstraints critical CA:FALSE; authorityKeyIdentifier; random
//     128-bit serial; valid 1 h ago .. 30 days (never past the CA's end),
//     minted again once within 1 day of its end.
//   - each leaf gets its own SSL_CTX (TLS 1.2 and 1.3 only, renegotiation
//     off, only the leaf sent: the client has the CA as its anchor), cached
//     per host: at most kServerContextCacheSize, the oldest minted evicted.
//   - returned as std::shared_ptr<SSL_CTX>: a raw pointer could not survive
//     an eviction or a re-mint. An SSL made with SSL_new holds its own
//     reference to its context, so the caller may drop the shared_ptr right
//     after SSL_new.
//   - the CA and its leaves pass OpenSSL's X509_V_FLAG_X509_STRICT checks
//     (Python 3.13 verifies with it by default).
//   - ALPN: the context's select callback picks the protocol stored on that
//     SSL with SetServerAlpn (the proxy stores what its upstream negotiated,
//     so both legs speak the same protocol), if the client offered it;
//     nothing stored, or not offered: no ALPN (SSL_TLSEXT_ERR_NOACK, not a
//     handshake failure; the client falls back to its default, HTTP/1.1). It
//     lives in the SSL's ex_data: SetServerAlpn must come before SSL_accept
//     reads the ClientHello.
//
// Upstream (the proxy as a client): UpstreamTlsContext verifies the peer
// (SSL_VERIFY_PEER) against the system trust store, or only against
// `ca_file` (tests); TLS 1.2+. PrepareUpstream sets SNI (not for an IP
// literal, RFC 6066), the name verified (SSL_set1_host, partial wildcards
// like "a*.x.com" not accepted) and the ALPN offer.
//
// Thread safety: a SandboxCa may be used from any number of threads
// (ServerContext locks; a leaf is minted under the lock: a signature and an
// SSL_CTX, about a millisecond, once per host and month).
// The contexts are OpenSSL's: usable by many SSLs concurrently.
// SIGPIPE: OpenSSL writes to a socket with write(2); the caller blocks or
// ignores SIGPIPE around SSL I/O (cf. net/conn.cc's SigpipeGuard).
//
// Errors: every OpenSSL failure names the call and OpenSSL's error strings
// (the thread's error queue, drained), e.g. "SSL_CTX_load_verify_locations(
// /x.pem): error:80000002:system library::No such file or directory; ...".
// SetServerAlpn returns a Status too: storing can fail (an allocation), and
// a failure there must not pass for "no ALPN".
//
// Test hooks (public, named ...ForTest): MintLeafForTest signs a leaf for
// any name, bypassing the names check, so a test can show that a verifier
// refuses what the constraints exclude; AdvanceClockForTest moves the CA's
// clock for the re-minting rules.
#pragma once

#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/error.h"
#include "net/openssl_loader.h"

namespace deepbox::local {

// RAII for OpenSSL objects (net/openssl_loader.h: OpenSSL is loaded on first use).
using net::OpenSslFree;
using X509Ptr = std::unique_ptr<X509, OpenSslFree<&net::LibOpenSsl::X509_free>>;
using EvpPkeyPtr = std::unique_ptr<EVP_PKEY, OpenSslFree<&net::LibOpenSsl::EVP_PKEY_free>>;
using SslCtxPtr = std::unique_ptr<SSL_CTX, OpenSslFree<&net::LibOpenSsl::SSL_CTX_free>>;
using SslPtr = std::unique_ptr<SSL, OpenSslFree<&net::LibOpenSsl::SSL_free>>;
using BioPtr = std::unique_ptr<BIO, OpenSslFree<&net::LibOpenSsl::BIO_free_all>>;
using X509StorePtr = std::unique_ptr<X509_STORE, OpenSslFree<&net::LibOpenSsl::X509_STORE_free>>;
using X509StoreCtxPtr =
    std::unique_ptr<X509_STORE_CTX, OpenSslFree<&net::LibOpenSsl::X509_STORE_CTX_free>>;

inline constexpr size_t kServerContextCacheSize = 256;
inline constexpr int kSandboxCaValidityDays = 400;
inline constexpr int kSandboxLeafValidityDays = 30;

class SandboxCa {
 public:
  // `label` (1..37 printable ASCII bytes: the CN has 64) names the sandbox in
  // the subject. `names`: the secret hosts, DNS names ("*.example.com"
  // allowed), lower-cased here; IP literals, a '*' anywhere but a leading
  // "*." label and an empty list are kInvalidArgument.
  static Result<std::unique_ptr<SandboxCa>> Create(std::string_view label,
                                                   std::vector<std::string> names);
  SandboxCa(const SandboxCa&) = delete;
  SandboxCa& operator=(const SandboxCa&) = delete;
  ~SandboxCa();

  // The CA certificate (PEM), for the sandbox's trust store.
  const std::string& cert_pem() const { return cert_pem_; }
  // The names as normalized by Create.
  const std::vector<std::string>& names() const { return names_; }

  // The server-side context for a connection whose SNI is `host` (see the
  // top comment).
  Result<std::shared_ptr<SSL_CTX>> ServerContext(std::string_view host);

  // Test only: a leaf for any host (a DNS name, or an IP literal: then an IP
  // SAN and no subject), signed by this CA, without the names check. It
  // lets a test show that the verifier enforces the name constraints.
  Result<X509Ptr> MintLeafForTest(std::string_view host);
  // Test only: moves this CA's clock (leaf validity, re-minting) forward.
  void AdvanceClockForTest(std::chrono::seconds by) { clock_offset_s_ += by.count(); }

 private:
  struct CachedContext {
    std::shared_ptr<SSL_CTX> ctx;
    time_t not_after = 0;
    uint64_t minted = 0;  // order of minting, for eviction
  };
  SandboxCa() = default;
  time_t Now() const;
  Result<X509Ptr> MintLeaf(const std::string& host, time_t now, time_t not_after);

  std::vector<std::string> names_;
  EvpPkeyPtr ca_key_;
  EvpPkeyPtr leaf_key_;
  X509Ptr ca_cert_;
  std::string cert_pem_;
  time_t ca_not_after_ = 0;
  std::atomic<int64_t> clock_offset_s_{0};

  std::mutex mu_;
  std::unordered_map<std::string, CachedContext> cache_;
  uint64_t minted_ = 0;
};

// Stores on `ssl` (from a ServerContext) the protocol its ALPN callback
// selects, e.g. "h2" or "http/1.1" (1..255 bytes); "" clears it. Before
// SSL_accept.
Status SetServerAlpn(SSL* ssl, std::string_view proto);

// The upstream (client) context: TLS 1.2+, SSL_VERIFY_PEER against the
// system's default trust store, or only the PEM certificates of `ca_file`
// when it is not empty.
Result<std::shared_ptr<SSL_CTX>> UpstreamTlsContext(const std::string& ca_file);

// Prepares `ssl` (from an UpstreamTlsContext) for `host`: SNI (a DNS name
// only), the name its certificate must carry, and the ALPN offer `alpn` in
// order of preference (e.g. {"h2", "http/1.1"}; empty = no ALPN extension).
Status PrepareUpstream(SSL* ssl, const std::string& host, const std::vector<std::string>& alpn);

// OpenSSL's error queue of this thread as text, emptied:
// "error:0A000086:SSL routines::certificate verify failed; ..." ("no OpenSSL
// error recorded" when it was empty).
std::string DrainOpenSslErrors();

// The error for a failed handshake call (`call` = "SSL_connect",
// "SSL_accept", ...; `ret` its return value), taken right after it on the
// same thread: a refused certificate gives X509_verify_cert_error_string
// (e.g. "SSL_connect: certificate verify failed: hostname mismatch") and
// reason kReasonTlsCertificate; else OpenSSL's error queue or the errno.
// kUnavailable (the convention of net/conn.h).
Error TlsHandshakeError(SSL* ssl, int ret, std::string_view call);

}  // namespace deepbox::local
