// Fresh private keys as PEM (PKCS#8) for the tests of JWT client assertions,
// made with OpenSSL: an EC key on a named curve ("P-256", "P-384", "P-521") or
// an RSA key of some size.
#pragma once

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include <cstddef>
#include <string>

namespace deepbox::mcp::testing {

inline std::string PemOfKey(EVP_PKEY* key) {
  if (key == nullptr) return "";
  BIO* bio = BIO_new(BIO_s_mem());
  std::string pem;
  if (PEM_write_bio_PrivateKey(bio, key, nullptr, nullptr, 0, nullptr, nullptr) == 1) {
    char* data = nullptr;
    const long n = BIO_get_mem_data(bio, &data);
    pem.assign(data, static_cast<size_t>(n));
  }
  BIO_free(bio);
  EVP_PKEY_free(key);
  return pem;
}

inline std::string EcPrivateKeyPem(const char* curve) {
  return PemOfKey(EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", curve));
}

inline std::string RsaPrivateKeyPem(size_t bits) {
  return PemOfKey(EVP_PKEY_Q_keygen(nullptr, nullptr, "RSA", bits));
}

}  // namespace deepbox::mcp::testing
