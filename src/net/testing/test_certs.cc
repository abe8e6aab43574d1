#include "net/testing/test_certs.h"

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <stdexcept>

namespace deepbox::net::testing {
namespace {

EVP_PKEY* NewKey() {
  EVP_PKEY* key = EVP_EC_gen("P-256");
  if (key == nullptr) throw std::runtime_error("EVP_EC_gen failed");
  return key;
}

std::string KeyPem(EVP_PKEY* key) {
  BIO* bio = BIO_new(BIO_s_mem());
  PEM_write_bio_PrivateKey(bio, key, nullptr, nullptr, 0, nullptr, nullptr);
  char* data = nullptr;
  long n = BIO_get_mem_data(bio, &data);
  std::string out(data, static_cast<size_t>(n));
  BIO_free(bio);
  return out;
}

std::string CertPem(X509* cert) {
  BIO* bio = BIO_new(BIO_s_mem());
  PEM_write_bio_X509(bio, cert);
  char* data = nullptr;
  long n = BIO_get_mem_data(bio, &data);
  std::string out(data, static_cast<size_t>(n));
  BIO_free(bio);
  return out;
}

void AddExt(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
}

X509* MakeCert(EVP_PKEY* key, const char* cn, const char* org, X509* issuer, long serial) {
  X509* cert = X509_new();
  X509_set_version(cert, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert), serial);
  X509_gmtime_adj(X509_getm_notBefore(cert), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert), 3600L * 24 * 365);
  X509_set_pubkey(cert, key);
  X509_NAME* name = X509_get_subject_name(cert);
  if (org != nullptr) {
    X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(org),
                               -1, -1, 0);
  }
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(cn),
                             -1, -1, 0);
  X509_set_issuer_name(cert, issuer != nullptr ? X509_get_subject_name(issuer) : name);
  return cert;
}

}  // namespace

TestPki GenerateTestPki(const std::string& client_common_name, const std::string& client_org,
                        const std::string& server_san) {
  TestPki pki;
  EVP_PKEY* ca_key = NewKey();
  X509* ca = MakeCert(ca_key, "deepbox-test-ca", nullptr, nullptr, 1);
  AddExt(ca, ca, NID_basic_constraints, "critical,CA:TRUE");
  AddExt(ca, ca, NID_key_usage, "critical,keyCertSign,cRLSign");
  AddExt(ca, ca, NID_subject_key_identifier, "hash");
  X509_sign(ca, ca_key, EVP_sha256());

  EVP_PKEY* server_key = NewKey();
  X509* server = MakeCert(server_key, "localhost", nullptr, ca, 2);
  AddExt(server, ca, NID_subject_alt_name, server_san.c_str());
  AddExt(server, ca, NID_ext_key_usage, "serverAuth");
  X509_sign(server, ca_key, EVP_sha256());

  EVP_PKEY* client_key = NewKey();
  X509* client = MakeCert(client_key, client_common_name.c_str(),
                          client_org.empty() ? nullptr : client_org.c_str(), ca, 3);
  AddExt(client, ca, NID_ext_key_usage, "clientAuth");
  X509_sign(client, ca_key, EVP_sha256());

  pki.ca_cert_pem = CertPem(ca);
  pki.ca_key_pem = KeyPem(ca_key);
  pki.server_cert_pem = CertPem(server);
  pki.server_key_pem = KeyPem(server_key);
  pki.client_cert_pem = CertPem(client);
  pki.client_key_pem = KeyPem(client_key);
  X509_free(ca);
  X509_free(server);
  X509_free(client);
  EVP_PKEY_free(ca_key);
  EVP_PKEY_free(server_key);
  EVP_PKEY_free(client_key);
  return pki;
}

}  // namespace deepbox::net::testing
