// SandboxCa and the upstream TLS helpers: real handshakes over a socketpair
// (the server side in a thread, the client on the test's thread, both
// blocking), the certificates read back field by field, and the name
// constraints checked by OpenSSL's own verifier.
#include "local/sandbox_ca.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>
#include <signal.h>
#include <sys/socket.h>

#include <atomic>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <thread>

#include "common/testing/temp_dir.h"
#include "common/unique_fd.h"

namespace deepbox::local {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using BasicConstraintsPtr = std::unique_ptr<BASIC_CONSTRAINTS, OpenSslFree<BASIC_CONSTRAINTS_free>>;
using NameConstraintsPtr = std::unique_ptr<NAME_CONSTRAINTS, OpenSslFree<NAME_CONSTRAINTS_free>>;
using GeneralNamesPtr = std::unique_ptr<GENERAL_NAMES, OpenSslFree<GENERAL_NAMES_free>>;

// A side whose peer failed may write to a closed socket: EPIPE, not death.
[[maybe_unused]] const bool kSigpipeIgnored = [] {
  signal(SIGPIPE, SIG_IGN);
  return true;
}();

constexpr char kLabel[] = "sb-0123456789ab";

std::unique_ptr<SandboxCa> NewCa(std::vector<std::string> names) {
  auto ca = SandboxCa::Create(kLabel, std::move(names));
  EXPECT_TRUE(ca.has_value()) << ca.error().ToString();
  return ca ? std::move(*ca) : nullptr;
}

X509Ptr ParsePem(const std::string& pem) {
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  return X509Ptr(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
}

// A client context that trusts only `ca_pem` (no system store).
SslCtxPtr ClientTrusting(const std::string& ca_pem) {
  SslCtxPtr ctx(SSL_CTX_new(TLS_client_method()));
  SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, nullptr);
  X509Ptr ca = ParsePem(ca_pem);
  EXPECT_TRUE(ca);
  EXPECT_EQ(X509_STORE_add_cert(SSL_CTX_get_cert_store(ctx.get()), ca.get()), 1);
  return ctx;
}

// SNI + the name to verify, as a client of a secret host does.
std::function<void(SSL*)> ExpectHost(std::string host, std::vector<std::string> alpn = {}) {
  return [host, alpn](SSL* ssl) {
    SSL_set_tlsext_host_name(ssl, host.c_str());
    ASSERT_EQ(SSL_set1_host(ssl, host.c_str()), 1);
    std::string wire;
    for (const std::string& p : alpn) wire += static_cast<char>(p.size()) + p;
    if (!wire.empty()) {
      ASSERT_EQ(SSL_set_alpn_protos(ssl, reinterpret_cast<const unsigned char*>(wire.data()),
                                    static_cast<unsigned int>(wire.size())),
                0);
    }
  };
}

struct Outcome {
  bool ok = false;
  std::string error;  // TlsHandshakeError(...).message
  std::string reason;
  long verify = X509_V_OK;
  int version = 0;
  std::string alpn;      // negotiated, "" = none
  std::string cipher;    // the negotiated suite's standard name
  std::string received;  // application data from the peer
};

std::string Alpn(SSL* ssl) {
  const unsigned char* p = nullptr;
  unsigned int n = 0;
  SSL_get0_alpn_selected(ssl, &p, &n);
  return std::string(reinterpret_cast<const char*>(p), n);
}

// One connection: the server (a thread) with `server_ctx` and, if given, the
// protocol stored with SetServerAlpn; the client here with `client_ctx`,
// prepared by `prepare`. The client sends "ping", the server answers
// "pong:ping". Each side closes its socket when it is done, so a side whose
// peer failed sees EOF instead of waiting.
struct Connection {
  Outcome server, client;
};
Connection Connect(SSL_CTX* server_ctx, SSL_CTX* client_ctx,
                   const std::function<void(SSL*)>& prepare,
                   std::optional<std::string> server_alpn = std::nullopt) {
  Connection conn;
  int sv[2];
  EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  UniqueFd server_fd(sv[0]), client_fd(sv[1]);
  std::thread server([&conn, server_ctx, server_alpn, fd = std::move(server_fd)] {
    Outcome& out = conn.server;
    SslPtr ssl(SSL_new(server_ctx));
    SSL_set_fd(ssl.get(), fd.get());
    if (server_alpn) {
      EXPECT_TRUE(SetServerAlpn(ssl.get(), *server_alpn));
    }
    int r = SSL_accept(ssl.get());
    if (r != 1) {
      out.error = TlsHandshakeError(ssl.get(), r, "SSL_accept").message;
      return;
    }
    out.ok = true;
    out.version = SSL_version(ssl.get());
    out.alpn = Alpn(ssl.get());
    out.cipher = SSL_CIPHER_standard_name(SSL_get_current_cipher(ssl.get()));
    char buf[64];
    int n = SSL_read(ssl.get(), buf, sizeof buf);
    if (n > 0) {
      out.received.assign(buf, n);
      std::string reply = "pong:" + out.received;
      SSL_write(ssl.get(), reply.data(), static_cast<int>(reply.size()));
    }
    SSL_shutdown(ssl.get());
  });
  {
    Outcome& out = conn.client;
    SslPtr ssl(SSL_new(client_ctx));
    SSL_set_fd(ssl.get(), client_fd.get());
    prepare(ssl.get());
    int r = SSL_connect(ssl.get());
    out.verify = SSL_get_verify_result(ssl.get());
    if (r != 1) {
      Error e = TlsHandshakeError(ssl.get(), r, "SSL_connect");
      out.error = e.message;
      out.reason = e.reason;
    } else {
      out.ok = true;
      out.version = SSL_version(ssl.get());
      out.alpn = Alpn(ssl.get());
      out.cipher = SSL_CIPHER_standard_name(SSL_get_current_cipher(ssl.get()));
      SSL_write(ssl.get(), "ping", 4);
      char buf[64];
      for (int n; (n = SSL_read(ssl.get(), buf, sizeof buf)) > 0;) out.received.append(buf, n);
    }
  }
  client_fd.reset();
  server.join();
  ERR_clear_error();
  return conn;
}

// X509_verify_cert of `leaf` with `ca` the only trust anchor, as a TLS
// server certificate, with RFC 5280's strict checks (Python 3.13's default):
// X509_V_OK or the verifier's error.
int VerifyLeaf(const SandboxCa& ca, X509* leaf) {
  X509StorePtr store(X509_STORE_new());
  X509Ptr anchor = ParsePem(ca.cert_pem());
  X509_STORE_add_cert(store.get(), anchor.get());
  X509StoreCtxPtr ctx(X509_STORE_CTX_new());
  EXPECT_EQ(X509_STORE_CTX_init(ctx.get(), store.get(), leaf, nullptr), 1);
  X509_STORE_CTX_set_purpose(ctx.get(), X509_PURPOSE_SSL_SERVER);
  X509_STORE_CTX_set_flags(ctx.get(), X509_V_FLAG_X509_STRICT);
  int ok = X509_verify_cert(ctx.get());
  int err = X509_STORE_CTX_get_error(ctx.get());
  ERR_clear_error();
  return ok == 1 ? X509_V_OK : err;
}

bool IsCritical(X509* cert, int nid) {
  int at = X509_get_ext_by_NID(cert, nid, -1);
  return at >= 0 && X509_EXTENSION_get_critical(X509_get_ext(cert, at)) == 1;
}

// notAfter - notBefore, in seconds.
int64_t Lifetime(const X509* cert) {
  int days = 0, secs = 0;
  EXPECT_EQ(ASN1_TIME_diff(&days, &secs, X509_get0_notBefore(cert), X509_get0_notAfter(cert)), 1);
  return int64_t{days} * 86400 + secs;
}

TEST(SandboxCaTest, ClientTrustingTheCaCompletesAHandshake) {
  auto ca = NewCa({"api.example.com"});
  ASSERT_NE(ca, nullptr);
  auto server = ca->ServerContext("api.example.com");
  ASSERT_TRUE(server) << server.error().ToString();
  SslCtxPtr client = ClientTrusting(ca->cert_pem());

  Connection c = Connect(server->get(), client.get(), ExpectHost("api.example.com"));
  ASSERT_TRUE(c.client.ok) << c.client.error;
  EXPECT_TRUE(c.server.ok) << c.server.error;
  EXPECT_EQ(c.client.verify, X509_V_OK);
  EXPECT_GE(c.client.version, TLS1_2_VERSION);
  EXPECT_EQ(c.server.received, "ping");
  EXPECT_EQ(c.client.received, "pong:ping");
  EXPECT_EQ(c.client.alpn, "");

  SSL_CTX_set_max_proto_version(client.get(), TLS1_2_VERSION);  // ECDHE-ECDSA with this leaf
  Connection tls12 = Connect(server->get(), client.get(), ExpectHost("api.example.com"));
  ASSERT_TRUE(tls12.client.ok) << tls12.client.error;
  EXPECT_EQ(tls12.client.version, TLS1_2_VERSION);
  EXPECT_EQ(tls12.client.received, "pong:ping");
}

// Both intercepted legs prefer AES-128-GCM (each byte is encrypted once more
// than in a tunnel), but a client that puts ChaCha20 first (no AES
// instructions) gets it, and a client offering only AES-256 still connects.
TEST(SandboxCaTest, InterceptedLegsPreferAes128) {
  auto ca = NewCa({"api.example.com"});
  ASSERT_NE(ca, nullptr);
  auto server = ca->ServerContext("api.example.com");
  ASSERT_TRUE(server) << server.error().ToString();
  auto with_suites = [&](const char* suites) {
    SslCtxPtr client = ClientTrusting(ca->cert_pem());
    EXPECT_EQ(SSL_CTX_set_ciphersuites(client.get(), suites), 1);
    return Connect(server->get(), client.get(), ExpectHost("api.example.com"));
  };
  // OpenSSL's own default order puts AES-256 first.
  Connection openssl_default =
      with_suites("TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256:TLS_AES_128_GCM_SHA256");
  ASSERT_TRUE(openssl_default.client.ok) << openssl_default.client.error;
  EXPECT_EQ(openssl_default.client.cipher, "TLS_AES_128_GCM_SHA256");
  Connection chacha_first =
      with_suites("TLS_CHACHA20_POLY1305_SHA256:TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384");
  ASSERT_TRUE(chacha_first.client.ok) << chacha_first.client.error;
  EXPECT_EQ(chacha_first.client.cipher, "TLS_CHACHA20_POLY1305_SHA256");
  Connection only_256 = with_suites("TLS_AES_256_GCM_SHA384");
  ASSERT_TRUE(only_256.client.ok) << only_256.client.error;
  EXPECT_EQ(only_256.client.cipher, "TLS_AES_256_GCM_SHA384");

  // The upstream leg offers AES-128 first (a server going by the client's
  // order, OpenSSL's default, takes it).
  auto upstream = UpstreamTlsContext("");
  ASSERT_TRUE(upstream) << upstream.error().ToString();
  STACK_OF(SSL_CIPHER)* offered = SSL_CTX_get_ciphers(upstream->get());
  ASSERT_GT(sk_SSL_CIPHER_num(offered), 0);
  EXPECT_STREQ(SSL_CIPHER_standard_name(sk_SSL_CIPHER_value(offered, 0)), "TLS_AES_128_GCM_SHA256");
}

TEST(SandboxCaTest, ClientTrustingAnotherCaFailsCleanly) {
  auto ca = NewCa({"api.example.com"});
  auto other = NewCa({"api.example.com"});
  ASSERT_TRUE(ca && other);
  auto server = ca->ServerContext("api.example.com");
  ASSERT_TRUE(server);
  SslCtxPtr client = ClientTrusting(other->cert_pem());

  Connection c = Connect(server->get(), client.get(), ExpectHost("api.example.com"));
  EXPECT_FALSE(c.client.ok);
  EXPECT_FALSE(c.server.ok);
  EXPECT_NE(c.client.verify, X509_V_OK);
  EXPECT_THAT(c.client.error, HasSubstr("SSL_connect: certificate verify failed:"));
  EXPECT_EQ(c.client.reason, kReasonTlsCertificate);
  EXPECT_THAT(c.server.error, HasSubstr("SSL_accept: "));
}

TEST(SandboxCaTest, WildcardCoversExactlyOneLabel) {
  auto ca = NewCa({"*.example.com"});
  ASSERT_NE(ca, nullptr);
  auto server = ca->ServerContext("a.example.com");
  ASSERT_TRUE(server) << server.error().ToString();
  SslCtxPtr client = ClientTrusting(ca->cert_pem());
  Connection c = Connect(server->get(), client.get(), ExpectHost("a.example.com"));
  EXPECT_TRUE(c.client.ok) << c.client.error;

  auto upper = ca->ServerContext("A.Example.COM.");  // case and a trailing dot do not matter
  ASSERT_TRUE(upper);
  EXPECT_EQ(upper->get(), server->get());

  // Any depth under the wildcard, as the allowlist (the leaf names the exact host).
  auto deep = ca->ServerContext("a.b.example.com");
  ASSERT_TRUE(deep) << deep.error().message;
  for (const char* host : {"example.com", "evil.com", "aexample.com", "example.com.evil.com"}) {
    auto refused = ca->ServerContext(host);
    ASSERT_FALSE(refused) << host;
    EXPECT_EQ(refused.error().code, ErrorCode::kPermissionDenied) << host;
    EXPECT_EQ(refused.error().message,
              fmt::format("TLS for '{}' refused: not one of this sandbox's secret hosts "
                          "(*.example.com)",
                          host));
  }
  auto malformed = ca->ServerContext("a b.example.com");
  ASSERT_FALSE(malformed);
  EXPECT_EQ(malformed.error().code, ErrorCode::kInvalidArgument);
}

TEST(SandboxCaTest, CaCertificateCarriesExactlyTheConstraints) {
  auto ca = NewCa({"api.example.com", "*.example.org", "API.Example.com."});
  ASSERT_NE(ca, nullptr);
  EXPECT_THAT(ca->names(), ElementsAre("api.example.com", "*.example.org"));
  X509Ptr cert = ParsePem(ca->cert_pem());
  ASSERT_TRUE(cert);
  X509* x = cert.get();

  EXPECT_EQ(X509_get_version(x), X509_VERSION_3);
  char cn[128] = {};
  X509_NAME_get_text_by_NID(X509_get_subject_name(x), NID_commonName, cn, sizeof cn);
  EXPECT_STREQ(cn, "deepbox sandbox sb-0123456789ab secrets CA");
  EXPECT_EQ(X509_NAME_cmp(X509_get_subject_name(x), X509_get_issuer_name(x)), 0);
  EXPECT_EQ(X509_verify(x, X509_get0_pubkey(x)), 1);  // self-signed
  EXPECT_EQ(EVP_PKEY_get_base_id(X509_get0_pubkey(x)), EVP_PKEY_EC);
  EXPECT_EQ(EVP_PKEY_get_bits(X509_get0_pubkey(x)), 256);
  EXPECT_EQ(Lifetime(x), kSandboxCaValidityDays * 86400 + 3600);
  EXPECT_LT(X509_cmp_current_time(X509_get0_notBefore(x)), 0);

  int crit = -1;
  BasicConstraintsPtr bc(
      static_cast<BASIC_CONSTRAINTS*>(X509_get_ext_d2i(x, NID_basic_constraints, &crit, nullptr)));
  ASSERT_TRUE(bc);
  EXPECT_EQ(crit, 1);
  EXPECT_TRUE(bc->ca);
  ASSERT_NE(bc->pathlen, nullptr);
  EXPECT_EQ(ASN1_INTEGER_get(bc->pathlen), 0);

  EXPECT_EQ(X509_get_key_usage(x), static_cast<uint32_t>(KU_KEY_CERT_SIGN | KU_CRL_SIGN));
  EXPECT_TRUE(IsCritical(x, NID_key_usage));
  EXPECT_NE(X509_get0_subject_key_id(x), nullptr);

  NameConstraintsPtr nc(
      static_cast<NAME_CONSTRAINTS*>(X509_get_ext_d2i(x, NID_name_constraints, &crit, nullptr)));
  ASSERT_TRUE(nc);
  EXPECT_EQ(crit, 1);
  std::vector<std::string> permitted;
  for (int i = 0; i < sk_GENERAL_SUBTREE_num(nc->permittedSubtrees); ++i) {
    GENERAL_SUBTREE* st = sk_GENERAL_SUBTREE_value(nc->permittedSubtrees, i);
    ASSERT_EQ(st->base->type, GEN_DNS);
    const ASN1_IA5STRING* dns = st->base->d.dNSName;
    permitted.emplace_back(reinterpret_cast<const char*>(ASN1_STRING_get0_data(dns)),
                           ASN1_STRING_length(dns));
  }
  EXPECT_THAT(permitted, ElementsAre("api.example.com", "example.org"));
  std::vector<std::string> excluded;
  for (int i = 0; i < sk_GENERAL_SUBTREE_num(nc->excludedSubtrees); ++i) {
    GENERAL_SUBTREE* st = sk_GENERAL_SUBTREE_value(nc->excludedSubtrees, i);
    ASSERT_EQ(st->base->type, GEN_IPADD);
    const ASN1_OCTET_STRING* ip = st->base->d.iPAddress;
    excluded.emplace_back(reinterpret_cast<const char*>(ASN1_STRING_get0_data(ip)),
                          ASN1_STRING_length(ip));
  }
  EXPECT_THAT(excluded, ElementsAre(std::string(8, '\0'), std::string(32, '\0')));
}

TEST(SandboxCaTest, VerifierEnforcesTheNameConstraints) {
  auto ca = NewCa({"api.example.com", "*.example.org"});
  ASSERT_NE(ca, nullptr);
  // Inside a subtree: the name and any name under it (RFC 5280 DNS subtrees
  // have no other form; see the header).
  for (const char* host : {"api.example.com", "v1.api.example.com", "a.example.org", "example.org",
                           "a.b.example.org"}) {
    auto leaf = ca->MintLeafForTest(host);
    ASSERT_TRUE(leaf) << leaf.error().ToString();
    EXPECT_EQ(VerifyLeaf(*ca, leaf->get()), X509_V_OK) << host;
  }
  for (const char* host : {"evil.com", "xapi.example.com", "example.com", "www.example.com",
                           "notexample.org", "org"}) {
    auto leaf = ca->MintLeafForTest(host);
    ASSERT_TRUE(leaf) << leaf.error().ToString();
    EXPECT_EQ(VerifyLeaf(*ca, leaf->get()), X509_V_ERR_PERMITTED_VIOLATION) << host;
  }
  for (const char* ip : {"203.0.113.7", "2001:db8::1"}) {
    auto leaf = ca->MintLeafForTest(ip);
    ASSERT_TRUE(leaf) << leaf.error().ToString();
    EXPECT_EQ(VerifyLeaf(*ca, leaf->get()), X509_V_ERR_EXCLUDED_VIOLATION) << ip;
  }
}

TEST(SandboxCaTest, LeafNamesOnlyItsHost) {
  const std::string long_host = std::string(40, 'a') + "." + std::string(40, 'b') + ".example.org";
  auto ca = NewCa({"api.example.com", "*.example.com", long_host});
  ASSERT_NE(ca, nullptr);
  X509Ptr ca_cert = ParsePem(ca->cert_pem());
  auto ctx = ca->ServerContext("API.example.com");
  ASSERT_TRUE(ctx) << ctx.error().ToString();
  X509* leaf = SSL_CTX_get0_certificate(ctx->get());
  ASSERT_NE(leaf, nullptr);

  int crit = -1;
  GeneralNamesPtr san(
      static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(leaf, NID_subject_alt_name, &crit, nullptr)));
  ASSERT_TRUE(san);
  EXPECT_EQ(crit, 0);
  ASSERT_EQ(sk_GENERAL_NAME_num(san.get()), 1);
  const GENERAL_NAME* gn = sk_GENERAL_NAME_value(san.get(), 0);
  ASSERT_EQ(gn->type, GEN_DNS);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(ASN1_STRING_get0_data(gn->d.dNSName)),
                        ASN1_STRING_length(gn->d.dNSName)),
            "api.example.com");
  char cn[128] = {};
  X509_NAME_get_text_by_NID(X509_get_subject_name(leaf), NID_commonName, cn, sizeof cn);
  EXPECT_STREQ(cn, "api.example.com");
  EXPECT_EQ(X509_NAME_cmp(X509_get_issuer_name(leaf), X509_get_subject_name(ca_cert.get())), 0);

  EXPECT_EQ(X509_get_extended_key_usage(leaf), static_cast<uint32_t>(XKU_SSL_SERVER));
  EXPECT_EQ(X509_get_key_usage(leaf), static_cast<uint32_t>(KU_DIGITAL_SIGNATURE));
  EXPECT_TRUE(IsCritical(leaf, NID_key_usage));
  BasicConstraintsPtr bc(static_cast<BASIC_CONSTRAINTS*>(
      X509_get_ext_d2i(leaf, NID_basic_constraints, &crit, nullptr)));
  ASSERT_TRUE(bc);
  EXPECT_FALSE(bc->ca);
  ASSERT_NE(X509_get0_authority_key_id(leaf), nullptr);
  EXPECT_EQ(ASN1_OCTET_STRING_cmp(X509_get0_authority_key_id(leaf),
                                  X509_get0_subject_key_id(ca_cert.get())),
            0);
  EXPECT_EQ(Lifetime(leaf), kSandboxLeafValidityDays * 86400 + 3600);
  EXPECT_EQ(VerifyLeaf(*ca, leaf), X509_V_OK);
  EXPECT_EQ(SSL_CTX_get_min_proto_version(ctx->get()), TLS1_2_VERSION);

  // Not the CA's key; one key for every leaf of this CA.
  EXPECT_NE(EVP_PKEY_eq(X509_get0_pubkey(leaf), X509_get0_pubkey(ca_cert.get())), 1);
  auto other = ca->ServerContext("b.example.com");
  ASSERT_TRUE(other);
  X509* other_leaf = SSL_CTX_get0_certificate(other->get());
  EXPECT_EQ(EVP_PKEY_eq(X509_get0_pubkey(leaf), X509_get0_pubkey(other_leaf)), 1);

  // Longer than CN's 64 characters: no subject, a critical SAN.
  auto long_ctx = ca->ServerContext(long_host);
  ASSERT_TRUE(long_ctx) << long_ctx.error().ToString();
  X509* long_leaf = SSL_CTX_get0_certificate(long_ctx->get());
  EXPECT_EQ(X509_NAME_entry_count(X509_get_subject_name(long_leaf)), 0);
  EXPECT_TRUE(IsCritical(long_leaf, NID_subject_alt_name));
  EXPECT_EQ(VerifyLeaf(*ca, long_leaf), X509_V_OK);
}

