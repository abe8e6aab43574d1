// A throwaway PKI for tests: a CA and a leaf for some DNS names (EC P-256),
// as PEM. Upstream servers of the test worlds (tls_echo_server.h) present
// the leaf; the code under test trusts the CA (and nothing else).
#pragma once

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <cstdlib>
#include <string>

namespace deepbox::local::testing {

struct TestPki {
  std::string ca_pem;
  std::string chain_pem;  // leaf, then the CA (a chain as a server sends it)
  std::string key_pem;    // the leaf's
};

inline std::string PemOf(X509* cert) {
  BIO* bio = BIO_new(BIO_s_mem());
  PEM_write_bio_X509(bio, cert);
  char* data = nullptr;
  long n = BIO_get_mem_data(bio, &data);
  std::string out(data, static_cast<size_t>(n));
  BIO_free(bio);
  return out;
}

inline std::string PemOf(EVP_PKEY* key) {
  BIO* bio = BIO_new(BIO_s_mem());
  PEM_write_bio_PrivateKey(bio, key, nullptr, nullptr, 0, nullptr, nullptr);
  char* data = nullptr;
  long n = BIO_get_mem_data(bio, &data);
  std::string out(data, static_cast<size_t>(n));
  BIO_free(bio);
  return out;
}

inline void AddTestExtension(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
  if (ext == nullptr) std::abort();  // a test's own literal is wrong
  X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
}

inline X509* NewTestCert(EVP_PKEY* key, const std::string& common_name, X509* issuer, long serial) {
  X509* cert = X509_new();
  X509_set_version(cert, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert), serial);
  X509_gmtime_adj(X509_getm_notBefore(cert), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert), 3600L * 24);
  X509_set_pubkey(cert, key);
  X509_NAME* name = X509_get_subject_name(cert);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(common_name.c_str()), -1, -1,
                             0);
  X509_set_issuer_name(cert, issuer != nullptr ? X509_get_subject_name(issuer) : name);
  return cert;
}

// A CA named `ca_name` and a leaf for `dns_names` ("a.test,b.test").
inline TestPki MakeTestPki(const std::string& dns_names,
                           const std::string& ca_name = "deepbox test CA") {
  TestPki pki;
  EVP_PKEY* ca_key = EVP_EC_gen("P-256");
  EVP_PKEY* leaf_key = EVP_EC_gen("P-256");
  X509* ca = NewTestCert(ca_key, ca_name, nullptr, 1);
  AddTestExtension(ca, ca, NID_basic_constraints, "critical,CA:TRUE");
  AddTestExtension(ca, ca, NID_key_usage, "critical,keyCertSign,cRLSign");
  AddTestExtension(ca, ca, NID_subject_key_identifier, "hash");
  X509_sign(ca, ca_key, EVP_sha256());
  std::string first = dns_names.substr(0, dns_names.find(','));
  X509* leaf = NewTestCert(leaf_key, first, ca, 2);
  std::string san;
  size_t start = 0;
  while (start <= dns_names.size()) {
    size_t comma = dns_names.find(',', start);
    if (comma == std::string::npos) comma = dns_names.size();
    san += (san.empty() ? "DNS:" : ",DNS:") + dns_names.substr(start, comma - start);
    start = comma + 1;
  }
  AddTestExtension(leaf, ca, NID_basic_constraints, "critical,CA:FALSE");
  AddTestExtension(leaf, ca, NID_subject_alt_name, san);
  AddTestExtension(leaf, ca, NID_ext_key_usage, "serverAuth");
  AddTestExtension(leaf, ca, NID_authority_key_identifier, "keyid:always");
  X509_sign(leaf, ca_key, EVP_sha256());
  pki.ca_pem = PemOf(ca);
  pki.chain_pem = PemOf(leaf) + pki.ca_pem;
  pki.key_pem = PemOf(leaf_key);
  X509_free(leaf);
  X509_free(ca);
  EVP_PKEY_free(leaf_key);
  EVP_PKEY_free(ca_key);
  return pki;
}

}  // namespace deepbox::local::testing
