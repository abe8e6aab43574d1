#include "local/sandbox_ca.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/strings.h"
#include "common/terminal_text.h"
#include "net/openssl_loader.h"

namespace deepbox::local {

namespace {

// OpenSSL's functions (net/openssl_loader.h: loaded on first use).
const net::LibOpenSsl& OpenSsl() { return net::RequireLibOpenSsl(); }

using BnPtr = std::unique_ptr<BIGNUM, OpenSslFree<&net::LibOpenSsl::BN_free>>;
using X509NamePtr = std::unique_ptr<X509_NAME, OpenSslFree<&net::LibOpenSsl::X509_NAME_free>>;
using X509ExtPtr =
    std::unique_ptr<X509_EXTENSION, OpenSslFree<&net::LibOpenSsl::X509_EXTENSION_free>>;
using GeneralNamePtr =
    std::unique_ptr<GENERAL_NAME, OpenSslFree<&net::LibOpenSsl::GENERAL_NAME_free>>;
using GeneralNamesPtr =
    std::unique_ptr<GENERAL_NAMES, OpenSslFree<&net::LibOpenSsl::GENERAL_NAMES_free>>;
using NameConstraintsPtr =
    std::unique_ptr<NAME_CONSTRAINTS, OpenSslFree<&net::LibOpenSsl::NAME_CONSTRAINTS_free>>;
using GeneralSubtreePtr =
    std::unique_ptr<GENERAL_SUBTREE, OpenSslFree<&net::LibOpenSsl::GENERAL_SUBTREE_free>>;

constexpr time_t kSecondsPerHour = 3600;
constexpr time_t kSecondsPerDay = 24 * kSecondsPerHour;
// TLS 1.3 suites of both intercepted legs, AES-128-GCM first: every byte is
// decrypted and encrypted once more than in a tunnel, and AES-128 does that
// ~30% faster than AES-256 (OpenSSL's default first choice) at a strength
// TLS 1.3 mandates. TLS 1.2 keeps OpenSSL's defaults.
constexpr const char* kInterceptCipherSuites =
    "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256";
constexpr size_t kMaxLabel = 37;  // 64 (CN) - "deepbox sandbox " - " secrets CA"

tl::unexpected<Error> OpenSslFailure(std::string_view call, ErrorCode code = ErrorCode::kInternal) {
  return MakeError(code, fmt::format("{}: {}", call, DrainOpenSslErrors()));
}

// Untrusted text (an SNI, a caller's name) in a message: one line, inert, short.
std::string UntrustedText(std::string_view text) {
  return SanitizeLineForTerminal(text.substr(0, 256));
}

bool IsIpAddressText(const std::string& host) {
  unsigned char buf[16];
  return inet_pton(AF_INET, host.c_str(), buf) == 1 || inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

// A lower-case DNS name: labels of [a-z0-9_-], 1..63 bytes each, 253 in all.
// ('_' occurs in real host names, e.g. SRV-style ones.)
bool IsDnsName(std::string_view name) {
  if (name.empty() || name.size() > 253) return false;
  for (std::string_view label : Split(name, '.')) {
    if (label.empty() || label.size() > 63) return false;
    for (char c : label) {
      if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_')) {
        return false;
      }
    }
  }
  return true;
}

// Lower case, one trailing dot dropped ("API.Example.com." -> "api.example.com").
std::string NormalizeHost(std::string_view host) {
  std::string out = AsciiLower(host);
  if (!out.empty() && out.back() == '.') out.pop_back();
  return out;
}

// A secret-host entry as Create keeps it: "host" or "*.domain".
Result<std::string> NormalizeName(std::string_view name) {
  std::string out = NormalizeHost(name);
  std::string_view base = out;
  if (base.substr(0, 2) == "*.") base.remove_prefix(2);
  if (!IsDnsName(base) || IsIpAddressText(std::string(base))) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("secret host '{}': not a DNS name or a '*.' wildcard of one",
                                 UntrustedText(name)));
  }
  return out;
}

// The name-constraint subtree of an entry: the name, or a wildcard's domain.
std::string_view SubtreeOf(std::string_view name) {
  return name.substr(0, 2) == "*." ? name.substr(2) : name;
}

