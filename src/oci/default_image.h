// The one default image: what `--image` with no value runs locally and what
// the k8s SandboxTemplate runs (deploy/k8s/sandbox-template.yaml; a test,
// tests/k8s/manifest_test.cc, checks that the template names this string),
// so a sandbox looks the same on a laptop and in the cluster.
#pragma once

namespace deepbox::oci {

inline constexpr const char* kDefaultSandboxImage = "python:3.12-slim-bookworm";

}  // namespace deepbox::oci
