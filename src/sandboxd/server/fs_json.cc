#include "sandboxd/server/fs_json.h"

#include <fmt/format.h>

#include <array>
#include <charconv>

#include "common/utf8.h"

namespace deepbox::sandboxd {
namespace {

// Bytes Boost.JSON escapes: control characters, '"' and '\\'.
constexpr auto kNeedsEscape = [] {
  std::array<bool, 256> t{};
  for (int c = 0; c < 0x20; ++c) t[c] = true;
  t['"'] = true;
  t['\\'] = true;
  return t;
}();

void AppendEscaped(std::string& out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out.push_back('"');
  size_t run = 0;  // start of the pending run of bytes copied verbatim
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (!kNeedsEscape[c]) continue;
    out.append(s.data() + run, i - run);
    run = i + 1;
    switch (c) {
      case '"':
        out.append("\\\"");
        break;
      case '\\':
        out.append("\\\\");
        break;
      case '\b':
        out.append("\\b");
        break;
      case '\f':
        out.append("\\f");
        break;
      case '\n':
        out.append("\\n");
        break;
      case '\r':
        out.append("\\r");
        break;
      case '\t':
        out.append("\\t");
        break;
      default: {
        const char esc[6] = {'\\', 'u', '0', '0', kHex[c >> 4], kHex[c & 15]};
        out.append(esc, sizeof esc);
      }
    }
  }
  out.append(s.data() + run, s.size() - run);
  out.push_back('"');
}

void AppendUint(std::string& out, uint64_t v) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, static_cast<size_t>(end - buf));
}

void AppendMode(std::string& out, uint32_t mode) {
  // fmt "{:04o}": at least 4 octal digits (mode is at most 07777).
  char buf[16];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, mode, 8);
  for (auto n = end - buf; n < 4; ++n) out.push_back('0');
  out.append(buf, static_cast<size_t>(end - buf));
}

// `{"path":...,"name":...,"type":"..."`, the object left open.
void AppendNameAndType(std::string& out, const fs::FileInfo& f) {
  out.append("{\"path\":");
  AppendJsonString(out, f.path);
  out.append(",\"name\":");
  AppendJsonString(out, f.name);
  out.append(",\"type\":\"");
  out.append(fs::FileTypeName(f.type));
  out.push_back('"');
}

void AppendFileInfo(std::string& out, const fs::FileInfo& f) {
  AppendNameAndType(out, f);
  out.append(",\"size\":");
  AppendUint(out, f.size);
  out.append(",\"mode\":\"");
  AppendMode(out, f.mode);
  out.append("\",\"modified_at\":");
  AppendJsonString(out, f.mtime);
  if (f.type == fs::FileType::kSymlink) {
    out.append(",\"link_target\":");
    AppendJsonString(out, f.symlink_target);
  }
  out.push_back('}');
}

}  // namespace

void AppendJsonString(std::string& out, std::string_view text) {
  if (IsValidUtf8(text)) {
    AppendEscaped(out, text);
  } else {
    AppendEscaped(out, SanitizeUtf8(text));
  }
}

json::object FileInfoJson(const fs::FileInfo& f) {
  json::object o;
  o["path"] = JsonString(f.path);
  o["name"] = JsonString(f.name);
  o["type"] = std::string(fs::FileTypeName(f.type));
  o["size"] = f.size;
  o["mode"] = fmt::format("{:04o}", f.mode);
  o["modified_at"] = f.mtime;
  if (f.type == fs::FileType::kSymlink) o["link_target"] = JsonString(f.symlink_target);
  return o;
}

std::string ListJson(const fs::ListResult& list) {
  std::string out;
  // path + name twice, fixed keys and values: ~150 bytes an entry.
  size_t estimate = 64 + list.path.size();
  for (const auto& e : list.entries) {
    estimate += 128 + e.path.size() + e.name.size() + e.symlink_target.size();
  }
  out.reserve(estimate);
  out.append("{\"path\":");
  AppendJsonString(out, list.path);
  out.append(",\"entries\":[");
  for (size_t i = 0; i < list.entries.size(); ++i) {
    if (i > 0) out.push_back(',');
    if (list.stat) {
      AppendFileInfo(out, list.entries[i]);
    } else {  // fs/list "stat": false: what getdents64 tells
      AppendNameAndType(out, list.entries[i]);
      out.push_back('}');
    }
  }
  out.append("],\"truncated\":");
  out.append(list.truncated ? "true" : "false");
  out.push_back('}');
  return out;
}

std::string TreeJson(const fs::TreeResult& tree) {
  std::string out;
  size_t estimate = 64;
  for (const auto& e : tree.entries) estimate += 48 + e.path.size();
  out.reserve(estimate);
  out.append("{\"entries\":[");
  char buf[24];
  for (size_t i = 0; i < tree.entries.size(); ++i) {
    const fs::TreeEntry& e = tree.entries[i];
    out.append(i > 0 ? ",[" : "[");
    AppendJsonString(out, e.path);
    out.push_back(',');
    AppendUint(out, e.size);
    out.push_back(',');
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf, e.mtime_ns);
    out.append(buf, static_cast<size_t>(end - buf));
    out.push_back(',');
    AppendUint(out, e.mode);
    out.append(e.symlink ? ",\"l\"]" : ",\"f\"]");
  }
  out.append("],\"truncated\":");
  out.append(tree.truncated ? "true" : "false");
  out.append(",\"unreadable\":");
  out.append(tree.unreadable ? "true" : "false");
  out.push_back('}');
  return out;
}

}  // namespace deepbox::sandboxd