Status SetRandomSerial(X509* cert) {
  BnPtr bn(OpenSsl().BN_new());
  if (!bn) return OpenSslFailure("BN_new");
  do {
    if (OpenSsl().BN_rand(bn.get(), 128, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) != 1) {
      return OpenSslFailure("BN_rand");
    }
  } while (OpenSsl().BN_is_zero(bn.get()));
  if (OpenSsl().BN_to_ASN1_INTEGER(bn.get(), OpenSsl().X509_get_serialNumber(cert)) == nullptr) {
    return OpenSslFailure("BN_to_ASN1_INTEGER");
  }
  return {};
}

Status SetValidity(X509* cert, time_t not_before, time_t not_after) {
  if (OpenSsl().X509_time_adj_ex(OpenSsl().X509_getm_notBefore(cert), 0, 0, &not_before) ==
          nullptr ||
      OpenSsl().X509_time_adj_ex(OpenSsl().X509_getm_notAfter(cert), 0, 0, &not_after) == nullptr) {
    return OpenSslFailure("X509_time_adj_ex");
  }
  return {};
}

// An extension of fixed text (nothing from outside goes through the config
// syntax): e.g. "critical,CA:TRUE,pathlen:0".
Status AddExtension(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  OpenSsl().X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509ExtPtr ext(OpenSsl().X509V3_EXT_conf_nid(nullptr, &ctx, nid, value));
  if (!ext)
    return OpenSslFailure(
        fmt::format("X509V3_EXT_conf_nid({}={})", OpenSsl().OBJ_nid2sn(nid), value));
  if (OpenSsl().X509_add_ext(cert, ext.get(), -1) != 1) return OpenSslFailure("X509_add_ext");
  return {};
}

Result<GeneralNamePtr> DnsGeneralName(std::string_view name) {
  GeneralNamePtr gn(OpenSsl().GENERAL_NAME_new());
  ASN1_IA5STRING* ia5 = OpenSsl().ASN1_IA5STRING_new();
  if (!gn || ia5 == nullptr) {
    OpenSsl().ASN1_IA5STRING_free(ia5);
    return OpenSslFailure("GENERAL_NAME_new");
  }
  OpenSsl().GENERAL_NAME_set0_value(gn.get(), GEN_DNS, ia5);
  if (OpenSsl().ASN1_STRING_set(ia5, name.data(), static_cast<int>(name.size())) != 1) {
    return OpenSslFailure("ASN1_STRING_set");
  }
  return gn;
}

// An iPAddress GeneralName of `bytes` raw bytes (an address, or an address
// and its mask in a name constraint).
Result<GeneralNamePtr> IpGeneralName(const unsigned char* bytes, size_t size) {
  GeneralNamePtr gn(OpenSsl().GENERAL_NAME_new());
  ASN1_OCTET_STRING* octets = OpenSsl().ASN1_OCTET_STRING_new();
  if (!gn || octets == nullptr) {
    OpenSsl().ASN1_OCTET_STRING_free(octets);
    return OpenSslFailure("GENERAL_NAME_new");
  }
  OpenSsl().GENERAL_NAME_set0_value(gn.get(), GEN_IPADD, octets);
  if (OpenSsl().ASN1_OCTET_STRING_set(octets, bytes, static_cast<int>(size)) != 1) {
    return OpenSslFailure("ASN1_OCTET_STRING_set");
  }
  return gn;
}

Status PushSubtree(STACK_OF(GENERAL_SUBTREE) * list, GeneralNamePtr base) {
  GeneralSubtreePtr subtree(OpenSsl().GENERAL_SUBTREE_new());
  if (!subtree) return OpenSslFailure("GENERAL_SUBTREE_new");
  OpenSsl().GENERAL_NAME_free(subtree->base);
  subtree->base = base.release();
  // sk_GENERAL_SUBTREE_push, an inline function over OPENSSL_sk_push.
  if (OpenSsl().OPENSSL_sk_push(reinterpret_cast<OPENSSL_STACK*>(list), subtree.get()) == 0)
    return OpenSslFailure("sk_GENERAL_SUBTREE_push");
  subtree.release();
  return {};
}

