// The daemon for a sandbox on an image: deepbox-sandboxd runs inside the
// image's root, whose libraries are the image's (or none: a distroless or
// musl image), so it brings its own, as the k8s template's init container
// does (deploy/k8s/bundle-sandboxd.sh): at /deepbox, bin/deepbox-sandboxd and
// lib/ with every shared library `ldd` resolves for it and the dynamic loader
// (lib/ld.so links to it). Nothing is copied: each file is bound read-only
// from where it is on the host (a bind inherits its source's mount flags, and
// the state dir may be noexec; the binary's and the system's libraries are
// not). The daemon is started through that loader with --library-path
// (SandboxdBundleArgv): nothing is patched, and the commands it runs see no
// LD_LIBRARY_PATH, only the image's own libraries.
//
// What `ldd` says is kept under `cache_dir`, one file per binary version (its
// path, size, mtime and inode), written once (atomically).
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

struct SandboxdBundle {
  // Path inside (under kSandboxdBundleMount) -> the host file bound there.
  std::vector<std::pair<std::string, std::string>> files;
  std::string loader;  // the loader's file name in lib/ (lib/ld.so links to it)
};

// The shared libraries `ldd` resolves for `binary` (absolute host paths) and
// its dynamic loader. NOT_FOUND names a library ldd cannot find;
// INVALID_ARGUMENT: not a dynamically linked program.
struct LinkedLibraries {
  std::vector<std::filesystem::path> libs;
  std::filesystem::path loader;
};
Result<LinkedLibraries> ListLinkedLibraries(const std::filesystem::path& binary);

Result<SandboxdBundle> ResolveSandboxdBundle(const std::filesystem::path& binary,
                                             const std::filesystem::path& cache_dir);

// argv that starts the bundled daemon inside the sandbox; `args` follow.
std::vector<std::string> SandboxdBundleArgv(const std::vector<std::string>& args);

}  // namespace deepbox::local
