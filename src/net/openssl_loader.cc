#include "net/openssl_loader.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace deepbox::net {
namespace {

std::atomic<const LibOpenSsl*> loaded_api{nullptr};

}  // namespace

Result<const LibOpenSsl*> LoadLibOpenSsl(std::string_view purpose) {
  static LibOpenSsl api;
  static std::string error;  // why it could not be loaded (then every call fails)
  static const bool loaded = [] {
#if DEEPBOX_OPENSSL_LINKED
#define DEEPBOX_OPENSSL_LINK(name) api.name = &::name;
    DEEPBOX_OPENSSL_FUNCS(DEEPBOX_OPENSSL_LINK)
#undef DEEPBOX_OPENSSL_LINK
#else
    // libssl's own dependency brings libcrypto; dlsym on its handle searches both.
    void* h = dlopen("libssl.so.3", RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      error = dlerror();
      return false;
    }
#define DEEPBOX_OPENSSL_LOAD(name)                                 \
  api.name = reinterpret_cast<decltype(&::name)>(dlsym(h, #name)); \
  if (api.name == nullptr) {                                       \
    error = "libssl.so.3 or libcrypto.so.3 lacks " #name;          \
    return false;                                                  \
  }
    DEEPBOX_OPENSSL_FUNCS(DEEPBOX_OPENSSL_LOAD)
#undef DEEPBOX_OPENSSL_LOAD
#endif
    loaded_api.store(&api, std::memory_order_release);
    return true;
  }();
  if (!loaded) {
    return MakeError(ErrorCode::kUnavailable, fmt::format("{} needs OpenSSL: {}", purpose, error));
  }
  return &api;
}

const LibOpenSsl& RequireLibOpenSsl() {
  // Called for every OpenSSL call of the CLI (the secrets proxy's per-record
  // ones too): once loaded, one atomic load.
  if (const LibOpenSsl* api = LoadedLibOpenSsl()) return *api;
  auto loaded = LoadLibOpenSsl("deepbox");
  if (!loaded) {
    std::fprintf(stderr, "%s\n", loaded.error().message.c_str());
    std::_Exit(127);  // what the dynamic loader did when it was linked
  }
  return **loaded;
}

const LibOpenSsl* LoadedLibOpenSsl() { return loaded_api.load(std::memory_order_acquire); }

}  // namespace deepbox::net
