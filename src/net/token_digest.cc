#include "net/token_digest.h"

#include "common/base64.h"
#include "net/openssl_loader.h"

namespace deepbox::net {

std::string Sha256(std::string_view data) {
  // Without OpenSSL, or when EVP_Digest fails (only on allocation failure),
  // the digest is empty and matches nothing (TokenMatchesDigest compares 32
  // bytes). The daemon loads OpenSSL when it starts with a token verifier.
  auto loaded = LoadLibOpenSsl("SHA-256");
  if (!loaded) return {};
  const LibOpenSsl& openssl = **loaded;
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (openssl.EVP_Digest(data.data(), data.size(), out, &len, openssl.EVP_sha256(), nullptr) != 1)
    return {};
  return std::string(reinterpret_cast<const char*>(out), len);
}

std::string HmacSha256(std::string_view key, std::string_view data) {
  auto loaded = LoadLibOpenSsl("HMAC-SHA-256");
  if (!loaded) return {};
  const LibOpenSsl& openssl = **loaded;
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (openssl.HMAC(openssl.EVP_sha256(), key.data(), static_cast<int>(key.size()),
                   reinterpret_cast<const unsigned char*>(data.data()), data.size(), out,
                   &len) == nullptr) {
    return {};
  }
  return std::string(reinterpret_cast<const char*>(out), len);
}

std::string Base64UrlEncode(std::string_view data) {
  std::string s = Base64Encode(data);
  while (!s.empty() && s.back() == '=') s.pop_back();
  for (char& c : s) {
    if (c == '+') c = '-';
    if (c == '/') c = '_';
  }
  return s;
}

std::string TokenVerifier(std::string_view token) {
  return std::string(kTokenVerifierPrefix) + Base64UrlEncode(Sha256(token));
}

std::optional<std::string> ParseTokenVerifier(std::string_view text) {
  auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  while (!text.empty() && space(text.front())) text.remove_prefix(1);
  while (!text.empty() && space(text.back())) text.remove_suffix(1);
  if (!text.starts_with(kTokenVerifierPrefix)) return std::nullopt;
  std::string b64(text.substr(kTokenVerifierPrefix.size()));
  if (b64.size() != 43) return std::nullopt;  // 32 bytes, unpadded
  for (char& c : b64) {
    if (c == '-') {
      c = '+';
    } else if (c == '_') {
      c = '/';
    } else if (c == '+' || c == '/' || c == '=') {
      return std::nullopt;  // the standard alphabet is not this format
    }
  }
  auto raw = Base64Decode(b64);
  if (!raw || raw->size() != 32) return std::nullopt;
  return raw;
}

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  auto loaded = LoadLibOpenSsl("comparing secrets");
  if (!loaded) return false;  // fail closed
  return (*loaded)->CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

bool TokenMatchesDigest(std::string_view token, std::string_view digest) {
  return digest.size() == 32 && ConstantTimeEquals(Sha256(token), digest);
}

}  // namespace deepbox::net