TEST(SandboxCaTest, AlpnFollowsWhatWasStored) {
  auto ca = NewCa({"api.example.com"});
  ASSERT_NE(ca, nullptr);
  auto server = ca->ServerContext("api.example.com");
  ASSERT_TRUE(server);
  SslCtxPtr client = ClientTrusting(ca->cert_pem());
  struct Case {
    std::optional<std::string> stored;
    std::vector<std::string> offered;
    std::string negotiated;
  };
  for (const Case& tc :
       {Case{"h2", {"h2", "http/1.1"}, "h2"}, Case{"http/1.1", {"h2", "http/1.1"}, "http/1.1"},
        Case{std::nullopt, {"h2", "http/1.1"}, ""}, Case{"h2", {"http/1.1"}, ""},
        Case{"h2", {}, ""}}) {
    SCOPED_TRACE(fmt::format("stored {}, offered {}", tc.stored.value_or("nothing"),
                             fmt::join(tc.offered, ",")));
    Connection c =
        Connect(server->get(), client.get(), ExpectHost("api.example.com", tc.offered), tc.stored);
    ASSERT_TRUE(c.client.ok) << c.client.error;
    EXPECT_TRUE(c.server.ok) << c.server.error;
    EXPECT_EQ(c.client.alpn, tc.negotiated);
    EXPECT_EQ(c.server.alpn, tc.negotiated);
    EXPECT_EQ(c.client.received, "pong:ping");
  }

  SslPtr ssl(SSL_new(server->get()));
  EXPECT_TRUE(SetServerAlpn(ssl.get(), "h2"));
  EXPECT_TRUE(SetServerAlpn(ssl.get(), "http/1.1"));  // replaces
  EXPECT_TRUE(SetServerAlpn(ssl.get(), ""));          // clears
  EXPECT_FALSE(SetServerAlpn(ssl.get(), std::string(256, 'x')));
  SslPtr dup(SSL_dup(ssl.get()));  // the slot copies with the SSL (no double free)
  EXPECT_TRUE(SetServerAlpn(ssl.get(), "h2"));
  SslPtr dup2(SSL_dup(ssl.get()));
}