// Critical nameConstraints: permitted DNS subtrees, every IP address excluded.
Status AddNameConstraints(X509* cert, const std::vector<std::string>& names) {
  NameConstraintsPtr nc(OpenSsl().NAME_CONSTRAINTS_new());
  if (!nc) return OpenSslFailure("NAME_CONSTRAINTS_new");
  // sk_GENERAL_SUBTREE_new_null, an inline function over OPENSSL_sk_new_null.
  nc->permittedSubtrees =
      reinterpret_cast<STACK_OF(GENERAL_SUBTREE)*>(OpenSsl().OPENSSL_sk_new_null());
  nc->excludedSubtrees =
      reinterpret_cast<STACK_OF(GENERAL_SUBTREE)*>(OpenSsl().OPENSSL_sk_new_null());
  if (nc->permittedSubtrees == nullptr || nc->excludedSubtrees == nullptr) {
    return OpenSslFailure("sk_GENERAL_SUBTREE_new_null");
  }
  std::vector<std::string_view> subtrees;
  for (const std::string& name : names) subtrees.push_back(SubtreeOf(name));
  std::sort(subtrees.begin(), subtrees.end());
  subtrees.erase(std::unique(subtrees.begin(), subtrees.end()), subtrees.end());
  for (std::string_view subtree : subtrees) {
    auto gn = DnsGeneralName(subtree);
    if (!gn) return tl::unexpected(gn.error());
    if (auto s = PushSubtree(nc->permittedSubtrees, std::move(*gn)); !s) return s;
  }
  // Address + mask, all zero: 0.0.0.0/0 and ::/0.
  const unsigned char zeros[32] = {};
  for (size_t size : {size_t{8}, size_t{32}}) {
    auto gn = IpGeneralName(zeros, size);
    if (!gn) return tl::unexpected(gn.error());
    if (auto s = PushSubtree(nc->excludedSubtrees, std::move(*gn)); !s) return s;
  }
  if (OpenSsl().X509_add1_ext_i2d(cert, NID_name_constraints, nc.get(), 1, X509V3_ADD_DEFAULT) !=
      1) {
    return OpenSslFailure("X509_add1_ext_i2d(nameConstraints)");
  }
  return {};
}

Result<std::string> CertPem(X509* cert) {
  BioPtr bio(OpenSsl().BIO_new(OpenSsl().BIO_s_mem()));
  if (!bio) return OpenSslFailure("BIO_new");
  if (OpenSsl().PEM_write_bio_X509(bio.get(), cert) != 1)
    return OpenSslFailure("PEM_write_bio_X509");
  BUF_MEM* mem = nullptr;
  OpenSsl().BIO_ctrl(bio.get(), BIO_C_GET_BUF_MEM_PTR, 0, &mem);  // BIO_get_mem_ptr, a macro
  return std::string(mem->data, mem->length);
}

Result<EvpPkeyPtr> NewP256Key() {
  EvpPkeyPtr key(OpenSsl().EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256"));  // EVP_EC_gen
  if (!key) return OpenSslFailure("EVP_EC_gen(P-256)");
  return key;
}

// The SSL ex_data slot of SetServerAlpn: an owned std::string*.
void FreeAlpn(void*, void* ptr, CRYPTO_EX_DATA*, int, long, void*) {
  delete static_cast<std::string*>(ptr);
}
int DupAlpn(CRYPTO_EX_DATA*, const CRYPTO_EX_DATA*, void** from_d, int, long, void*) {
  // SSL_dup copies the pointer; each SSL must own its copy.
  auto** slot = reinterpret_cast<std::string**>(from_d);
  if (*slot != nullptr) *slot = new std::string(**slot);
  return 1;
}
int AlpnIndex() {
  // SSL_get_ex_new_index, a macro over CRYPTO_get_ex_new_index.
  static const int index = OpenSsl().CRYPTO_get_ex_new_index(CRYPTO_EX_INDEX_SSL, 0, nullptr,
                                                             nullptr, DupAlpn, FreeAlpn);
  return index;
}

int SelectAlpn(SSL* ssl, const unsigned char** out, unsigned char* outlen, const unsigned char* in,
               unsigned int inlen, void*) {
  int index = AlpnIndex();
  if (index < 0) return SSL_TLSEXT_ERR_NOACK;
  const auto* want = static_cast<const std::string*>(OpenSsl().SSL_get_ex_data(ssl, index));
  if (want == nullptr) return SSL_TLSEXT_ERR_NOACK;
  for (unsigned int at = 0; at < inlen;) {
    unsigned int len = in[at];
    if (len == 0 || len > inlen - at - 1) break;
    if (len == want->size() && std::memcmp(in + at + 1, want->data(), len) == 0) {
      *out = in + at + 1;  // OpenSSL copies the selection
      *outlen = static_cast<unsigned char>(len);
      return SSL_TLSEXT_ERR_OK;
    }
    at += 1 + len;
  }
  return SSL_TLSEXT_ERR_NOACK;
}

}  // namespace

