// `deepbox image pull|ls|rm|prune`: the local image cache (src/oci).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <string>

#include "cli/cli.h"
#include "cli/commands.h"
#include "common/byte_size.h"
#include "common/json.h"
#include "common/terminal_text.h"
#include "common/time.h"
#include "oci/image_pull.h"
#include "oci/image_store.h"
#include "oci/reference.h"

namespace deepbox::cli {

namespace {

using Clock = std::chrono::steady_clock;

std::string ShortDigest(std::string_view digest) {
  return std::string(digest.substr(0, std::min<size_t>(digest.size(), 7 + 12)));
}

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

std::string Rate(uint64_t bytes, double seconds) {
  if (seconds <= 0.0) return "-";
  return FormatBytes(static_cast<uint64_t>(static_cast<double>(bytes) / seconds)) + "/s";
}

json::object EventJson(const oci::PullEvent& e) {
  json::object o;
  using Kind = oci::PullEvent::Kind;
  switch (e.kind) {
    case Kind::kResolved:
      o["event"] = "resolved";
      o["image"] = e.name;
      o["manifest_digest"] = e.manifest_digest;
      if (!e.index_digest.empty()) o["index_digest"] = e.index_digest;
      o["layers"] = e.count;
      return o;
    case Kind::kImageDone:
      o["event"] = "done";
      o["image"] = e.name;
      o["manifest_digest"] = e.manifest_digest;
      return o;
    case Kind::kLayerStart:
      o["event"] = "layer_start";
      break;
    case Kind::kLayerProgress:
      o["event"] = "layer_progress";
      o["done"] = e.done;
      break;
    case Kind::kLayerDone:
      o["event"] = "layer_done";
      o["downloaded"] = e.downloaded;
      o["resumed_from"] = e.resumed_from;
      break;
  }
  o["index"] = e.index;
  o["layers"] = e.count;
  o["digest"] = e.digest;
  o["size"] = e.size;
  if (e.kind != Kind::kLayerProgress) o["cached"] = e.cached;
  return o;
}

// What a pull shows: JSON events, a live status line on a terminal, or one
// line per layer for logs.
class PullDisplay {
 public:
  PullDisplay(bool json, bool terminal) : json_(json), terminal_(terminal) {}

  void On(const oci::PullEvent& e) {
    using Kind = oci::PullEvent::Kind;
    if (json_) {
      std::printf("%s\n", ToJson(EventJson(e)).c_str());
      std::fflush(stdout);
      return;
    }
    switch (e.kind) {
      case Kind::kResolved:
        Line(Printf("%s: manifest %s, %zu layer%s", e.name.c_str(),
                    ShortDigest(e.manifest_digest).c_str(), e.count, e.count == 1 ? "" : "s"));
        return;
      case Kind::kLayerStart:
        layers_[e.index] = {e.size, 0, Clock::now()};
        total_size_ += e.size;
        return;
      case Kind::kLayerProgress: {
        auto& l = layers_[e.index];
        total_done_ += e.done >= l.done ? e.done - l.done : 0;
        l.done = e.done;
        if (terminal_) Status(e);
        return;
      }
      case Kind::kLayerDone: {
        auto& l = layers_[e.index];
        total_done_ += l.size >= l.done ? l.size - l.done : 0;
        l.done = l.size;
        std::string how = !e.downloaded ? "cached"
                          : e.resumed_from > 0
                              ? "downloaded (resumed at " + FormatBytes(e.resumed_from) + ")"
                              : "downloaded";
        double s = Seconds(l.started);
        Line(Printf("layer %zu/%zu %s %s %s in %.1fs%s", e.index + 1, e.count,
                    ShortDigest(e.digest).c_str(), FormatBytes(e.size).c_str(), how.c_str(), s,
                    e.downloaded ? (", " + Rate(e.size - e.resumed_from, s)).c_str() : ""));
        return;
      }
      case Kind::kImageDone:
        return;
    }
  }

  void Finish() {
    if (terminal_ && status_shown_) std::fprintf(stderr, "\r\033[K");
  }
  double elapsed() const { return Seconds(started_); }
  uint64_t total_size() const { return total_size_; }

 private:
  struct LayerState {
    uint64_t size = 0;
    uint64_t done = 0;
    Clock::time_point started;
  };

  template <typename... Args>
  static std::string Printf(const char* format, Args... args) {
    char buf[512];
    std::snprintf(buf, sizeof(buf), format, args...);
    return buf;
  }

  void Line(const std::string& text) {
    if (terminal_ && status_shown_) std::fprintf(stderr, "\r\033[K");
    status_shown_ = false;
    std::fprintf(stderr, "%s\n", SanitizeLineForTerminal(text).c_str());
  }

  void Status(const oci::PullEvent& e) {
    auto now = Clock::now();
    if (status_shown_ && now - last_status_ < std::chrono::milliseconds(100)) return;
    last_status_ = now;
    status_shown_ = true;
    std::fprintf(stderr, "\r\033[Klayer %zu/%zu %s %s/%s | total %s/%s %s", e.index + 1, e.count,
                 ShortDigest(e.digest).c_str(), FormatBytes(e.done).c_str(),
                 FormatBytes(e.size).c_str(), FormatBytes(total_done_).c_str(),
                 FormatBytes(total_size_).c_str(), Rate(total_done_, Seconds(started_)).c_str());
    std::fflush(stderr);
  }

  bool json_;
  bool terminal_;
  bool status_shown_ = false;
  Clock::time_point started_ = Clock::now();
  Clock::time_point last_status_;
  std::map<size_t, LayerState> layers_;
  uint64_t total_size_ = 0;
  uint64_t total_done_ = 0;
};

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
