// Content digests of OCI blobs ("sha256:<64 lowercase hex>"): checking their
// form, and computing them as bytes stream past (OpenSSL's SHA-256).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "common/error.h"

namespace deepbox::oci {

// "sha256:" followed by exactly 64 lowercase hex digits: the only algorithm
// accepted (a digest is also a file name in the cache, so its form is strict).
bool ValidDigest(std::string_view digest);
// INVALID_ARGUMENT naming `what` ("layer digest") unless ValidDigest.
Status CheckDigest(std::string_view digest, std::string_view what);
// The hex part of a valid digest.
std::string_view DigestHex(std::string_view digest);

// SHA-256 of a byte stream, fed in pieces.
class Sha256Digester {
 public:
  Sha256Digester();
  ~Sha256Digester();
  Sha256Digester(Sha256Digester&&) noexcept;
  Sha256Digester& operator=(Sha256Digester&&) noexcept;
  void Update(std::string_view data);
  // "sha256:<hex>" of everything fed; the digester is spent afterwards.
  std::string Finish();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// "sha256:<hex>" of `data`.
std::string Sha256Digest(std::string_view data);

}  // namespace deepbox::oci