std::string DrainOpenSslErrors() {
  std::string out;
  while (unsigned long e = OpenSsl().ERR_get_error()) {
    char buf[256];
    OpenSsl().ERR_error_string_n(e, buf, sizeof buf);
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out.empty() ? "no OpenSSL error recorded" : out;
}

Result<std::unique_ptr<SandboxCa>> SandboxCa::Create(std::string_view label,
                                                     std::vector<std::string> names) {
  if (label.empty() || label.size() > kMaxLabel ||
      !std::all_of(label.begin(), label.end(), [](char c) { return c >= 0x20 && c < 0x7f; })) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("sandbox CA label '{}': 1..{} printable ASCII characters",
                                 UntrustedText(label), kMaxLabel));
  }
  if (names.empty()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "a sandbox CA needs at least one secret host (no name would leave its name "
                     "constraints open)");
  }
  std::unique_ptr<SandboxCa> ca(new SandboxCa());
  for (const std::string& name : names) {
    auto normalized = NormalizeName(name);
    if (!normalized) return tl::unexpected(normalized.error());
    if (std::find(ca->names_.begin(), ca->names_.end(), *normalized) == ca->names_.end()) {
      ca->names_.push_back(std::move(*normalized));
    }
  }

  auto ca_key = NewP256Key();
  if (!ca_key) return tl::unexpected(ca_key.error());
  ca->ca_key_ = std::move(*ca_key);
  auto leaf_key = NewP256Key();
  if (!leaf_key) return tl::unexpected(leaf_key.error());
  ca->leaf_key_ = std::move(*leaf_key);

  X509Ptr cert(OpenSsl().X509_new());
  if (!cert) return OpenSslFailure("X509_new");
  X509* x = cert.get();
  if (OpenSsl().X509_set_version(x, X509_VERSION_3) != 1) return OpenSslFailure("X509_set_version");
  if (auto s = SetRandomSerial(x); !s) return tl::unexpected(s.error());
  const time_t now = ca->Now();
  ca->ca_not_after_ = now + kSandboxCaValidityDays * kSecondsPerDay;
  if (auto s = SetValidity(x, now - kSecondsPerHour, ca->ca_not_after_); !s) {
    return tl::unexpected(s.error());
  }
  X509NamePtr subject(OpenSsl().X509_NAME_new());
  const std::string cn = fmt::format("deepbox sandbox {} secrets CA", label);
  if (!subject || OpenSsl().X509_NAME_add_entry_by_NID(
                      subject.get(), NID_commonName, MBSTRING_UTF8,
                      reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0) != 1) {
    return OpenSslFailure("X509_NAME_add_entry_by_NID(CN)");
  }
  if (OpenSsl().X509_set_subject_name(x, subject.get()) != 1 ||
      OpenSsl().X509_set_issuer_name(x, subject.get()) != 1) {
    return OpenSslFailure("X509_set_subject_name");
  }
  if (OpenSsl().X509_set_pubkey(x, ca->ca_key_.get()) != 1)
    return OpenSslFailure("X509_set_pubkey");
  for (auto [nid, value] : {std::pair{NID_basic_constraints, "critical,CA:TRUE,pathlen:0"},
                            std::pair{NID_key_usage, "critical,keyCertSign,cRLSign"},
                            std::pair{NID_subject_key_identifier, "hash"}}) {
    if (auto s = AddExtension(x, x, nid, value); !s) return tl::unexpected(s.error());
  }
  if (auto s = AddNameConstraints(x, ca->names_); !s) return tl::unexpected(s.error());
  if (OpenSsl().X509_sign(x, ca->ca_key_.get(), OpenSsl().EVP_sha256()) == 0)
    return OpenSslFailure("X509_sign(CA)");
  auto pem = CertPem(x);
  if (!pem) return tl::unexpected(pem.error());
  ca->cert_pem_ = std::move(*pem);
  ca->ca_cert_ = std::move(cert);
  return ca;
}

SandboxCa::~SandboxCa() = default;

time_t SandboxCa::Now() const { return time(nullptr) + clock_offset_s_.load(); }

