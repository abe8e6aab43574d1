#include "acp/terminal_spool.h"

#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <vector>

#include "common/io.h"
#include "common/parse_number.h"
#include "common/remove_tree.h"
#include "common/strings.h"

namespace deepbox::acp {

Result<std::unique_ptr<SpoolDir>> SpoolDir::Create() {
  const char* runtime = std::getenv("XDG_RUNTIME_DIR");
  std::string base = runtime && runtime[0] == '/' ? runtime : "/tmp";
  std::string tmpl = base + "/deepbox-acp-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (!::mkdtemp(buf.data())) return MakeSyscallError("mkdtemp", errno, tmpl);
  return std::unique_ptr<SpoolDir>(new SpoolDir(buf.data()));
}

SpoolDir::~SpoolDir() { (void)RemoveTree(path_); }

Result<std::unique_ptr<OutputSpool>> OutputSpool::Create(const std::string& dir,
                                                         const std::string& name) {
  if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..") {
    return MakeError(ErrorCode::kInvalidArgument, "bad spool name \"" + name + "\"");
  }
  std::string path = dir + "/" + name;
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd) return MakeSyscallError("open", errno, path);
  return std::unique_ptr<OutputSpool>(new OutputSpool(std::move(path), std::move(fd)));
}

OutputSpool::~OutputSpool() {
  ::unlink(path_.c_str());
  ::unlink((path_ + ".exit").c_str());
  ::unlink((path_ + ".exit.tmp").c_str());
}

Status OutputSpool::Append(std::string_view bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (finished_ || bytes.empty()) return {};
  return WriteAll(fd_.get(), bytes, path_);
}

bool OutputSpool::finished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return finished_;
}

Status OutputSpool::Finish(int exit_code) {
  std::lock_guard<std::mutex> lock(mu_);
  if (finished_) return {};
  finished_ = true;
  fd_.reset();
  const std::string tmp = path_ + ".exit.tmp";
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd) return tl::unexpected(SyscallError("open", errno, tmp));
  if (auto st = WriteAll(fd.get(), std::to_string(exit_code) + "\n", tmp); !st) return st;
  fd.reset();
  if (::rename(tmp.c_str(), (path_ + ".exit").c_str()) != 0) {
    return tl::unexpected(SyscallError("rename", errno, tmp));
  }
  return {};
}

namespace {

// Copies what `in` holds past its offset to `out`.
Status CopyNewOutput(int in, int out, const std::string& path) {
  char buf[64 * 1024];
  for (;;) {
    ssize_t n = ::read(in, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return tl::unexpected(SyscallError("read", errno, path));
    if (n == 0) return {};
    if (auto st = WriteAll(out, std::string_view(buf, static_cast<size_t>(n)), "the output"); !st) {
      return st;
    }
  }
}

// The exit status in `exit_path`, nullopt while there is none.
Result<std::optional<int>> ReadExitStatus(const std::string& exit_path) {
  UniqueFd fd(::open(exit_path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd) {
    if (errno == ENOENT) return std::optional<int>();
    return MakeSyscallError("open", errno, exit_path);
  }
  auto text = ReadAll(fd.get(), exit_path, 64);
  if (!text) return tl::unexpected(text.error());
  auto code = ParseI64(Trim(*text));
  if (!code || *code < 0 || *code > 255) {
    return MakeError(ErrorCode::kInvalidArgument, exit_path + " holds no exit status");
  }
  return std::optional<int>(static_cast<int>(*code));
}

}  // namespace

Result<int> FollowSpool(const std::string& path, int out_fd) {
  UniqueFd in(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
  if (!in) {
    if (errno == ELOOP) {
      return MakeError(ErrorCode::kInvalidArgument, path + " is a symlink, not a spool");
    }
    return MakeSyscallError("open", errno, path);
  }
  struct stat st {};
  if (::fstat(in.get(), &st) != 0) return MakeSyscallError("fstat", errno, path);
  // Only what SpoolDir and OutputSpool make: DIR/deepbox-acp-XXXXXX/N.out,
  // the caller's own. Anything else is refused rather than followed forever.
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "."
                          : slash == 0               ? "/"
                                                     : path.substr(0, slash);
  const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  const size_t dir_slash = dir.rfind('/');
  const std::string dir_name = dir_slash == std::string::npos ? dir : dir.substr(dir_slash + 1);
  if (!S_ISREG(st.st_mode) || st.st_uid != ::geteuid() || !name.ends_with(".out") ||
      !dir_name.starts_with("deepbox-acp-")) {
    return MakeError(ErrorCode::kInvalidArgument,
                     path + " is not a spool of `deepbox acp` (DIR/deepbox-acp-XXXXXX/N.out)");
  }
  const std::string exit_path = path + ".exit";
  // Without inotify (none left, or a file system without it) the 1 s poll
  // alone notices new output.
  UniqueFd watch(::inotify_init1(IN_CLOEXEC | IN_NONBLOCK));
  if (watch && ::inotify_add_watch(watch.get(), dir.c_str(),
                                   IN_MODIFY | IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE |
                                       IN_DELETE | IN_DELETE_SELF) < 0) {
    watch.reset();
  }
  for (;;) {
    // The exit status first: once it is there, all the output is too.
    auto code = ReadExitStatus(exit_path);
    if (!code) return tl::unexpected(code.error());
    if (auto st = CopyNewOutput(in.get(), out_fd, path); !st) return tl::unexpected(st.error());
    if (*code) return **code;
    struct stat now {};
    if (::stat(path.c_str(), &now) != 0) {
      if (errno == ENOENT) {
        return MakeError(ErrorCode::kNotFound,
                         "the spool " + path + " was removed before the command ended");
      }
      return MakeSyscallError("stat", errno, path);
    }
    pollfd p{watch ? watch.get() : -1, POLLIN, 0};
    int r = ::poll(&p, 1, 1000);
    if (r < 0 && errno != EINTR) return MakeSyscallError("poll", errno);
    if (r > 0 && watch) {
      char events[4096];
      while (::read(watch.get(), events, sizeof events) > 0) {
      }
    }
  }
}

}  // namespace deepbox::acp
