// Raw file transfer (/deepbox/v1/fs/raw) and tar streams (/deepbox/v1/fs/tar/...).
#include <fmt/format.h>
#include <unistd.h>

#include <cstring>

#include "common/json.h"
#include "net/url.h"
#if __has_include("sandboxd/fs/tar.h")
#include "sandboxd/fs/tar.h"
#define DEEPBOX_HAVE_TAR 1
#endif
#include "sandboxd/fs/workspace.h"
#include "sandboxd/server/daemon.h"

namespace deepbox::sandboxd {

void Daemon::RawDownloadPath(const std::string& path, net::ResponseWriter& writer, bool v1_errors) {
  auto stream = fs::OpenForRead(root_, path);
  if (!stream) {
    if (v1_errors) {
      json::object o;
      o["code"] = std::string(ErrorCodeName(stream.error().code));
      o["message"] = JsonString(stream.error().message);
      (void)writer.Send(JsonResponse(ErrorCodeHttpStatus(stream.error().code), ToJson(o)));
    } else {
      (void)writer.Send(ErrorResponse(stream.error()));
    }
    return;
  }
  net::Headers headers;
  headers.Set("Content-Type", "application/octet-stream");
  headers.Set("X-File-Size", std::to_string(stream->size));
  if (!writer.BeginStream(200, headers)) return;
  std::vector<char> buf(256 * 1024);
  for (;;) {
    ssize_t n = ::read(stream->fd.get(), buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return;  // abort the stream: the client sees a truncated chunked body
    if (n == 0) break;
    if (!writer.WriteChunk(std::string_view(buf.data(), static_cast<size_t>(n)))) return;
  }
  (void)writer.EndStream();
}

void Daemon::RawDownload(const net::Request& request, net::ResponseWriter& writer) {
  auto path = request.Query("path");
  if (!path) {
    (void)writer.Send(
        ErrorResponse(Error(ErrorCode::kInvalidArgument, "query parameter 'path' is required")));
    return;
  }
  if (request.method == "HEAD") {
    auto st = fs::Stat(root_, *path);
    if (!st) {
      (void)writer.Send(ErrorResponse(st.error()));
      return;
    }
    net::Response r;
    r.headers.Set("Content-Type", "application/octet-stream");
    (void)writer.Send(r);
    return;
  }
  RawDownloadPath(*path, writer, false);
}

net::Response Daemon::RawUpload(const net::Request& request) {
  auto path = request.Query("path");
  if (!path)
    return ErrorResponse(Error(ErrorCode::kInvalidArgument, "query parameter 'path' is required"));
  fs::WriteOptions wo;
  if (auto mode = request.Query("mode")) {
    if (mode->empty() || mode->size() > 5 ||
        mode->find_first_not_of("01234567") != std::string::npos) {
      return ErrorResponse(Error(ErrorCode::kInvalidArgument, "mode must be octal like 0644"));
    }
    wo.mode = static_cast<uint32_t>(std::stoul(*mode, nullptr, 8)) & 07777;
  }
  auto w = fs::Write(root_, *path, request.body, wo);
  if (!w) return ErrorResponse(w.error());
  json::object o;
  o["path"] = JsonString(w->path);
  o["size"] = w->bytes;
  return JsonResponse(200, ToJson(o));
}

#ifndef DEEPBOX_HAVE_TAR
void Daemon::TarDownload(const net::Request&, net::ResponseWriter& writer) {
  (void)writer.Send(ErrorResponse(Error(ErrorCode::kUnimplemented, "tar: pending")));
}
net::Response Daemon::TarUpload(const net::Request&) {
  return ErrorResponse(Error(ErrorCode::kUnimplemented, "tar: pending"));
}
#else
void Daemon::TarDownload(const net::Request& request, net::ResponseWriter& writer) {
  auto body = ParseJsonObject(request.body);
  if (!body) {
    (void)writer.Send(ErrorResponse(body.error()));
    return;
  }
  std::vector<std::string> paths;
  if (auto it = body->find("paths"); it != body->end() && it->value().is_array()) {
    for (const auto& p : it->value().as_array()) {
      if (!p.is_string()) {
        (void)writer.Send(
            ErrorResponse(Error(ErrorCode::kInvalidArgument, "'paths' must be strings")));
        return;
      }
      paths.emplace_back(p.as_string());
    }
  }
  if (paths.empty()) {
    (void)writer.Send(ErrorResponse(
        Error(ErrorCode::kInvalidArgument, "field 'paths' must list at least one path")));
    return;
  }
  // Validate before the stream starts, so a missing path is a clean 404.
  for (const auto& p : paths) {
    if (auto st = fs::Stat(root_, p); !st) {
      (void)writer.Send(ErrorResponse(st.error()));
      return;
    }
  }
  net::Headers headers;
  headers.Set("Content-Type", "application/x-tar");
  if (!writer.BeginStream(200, headers)) return;
  auto s = fs::WriteTar(root_, paths,
                        [&](std::string_view data) -> Status { return writer.WriteChunk(data); });
  if (s) (void)writer.EndStream();
}

net::Response Daemon::TarUpload(const net::Request& request) {
  std::string dest = request.Query("path").value_or(root_.path());
  size_t pos = 0;
  const std::string& body = request.body;
  auto written = fs::ExtractTar(root_, dest, [&](char* buf, size_t size) -> Result<size_t> {
    size_t n = std::min(size, body.size() - pos);
    std::memcpy(buf, body.data() + pos, n);
    pos += n;
    return n;
  });
  if (!written) return ErrorResponse(written.error());
  json::array list;
  for (const auto& p : *written) list.emplace_back(JsonString(p));
  json::object o;
  o["written"] = std::move(list);
  return JsonResponse(200, ToJson(o));
}
#endif

}  // namespace deepbox::sandboxd
