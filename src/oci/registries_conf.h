// Where an image is pulled from: registry mirrors, rewritten locations,
// insecure and blocked registries, from the containers-registries.conf(5)
// files Podman, Buildah and skopeo read (format version 2, TOML):
//
//   [[registry]]
//   prefix = "docker.io"                 # what image names it is for
//   location = "registry.example.com"    # where the primary lives (default: prefix)
//   insecure = false                     # plain HTTP / unverified TLS allowed
//   blocked = false                      # pulls refused
//   [[registry.mirror]]
//   location = "mirror.example.com:5000/dockerhub"
//   insecure = false
//   pull-from-mirror = "all"             # or "digest-only", "tag-only"
//
// Files, as Podman reads them: $CONTAINERS_REGISTRIES_CONF when set, else
// ~/.config/containers/registries.conf when it exists, else
// /etc/containers/registries.conf; then the drop-ins (*.conf, in name
// order) of /etc/containers/registries.conf.d and then of
// ~/.config/containers/registries.conf.d (only the latter when the user's
// main file was read). A drop-in's [[registry]] replaces the earlier one of
// the same prefix. Everything else in the files (unqualified-search-
// registries, short-name aliases, credential-helpers) is not used: names
// are normalised the way Docker does (reference.h).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/user_state_dir.h"
#include "oci/reference.h"

namespace deepbox::oci {

enum class PullFromMirror { kAll, kDigestOnly, kTagOnly };

struct RegistryMirror {
  std::string location;  // host[:port][/namespace...]
  bool insecure = false;
  PullFromMirror pull_from = PullFromMirror::kAll;
};

struct RegistryEntry {
  std::string prefix;    // "docker.io", "example.com/team", "*.example.com"
  std::string location;  // "" for a wildcard prefix (names are not rewritten)
  bool insecure = false;
  bool blocked = false;
  std::vector<RegistryMirror> mirrors;
  std::string file;  // where it was read, for messages
};

struct RegistriesConf {
  std::vector<RegistryEntry> registries;
  std::vector<std::string> files;  // read, in order
};

// One place to try, in order: the mirrors that apply, then the primary.
struct PullSource {
  ImageReference ref;  // the name to ask that registry for
  bool insecure = false;
  bool mirror = false;
};

// Parses one file's text into `conf` (a [[registry]] of a prefix already
// there replaces it). INVALID_ARGUMENT naming `file` and the line for TOML
// errors, the version 1 format, wrong types, an unknown pull-from-mirror, a
// wildcard prefix with a location, a location or prefix that is not a
// registry name.
Status ParseRegistriesConf(std::string_view text, const std::string& file, RegistriesConf& conf);

// The files above, read and merged (`env` gives CONTAINERS_REGISTRIES_CONF
// and HOME; tests pass their own); no file at all is an empty config.
Result<RegistriesConf> LoadRegistriesConf(const EnvGetter& env = ProcessEnvironment());

// Where to pull `ref` from: the entry with the longest matching prefix
// decides; without one, `ref` itself. PERMISSION_DENIED when that entry is
// blocked.
Result<std::vector<PullSource>> ResolvePullSources(const RegistriesConf& conf,
                                                   const ImageReference& ref);

}  // namespace deepbox::oci
