// A local sandbox on an OCI image (`--image REF`): what the creator resolves
// (the image pulled on first use, from the cache shared with `deepbox
// image`), what the sandbox's record keeps of it, the pin that keeps the
// cache from removing it while the sandbox lives (oci/image_store.h:
// ImagePin), and the environment its daemon and commands get.
//
// What applies of the image's config: Env (the sandbox's own HOME, USER and
// a PATH ending in /.deepbox/bin set over it) and WorkingDir (the cwd
// of every command that names none: the daemon's --exec-cwd; /workspace
// when the image has none, or names a directory it does not hold). Not applied: User
// (the sandbox always runs as uid/gid 1000: local/namespaces.h), Entrypoint
// and Cmd (the sandbox's service is its daemon, as in the k8s template).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/json.h"
#include "oci/image_store.h"

namespace deepbox::local::lifecycle {

struct SandboxImage {
  std::string name;       // canonical reference ("" = no image)
  std::string digest;     // its manifest's: a warm sandbox matches a claim by it
  std::string store_dir;  // the image cache that holds it (and the pin)
  oci::ImageRecord record;
  std::vector<std::string> layers;  // extracted layer dirs, bottom first
  std::vector<std::string> env;     // config Env
  std::string working_dir;          // config WorkingDir
  std::string user;                 // config User (recorded, not applied)

  bool empty() const { return name.empty(); }
  json::object ToJson() const;
  static Result<SandboxImage> FromJson(const json::object& o);
};

// `image_dir` "" = oci::DefaultImageDir(). Pulls `reference` when it is not
// cached (no progress shown: the CLI pulls first with its display), and
// returns it with the store held shared in `hold` until the sandbox is
// pinned. INVALID_ARGUMENT for a malformed reference; the pull's error
// (UNAVAILABLE, NOT_FOUND, ...) names the image.
Result<SandboxImage> PrepareSandboxImage(const std::string& image_dir, const std::string& reference,
                                         oci::StoreLock* hold);

// The pin of sandbox `id` (state dir `sandbox_dir`), and its removal.
Status PinSandboxImage(const SandboxImage& image, const std::string& id,
                       const std::filesystem::path& sandbox_dir);
void UnpinSandboxImage(const SandboxImage& image, const std::string& id);

// The daemon's environment on this image (see above), over `base`.
std::vector<std::string> SandboxImageEnv(const SandboxImage& image,
                                         const std::vector<std::string>& base);
// Commands' default cwd: WorkingDir when the image holds that directory.
std::string SandboxImageCwd(const SandboxImage& image);

}  // namespace deepbox::local::lifecycle
