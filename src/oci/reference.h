// Image references as people write them, normalised the way Docker does:
//   python:3.12-slim-bookworm        -> docker.io/library/python:3.12-slim-bookworm
//   ghcr.io/org/app                  -> ghcr.io/org/app:latest
//   localhost:5000/app:v1            -> localhost:5000/app:v1
//   app@sha256:<hex>                 -> docker.io/library/app@sha256:<hex>
// The first component is a registry when it holds a '.' or a ':' or is
// "localhost"; otherwise the registry is Docker Hub.
#pragma once

#include <string>
#include <string_view>

#include "common/error.h"

namespace deepbox::oci {

inline constexpr std::string_view kDockerHub = "docker.io";

struct ImageReference {
  std::string registry;    // "docker.io", "localhost:5000", "[::1]:5000"
  std::string repository;  // "library/python"
  std::string tag;         // "" when only a digest was given
  std::string digest;      // "sha256:<hex>" or ""

  // The canonical name: registry/repository[:tag][@digest].
  std::string ToString() const;
  // What the manifest is fetched by: the digest when there is one, else the tag.
  const std::string& ManifestReference() const { return digest.empty() ? tag : digest; }
  // The host[:port] to connect to (Docker Hub's API is registry-1.docker.io).
  std::string ApiHost() const;
  // The host without a port (and without brackets), for loopback checks.
  std::string HostName() const;
};

// INVALID_ARGUMENT with what is wrong for anything else (upper case in a
// repository, an empty component, a bad tag or digest, ...).
Result<ImageReference> ParseImageReference(std::string_view text);

// Whether `host` (no port) names this machine: localhost, 127.0.0.0/8, ::1.
bool IsLoopbackHost(std::string_view host);

}  // namespace deepbox::oci
