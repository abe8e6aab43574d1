#include "oci/digest.h"

#include <fmt/format.h>
#include <openssl/evp.h>

#include <cstdlib>

#include "net/openssl_loader.h"

namespace deepbox::oci {

namespace {

// OpenSSL's functions (net/openssl_loader.h: loaded on first use).
const net::LibOpenSsl& OpenSsl() { return net::RequireLibOpenSsl(); }

constexpr std::string_view kSha256Prefix = "sha256:";
}  // namespace

bool ValidDigest(std::string_view digest) {
  if (digest.size() != kSha256Prefix.size() + 64 || digest.substr(0, 7) != kSha256Prefix) {
    return false;
  }
  for (char c : digest.substr(7)) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

Status CheckDigest(std::string_view digest, std::string_view what) {
  if (ValidDigest(digest)) return {};
  return MakeError(ErrorCode::kInvalidArgument,
                   fmt::format("{} '{}' is not a sha256 digest (sha256:<64 lowercase hex>)", what,
                               digest.substr(0, 100)));
}

std::string_view DigestHex(std::string_view digest) { return digest.substr(kSha256Prefix.size()); }

struct Sha256Digester::State {
  EVP_MD_CTX* ctx = nullptr;
  ~State() { OpenSsl().EVP_MD_CTX_free(ctx); }
};

Sha256Digester::Sha256Digester() : state_(std::make_unique<State>()) {
  state_->ctx = OpenSsl().EVP_MD_CTX_new();
  // Allocation failure of a few bytes: nothing sensible to return.
  if (state_->ctx == nullptr ||
      OpenSsl().EVP_DigestInit_ex(state_->ctx, OpenSsl().EVP_sha256(), nullptr) != 1) {
    std::abort();
  }
}

Sha256Digester::~Sha256Digester() = default;
Sha256Digester::Sha256Digester(Sha256Digester&&) noexcept = default;
Sha256Digester& Sha256Digester::operator=(Sha256Digester&&) noexcept = default;

void Sha256Digester::Update(std::string_view data) {
  OpenSsl().EVP_DigestUpdate(state_->ctx, data.data(), data.size());
}

std::string Sha256Digester::Finish() {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  OpenSsl().EVP_DigestFinal_ex(state_->ctx, md, &len);
  std::string out(kSha256Prefix);
  static constexpr char kHex[] = "0123456789abcdef";
  for (unsigned int i = 0; i < len; ++i) {
    out += kHex[md[i] >> 4];
    out += kHex[md[i] & 15];
  }
  return out;
}

std::string Sha256Digest(std::string_view data) {
  Sha256Digester d;
  d.Update(data);
  return d.Finish();
}

}  // namespace deepbox::oci
