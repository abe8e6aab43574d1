#include "k8s/claim_token.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <optional>

#include "common/unique_fd.h"
#include "common/user_state_dir.h"
#include "net/token_digest.h"

namespace deepbox::k8s {

namespace {

constexpr size_t kKeyBytes = 32;

std::string Hex(std::string_view raw) {
  std::string out;
  for (unsigned char c : raw) out += fmt::format("{:02x}", c);
  return out;
}

std::optional<std::string> Unhex(std::string_view text) {
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  if (text.size() % 2 != 0) return std::nullopt;
  std::string out;
  for (size_t i = 0; i < text.size(); i += 2) {
    int hi = nibble(text[i]), lo = nibble(text[i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out.push_back(static_cast<char>(hi * 16 + lo));
  }
  return out;
}

Status MakeDirs(const std::string& dir) {
  if (dir.empty() || dir == "/") return {};
  struct stat st {};
  if (::stat(dir.c_str(), &st) == 0) return {};
  size_t slash = dir.rfind('/');
  if (slash != std::string::npos && slash > 0) {
    if (auto s = MakeDirs(dir.substr(0, slash)); !s) return s;
  }
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return MakeSyscallError("mkdir", errno, dir);
  }
  return {};
}

// The key in `fd` (opened O_NOFOLLOW), after the ownership and mode checks.
Result<std::string> ReadKey(int fd, const std::string& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return MakeSyscallError("fstat", errno, path);
  if (!S_ISREG(st.st_mode)) {
    return MakeError(ErrorCode::kPermissionDenied,
                     fmt::format("the claim key {} is not a regular file", path));
  }
  if (st.st_uid != ::geteuid() || (st.st_mode & 077) != 0) {
    return MakeError(ErrorCode::kPermissionDenied,
                     fmt::format("the claim key {} must be owned by uid {} with mode 0600 (it "
                                 "is uid {}, mode {:04o}): whoever reads it drives your "
                                 "Kubernetes sandboxes",
                                 path, ::geteuid(), st.st_uid, st.st_mode & 07777));
  }
  char buf[2 * kKeyBytes + 2];
  size_t got = 0;
  while (got < sizeof buf) {
    ssize_t n = ::read(fd, buf + got, sizeof buf - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return MakeSyscallError("read", errno, path);
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  std::string_view text(buf, got);
  if (text.ends_with('\n')) text.remove_suffix(1);
  auto key = Unhex(text);
  if (!key || key->size() != kKeyBytes) {
    return MakeError(ErrorCode::kPermissionDenied,
                     fmt::format("the claim key {} does not hold {} hex digits (delete it to "
                                 "get a new one; claims made with the old key can then no "
                                 "longer be driven)",
                                 path, 2 * kKeyBytes));
  }
  return *key;
}

}  // namespace

std::string DefaultClaimKeyPath() {
  if (const char* f = std::getenv("DEEPBOX_K8S_CLAIM_KEY_FILE"); f != nullptr && *f != '\0') {
    return f;
  }
  // "" without a home: loading it fails, and the provider's message names
  // DEEPBOX_K8S_CLAIM_KEY_FILE.
  return UserStateDir(ProcessEnvironment(), "k8s-claim-key", "DEEPBOX_K8S_CLAIM_KEY_FILE")
      .value_or("");
}

Result<std::string> LoadOrCreateClaimKey(const std::string& path) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    if (fd) return ReadKey(fd.get(), path);
    if (errno != ENOENT) return MakeSyscallError("open", errno, "the claim key " + path);
    // Create it: written in full to a private temporary, then linked into
    // place (a concurrent deepbox that wins keeps its key; we read it).
    size_t slash = path.rfind('/');
    std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
    if (auto s = MakeDirs(dir); !s) return tl::unexpected(s.error());
    std::string raw(kKeyBytes, '\0');
    for (size_t got = 0; got < raw.size();) {
      ssize_t n = ::getrandom(raw.data() + got, raw.size() - got, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return MakeSyscallError("getrandom", errno);
      got += static_cast<size_t>(n);
    }
    std::string text = Hex(raw) + "\n";
    std::string tmp_path = fmt::format("{}.tmp-{}-{}", path, ::getpid(), attempt);
    ::unlink(tmp_path.c_str());  // left by a process of ours that died here
    UniqueFd tmp(
        ::open(tmp_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!tmp) return MakeSyscallError("open", errno, tmp_path);
    bool written =
        ::write(tmp.get(), text.data(), text.size()) == static_cast<ssize_t>(text.size());
    int write_errno = errno;
    int linked = written ? ::link(tmp_path.c_str(), path.c_str()) : -1;
    int link_errno = errno;
    ::unlink(tmp_path.c_str());
    if (!written) return MakeSyscallError("write", write_errno, tmp_path);
    if (linked == 0) return raw;
    errno = link_errno;
    if (errno != EEXIST) return MakeSyscallError("link", errno, path);
  }
  return MakeError(ErrorCode::kInternal, "the claim key " + path + " keeps changing");
}

std::string DeriveClaimToken(std::string_view key, std::string_view ns, std::string_view name) {
  return net::Base64UrlEncode(
      net::HmacSha256(key, fmt::format("deepbox-sandboxd-token/v1\n{}/{}", ns, name)));
}

}  // namespace deepbox::k8s