TEST(SandboxCaTest, UpstreamVerifiesTheChainAndTheName) {
  auto ca = NewCa({"api.example.com", "other.example.com"});
  auto stranger = NewCa({"api.example.com"});
  ASSERT_TRUE(ca && stranger);
  testing::TempDir dir("sandbox-ca-test");
  const std::string ca_file = dir.Path("ca.pem");
  std::ofstream(ca_file) << ca->cert_pem();
  auto client = UpstreamTlsContext(ca_file);
  ASSERT_TRUE(client) << client.error().ToString();
  auto prepare = [](std::string host) {
    return [host](SSL* ssl) {
      auto s = PrepareUpstream(ssl, host, {"h2", "http/1.1"});
      EXPECT_TRUE(s) << s.error().ToString();
    };
  };

  auto api = ca->ServerContext("api.example.com");
  ASSERT_TRUE(api);
  Connection ok = Connect(api->get(), client->get(), prepare("api.example.com"), "h2");
  ASSERT_TRUE(ok.client.ok) << ok.client.error;
  EXPECT_EQ(ok.client.verify, X509_V_OK);
  EXPECT_EQ(ok.client.alpn, "h2");
  EXPECT_EQ(ok.client.received, "pong:ping");

  auto other = ca->ServerContext("other.example.com");
  ASSERT_TRUE(other);
  Connection wrong_name = Connect(other->get(), client->get(), prepare("api.example.com"));
  EXPECT_FALSE(wrong_name.client.ok);
  EXPECT_FALSE(wrong_name.server.ok);
  EXPECT_EQ(wrong_name.client.verify, X509_V_ERR_HOSTNAME_MISMATCH);
  EXPECT_THAT(wrong_name.client.error,
              HasSubstr("SSL_connect: certificate verify failed: hostname mismatch"));
  EXPECT_EQ(wrong_name.client.reason, kReasonTlsCertificate);

  auto foreign = stranger->ServerContext("api.example.com");
  ASSERT_TRUE(foreign);
  Connection wrong_ca = Connect(foreign->get(), client->get(), prepare("api.example.com"));
  EXPECT_FALSE(wrong_ca.client.ok);
  EXPECT_EQ(wrong_ca.client.verify, X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY);
  EXPECT_EQ(wrong_ca.client.reason, kReasonTlsCertificate);
}

