#include "fs/archive_loader.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <string>

namespace deepbox::fs {

Result<const LibArchive*> LoadLibArchive(std::string_view purpose) {
  static LibArchive api;
  static std::string error;  // why it could not be loaded (then every call fails)
  static const bool loaded = [] {
    void* h = dlopen("libarchive.so.13", RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      error = dlerror();
      return false;
    }
#define DEEPBOX_LIBARCHIVE_LOAD(name)                              \
  api.name = reinterpret_cast<decltype(&::name)>(dlsym(h, #name)); \
  if (api.name == nullptr) {                                       \
    error = "libarchive.so.13 lacks " #name;                       \
    return false;                                                  \
  }
    DEEPBOX_LIBARCHIVE_FUNCS(DEEPBOX_LIBARCHIVE_LOAD)
#undef DEEPBOX_LIBARCHIVE_LOAD
    return true;
  }();
  if (!loaded) {
    return MakeError(ErrorCode::kUnavailable,
                     fmt::format("{} needs libarchive: {}", purpose, error));
  }
  return &api;
}

}  // namespace deepbox::fs
