#include "sandboxd/server/nghttp2_loader.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <string>

namespace deepbox::sandboxd {

Result<const LibNghttp2*> LoadLibNghttp2(std::string_view purpose) {
  static LibNghttp2 api;
  static std::string error;  // why it could not be loaded (then every call fails)
  static const bool loaded = [] {
    void* h = dlopen("libnghttp2.so.14", RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      error = dlerror();
      return false;
    }
#define DEEPBOX_NGHTTP2_LOAD(name)                                 \
  api.name = reinterpret_cast<decltype(&::name)>(dlsym(h, #name)); \
  if (api.name == nullptr) {                                       \
    error = "libnghttp2.so.14 lacks " #name;                       \
    return false;                                                  \
  }
    DEEPBOX_NGHTTP2_FUNCS(DEEPBOX_NGHTTP2_LOAD)
#undef DEEPBOX_NGHTTP2_LOAD
    return true;
  }();
  if (!loaded) {
    return MakeError(ErrorCode::kUnavailable,
                     fmt::format("{} needs libnghttp2: {}", purpose, error));
  }
  return &api;
}

}  // namespace deepbox::sandboxd