TEST(SandboxCaTest, UpstreamContextAndPreparationErrors) {
  auto system = UpstreamTlsContext("");
  ASSERT_TRUE(system) << system.error().ToString();
  EXPECT_EQ(SSL_CTX_get_verify_mode(system->get()), SSL_VERIFY_PEER);
  EXPECT_EQ(SSL_CTX_get_min_proto_version(system->get()), TLS1_2_VERSION);

  auto missing = UpstreamTlsContext("/nonexistent/ca.pem");
  ASSERT_FALSE(missing);
  EXPECT_THAT(missing.error().message,
              HasSubstr("SSL_CTX_load_verify_locations(/nonexistent/ca.pem): error:"));
  EXPECT_EQ(ERR_peek_error(), 0u);  // drained

  SslPtr ssl(SSL_new(system->get()));
  EXPECT_FALSE(PrepareUpstream(ssl.get(), "", {}));
  auto bad_alpn = PrepareUpstream(ssl.get(), "api.example.com", {"h2", ""});
  ASSERT_FALSE(bad_alpn);
  EXPECT_EQ(bad_alpn.error().code, ErrorCode::kInvalidArgument);
  EXPECT_TRUE(PrepareUpstream(ssl.get(), "api.example.com", {}));
  EXPECT_STREQ(SSL_get_servername(ssl.get(), TLSEXT_NAMETYPE_host_name), "api.example.com");
  SslPtr by_ip(SSL_new(system->get()));
  EXPECT_TRUE(PrepareUpstream(by_ip.get(), "203.0.113.7", {"http/1.1"}));
  EXPECT_EQ(SSL_get_servername(by_ip.get(), TLSEXT_NAMETYPE_host_name), nullptr);  // no SNI
}

