#include "oci/manifest.h"

#include <fmt/format.h>
#include <sys/utsname.h>

#include "common/json.h"
#include "oci/digest.h"

namespace deepbox::oci {

namespace {

tl::unexpected<Error> BadDocument(std::string_view what, std::string_view why) {
  return MakeError(ErrorCode::kInvalidArgument, fmt::format("{}: {}", what, why));
}

Result<json::object> ParseDocument(std::string_view body, std::string_view what) {
  if (body.size() > kMaxManifestBytes) {
    return BadDocument(
        what, fmt::format("{} bytes, more than the {} accepted", body.size(), kMaxManifestBytes));
  }
  auto doc = ParseJsonObject(body);
  if (!doc) return BadDocument(what, doc.error().message);
  return doc;
}

Result<Descriptor> ParseDescriptor(const json::value& v, std::string_view what) {
  if (!v.is_object()) return BadDocument(what, "a descriptor is not an object");
  const json::object& o = v.as_object();
  Descriptor d;
  d.media_type = GetOptString(o, "mediaType").value_or("");
  d.digest = GetOptString(o, "digest").value_or("");
  if (auto s = CheckDigest(d.digest, fmt::format("{} digest", what)); !s) {
    return tl::unexpected(s.error());
  }
  const json::value* size = o.if_contains("size");
  auto n = size != nullptr ? JsonToInt64(*size) : std::nullopt;
  if (!n || *n < 0) return BadDocument(what, fmt::format("{} has no valid size", d.digest));
  d.size = static_cast<uint64_t>(*n);
  if (const json::value* p = o.if_contains("platform"); p != nullptr && p->is_object()) {
    d.platform.os = GetOptString(p->as_object(), "os").value_or("");
    d.platform.architecture = GetOptString(p->as_object(), "architecture").value_or("");
    d.platform.variant = GetOptString(p->as_object(), "variant").value_or("");
  }
  return d;
}

std::vector<std::string> StringArray(const json::object& o, std::string_view key) {
  std::vector<std::string> out;
  if (const json::value* v = o.if_contains(key); v != nullptr && v->is_array()) {
    for (const auto& item : v->as_array()) {
      if (item.is_string()) out.emplace_back(item.as_string());
    }
  }
  return out;
}

}  // namespace

std::string Platform::ToString() const {
  std::string out = os + "/" + architecture;
  if (!variant.empty()) out += "/" + variant;
  return out;
}

bool IsIndexMediaType(std::string_view t) { return t == kOciIndex || t == kDockerManifestList; }
bool IsManifestMediaType(std::string_view t) { return t == kOciManifest || t == kDockerManifest; }

bool IsSupportedLayerMediaType(std::string_view t) {
  return t == kOciLayerTar || t == kOciLayerGzip || t == kOciLayerZstd || t == kDockerLayerGzip ||
         t == "application/vnd.oci.image.layer.nondistributable.v1.tar" ||
         t == "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip" ||
         t == "application/vnd.oci.image.layer.nondistributable.v1.tar+zstd" ||
         t == "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip";
}

std::string ManifestAcceptHeader() {
  return fmt::format("{}, {}, {}, {}", kOciIndex, kOciManifest, kDockerManifestList,
                     kDockerManifest);
}

std::string ManifestMediaType(std::string_view body, std::string_view header_type) {
  auto doc = ParseJsonObject(body);
  if (doc) {
    if (auto t = GetOptString(*doc, "mediaType"); t && !t->empty()) return *t;
  }
  std::string header(header_type.substr(0, header_type.find(';')));
  if (IsIndexMediaType(header) || IsManifestMediaType(header)) return header;
  if (doc && doc->contains("manifests")) return std::string(kOciIndex);
  if (doc && doc->contains("layers")) return std::string(kOciManifest);
  return header;
}

Result<ImageIndex> ParseImageIndex(std::string_view body) {
  auto doc = ParseDocument(body, "image index");
  if (!doc) return tl::unexpected(doc.error());
  const json::value* list = doc->if_contains("manifests");
  if (list == nullptr || !list->is_array()) {
    return BadDocument("image index", "no \"manifests\" array");
  }
  ImageIndex index;
  for (const auto& entry : list->as_array()) {
    auto d = ParseDescriptor(entry, "image index entry");
    if (!d) return tl::unexpected(d.error());
    index.manifests.push_back(std::move(*d));
  }
  return index;
}

Result<ImageManifest> ParseImageManifest(std::string_view body) {
  auto doc = ParseDocument(body, "image manifest");
  if (!doc) return tl::unexpected(doc.error());
  const json::value* config = doc->if_contains("config");
  if (config == nullptr) return BadDocument("image manifest", "no \"config\"");
  ImageManifest m;
  auto c = ParseDescriptor(*config, "config");
  if (!c) return tl::unexpected(c.error());
  m.config = std::move(*c);
  const json::value* layers = doc->if_contains("layers");
  if (layers == nullptr || !layers->is_array()) {
    return BadDocument("image manifest", "no \"layers\" array");
  }
  for (const auto& entry : layers->as_array()) {
    auto d = ParseDescriptor(entry, "layer");
    if (!d) return tl::unexpected(d.error());
    if (!IsSupportedLayerMediaType(d->media_type)) {
      return MakeError(ErrorCode::kUnimplemented,
                       fmt::format("layer {} has media type '{}', which deepbox cannot extract "
                                   "(tar, tar+gzip and tar+zstd layers only)",
                                   d->digest, d->media_type.substr(0, 200)));
    }
    m.layers.push_back(std::move(*d));
  }
  return m;
}

Result<ImageConfig> ParseImageConfig(std::string_view body) {
  auto doc = ParseDocument(body, "image config");
  if (!doc) return tl::unexpected(doc.error());
  ImageConfig c;
  c.platform.os = GetOptString(*doc, "os").value_or("");
  c.platform.architecture = GetOptString(*doc, "architecture").value_or("");
  c.platform.variant = GetOptString(*doc, "variant").value_or("");
  if (const json::value* cfg = doc->if_contains("config"); cfg != nullptr && cfg->is_object()) {
    const json::object& o = cfg->as_object();
    c.env = StringArray(o, "Env");
    c.working_dir = GetOptString(o, "WorkingDir").value_or("");
    c.user = GetOptString(o, "User").value_or("");
    c.entrypoint = StringArray(o, "Entrypoint");
    c.cmd = StringArray(o, "Cmd");
  }
  if (const json::value* rootfs = doc->if_contains("rootfs");
      rootfs != nullptr && rootfs->is_object()) {
    c.diff_ids = StringArray(rootfs->as_object(), "diff_ids");
  }
  return c;
}

Platform HostPlatform() {
  Platform p{"linux", "", ""};
  struct utsname u {};
  std::string machine = uname(&u) == 0 ? u.machine : "";
  if (machine == "x86_64") {
    p.architecture = "amd64";
  } else if (machine == "aarch64" || machine == "arm64") {
    p.architecture = "arm64";
  } else {
    p.architecture = machine;
  }
  return p;
}

Result<Descriptor> SelectPlatform(const ImageIndex& index, const Platform& want) {
  std::string seen;
  for (const Descriptor& d : index.manifests) {
    if (d.platform.os == want.os && d.platform.architecture == want.architecture &&
        (want.variant.empty() || d.platform.variant.empty() ||
         d.platform.variant == want.variant)) {
      return d;
    }
    if (!d.platform.os.empty()) {
      if (!seen.empty()) seen += ", ";
      seen += d.platform.ToString();
    }
  }
  return MakeError(ErrorCode::kNotFound,
                   fmt::format("the image has no {} variant (it has: {})", want.ToString(),
                               seen.empty() ? "none named" : seen));
}

}  // namespace deepbox::oci
