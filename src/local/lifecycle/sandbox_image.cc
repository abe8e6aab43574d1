#include "local/lifecycle/sandbox_image.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include "local/image_root.h"
#include "oci/image_pull.h"
#include "oci/reference.h"

namespace deepbox::local::lifecycle {
namespace {

json::array StringArray(const std::vector<std::string>& values) {
  json::array a;
  for (const auto& v : values) a.emplace_back(JsonString(v));
  return a;
}

std::vector<std::string> ReadStringArray(const json::object& o, std::string_view key) {
  std::vector<std::string> out;
  if (auto it = o.find(key); it != o.end() && it->value().is_array()) {
    for (const auto& v : it->value().as_array()) {
      if (v.is_string()) out.emplace_back(v.as_string());
    }
  }
  return out;
}

}  // namespace

json::object SandboxImage::ToJson() const {
  json::object o;
  o["name"] = JsonString(name);
  o["digest"] = JsonString(digest);
  o["store_dir"] = JsonString(store_dir);
  if (auto record_json = ParseJsonObject(oci::ImageRecordToJson(record))) {
    o["record"] = std::move(*record_json);
  }
  o["layers"] = StringArray(layers);
  o["env"] = StringArray(env);
  o["working_dir"] = JsonString(working_dir);
  o["user"] = JsonString(user);
  return o;
}

Result<SandboxImage> SandboxImage::FromJson(const json::object& o) {
  SandboxImage image;
  image.name = GetOptString(o, "name").value_or("");
  image.digest = GetOptString(o, "digest").value_or("");
  image.store_dir = GetOptString(o, "store_dir").value_or("");
  if (auto it = o.find("record"); it != o.end() && it->value().is_object()) {
    auto record = oci::ImageRecordFromJson(deepbox::ToJson(it->value()));
    if (!record) return tl::unexpected(record.error());
    image.record = std::move(*record);
  }
  image.layers = ReadStringArray(o, "layers");
  image.env = ReadStringArray(o, "env");
  image.working_dir = GetOptString(o, "working_dir").value_or("");
  image.user = GetOptString(o, "user").value_or("");
  if (!image.name.empty() && (image.layers.empty() || image.store_dir.empty())) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("image {} is recorded without its layers", image.name));
  }
  return image;
}

Result<SandboxImage> PrepareSandboxImage(const std::string& image_dir, const std::string& reference,
                                         oci::StoreLock* hold) {
  auto ref = oci::ParseImageReference(reference);
  if (!ref) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("--image {}: {}", reference, ref.error().message));
  }
  auto store = oci::ImageStore::Open(image_dir);
  if (!store) return tl::unexpected(store.error());
  auto shared = (*store)->LockShared();
  if (!shared) return tl::unexpected(shared.error());
  // A named object: GCC 12 at -O3 took a temporary's optionals for uninitialized.
  const oci::PullOptions options;
  auto local = oci::EnsureImage(**store, *ref, options);
  if (!local) {
    Error e = local.error();
    e.message = fmt::format("image {}: {}", ref->ToString(), e.message);
    return tl::unexpected(e);
  }
  SandboxImage image;
  image.name = local->record.name;
  image.digest = local->record.manifest_digest;
  image.store_dir = (*store)->dir();
  image.record = local->record;
  image.layers = local->layer_dirs;
  image.env = local->config.env;
  image.working_dir = local->config.working_dir;
  image.user = local->config.user;
  *hold = std::move(*shared);
  return image;
}

Status PinSandboxImage(const SandboxImage& image, const std::string& id,
                       const std::filesystem::path& sandbox_dir) {
  auto store = oci::ImageStore::Open(image.store_dir);
  if (!store) return tl::unexpected(store.error());
  oci::ImagePin pin;
  pin.sandbox = id;
  pin.sandbox_dir = sandbox_dir.string();
  pin.image = image.record;
  return (*store)->Pin(pin);
}

void UnpinSandboxImage(const SandboxImage& image, const std::string& id) {
  if (image.empty()) return;
  if (auto store = oci::ImageStore::Open(image.store_dir)) (void)(*store)->Unpin(id);
}

std::vector<std::string> SandboxImageEnv(const SandboxImage& image,
                                         const std::vector<std::string>& base) {
  auto key_of = [](const std::string& e) { return e.substr(0, e.find('=')); };
  std::vector<std::string> env = base;
  auto set = [&](const std::string& entry) {
    const std::string key = key_of(entry);
    for (auto& e : env) {
      if (key_of(e) == key) {
        e = entry;
        return;
      }
    }
    env.push_back(entry);
  };
  for (const auto& e : image.env) {
    if (e.find('=') == std::string::npos || e.front() == '=') continue;
    const std::string key = key_of(e);
    if (key == "HOME" || key == "USER") continue;  // the sandbox's own
    if (key == "PATH") {
      set(e + ":/.deepbox/bin");
      continue;
    }
    set(e);
  }
  return env;
}

std::string SandboxImageCwd(const SandboxImage& image) {
  if (image.working_dir.empty() || image.working_dir.front() != '/') return "/workspace";
  std::vector<std::filesystem::path> layers(image.layers.begin(), image.layers.end());
  auto found = MergedLayers(layers).Find(image.working_dir);
  struct stat st {};
  if (!found || stat(found->c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return "/workspace";
  return image.working_dir;
}

}  // namespace deepbox::local::lifecycle