TEST(SandboxCaTest, KeyStaysInsideAndEachCaIsItsOwn) {
  auto a = NewCa({"api.example.com"});
  auto b = NewCa({"api.example.com"});
  ASSERT_TRUE(a && b);
  for (const auto* ca : {a.get(), b.get()}) {
    EXPECT_THAT(ca->cert_pem(), Not(HasSubstr("PRIVATE KEY")));
    EXPECT_EQ(ca->cert_pem().rfind("-----BEGIN CERTIFICATE-----\n", 0), 0u);
    EXPECT_EQ(ca->cert_pem().find("-----BEGIN", 1), std::string::npos);  // one block only
  }
  X509Ptr ca_a = ParsePem(a->cert_pem());
  X509Ptr ca_b = ParsePem(b->cert_pem());
  EXPECT_NE(EVP_PKEY_eq(X509_get0_pubkey(ca_a.get()), X509_get0_pubkey(ca_b.get())), 1);
  EXPECT_NE(
      ASN1_INTEGER_cmp(X509_get0_serialNumber(ca_a.get()), X509_get0_serialNumber(ca_b.get())), 0);
  auto leaf_a = a->ServerContext("api.example.com");
  auto leaf_b = b->ServerContext("api.example.com");
  ASSERT_TRUE(leaf_a && leaf_b);
  EXPECT_NE(EVP_PKEY_eq(X509_get0_pubkey(SSL_CTX_get0_certificate(leaf_a->get())),
                        X509_get0_pubkey(SSL_CTX_get0_certificate(leaf_b->get()))),
            1);
}

