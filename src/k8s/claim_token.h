// Per-claim daemon tokens (deploy/k8s/README.md "Who may drive a sandbox"):
// only whoever claimed a sandbox may drive its daemon, even from a pod that
// reaches it directly.
//
//  * The token of claim NAMESPACE/NAME is HMAC-SHA256(user key, "NAMESPACE/NAME")
//    (base64url): every deepbox process of the user derives it again
//    (`sandbox exec` after `sandbox create`), nothing per claim is stored,
//    and no other user can compute it.
//  * The claim carries only its verifier, "sha256:" + base64url(SHA-256(token)),
//    in spec.additionalPodMetadata.annotations[kTokenVerifierAnnotation].
//    The controller puts it on the pod (also a warm pod it adopts: no
//    restart), the template's downward API volume shows it to the daemon
//    (--token-sha256-file). The cluster and the pod hold nothing that lets
//    anyone drive the daemon: readers of claims, pods or the volume get a
//    SHA-256 of 256 random bits.
//  * The client sends the token in X-Sandboxd-Token (net/token_digest.h),
//    which the sandbox routers forward; Authorization stays the router's.
#pragma once

#include <string>
#include <string_view>

#include "common/error.h"

namespace deepbox::k8s {

inline constexpr std::string_view kTokenVerifierAnnotation = "deepbox.dev/sandboxd-token-sha256";

// $DEEPBOX_K8S_CLAIM_KEY_FILE, else $XDG_STATE_HOME/deepbox/k8s-claim-key
// (~/.local/state/deepbox/k8s-claim-key).
std::string DefaultClaimKeyPath();

// The user's key (32 random bytes, stored as 64 hex digits): read from `path`,
// which must be a regular file owned by this user with no group or other
// access; created (0600, parents 0700) when missing.
Result<std::string> LoadOrCreateClaimKey(const std::string& path);

// The token of claim ns/name under `key`.
std::string DeriveClaimToken(std::string_view key, std::string_view ns, std::string_view name);

}  // namespace deepbox::k8s