Result<X509Ptr> SandboxCa::MintLeaf(const std::string& host, time_t now, time_t not_after) {
  const bool ip = IsIpAddressText(host);
  X509Ptr cert(OpenSsl().X509_new());
  if (!cert) return OpenSslFailure("X509_new");
  X509* x = cert.get();
  if (OpenSsl().X509_set_version(x, X509_VERSION_3) != 1) return OpenSslFailure("X509_set_version");
  if (auto s = SetRandomSerial(x); !s) return tl::unexpected(s.error());
  if (auto s = SetValidity(x, now - kSecondsPerHour, not_after); !s) {
    return tl::unexpected(s.error());
  }
  if (OpenSsl().X509_set_issuer_name(x, OpenSsl().X509_get_subject_name(ca_cert_.get())) != 1) {
    return OpenSslFailure("X509_set_issuer_name");
  }
  // CN=<host> where it fits CN's 64 characters; else (and for an address) an
  // empty subject, which RFC 5280 allows with a critical SAN.
  const bool with_cn = !ip && host.size() <= 64;
  if (with_cn && OpenSsl().X509_NAME_add_entry_by_NID(
                     OpenSsl().X509_get_subject_name(x), NID_commonName, MBSTRING_UTF8,
                     reinterpret_cast<const unsigned char*>(host.c_str()), -1, -1, 0) != 1) {
    return OpenSslFailure("X509_NAME_add_entry_by_NID(CN)");
  }
  if (OpenSsl().X509_set_pubkey(x, leaf_key_.get()) != 1) return OpenSslFailure("X509_set_pubkey");
  for (auto [nid, value] :
       {std::pair{NID_basic_constraints, "critical,CA:FALSE"},
        std::pair{NID_key_usage, "critical,digitalSignature"},
        std::pair{NID_ext_key_usage, "serverAuth"}, std::pair{NID_subject_key_identifier, "hash"},
        std::pair{NID_authority_key_identifier, "keyid:always"}}) {
    if (auto s = AddExtension(x, ca_cert_.get(), nid, value); !s) return tl::unexpected(s.error());
  }
  GeneralNamesPtr san(OpenSsl().GENERAL_NAMES_new());
  if (!san) return OpenSslFailure("GENERAL_NAMES_new");
  Result<GeneralNamePtr> gn;
  if (ip) {
    unsigned char addr[16];
    bool v4 = inet_pton(AF_INET, host.c_str(), addr) == 1;
    if (!v4) inet_pton(AF_INET6, host.c_str(), addr);
    gn = IpGeneralName(addr, v4 ? 4 : 16);
  } else {
    gn = DnsGeneralName(host);
  }
  if (!gn) return tl::unexpected(gn.error());
  // sk_GENERAL_NAME_push, an inline function over OPENSSL_sk_push.
  if (OpenSsl().OPENSSL_sk_push(reinterpret_cast<OPENSSL_STACK*>(san.get()), gn->get()) == 0) {
    return OpenSslFailure("sk_GENERAL_NAME_push");
  }
  gn->release();
  const int crit = with_cn ? 0 : 1;
  if (OpenSsl().X509_add1_ext_i2d(x, NID_subject_alt_name, san.get(), crit, X509V3_ADD_DEFAULT) !=
      1) {
    return OpenSslFailure("X509_add1_ext_i2d(subjectAltName)");
  }
  if (OpenSsl().X509_sign(x, ca_key_.get(), OpenSsl().EVP_sha256()) == 0)
    return OpenSslFailure("X509_sign(leaf)");
  return cert;
}

Result<X509Ptr> SandboxCa::MintLeafForTest(std::string_view host) {
  std::string h = NormalizeHost(host);
  if (!IsIpAddressText(h) && !IsDnsName(h)) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("'{}' is not a DNS name", UntrustedText(host)));
  }
  std::lock_guard<std::mutex> lock(mu_);
  const time_t now = Now();
  return MintLeaf(h, now, std::min(now + kSandboxLeafValidityDays * kSecondsPerDay, ca_not_after_));
}

