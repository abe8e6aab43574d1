#include "sandboxd/server/multipart.h"

#include <fmt/format.h>

#include "common/strings.h"
#include "net/http.h"

namespace deepbox::sandboxd {
namespace {

// HTTP's optional whitespace (space, tab) around header fields; a stray CR
// at the end of a field goes too.
std::string_view TrimOws(std::string_view s) { return TrimRight(TrimLeft(s, " \t"), " \t\r"); }

// Value of `key=` in a header parameter list, unquoting "..." (with \" escapes).
std::optional<std::string> Param(std::string_view header, std::string_view key) {
  size_t pos = 0;
  while (pos < header.size()) {
    size_t semi = header.find(';', pos);
    // Quoted values may contain ';': scan quote-aware.
    bool quoted = false;
    for (size_t i = pos; i < header.size(); ++i) {
      if (header[i] == '"' && (i == 0 || header[i - 1] != '\\')) quoted = !quoted;
      if (header[i] == ';' && !quoted) {
        semi = i;
        break;
      }
      if (i + 1 == header.size()) semi = std::string_view::npos;
    }
    std::string_view part =
        TrimOws(header.substr(pos, semi == std::string_view::npos ? header.npos : semi - pos));
    auto eq = part.find('=');
    if (eq != std::string_view::npos && net::EqualsIgnoreCase(TrimOws(part.substr(0, eq)), key)) {
      std::string_view v = TrimOws(part.substr(eq + 1));
      if (v.size() >= 2 && v.front() == '"' && v.back() == '"') {
        v = v.substr(1, v.size() - 2);
        std::string out;
        for (size_t i = 0; i < v.size(); ++i) {
          if (v[i] == '\\' && i + 1 < v.size()) ++i;
          out.push_back(v[i]);
        }
        return out;
      }
      return std::string(v);
    }
    if (semi == std::string_view::npos) break;
    pos = semi + 1;
  }
  return std::nullopt;
}

}  // namespace

Result<std::vector<FormPart>> ParseMultipart(std::string_view content_type, std::string_view body) {
  if (!content_type.starts_with("multipart/form-data")) {
    return MakeError(ErrorCode::kInvalidArgument, "expected a multipart/form-data body");
  }
  auto boundary = Param(content_type, "boundary");
  if (!boundary || boundary->empty()) {
    return MakeError(ErrorCode::kInvalidArgument, "multipart body without a boundary");
  }
  std::string delim = "--" + *boundary;
  std::vector<FormPart> parts;
  size_t pos = body.find(delim);
  if (pos == std::string_view::npos) {
    return MakeError(ErrorCode::kInvalidArgument, "multipart boundary not found in body");
  }
  for (;;) {
    pos += delim.size();
    if (body.substr(pos, 2) == "--") break;  // closing delimiter
    if (body.substr(pos, 2) != "\r\n") {
      return MakeError(ErrorCode::kInvalidArgument, "malformed multipart delimiter line");
    }
    pos += 2;
    size_t headers_end = body.find("\r\n\r\n", pos);
    if (headers_end == std::string_view::npos) {
      return MakeError(ErrorCode::kInvalidArgument, "multipart part without headers end");
    }
    FormPart part;
    std::string_view headers = body.substr(pos, headers_end - pos);
    while (!headers.empty()) {
      size_t eol = headers.find("\r\n");
      std::string_view line = headers.substr(0, eol);
      headers = eol == std::string_view::npos ? "" : headers.substr(eol + 2);
      auto colon = line.find(':');
      if (colon == std::string_view::npos) continue;
      std::string_view name = TrimOws(line.substr(0, colon));
      std::string_view value = TrimOws(line.substr(colon + 1));
      if (net::EqualsIgnoreCase(name, "Content-Disposition")) {
        part.name = Param(value, "name").value_or("");
        part.filename = Param(value, "filename").value_or("");
      } else if (net::EqualsIgnoreCase(name, "Content-Type")) {
        part.content_type = std::string(value);
      }
    }
    size_t data_start = headers_end + 4;
    size_t next = body.find("\r\n" + delim, data_start);
    if (next == std::string_view::npos) {
      return MakeError(ErrorCode::kInvalidArgument, "multipart part is not terminated");
    }
    part.data = body.substr(data_start, next - data_start);
    parts.push_back(std::move(part));
    pos = next + 2;
  }
  return parts;
}

}  // namespace deepbox::sandboxd
