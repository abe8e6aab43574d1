// `deepbox image pull|ls|rm|prune`: the local image cache (src/oci).
#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>

#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/image_pull_display.h"
#include "common/byte_size.h"
#include "common/json.h"
#include "common/terminal_text.h"
#include "common/time.h"
#include "oci/default_image.h"
#include "oci/image_pull.h"
#include "oci/image_store.h"
#include "oci/reference.h"

namespace deepbox::cli {

namespace {

std::string ShortDigest(std::string_view digest) {
  return std::string(digest.substr(0, std::min<size_t>(digest.size(), 7 + 12)));
}

Result<std::unique_ptr<oci::ImageStore>> OpenStore() { return oci::ImageStore::Open(""); }

}  // namespace

int RunImagePull(const ImagePullArgs& args) {
  auto ref = oci::ParseImageReference(args.reference);
  if (!ref) {
    ReportError(ref.error());
    return kExitUsage;
  }
  auto store = OpenStore();
  if (!store) return ReportError(store.error());
  oci::PullOptions options;
  options.registry.ca_file = args.registry_ca;
  options.registry.insecure = args.insecure;
  PullDisplay display(args.json, !args.json && isatty(STDERR_FILENO) == 1);
  auto pulled =
      oci::PullImage(**store, *ref, options, [&](const oci::PullEvent& e) { display.On(e); });
  display.Finish();
  if (!pulled) {
    if (args.json) {
      json::object o;
      o["event"] = "error";
      o["error"] = ErrorToJson(pulled.error());
      std::printf("%s\n", ToJson(o).c_str());
    }
    return ReportError(pulled.error());
  }
  if (!args.json) {
    const size_t n = pulled->record.layers.size();
    std::printf("%s %s (%s, %zu layer%s, %s)\n", pulled->record.name.c_str(),
                pulled->record.manifest_digest.c_str(), pulled->record.platform.ToString().c_str(),
                n, n == 1 ? "" : "s", FormatBytes(pulled->record.size).c_str());
  }
  return kExitOk;
}

int RunImageLs(const ImageLsArgs& args) {
  auto store = OpenStore();
  if (!store) return ReportError(store.error());
  auto images = (*store)->ListImages();
  if (!images) return ReportError(images.error());
  if (args.json) {
    json::array out;
    for (const auto& r : *images) {
      auto v = ParseJson(oci::ImageRecordToJson(r));
      if (v) out.push_back(std::move(*v));
    }
    std::printf("%s\n", ToJson(out).c_str());
    return kExitOk;
  }
  std::printf("%-60s %-19s %-14s %10s %s\n", "IMAGE", "DIGEST", "PLATFORM", "SIZE", "PULLED");
  const int64_t now = NowMs();
  for (const auto& r : *images) {
    auto pulled = ParseRfc3339Ms(r.pulled_at);
    std::printf("%-60s %-19s %-14s %10s %s\n", SanitizeLineForTerminal(r.name).c_str(),
                ShortDigest(r.manifest_digest).c_str(), r.platform.ToString().c_str(),
                FormatBytes(r.size).c_str(),
                pulled ? (FormatAge(now - *pulled) + " ago").c_str() : "-");
  }
  return kExitOk;
}

int RunImageRm(const ImageRmArgs& args) {
  auto ref = oci::ParseImageReference(args.reference);
  if (!ref) {
    ReportError(ref.error());
    return kExitUsage;
  }
  auto store = OpenStore();
  if (!store) return ReportError(store.error());
  auto removed = (*store)->RemoveImage(ref->ToString());
  if (!removed) return ReportError(removed.error());
  if (!*removed) {
    return ReportError(Error(ErrorCode::kNotFound,
                             "no image " + ref->ToString() + " in the cache (deepbox image ls)"));
  }
  std::printf("removed %s\n", ref->ToString().c_str());
  return kExitOk;
}

void DefaultImageIfEmpty(const CLI::Option* option, std::string& image) {
  if (option != nullptr && option->count() > 0 && image.empty()) {
    image = oci::kDefaultSandboxImage;
  }
}

int RunImagePrune() {
  auto store = OpenStore();
  if (!store) return ReportError(store.error());
  auto pruned = (*store)->Prune();
  if (!pruned) return ReportError(pruned.error());
  std::printf(
      "removed %llu blobs, %llu extracted layers, %llu leftovers of interrupted pulls; "
      "freed %s\n",
      static_cast<unsigned long long>(pruned->blobs_removed),
      static_cast<unsigned long long>(pruned->layers_removed),
      static_cast<unsigned long long>(pruned->temporaries_removed),
      FormatBytes(pruned->bytes_freed).c_str());
  return kExitOk;
}

}  // namespace deepbox::cli
