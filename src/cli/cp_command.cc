// deepbox sandbox cp SRC DST: files and directories between host and sandbox.
//
// Files go through the daemon's raw transfer (SandboxdClient Upload/Download).
// Directories go as one tar stream (PUT /deepbox/v1/fs/tar/upload, POST
// /deepbox/v1/fs/tar/download); if the daemon does not offer tar
// (UNIMPLEMENTED), file by file. Archives from a sandbox are untrusted: they
// are extracted with libarchive's secure flags (no absolute paths, no "..",
// nothing through a symlink), without owners, set-id bits, devices or hard links.
#include <archive.h>
#include <archive_entry.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>

#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/provider_util.h"
#include "common/json.h"
#include "common/unique_fd.h"
#include "net/http_client.h"
#include "net/url.h"

namespace deepbox::cli {
namespace {

namespace fs = std::filesystem;
using local::lifecycle::Store;

struct Ref {
  bool in_sandbox = false;
  std::string id;
  std::string path;
};

Ref ParseRef(const std::string& text) {
  Ref r;
  size_t colon = text.find(':');
  if (colon != std::string::npos && Store::ValidId(text.substr(0, colon))) {
    r.in_sandbox = true;
    r.id = text.substr(0, colon);
    r.path = text.substr(colon + 1);
    if (r.path.empty()) r.path = ".";
  } else {
    r.path = text;
  }
  return r;
}

std::string Basename(std::string p) {
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  size_t slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

std::string JoinSandboxPath(const std::string& dir, const std::string& name) {
  if (dir.empty() || dir == ".") return name;
  return dir.back() == '/' ? dir + name : dir + "/" + name;
}

Result<std::string> ReadHostFile(const fs::path& p) {
  UniqueFd fd(open(p.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return MakeSyscallError("open", errno, p.string());
  std::string out;
  char buf[65536];
  for (;;) {
    ssize_t n = read(fd.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return MakeSyscallError("read", errno, p.string());
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

Status WriteHostFile(const fs::path& p, std::string_view data, uint32_t mode) {
  UniqueFd fd(open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC,
                   (mode & 0777) == 0 ? 0644 : (mode & 0777)));
  if (!fd) return MakeSyscallError("open", errno, p.string());
  while (!data.empty()) {
    ssize_t n = write(fd.get(), data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return MakeSyscallError("write", errno, p.string());
    data.remove_prefix(static_cast<size_t>(n));
  }
  return {};
}

// ------------------------------------------------------------ tar (host side)

// libarchive is loaded only when a directory is copied: linked normally it
// (with libxml2, ICU, nettle, lzma, zstd, ...) would be loaded by every
// `deepbox` process, including each sandbox's supervisor (~1.5 ms and
// hundreds of KiB per sandbox).
#define DEEPBOX_ARCHIVE_FUNCS(X)        \
  X(archive_entry_filetype)             \
  X(archive_entry_free)                 \
  X(archive_entry_hardlink)             \
  X(archive_entry_new)                  \
  X(archive_entry_pathname)             \
  X(archive_entry_perm)                 \
  X(archive_entry_set_filetype)         \
  X(archive_entry_set_gid)              \
  X(archive_entry_set_mtime)            \
  X(archive_entry_set_pathname)         \
  X(archive_entry_set_perm)             \
  X(archive_entry_set_size)             \
  X(archive_entry_set_symlink)          \
  X(archive_entry_set_uid)              \
  X(archive_error_string)               \
  X(archive_read_data_block)            \
  X(archive_read_free)                  \
  X(archive_read_new)                   \
  X(archive_read_next_header)           \
  X(archive_read_open_memory)           \
  X(archive_read_support_format_gnutar) \
  X(archive_read_support_format_tar)    \
  X(archive_write_close)                \
  X(archive_write_data)                 \
  X(archive_write_data_block)           \
  X(archive_write_disk_new)             \
  X(archive_write_disk_set_options)     \
  X(archive_write_finish_entry)         \
  X(archive_write_free)                 \
  X(archive_write_header)               \
  X(archive_write_new)                  \
  X(archive_write_open2)                \
  X(archive_write_set_format_pax_restricted)

struct ArchiveApi {
#define DEEPBOX_DECLARE(name) decltype(&::name) name = nullptr;
  DEEPBOX_ARCHIVE_FUNCS(DEEPBOX_DECLARE)
#undef DEEPBOX_DECLARE
};

Result<const ArchiveApi*> LoadArchive() {
  static ArchiveApi api;
  static std::string error;
  static bool loaded = [] {
    void* h = dlopen("libarchive.so.13", RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      error = std::string("copying directories needs libarchive: ") + dlerror();
      return false;
    }
#define DEEPBOX_LOAD(name)                                         \
  api.name = reinterpret_cast<decltype(&::name)>(dlsym(h, #name)); \
  if (api.name == nullptr) {                                       \
    error = "libarchive.so.13 lacks " #name;                       \
    return false;                                                  \
  }
    DEEPBOX_ARCHIVE_FUNCS(DEEPBOX_LOAD)
#undef DEEPBOX_LOAD
    return true;
  }();
  if (!loaded) return MakeError(ErrorCode::kUnavailable, error);
  return &api;
}

Result<std::string> TarDirectory(const fs::path& root) {
  auto api = LoadArchive();
  if (!api) return tl::unexpected(api.error());
  const ArchiveApi& A = **api;
  std::string out;
  archive* a = A.archive_write_new();
  A.archive_write_set_format_pax_restricted(a);
  A.archive_write_open2(
      a, &out, nullptr,
      [](archive*, void* ctx, const void* buf, size_t n) -> la_ssize_t {
        static_cast<std::string*>(ctx)->append(static_cast<const char*>(buf), n);
        return static_cast<la_ssize_t>(n);
      },
      nullptr, nullptr);
  Status result;
  std::error_code ec;
  fs::recursive_directory_iterator it(root, fs::directory_options::none, ec);
  if (ec) {
    A.archive_write_free(a);
    return MakeError(ErrorCode::kInternal,
                     fmt::format("reading {}: {}", root.string(), ec.message()));
  }
  for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) break;
    const fs::path& p = it->path();
    std::string rel = fs::relative(p, root).generic_string();
    struct stat st;
    if (lstat(p.c_str(), &st) != 0) {
      result = MakeSyscallError("lstat", errno, p.string());
      break;
    }
    archive_entry* e = A.archive_entry_new();
    A.archive_entry_set_pathname(e, rel.c_str());
    A.archive_entry_set_perm(e, st.st_mode & 07777);
    A.archive_entry_set_mtime(e, st.st_mtime, 0);
    std::string content;
    if (S_ISDIR(st.st_mode)) {
      A.archive_entry_set_filetype(e, AE_IFDIR);
    } else if (S_ISLNK(st.st_mode)) {
      std::error_code lec;
      A.archive_entry_set_filetype(e, AE_IFLNK);
      A.archive_entry_set_symlink(e, fs::read_symlink(p, lec).c_str());
    } else if (S_ISREG(st.st_mode)) {
      auto data = ReadHostFile(p);
      if (!data) {
        A.archive_entry_free(e);
        result = tl::unexpected(data.error());
        break;
      }
      content = std::move(*data);
      A.archive_entry_set_filetype(e, AE_IFREG);
      A.archive_entry_set_size(e, static_cast<la_int64_t>(content.size()));
    } else {
      std::fprintf(stderr, "deepbox: skipping %s (not a file, directory or symlink)\n", p.c_str());
      A.archive_entry_free(e);
      continue;
    }
    if (A.archive_write_header(a, e) != ARCHIVE_OK ||
        (!content.empty() && A.archive_write_data(a, content.data(), content.size()) < 0)) {
      result = MakeError(ErrorCode::kInternal, fmt::format("tar: {}", A.archive_error_string(a)));
      A.archive_entry_free(e);
      break;
    }
    A.archive_entry_free(e);
  }
  if (ec && result) {
    result =
        MakeError(ErrorCode::kInternal, fmt::format("reading {}: {}", root.string(), ec.message()));
  }
  A.archive_write_close(a);
  A.archive_write_free(a);
  if (!result) return tl::unexpected(result.error());
  return out;
}

// Splits a member name into components, dropping "." and empty ones; nullopt if unsafe.
std::optional<std::vector<std::string>> Components(std::string_view name) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= name.size()) {
    size_t slash = name.find('/', start);
    if (slash == std::string_view::npos) slash = name.size();
    std::string_view c = name.substr(start, slash - start);
    start = slash + 1;
    if (c.empty() || c == ".") continue;
    if (c == "..") return std::nullopt;
    parts.emplace_back(c);
  }
  return parts;
}

// Extracts an untrusted tar into `target`. Member names are made relative to
// the downloaded directory by stripping the longest of `prefixes` they start with.
Status ExtractUntrusted(const std::string& tar, const fs::path& target,
                        const std::vector<std::vector<std::string>>& prefixes) {
  auto api = LoadArchive();
  if (!api) return tl::unexpected(api.error());
  const ArchiveApi& A = **api;
  archive* in = A.archive_read_new();
  A.archive_read_support_format_tar(in);
  A.archive_read_support_format_gnutar(in);
  if (A.archive_read_open_memory(in, tar.data(), tar.size()) != ARCHIVE_OK) {
    Error e(ErrorCode::kInternal, fmt::format("tar: {}", A.archive_error_string(in)));
    A.archive_read_free(in);
    return tl::unexpected(e);
  }
  archive* out = A.archive_write_disk_new();
  // Destinations are `target` (canonical, so no symlink in it) + sanitized
  // member components; nothing may be written through a symlink the archive made.
  A.archive_write_disk_set_options(out, ARCHIVE_EXTRACT_TIME | ARCHIVE_EXTRACT_SECURE_SYMLINKS |
                                            ARCHIVE_EXTRACT_SECURE_NODOTDOT);
  Status result;
  const std::vector<std::string>* strip = nullptr;
  archive_entry* e = nullptr;
  for (;;) {
    int rc = A.archive_read_next_header(in, &e);
    if (rc == ARCHIVE_EOF) break;
    if (rc < ARCHIVE_WARN) {
      result = MakeError(ErrorCode::kInternal, fmt::format("tar: {}", A.archive_error_string(in)));
      break;
    }
    auto parts = Components(A.archive_entry_pathname(e));
    auto type = A.archive_entry_filetype(e);
    if (!parts || A.archive_entry_hardlink(e) != nullptr ||
        (type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK)) {
      std::fprintf(stderr, "deepbox: skipping unsafe or special tar member '%s'\n",
                   A.archive_entry_pathname(e));
      continue;
    }
    if (strip == nullptr) {  // decided by the first member
      static const std::vector<std::string> kNone;
      strip = &kNone;
      for (const auto& p : prefixes) {
        if (p.size() > strip->size() && p.size() <= parts->size() &&
            std::equal(p.begin(), p.end(), parts->begin())) {
          strip = &p;
        }
      }
    }
    if (parts->size() < strip->size() ||
        !std::equal(strip->begin(), strip->end(), parts->begin())) {
      continue;
    }
    fs::path dest = target;
    for (size_t i = strip->size(); i < parts->size(); ++i) dest /= (*parts)[i];
    A.archive_entry_set_pathname(e, dest.c_str());
    A.archive_entry_set_uid(e, geteuid());
    A.archive_entry_set_gid(e, getegid());
    A.archive_entry_set_perm(e, A.archive_entry_perm(e) & 0777);
    if (type == AE_IFDIR) A.archive_entry_set_perm(e, (A.archive_entry_perm(e) | 0700) & 0777);
    if (A.archive_write_header(out, e) != ARCHIVE_OK) {
      std::fprintf(stderr, "deepbox: skipping '%s': %s\n", dest.c_str(),
                   A.archive_error_string(out));
      continue;
    }
    const void* buf;
    size_t size;
    la_int64_t offset;
    while ((rc = A.archive_read_data_block(in, &buf, &size, &offset)) == ARCHIVE_OK) {
      if (A.archive_write_data_block(out, buf, size, offset) < ARCHIVE_OK) {
        result = MakeError(ErrorCode::kInternal, fmt::format("writing {}: {}", dest.string(),
                                                             A.archive_error_string(out)));
        break;
      }
    }
    if (!result) break;
    A.archive_write_finish_entry(out);
  }
  A.archive_write_close(out);
  A.archive_write_free(out);
  A.archive_read_free(in);
  return result;
}

// ------------------------------------------------------------ copy directions

class Copier {
 public:
  Copier(std::unique_ptr<SandboxdClient> client, std::unique_ptr<net::HttpClient> http)
      : client_(std::move(client)), http_(std::move(http)) {}

  Status HostToSandbox(const fs::path& src, std::string dst) {
    struct stat st;
    if (lstat(src.c_str(), &st) != 0) return MakeSyscallError("lstat", errno, src.string());
    auto dst_info = client_->Stat(dst);
    bool into = (dst_info && dst_info->is_dir()) || dst.back() == '/';
    if (into) dst = JoinSandboxPath(dst, Basename(src.string()));
    if (S_ISREG(st.st_mode)) {
      auto data = ReadHostFile(src);
      if (!data) return tl::unexpected(data.error());
      return client_->Upload(dst, *data, st.st_mode & 0777);
    }
    if (!S_ISDIR(st.st_mode)) {
      return MakeError(ErrorCode::kInvalidArgument,
                       fmt::format("{} is not a file or a directory", src.string()));
    }
    if (auto s = client_->Mkdir(dst, true); !s) return s;
    auto tar = TarDirectory(src);
    if (!tar) return tl::unexpected(tar.error());
    net::ClientRequest req;
    req.method = "PUT";
    req.target = "/deepbox/v1/fs/tar/upload?path=" + net::PercentEncode(dst);
    req.headers.Set("Content-Type", "application/x-tar");
    req.body = std::move(*tar);
    req.timeout = std::chrono::minutes(10);
    auto r = http_->Send(req);
    if (!r) return tl::unexpected(r.error());
    if (r->status == 200) return {};
    Error e = ResponseError(*r);
    if (e.code != ErrorCode::kUnimplemented) return tl::unexpected(e);
    return UploadTree(src, dst);  // the daemon has no tar: file by file
  }

  Status SandboxToHost(const std::string& src, fs::path dst) {
    auto info = client_->Stat(src);
    if (!info) return tl::unexpected(info.error());
    struct stat st;
    bool dst_is_dir = stat(dst.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
    if (dst_is_dir) dst /= Basename(info->path);
    if (!info->is_dir()) {
      if (info->type != FileType::kFile) {
        return MakeError(ErrorCode::kInvalidArgument,
                         fmt::format("{} is not a file or a directory", info->path));
      }
      auto data = client_->Download(info->path);
      if (!data) return tl::unexpected(data.error());
      return WriteHostFile(dst, *data, info->mode);
    }
    if (mkdir(dst.c_str(), 0755) != 0 && errno != EEXIST) {
      return MakeSyscallError("mkdir", errno, dst.string());
    }
    net::ClientRequest req;
    req.method = "POST";
    req.target = "/deepbox/v1/fs/tar/download";
    req.headers.Set("Content-Type", "application/json");
    json::object body;
    body["paths"] = json::array{json::value(JsonString(info->path))};
    req.body = ToJson(body);
    req.timeout = std::chrono::minutes(10);
    auto r = http_->Send(req);
    if (!r) return tl::unexpected(r.error());
    if (r->status != 200) {
      Error e = ResponseError(*r);
      if (e.code != ErrorCode::kUnimplemented) return tl::unexpected(e);
      return DownloadTree(info->path, dst);
    }
    // Member names may be relative to the sandbox root, to the dir's parent,
    // or absolute: strip whichever the archive uses.
    std::string root = client_->root();
    std::vector<std::vector<std::string>> prefixes;
    prefixes.push_back(*Components(info->path));
    if (info->path.rfind(root + "/", 0) == 0) {
      prefixes.push_back(*Components(info->path.substr(root.size() + 1)));
    }
    prefixes.push_back(*Components(Basename(info->path)));
    std::error_code ec;
    fs::path canonical = fs::canonical(dst, ec);
    if (ec) return MakeError(ErrorCode::kInternal, dst.string() + ": " + ec.message());
    return ExtractUntrusted(r->body, canonical, prefixes);
  }

 private:
  static Error ResponseError(const net::Response& r) {
    auto obj = ParseJsonObject(r.body);
    if (obj) {
      auto it = obj->find("error");
      if (it != obj->end() && it->value().is_object()) {
        const auto& e = it->value().as_object();
        return Error(ErrorCodeFromName(GetOptString(e, "code").value_or("INTERNAL")),
                     GetOptString(e, "message").value_or(""));
      }
    }
    return Error(r.status == 501 ? ErrorCode::kUnimplemented : ErrorCode::kInternal,
                 fmt::format("sandbox daemon answered HTTP {}", r.status));
  }

  Status UploadTree(const fs::path& src, const std::string& dst) {
    std::error_code ec;
    for (fs::recursive_directory_iterator it(src, ec), end; !ec && it != end; it.increment(ec)) {
      std::string target = JoinSandboxPath(dst, fs::relative(it->path(), src).generic_string());
      struct stat st;
      if (lstat(it->path().c_str(), &st) != 0)
        return MakeSyscallError("lstat", errno, it->path().string());
      if (S_ISDIR(st.st_mode)) {
        if (auto s = client_->Mkdir(target, true); !s) return s;
      } else if (S_ISREG(st.st_mode)) {
        auto data = ReadHostFile(it->path());
        if (!data) return tl::unexpected(data.error());
        if (auto s = client_->Upload(target, *data, st.st_mode & 0777); !s) return s;
      } else {
        std::fprintf(stderr, "deepbox: skipping %s (only files and directories are copied)\n",
                     it->path().c_str());
      }
    }
    if (ec)
      return MakeError(ErrorCode::kInternal,
                       fmt::format("reading {}: {}", src.string(), ec.message()));
    return {};
  }

  Status DownloadTree(const std::string& src, const fs::path& dst, int depth = 0) {
    if (depth > 128) return MakeError(ErrorCode::kResourceExhausted, "directory tree too deep");
    auto entries = client_->List(src);
    if (!entries) return tl::unexpected(entries.error());
    for (const auto& e : *entries) {
      auto parts = Components(e.name);
      if (!parts || parts->size() != 1) continue;
      fs::path target = dst / e.name;
      if (e.is_dir()) {
        if (mkdir(target.c_str(), 0755) != 0 && errno != EEXIST) {
          return MakeSyscallError("mkdir", errno, target.string());
        }
        struct stat st;
        if (lstat(target.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
          return MakeError(ErrorCode::kConflict, target.string() + " is not a directory");
        }
        if (auto s = DownloadTree(e.path, target, depth + 1); !s) return s;
      } else if (e.type == FileType::kFile) {
        auto data = client_->Download(e.path);
        if (!data) return tl::unexpected(data.error());
        if (auto s = WriteHostFile(target, *data, e.mode); !s) return s;
      } else {
        std::fprintf(stderr, "deepbox: skipping %s (only files and directories are copied)\n",
                     e.path.c_str());
      }
    }
    return {};
  }

  std::unique_ptr<SandboxdClient> client_;
  std::unique_ptr<net::HttpClient> http_;
};

}  // namespace

int RunSandboxCp(const SandboxCpArgs& args) {
  Ref src = ParseRef(args.src);
  Ref dst = ParseRef(args.dst);
  if (src.in_sandbox == dst.in_sandbox) {
    return ReportError(Error(ErrorCode::kInvalidArgument,
                             src.in_sandbox
                                 ? "both SRC and DST are in sandboxes: copy through the host"
                                 : "one of SRC and DST must be a sandbox path ID:PATH (e.g. "
                                   "sb-0123456789ab:/workspace/x)"));
  }
  const Ref& remote = src.in_sandbox ? src : dst;
  auto provider = MakeProvider(ProviderFlags{});
  if (!provider) return ReportError(provider.error());
  auto meta = (*provider)->Get(remote.id);
  if (!meta) return ReportError(meta.error());
  auto client = (*provider)->Connect(*meta);
  if (!client) return ReportError(client.error());
  net::ClientOptions ho;
  ho.read_idle_timeout = std::chrono::minutes(5);
  auto http = net::HttpClient::Create("unix:" + meta->socket, ho);
  if (!http) return ReportError(http.error());
  Copier copier(std::move(*client), std::move(*http));
  Status st = src.in_sandbox ? copier.SandboxToHost(src.path, dst.path)
                             : copier.HostToSandbox(src.path, dst.path);
  if (!st) return ReportError(st.error());
  return kExitOk;
}

}  // namespace deepbox::cli
