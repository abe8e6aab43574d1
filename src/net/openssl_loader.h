// OpenSSL (libssl.so.3 and the libcrypto.so.3 it needs), loaded on first use
// (dlopen) instead of linked. Every sandbox start execs two of our binaries,
// `deepbox` (its supervisor) and deepbox-sandboxd (its daemon), and loading
// OpenSSL was ~1.2 ms of each (issue 23; bench/local): now a sandbox without
// secrets or a token never loads it, and neither does a CLI command that
// makes no TLS connection. Every OpenSSL call of the product goes through
// this table (tests may call OpenSSL directly). Built with
// -DDEEPBOX_STATIC_OPENSSL=ON the table holds the statically linked
// functions instead. Bundles of the daemon carry both libraries
// (local/sandboxd_bundle.cc, deploy/k8s/bundle-sandboxd.sh).
#pragma once

#include <openssl/bn.h>
#include <openssl/crypto.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/objects.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <string_view>
#include <type_traits>

#include "common/error.h"

namespace deepbox::net {

#define DEEPBOX_OPENSSL_FUNCS(X)      \
  X(ASN1_IA5STRING_free)              \
  X(ASN1_IA5STRING_new)               \
  X(ASN1_OCTET_STRING_free)           \
  X(ASN1_OCTET_STRING_new)            \
  X(ASN1_OCTET_STRING_set)            \
  X(ASN1_STRING_set)                  \
  X(BIO_ctrl)                         \
  X(BIO_ctrl_pending)                 \
  X(BIO_free)                         \
  X(BIO_free_all)                     \
  X(BIO_new)                          \
  X(BIO_new_mem_buf)                  \
  X(BIO_s_mem)                        \
  X(BIO_write)                        \
  X(BN_bn2binpad)                     \
  X(BN_free)                          \
  X(BN_is_zero)                       \
  X(BN_new)                           \
  X(BN_rand)                          \
  X(BN_to_ASN1_INTEGER)               \
  X(CRYPTO_get_ex_new_index)          \
  X(CRYPTO_memcmp)                    \
  X(ECDSA_SIG_free)                   \
  X(ECDSA_SIG_get0_r)                 \
  X(ECDSA_SIG_get0_s)                 \
  X(ERR_clear_error)                  \
  X(ERR_error_string_n)               \
  X(ERR_get_error)                    \
  X(ERR_peek_error)                   \
  X(EVP_Digest)                       \
  X(EVP_DigestFinal_ex)               \
  X(EVP_DigestInit_ex)                \
  X(EVP_DigestSign)                   \
  X(EVP_DigestSignInit)               \
  X(EVP_DigestUpdate)                 \
  X(EVP_MD_CTX_free)                  \
  X(EVP_MD_CTX_new)                   \
  X(EVP_PKEY_Q_keygen)                \
  X(EVP_PKEY_free)                    \
  X(EVP_PKEY_get0_type_name)          \
  X(EVP_PKEY_get_bits)                \
  X(EVP_PKEY_is_a)                    \
  X(EVP_sha256)                       \
  X(EVP_sha384)                       \
  X(EVP_sha512)                       \
  X(GENERAL_NAMES_free)               \
  X(GENERAL_NAMES_new)                \
  X(GENERAL_NAME_free)                \
  X(GENERAL_NAME_new)                 \
  X(GENERAL_NAME_set0_value)          \
  X(GENERAL_SUBTREE_free)             \
  X(GENERAL_SUBTREE_new)              \
  X(HMAC)                             \
  X(NAME_CONSTRAINTS_free)            \
  X(NAME_CONSTRAINTS_new)             \
  X(OBJ_nid2sn)                       \
  X(OPENSSL_sk_new_null)              \
  X(OPENSSL_sk_push)                  \
  X(OPENSSL_thread_stop)              \
  X(PEM_read_bio_PrivateKey)          \
  X(PEM_read_bio_X509)                \
  X(PEM_write_bio_X509)               \
  X(SSL_CTX_check_private_key)        \
  X(SSL_CTX_ctrl)                     \
  X(SSL_CTX_free)                     \
  X(SSL_CTX_get_cert_store)           \
  X(SSL_CTX_load_verify_locations)    \
  X(SSL_CTX_new)                      \
  X(SSL_CTX_set_alpn_select_cb)       \
  X(SSL_CTX_set_ciphersuites)         \
  X(SSL_CTX_set_default_verify_paths) \
  X(SSL_CTX_set_options)              \
  X(SSL_CTX_set_verify)               \
  X(SSL_CTX_use_PrivateKey)           \
  X(SSL_CTX_use_certificate)          \
  X(SSL_accept)                       \
  X(SSL_connect)                      \
  X(SSL_ctrl)                         \
  X(SSL_do_handshake)                 \
  X(SSL_free)                         \
  X(SSL_get0_alpn_selected)           \
  X(SSL_get0_param)                   \
  X(SSL_get_error)                    \
  X(SSL_get_ex_data)                  \
  X(SSL_get_verify_result)            \
  X(SSL_new)                          \
  X(SSL_read)                         \
  X(SSL_set1_host)                    \
  X(SSL_set_accept_state)             \
  X(SSL_set_alpn_protos)              \
  X(SSL_set_bio)                      \
  X(SSL_set_connect_state)            \
  X(SSL_set_ex_data)                  \
  X(SSL_set_fd)                       \
  X(SSL_set_hostflags)                \
  X(SSL_set_options)                  \
  X(SSL_shutdown)                     \
  X(SSL_write)                        \
  X(TLS_client_method)                \
  X(TLS_server_method)                \
  X(X509V3_EXT_conf_nid)              \
  X(X509V3_set_ctx)                   \
  X(X509_EXTENSION_free)              \
  X(X509_NAME_add_entry_by_NID)       \
  X(X509_NAME_free)                   \
  X(X509_NAME_new)                    \
  X(X509_STORE_CTX_free)              \
  X(X509_STORE_add_cert)              \
  X(X509_STORE_free)                  \
  X(X509_VERIFY_PARAM_set1_host)      \
  X(X509_VERIFY_PARAM_set1_ip_asc)    \
  X(X509_add1_ext_i2d)                \
  X(X509_add_ext)                     \
  X(X509_free)                        \
  X(X509_get_serialNumber)            \
  X(X509_get_subject_name)            \
  X(X509_getm_notAfter)               \
  X(X509_getm_notBefore)              \
  X(X509_new)                         \
  X(X509_set_issuer_name)             \
  X(X509_set_pubkey)                  \
  X(X509_set_subject_name)            \
  X(X509_set_version)                 \
  X(X509_sign)                        \
  X(X509_time_adj_ex)                 \
  X(X509_verify_cert_error_string)    \
  X(d2i_ECDSA_SIG)

struct LibOpenSsl {
#define DEEPBOX_OPENSSL_DECLARE(name) decltype(&::name) name = nullptr;
  DEEPBOX_OPENSSL_FUNCS(DEEPBOX_OPENSSL_DECLARE)
#undef DEEPBOX_OPENSSL_DECLARE
};

// The functions, loaded once; UNAVAILABLE ("<purpose> needs OpenSSL: ...")
// when libssl.so.3 or one of them is missing.
Result<const LibOpenSsl*> LoadLibOpenSsl(std::string_view purpose);

// The functions, for a process that cannot do without them (the `deepbox`
// CLI and the supervisor: their file formats, the secrets proxy): one that
// cannot load OpenSSL stops here with the loader's error, as it did at its
// start while it was linked. The daemon uses LoadLibOpenSsl instead.
const LibOpenSsl& RequireLibOpenSsl();

// RAII for OpenSSL objects: std::unique_ptr<T, OpenSslFree<&LibOpenSsl::T_free>>
// (or OpenSslFree<T_free> in tests, which link OpenSSL).
template <auto Free>
struct OpenSslFree {
  template <typename T>
  void operator()(T* p) const {
    if constexpr (std::is_member_pointer_v<decltype(Free)>) {
      (RequireLibOpenSsl().*Free)(p);
    } else {
      Free(p);
    }
  }
};

// The functions if an earlier LoadLibOpenSsl succeeded, else nullptr: for
// what only matters once something used OpenSSL (freeing a thread's state),
// and for code that holds an object OpenSSL made (so it is loaded).
const LibOpenSsl* LoadedLibOpenSsl();

}  // namespace deepbox::net