TEST(SandboxCaTest, CreateRefusesWhatCannotBeConstrained) {
  for (std::vector<std::string> names :
       std::vector<std::vector<std::string>>{{},
                                             {""},
                                             {"*"},
                                             {"*.*.com"},
                                             {"a.*.com"},
                                             {"1.2.3.4"},
                                             {"exa mple.com"},
                                             {"a..com"},
                                             {"api.example.com", "2001:db8::1"}}) {
    auto ca = SandboxCa::Create(kLabel, names);
    ASSERT_FALSE(ca) << fmt::format("{}", fmt::join(names, ","));
    EXPECT_EQ(ca.error().code, ErrorCode::kInvalidArgument);
  }
  for (std::string label : {std::string(), std::string(38, 'x'), std::string("a\nb")}) {
    auto ca = SandboxCa::Create(label, {"api.example.com"});
    ASSERT_FALSE(ca);
    EXPECT_EQ(ca.error().code, ErrorCode::kInvalidArgument);
  }
  EXPECT_TRUE(SandboxCa::Create(std::string(37, 'x'), {"api.example.com"}));
}

TEST(SandboxCaTest, ContextsAreCachedAndBounded) {
  auto ca = NewCa({"*.example.com"});
  ASSERT_NE(ca, nullptr);
  std::vector<std::shared_ptr<SSL_CTX>> held;  // keeps every context alive: no reused address
  for (size_t i = 0; i <= kServerContextCacheSize; ++i) {
    auto ctx = ca->ServerContext(fmt::format("h{}.example.com", i));
    ASSERT_TRUE(ctx) << ctx.error().ToString();
    held.push_back(*ctx);
  }
  // h0 was the oldest when h256 came: evicted, minted again (which evicts h1).
  auto again = ca->ServerContext("h0.example.com");
  ASSERT_TRUE(again);
  EXPECT_NE(again->get(), held[0].get());
  EXPECT_EQ(ca->ServerContext("h0.example.com")->get(), again->get());
  EXPECT_EQ(ca->ServerContext("h2.example.com")->get(), held[2].get());
  EXPECT_EQ(ca->ServerContext("h256.example.com")->get(), held[256].get());
  EXPECT_NE(ca->ServerContext("h1.example.com")->get(), held[1].get());
  // An evicted context the caller still holds still works.
  SslCtxPtr client = ClientTrusting(ca->cert_pem());
  Connection c = Connect(held[0].get(), client.get(), ExpectHost("h0.example.com"));
  EXPECT_TRUE(c.client.ok) << c.client.error;
}

