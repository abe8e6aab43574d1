#include "cli/image_pull_display.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>

#include "common/byte_size.h"
#include "common/json.h"
#include "common/terminal_text.h"
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
      if (!e.source.empty()) o["mirror"] = e.source;
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

template <typename... Args>
std::string Printf(const char* format, Args... args) {
  char buf[512];
  std::snprintf(buf, sizeof(buf), format, args...);
  return buf;
}

}  // namespace

void PullDisplay::On(const oci::PullEvent& e) {
  using Kind = oci::PullEvent::Kind;
  if (json_) {
    std::printf("%s\n", ToJson(EventJson(e)).c_str());
    std::fflush(stdout);
    return;
  }
  switch (e.kind) {
    case Kind::kResolved:
      Line(Printf("%s: manifest %s, %zu layer%s%s%s", e.name.c_str(),
                  ShortDigest(e.manifest_digest).c_str(), e.count, e.count == 1 ? "" : "s",
                  e.source.empty() ? "" : ", from mirror ", e.source.c_str()));
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

void PullDisplay::Finish() {
  if (terminal_ && status_shown_) std::fprintf(stderr, "\r\033[K");
}

double PullDisplay::elapsed() const { return Seconds(started_); }

void PullDisplay::Line(const std::string& text) {
  if (terminal_ && status_shown_) std::fprintf(stderr, "\r\033[K");
  status_shown_ = false;
  std::fprintf(stderr, "%s\n", SanitizeLineForTerminal(text).c_str());
}

void PullDisplay::Status(const oci::PullEvent& e) {
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

Status PullImageForSandbox(const std::string& reference) {
  auto ref = oci::ParseImageReference(reference);
  if (!ref) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("--image {}: {}", reference, ref.error().message));
  }
  auto store = oci::ImageStore::Open("");
  if (!store) return tl::unexpected(store.error());
  PullDisplay display(false, isatty(STDERR_FILENO) == 1);
  // A named object: GCC 12 at -O3 took a temporary's optionals for uninitialized.
  const oci::PullOptions options;
  auto pulled =
      oci::EnsureImage(**store, *ref, options, [&](const oci::PullEvent& e) { display.On(e); });
  display.Finish();
  if (!pulled) {
    Error e = pulled.error();
    e.message = fmt::format("image {}: {}", ref->ToString(), e.message);
    return tl::unexpected(e);
  }
  return {};
}

}  // namespace deepbox::cli
