// The daemon's JSON API bodies (docs/sandboxd-api.md), through the real
// Daemon::Handle on a temporary root. Input: one byte choosing the route, the
// query string up to the first newline, then the body. Exec and process
// bodies are parsed (ParseCommandSpec, ParseOutputEncoding) but never run.
// Properties: every request is answered exactly once with a valid status;
// error answers are JSON; nothing outside the root changes.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "common/json.h"
#include "fuzz/daemon_fixture.h"
#include "net/url.h"
#include "sandboxd/server/exec_json.h"

namespace {

using deepbox::fuzz::DaemonFixture;
using deepbox::fuzz::MemoryWriter;

struct Route {
  const char* method;
  const char* path;
  const char* content_type;
};

constexpr Route kRoutes[] = {
    {"POST", "/deepbox/v1/fs/stat", "application/json"},
    {"POST", "/deepbox/v1/fs/list", "application/json"},
    {"POST", "/deepbox/v1/fs/read", "application/json"},
    {"POST", "/deepbox/v1/fs/write", "application/json"},
    {"POST", "/deepbox/v1/fs/edit", "application/json"},
    {"POST", "/deepbox/v1/fs/mkdir", "application/json"},
    {"POST", "/deepbox/v1/fs/move", "application/json"},
    {"POST", "/deepbox/v1/fs/delete", "application/json"},
    {"POST", "/deepbox/v1/fs/glob", "application/json"},
    {"POST", "/deepbox/v1/fs/grep", "application/json"},
    {"POST", "/deepbox/v1/fs/tar/download", "application/json"},
    {"POST", "/deepbox/v1/exec", "application/json"},       // parsed only
    {"POST", "/deepbox/v1/processes", "application/json"},  // parsed only
    {"POST", "/deepbox/v1/exec/attach", "application/json"},
    {"POST", "/deepbox/v1/exec/cancel", "application/json"},
    {"POST", "/upload", "multipart/form-data; boundary=deepboxfuzz"},
    {"GET", "/deepbox/v1/fs/raw", ""},
    {"PUT", "/deepbox/v1/fs/raw", "application/octet-stream"},
    {"PUT", "/deepbox/v1/fs/tar/upload", "application/x-tar"},
    {"GET", "/deepbox/v1/processes", ""},
    {"POST", "/deepbox/v1/processes/1/signal", "application/json"},
    {"GET", "/v1/files/", ""},
    {"PUT", "/v1/files/up.txt", "application/octet-stream"},
    {"POST", "/v1/files/", "multipart/form-data; boundary=deepboxfuzz"},
    {"DELETE", "/v1/files/hello.txt", ""},
    {"GET", "/list/", ""},
    {"GET", "/exists/hello.txt", ""},
    {"GET", "/download/hello.txt", ""},
    {"POST", "/deepbox/v1/fs/tree", "application/json"},
};
constexpr size_t kRouteCount = sizeof kRoutes / sizeof kRoutes[0];

// A streamed request body read from memory in small pieces.
class MemoryBody : public deepbox::net::BodyReader {
 public:
  explicit MemoryBody(std::string_view body) : body_(body), length_(body.size()) {}
  deepbox::Result<size_t> Read(char* data, size_t size) override {
    size_t n = std::min({size, body_.size(), size_t{333}});
    if (n == 0) return size_t{0};  // an empty body's data() may be null
    std::memcpy(data, body_.data(), n);
    body_.remove_prefix(n);
    return n;
  }
  std::optional<uint64_t> content_length() const override { return length_; }

 private:
  std::string_view body_;
  uint64_t length_;
};

DaemonFixture& F() {
  static DaemonFixture* f = new DaemonFixture();
  return *f;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const Route& route = kRoutes[data[0] % kRouteCount];
  std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  auto [query, body] = deepbox::fuzz::SplitFirst(in, '\n');

  DaemonFixture& f = F();
  f.Reset();
  const auto before = deepbox::fuzz::TakeSnapshot(f.base(), "root");

  deepbox::net::Request request;
  request.method = route.method;
  request.path = route.path;
  request.raw_path = route.path;
  request.target = std::string(route.path) + (query.empty() ? "" : "?" + std::string(query));
  request.query = deepbox::net::ParseQuery(query);
  if (*route.content_type) request.headers.Set("Content-Type", route.content_type);
  if (DaemonFixture::Spawns(request)) {
    // What the daemon would do before starting anything.
    auto obj = deepbox::ParseJsonObject(body);
    if (obj) {
      (void)deepbox::sandboxd::ParseCommandSpec(*obj, f.daemon());
      (void)deepbox::sandboxd::ParseOutputEncoding(*obj);
    }
    return 0;
  }
  MemoryBody reader(body);
  if (deepbox::sandboxd::Daemon::StreamsRequestBody(request)) {
    request.body_reader = &reader;
  } else {
    request.body = std::string(body);
  }
  MemoryWriter writer;
  f.Handle(request, writer);
  FUZZ_CHECK(writer.started() && writer.ended, "a request was not answered");
  FUZZ_CHECK(writer.status >= 100 && writer.status <= 599,
             fmt::format("status {} is not an HTTP status", writer.status));
  if (writer.status >= 400 && request.method != "HEAD") {
    FUZZ_CHECK(
        deepbox::ParseJson(writer.body).has_value(),
        fmt::format("error answer {} is not JSON: {}", writer.status, writer.body.substr(0, 200)));
  }
  const std::string diff =
      deepbox::fuzz::DescribeDifference(before, deepbox::fuzz::TakeSnapshot(f.base(), "root"));
  FUZZ_CHECK(diff.empty(), "a request changed something outside the root: " + diff);
  return 0;
}
