// Raw file transfer (/deepbox/v1/fs/raw) and tar streams (/deepbox/v1/fs/tar/...).
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cstring>
#include <optional>
#include <vector>

#include "common/json.h"
#include "fs/tar.h"
#include "net/url.h"
#include "sandboxd/fs/workspace.h"
#include "sandboxd/server/daemon.h"

namespace deepbox::sandboxd {

void Daemon::RawDownloadPath(const std::string& path, net::ResponseWriter& writer, bool v1_errors) {
  auto stream = fs::OpenForRead(files_root(), path);
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
    auto st = fs::Stat(files_root(), *path);
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

bool Daemon::StreamsRequestBody(const net::Request& head) {
  return head.method == "PUT" &&
         (head.path == "/deepbox/v1/fs/raw" || head.path == "/deepbox/v1/fs/tar/upload");
}

namespace {

// Refuses an upload that cannot fit before a byte of it is read. `path` is
// where it goes: the free space is that of its nearest existing directory
// (the file API may reach several filesystems).
Status CheckSpaceFor(const deepbox::fs::Root& root, std::string_view path,
                     std::optional<uint64_t> length) {
  if (!length) return {};
  auto rel = root.ToRelative(path);
  if (!rel) return {};  // the write itself reports it
  std::string dir = *rel;
  UniqueFd fd;
  for (;;) {
    auto opened = root.Open(dir, O_PATH | O_DIRECTORY);
    if (opened) {
      fd = std::move(*opened);
      break;
    }
    if (dir.empty()) return {};
    dir = std::string(deepbox::fs::SplitRelative(dir).first);
  }
  struct statvfs vfs {};
  if (::fstatvfs(fd.get(), &vfs) != 0) return {};  // unknown: let the writes tell
  const uint64_t avail = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  if (*length > avail) {
    return MakeError(ErrorCode::kResourceExhausted,
                     fmt::format("not enough space in the sandbox for {} bytes ({} bytes free in "
                                 "{})",
                                 *length, avail, root.ToAbsolute(dir)));
  }
  return {};
}

}  // namespace

net::Response Daemon::RawUpload(const net::Request& request) {
  auto path = request.Query("path");
  if (!path)
    return ErrorResponse(Error(ErrorCode::kInvalidArgument, "query parameter 'path' is required"));
  deepbox::fs::WriteOptions wo;
  if (auto mode = request.Query("mode")) {
    if (mode->empty() || mode->size() > 5 ||
        mode->find_first_not_of("01234567") != std::string::npos) {
      return ErrorResponse(Error(ErrorCode::kInvalidArgument, "mode must be octal like 0644"));
    }
    uint32_t m = 0;
    for (char c : *mode) m = m * 8 + static_cast<uint32_t>(c - '0');
    wo.mode = m & 07777;
  }
  if (request.body_reader == nullptr) {  // buffered (a caller other than the server)
    auto w = fs::Write(files_root(), *path, request.body, wo);
    if (!w) return ErrorResponse(w.error());
    json::object o;
    o["path"] = JsonString(w->path);
    o["size"] = w->bytes;
    return JsonResponse(200, ToJson(o));
  }
  if (auto s = CheckSpaceFor(files_root(), *path, request.body_reader->content_length()); !s) {
    return ErrorResponse(s.error());
  }
  auto writer = deepbox::fs::AtomicFileWriter::Create(files_root(), *path, wo);
  if (!writer) return ErrorResponse(writer.error());
  std::vector<char> buf(256 * 1024);
  for (;;) {
    auto n = request.body_reader->Read(buf.data(), buf.size());
    if (!n) return ErrorResponse(n.error());  // the writer's destructor drops the temp file
    if (*n == 0) break;
    if (auto s = writer->Append(std::string_view(buf.data(), *n)); !s) {
      return ErrorResponse(s.error());
    }
  }
  auto w = writer->Commit();
  if (!w) return ErrorResponse(w.error());
  json::object o;
  o["path"] = JsonString(w->path);
  o["size"] = w->bytes;
  return JsonResponse(200, ToJson(o));
}

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
  // Validate before the stream starts, so a missing path is a clean 404 (and
  // a daemon without libarchive a clean 503).
  if (auto ok = deepbox::fs::TarSupported(); !ok) {
    (void)writer.Send(ErrorResponse(ok.error()));
    return;
  }
  for (const auto& p : paths) {
    if (auto st = fs::Stat(files_root(), p); !st) {
      (void)writer.Send(ErrorResponse(st.error()));
      return;
    }
  }
  net::Headers headers;
  headers.Set("Content-Type", "application/x-tar");
  if (!writer.BeginStream(200, headers)) return;
  auto s = deepbox::fs::WriteTar(files_root(), paths, [&](std::string_view data) -> Status {
    return writer.WriteChunk(data);
  });
  if (s) (void)writer.EndStream();
}

net::Response Daemon::TarUpload(const net::Request& request) {
  std::string dest = request.Query("path").value_or(root().path());
  size_t pos = 0;
  const std::string& body = request.body;
  net::BodyReader* reader = request.body_reader;
  if (reader != nullptr) {
    if (auto s = CheckSpaceFor(files_root(), dest, reader->content_length()); !s) {
      return ErrorResponse(s.error());
    }
  }
  auto written =
      deepbox::fs::ExtractTar(files_root(), dest, [&](char* buf, size_t size) -> Result<size_t> {
        if (reader != nullptr) return reader->Read(buf, size);
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

}  // namespace deepbox::sandboxd