Result<std::shared_ptr<SSL_CTX>> SandboxCa::ServerContext(std::string_view host_in) {
  const std::string host = NormalizeHost(host_in);
  if (!IsDnsName(host)) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("TLS server name '{}' is not a DNS name", UntrustedText(host_in)));
  }
  bool listed = false;
  for (const std::string& name : names_) {
    if (name.substr(0, 2) == "*.") {
      std::string_view domain = std::string_view(name).substr(1);  // ".example.com"
      listed = host.size() > domain.size() && host.ends_with(domain);
    } else {
      listed = host == name;
    }
    if (listed) break;
  }
  if (!listed) {
    return MakeError(
        ErrorCode::kPermissionDenied,
        fmt::format("TLS for '{}' refused: not one of this sandbox's secret hosts ({})", host,
                    Join(names_, ", ")));
  }

  std::lock_guard<std::mutex> lock(mu_);
  const time_t now = Now();
  auto it = cache_.find(host);
  if (it != cache_.end() && now + kSecondsPerDay < it->second.not_after) return it->second.ctx;
  const time_t not_after = std::min(now + kSandboxLeafValidityDays * kSecondsPerDay, ca_not_after_);
  if (not_after <= now + kSecondsPerDay) {
    return MakeError(ErrorCode::kUnavailable,
                     fmt::format("the sandbox CA expires within a day (it was made for {} days): "
                                 "no certificate for '{}'",
                                 kSandboxCaValidityDays, host));
  }
  auto leaf = MintLeaf(host, now, not_after);
  if (!leaf) return tl::unexpected(leaf.error());

  SslCtxPtr ctx(OpenSsl().SSL_CTX_new(OpenSsl().TLS_server_method()));
  if (!ctx) return OpenSslFailure("SSL_CTX_new");
  SSL_CTX* c = ctx.get();
  // SSL_CTX_set_min_proto_version, a macro over SSL_CTX_ctrl.
  if (OpenSsl().SSL_CTX_ctrl(c, SSL_CTRL_SET_MIN_PROTO_VERSION, TLS1_2_VERSION, nullptr) != 1) {
    return OpenSslFailure("SSL_CTX_set_min_proto_version");
  }
  // Our preference, except that a client putting ChaCha20 first (no AES
  // instructions) gets it.
  OpenSsl().SSL_CTX_set_options(
      c, SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE | SSL_OP_PRIORITIZE_CHACHA);
  if (OpenSsl().SSL_CTX_set_ciphersuites(c, kInterceptCipherSuites) != 1) {
    return OpenSslFailure("SSL_CTX_set_ciphersuites");
  }
  if (OpenSsl().SSL_CTX_use_certificate(c, leaf->get()) != 1)
    return OpenSslFailure("SSL_CTX_use_certificate");
  if (OpenSsl().SSL_CTX_use_PrivateKey(c, leaf_key_.get()) != 1)
    return OpenSslFailure("SSL_CTX_use_PrivateKey");
  if (OpenSsl().SSL_CTX_check_private_key(c) != 1)
    return OpenSslFailure("SSL_CTX_check_private_key");
  if (AlpnIndex() < 0) return OpenSslFailure("SSL_get_ex_new_index");
  OpenSsl().SSL_CTX_set_alpn_select_cb(c, SelectAlpn, nullptr);

  std::shared_ptr<SSL_CTX> shared(ctx.release(), OpenSslFree<&net::LibOpenSsl::SSL_CTX_free>());
  if (it != cache_.end()) {
    it->second = {shared, not_after, ++minted_};
    return shared;
  }
  if (cache_.size() >= kServerContextCacheSize) {
    auto oldest = std::min_element(cache_.begin(), cache_.end(), [](const auto& a, const auto& b) {
      return a.second.minted < b.second.minted;
    });
    cache_.erase(oldest);
  }
  cache_.emplace(host, CachedContext{shared, not_after, ++minted_});
  return shared;
}

Status SetServerAlpn(SSL* ssl, std::string_view proto) {
  if (proto.size() > 255) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("ALPN protocol of {} bytes (at most 255)", proto.size()));
  }
  int index = AlpnIndex();
  if (index < 0) return OpenSslFailure("SSL_get_ex_new_index");
  auto owned = proto.empty() ? nullptr : std::make_unique<std::string>(proto);
  auto* old = static_cast<std::string*>(OpenSsl().SSL_get_ex_data(ssl, index));
  if (OpenSsl().SSL_set_ex_data(ssl, index, owned.get()) != 1)
    return OpenSslFailure("SSL_set_ex_data");
  owned.release();
  delete old;
  return {};
}