TEST(SandboxCaTest, LeavesAreMintedAgainNearTheirEnd) {
  auto ca = NewCa({"api.example.com"});
  ASSERT_NE(ca, nullptr);
  X509Ptr ca_cert = ParsePem(ca->cert_pem());
  auto first = ca->ServerContext("api.example.com");
  ASSERT_TRUE(first);

  ca->AdvanceClockForTest(std::chrono::hours(28 * 24 + 22));  // 1 day 2 h left: kept
  EXPECT_EQ(ca->ServerContext("api.example.com")->get(), first->get());
  ca->AdvanceClockForTest(std::chrono::hours(3));  // 23 h left: a new leaf
  auto second = ca->ServerContext("api.example.com");
  ASSERT_TRUE(second);
  EXPECT_NE(second->get(), first->get());
  EXPECT_GT(ASN1_TIME_compare(X509_get0_notAfter(SSL_CTX_get0_certificate(second->get())),
                              X509_get0_notAfter(SSL_CTX_get0_certificate(first->get()))),
            0);

  // 9 days 23 h before the CA's end: a leaf ends with the CA, not after it.
  ca->AdvanceClockForTest(std::chrono::hours(361 * 24));
  auto late = ca->ServerContext("api.example.com");
  ASSERT_TRUE(late) << late.error().ToString();
  EXPECT_EQ(ASN1_TIME_compare(X509_get0_notAfter(SSL_CTX_get0_certificate(late->get())),
                              X509_get0_notAfter(ca_cert.get())),
            0);
  // Within a day of the CA's end: no leaf at all.
  ca->AdvanceClockForTest(std::chrono::hours(9 * 24));  // 23 h left
  auto expired = ca->ServerContext("api.example.com");
  ASSERT_FALSE(expired);
  EXPECT_EQ(expired.error().code, ErrorCode::kUnavailable);
  EXPECT_THAT(expired.error().message, HasSubstr("expires within a day"));
}

TEST(SandboxCaTest, ServerContextIsThreadSafe) {
  auto ca = NewCa({"*.example.com"});
  ASSERT_NE(ca, nullptr);
  std::mutex mu;
  std::map<std::string, std::set<SSL_CTX*>> seen;
  std::vector<std::shared_ptr<SSL_CTX>> held;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 100; ++i) {
        std::string host = fmt::format("t{}.example.com", (i * 7 + t) % 20);
        auto ctx = ca->ServerContext(host);
        if (!ctx) {
          ++failures;
          continue;
        }
        std::lock_guard<std::mutex> lock(mu);
        seen[host].insert(ctx->get());
        held.push_back(*ctx);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(seen.size(), 20u);
  for (const auto& [host, ctxs] : seen) EXPECT_EQ(ctxs.size(), 1u) << host;
}

}  // namespace
}  // namespace deepbox::local
