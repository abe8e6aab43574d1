#include "mcp/jwt_assertion.h"

#include <fmt/format.h>
#include <openssl/bio.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include <memory>

#include "common/json.h"
#include "common/random.h"
#include "net/openssl_loader.h"
#include "net/token_digest.h"

namespace deepbox::mcp {
namespace {

// OpenSSL's functions (net/openssl_loader.h: loaded on first use).
const net::LibOpenSsl& OpenSsl() { return net::RequireLibOpenSsl(); }

struct PkeyFree {
  void operator()(EVP_PKEY* k) const { OpenSsl().EVP_PKEY_free(k); }
};
struct BioFree {
  void operator()(BIO* b) const { OpenSsl().BIO_free(b); }
};
struct MdCtxFree {
  void operator()(EVP_MD_CTX* c) const { OpenSsl().EVP_MD_CTX_free(c); }
};
struct EcdsaSigFree {
  void operator()(ECDSA_SIG* s) const { OpenSsl().ECDSA_SIG_free(s); }
};
using UniquePkey = std::unique_ptr<EVP_PKEY, PkeyFree>;

// OpenSSL's reason for the last failure, or `fallback`.
std::string OpenSslReason(const char* fallback) {
  const unsigned long e = OpenSsl().ERR_get_error();
  OpenSsl().ERR_clear_error();
  if (e == 0) return fallback;
  char buf[256];
  OpenSsl().ERR_error_string_n(e, buf, sizeof buf);
  return buf;
}

Result<UniquePkey> LoadPrivateKey(std::string_view pem) {
  std::unique_ptr<BIO, BioFree> bio(
      OpenSsl().BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  if (!bio) return MakeError(ErrorCode::kInternal, "BIO_new_mem_buf failed");
  UniquePkey key(OpenSsl().PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
  if (!key) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "the private key is not a PEM private key without a passphrase (" +
                         OpenSslReason("no PEM block") + ")");
  }
  return key;
}

struct KeyAlgorithm {
  std::string alg;
  const EVP_MD* digest = nullptr;
  size_t ec_component_bytes = 0;  // ES*: the size of r and of s; 0 for RSA
};

Result<KeyAlgorithm> AlgorithmOf(EVP_PKEY* key) {
  const int bits = OpenSsl().EVP_PKEY_get_bits(key);
  if (OpenSsl().EVP_PKEY_is_a(key, "EC")) {
    switch (bits) {
      case 256:
        return KeyAlgorithm{"ES256", OpenSsl().EVP_sha256(), 32};
      case 384:
        return KeyAlgorithm{"ES384", OpenSsl().EVP_sha384(), 48};
      case 521:
        return KeyAlgorithm{"ES512", OpenSsl().EVP_sha512(), 66};
      default:
        return MakeError(
            ErrorCode::kInvalidArgument,
            fmt::format("an EC key of {} bits: JWS signs with P-256, P-384 or P-521", bits));
    }
  }
  if (OpenSsl().EVP_PKEY_is_a(key, "RSA")) {
    if (bits < 2048) {
      return MakeError(ErrorCode::kInvalidArgument,
                       fmt::format("an RSA key of {} bits: RS256 needs 2048 or more", bits));
    }
    return KeyAlgorithm{"RS256", OpenSsl().EVP_sha256(), 0};
  }
  return MakeError(ErrorCode::kInvalidArgument,
                   fmt::format("a {} key: JWT assertions are signed with EC or RSA keys",
                               OpenSsl().EVP_PKEY_get0_type_name(key)));
}

// DER ECDSA-Sig-Value into JWS's fixed-size r || s (RFC 7518 §3.4).
Result<std::string> EcdsaDerToJose(const std::string& der, size_t component_bytes) {
  const auto* p = reinterpret_cast<const unsigned char*>(der.data());
  std::unique_ptr<ECDSA_SIG, EcdsaSigFree> sig(
      OpenSsl().d2i_ECDSA_SIG(nullptr, &p, static_cast<long>(der.size())));
  if (!sig) return MakeError(ErrorCode::kInternal, "d2i_ECDSA_SIG: " + OpenSslReason("bad DER"));
  std::string out(2 * component_bytes, '\0');
  auto* o = reinterpret_cast<unsigned char*>(out.data());
  if (OpenSsl().BN_bn2binpad(OpenSsl().ECDSA_SIG_get0_r(sig.get()), o,
                             static_cast<int>(component_bytes)) < 0 ||
      OpenSsl().BN_bn2binpad(OpenSsl().ECDSA_SIG_get0_s(sig.get()), o + component_bytes,
                             static_cast<int>(component_bytes)) < 0) {
    return MakeError(ErrorCode::kInternal, "BN_bn2binpad: an ECDSA component too large");
  }
  return out;
}

}  // namespace

Result<std::string> JwtAlgorithmForKey(std::string_view private_key_pem) {
  auto key = LoadPrivateKey(private_key_pem);
  if (!key) return tl::unexpected(key.error());
  auto a = AlgorithmOf(key->get());
  if (!a) return tl::unexpected(a.error());
  return a->alg;
}

Result<std::string> SignJwtAssertion(std::string_view private_key_pem, std::string_view alg,
                                     const JwtAssertionClaims& claims, int64_t now) {
  auto key = LoadPrivateKey(private_key_pem);
  if (!key) return tl::unexpected(key.error());
  auto a = AlgorithmOf(key->get());
  if (!a) return tl::unexpected(a.error());
  if (!alg.empty() && alg != a->alg) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("the private key signs {}, not {}", a->alg, alg));
  }
  if (claims.issuer.empty() || claims.audience.empty()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "a JWT assertion needs an issuer (the client id) and an audience");
  }
  json::object header{{"alg", a->alg}, {"typ", "JWT"}};
  json::object body;
  body["iss"] = claims.issuer;
  body["sub"] = claims.subject.empty() ? claims.issuer : claims.subject;
  body["aud"] = claims.audience;
  body["iat"] = now;
  body["exp"] = now + claims.lifetime.count();
  body["jti"] = RandomHex(32);  // single use (RFC 7523 §3 item 7)
  const std::string signing_input =
      net::Base64UrlEncode(ToJson(header)) + "." + net::Base64UrlEncode(ToJson(body));

  std::unique_ptr<EVP_MD_CTX, MdCtxFree> ctx(OpenSsl().EVP_MD_CTX_new());
  if (!ctx) return MakeError(ErrorCode::kInternal, "EVP_MD_CTX_new failed");
  size_t size = 0;
  const auto* input = reinterpret_cast<const unsigned char*>(signing_input.data());
  if (OpenSsl().EVP_DigestSignInit(ctx.get(), nullptr, a->digest, nullptr, key->get()) != 1 ||
      OpenSsl().EVP_DigestSign(ctx.get(), nullptr, &size, input, signing_input.size()) != 1) {
    return MakeError(ErrorCode::kInternal, "EVP_DigestSign: " + OpenSslReason("failed"));
  }
  std::string signature(size, '\0');
  if (OpenSsl().EVP_DigestSign(ctx.get(), reinterpret_cast<unsigned char*>(signature.data()), &size,
                               input, signing_input.size()) != 1) {
    return MakeError(ErrorCode::kInternal, "EVP_DigestSign: " + OpenSslReason("failed"));
  }
  signature.resize(size);
  if (a->ec_component_bytes != 0) {
    auto jose = EcdsaDerToJose(signature, a->ec_component_bytes);
    if (!jose) return tl::unexpected(jose.error());
    signature = std::move(*jose);
  }
  return signing_input + "." + net::Base64UrlEncode(signature);
}

}  // namespace deepbox::mcp
