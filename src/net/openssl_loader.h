// OpenSSL (libssl.so.3 and the libcrypto.so.3 it needs), loaded on first use
// (dlopen) by this library instead of linked: deepbox-sandboxd starts in
// every sandbox and a local one never speaks TLS nor checks a token, and
// loading OpenSSL was ~0.9 ms of each start (issue 23; bench/sandboxd). The
// `deepbox` binary links OpenSSL for its own uses, so there dlopen finds the
// copy already loaded. Built with -DDEEPBOX_STATIC_OPENSSL=ON the table
// holds the statically linked functions instead (one copy per process).
// Bundles of the daemon carry both libraries (local/sandboxd_bundle.cc,
// deploy/k8s/bundle-sandboxd.sh).
#pragma once

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <string_view>

#include "common/error.h"

namespace deepbox::net {

#define DEEPBOX_OPENSSL_FUNCS(X)    \
  X(BIO_free)                       \
  X(BIO_new_mem_buf)                \
  X(CRYPTO_memcmp)                  \
  X(ERR_clear_error)                \
  X(ERR_error_string_n)             \
  X(ERR_get_error)                  \
  X(EVP_Digest)                     \
  X(EVP_PKEY_free)                  \
  X(EVP_sha256)                     \
  X(HMAC)                           \
  X(OPENSSL_thread_stop)            \
  X(PEM_read_bio_PrivateKey)        \
  X(PEM_read_bio_X509)              \
  X(SSL_CTX_check_private_key)      \
  X(SSL_CTX_ctrl)                   \
  X(SSL_CTX_free)                   \
  X(SSL_CTX_get_cert_store)         \
  X(SSL_CTX_load_verify_locations)  \
  X(SSL_CTX_new)                    \
  X(SSL_CTX_set_default_verify_paths) \
  X(SSL_CTX_set_verify)             \
  X(SSL_CTX_use_PrivateKey)         \
  X(SSL_CTX_use_certificate)        \
  X(SSL_accept)                     \
  X(SSL_connect)                    \
  X(SSL_ctrl)                       \
  X(SSL_free)                       \
  X(SSL_get0_param)                 \
  X(SSL_get_error)                  \
  X(SSL_get_verify_result)          \
  X(SSL_new)                        \
  X(SSL_read)                       \
  X(SSL_set_fd)                     \
  X(SSL_shutdown)                   \
  X(SSL_write)                      \
  X(TLS_client_method)              \
  X(TLS_server_method)              \
  X(X509_STORE_add_cert)            \
  X(X509_VERIFY_PARAM_set1_host)    \
  X(X509_VERIFY_PARAM_set1_ip_asc)  \
  X(X509_free)                      \
  X(X509_verify_cert_error_string)

struct LibOpenSsl {
#define DEEPBOX_OPENSSL_DECLARE(name) decltype(&::name) name = nullptr;
  DEEPBOX_OPENSSL_FUNCS(DEEPBOX_OPENSSL_DECLARE)
#undef DEEPBOX_OPENSSL_DECLARE
};

// The functions, loaded once; UNAVAILABLE ("<purpose> needs OpenSSL: ...")
// when libssl.so.3 or one of them is missing.
Result<const LibOpenSsl*> LoadLibOpenSsl(std::string_view purpose);

// The functions if an earlier LoadLibOpenSsl succeeded, else nullptr: for
// what only matters once something used OpenSSL (freeing a thread's state),
// and for code that holds an object OpenSSL made (so it is loaded).
const LibOpenSsl* LoadedLibOpenSsl();

}  // namespace deepbox::net