Result<std::shared_ptr<SSL_CTX>> UpstreamTlsContext(const std::string& ca_file) {
  SslCtxPtr ctx(OpenSsl().SSL_CTX_new(OpenSsl().TLS_client_method()));
  if (!ctx) return OpenSslFailure("SSL_CTX_new");
  // SSL_CTX_set_min_proto_version, a macro over SSL_CTX_ctrl.
  if (OpenSsl().SSL_CTX_ctrl(ctx.get(), SSL_CTRL_SET_MIN_PROTO_VERSION, TLS1_2_VERSION, nullptr) !=
      1) {
    return OpenSslFailure("SSL_CTX_set_min_proto_version");
  }
  OpenSsl().SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, nullptr);
  if (OpenSsl().SSL_CTX_set_ciphersuites(ctx.get(), kInterceptCipherSuites) != 1) {
    return OpenSslFailure("SSL_CTX_set_ciphersuites");
  }
  if (ca_file.empty()) {
    if (OpenSsl().SSL_CTX_set_default_verify_paths(ctx.get()) != 1) {
      return OpenSslFailure("SSL_CTX_set_default_verify_paths");
    }
  } else if (OpenSsl().SSL_CTX_load_verify_locations(ctx.get(), ca_file.c_str(), nullptr) != 1) {
    return OpenSslFailure(fmt::format("SSL_CTX_load_verify_locations({})", ca_file),
                          ErrorCode::kInvalidArgument);
  }
  return std::shared_ptr<SSL_CTX>(ctx.release(), OpenSslFree<&net::LibOpenSsl::SSL_CTX_free>());
}

Status PrepareUpstream(SSL* ssl, const std::string& host, const std::vector<std::string>& alpn) {
  if (host.empty()) return MakeError(ErrorCode::kInvalidArgument, "upstream TLS: no host name");
  if (IsIpAddressText(host)) {
    // No SNI for an address (RFC 6066); its certificate must name it.
    if (OpenSsl().X509_VERIFY_PARAM_set1_ip_asc(OpenSsl().SSL_get0_param(ssl), host.c_str()) != 1) {
      return OpenSslFailure(fmt::format("X509_VERIFY_PARAM_set1_ip_asc({})", host));
    }
  } else {
    // SSL_set_tlsext_host_name, a macro over SSL_ctrl.
    if (OpenSsl().SSL_ctrl(ssl, SSL_CTRL_SET_TLSEXT_HOSTNAME, TLSEXT_NAMETYPE_host_name,
                           const_cast<char*>(host.c_str())) != 1) {
      return OpenSslFailure(fmt::format("SSL_set_tlsext_host_name({})", host));
    }
    OpenSsl().SSL_set_hostflags(ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    if (OpenSsl().SSL_set1_host(ssl, host.c_str()) != 1) {
      return OpenSslFailure(fmt::format("SSL_set1_host({})", host));
    }
  }
  if (alpn.empty()) return {};
  std::string wire;
  for (const std::string& proto : alpn) {
    if (proto.empty() || proto.size() > 255) {
      return MakeError(ErrorCode::kInvalidArgument,
                       fmt::format("ALPN protocol '{}': 1..255 bytes", proto));
    }
    wire += static_cast<char>(proto.size());
    wire += proto;
  }
  // 0 is success here.
  if (OpenSsl().SSL_set_alpn_protos(ssl, reinterpret_cast<const unsigned char*>(wire.data()),
                                    static_cast<unsigned int>(wire.size())) != 0) {
    return OpenSslFailure("SSL_set_alpn_protos");
  }
  return {};
}

Error TlsHandshakeError(SSL* ssl, int ret, std::string_view call) {
  const int saved_errno = errno;
  const int err = OpenSsl().SSL_get_error(ssl, ret);
  const long verify = OpenSsl().SSL_get_verify_result(ssl);
  if (verify != X509_V_OK) {
    OpenSsl().ERR_clear_error();  // "certificate verify failed": said better below
    return Error(ErrorCode::kUnavailable,
                 fmt::format("{}: certificate verify failed: {} (X509_V_ERR {})", call,
                             OpenSsl().X509_verify_cert_error_string(verify), verify),
                 std::string(kReasonTlsCertificate));
  }
  std::string detail;
  if (err == SSL_ERROR_SYSCALL && OpenSsl().ERR_peek_error() == 0) {
    detail = saved_errno != 0 ? SyscallError("read/write", saved_errno).message
                              : "the peer closed the connection";
  } else if (err == SSL_ERROR_ZERO_RETURN) {
    detail = "the peer closed the connection (close_notify)";
  } else if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
    detail = "not finished (non-blocking I/O wants to be retried)";
  } else {
    detail = DrainOpenSslErrors();
  }
  return Error(ErrorCode::kUnavailable, fmt::format("{}: {}", call, detail));
}

}  // namespace deepbox::local
