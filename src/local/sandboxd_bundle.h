// The daemon for a sandbox on an image: deepbox-sandboxd runs inside the
// image's root, whose libraries are the image's (or none: a distroless or
// musl image), so it brings its own, as the k8s template's init container
// does (deploy/k8s/bundle-sandboxd.sh): a directory with bin/ (the binary)
// and lib/ (every shared library `ldd` resolves for it, and the dynamic
// loader as lib/ld.so), bound read-only at /deepbox. The daemon is started
// through that loader with --library-path (SandboxdBundleArgv): nothing is
// patched, and the commands it runs see no LD_LIBRARY_PATH, only the image's
// own libraries.
//
// Bundles are kept under `bundles_dir`, one per binary version (its path,
// size, mtime and inode), made once (in a temporary directory renamed into
// place; a concurrent maker's is kept).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "common/error.h"

namespace deepbox::local {

// Where the bundle is inside the sandbox, and the daemon in it: where the
// k8s SandboxTemplate mounts its emptyDir and runs the daemon from
// (deploy/k8s/sandbox-template.yaml, checked by a test), so a sandbox on the
// same image looks alike in both worlds.
inline constexpr const char* kSandboxdBundleMount = "/deepbox";
inline constexpr const char* kBundledSandboxdPath = "/deepbox/bin/deepbox-sandboxd";

Result<std::filesystem::path> EnsureSandboxdBundle(const std::filesystem::path& binary,
                                                   const std::filesystem::path& bundles_dir);

// argv that starts the bundled daemon inside the sandbox; `args` follow.
std::vector<std::string> SandboxdBundleArgv(const std::vector<std::string>& args);

}  // namespace deepbox::local
