#include "local/sandboxd_bundle.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <sstream>

#include "common/remove_tree.h"
#include "common/subprocess.h"

namespace deepbox::local {
namespace {

namespace fs = std::filesystem;

Status CopyFileTo(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  fs::copy_file(from, to, fs::copy_options::overwrite_existing, ec);
  if (ec) return MakeSyscallError("copy", ec.value(), from.string() + " -> " + to.string());
  if (chmod(to.c_str(), 0755) != 0) return MakeSyscallError("chmod", errno, to.string());
  return {};
}

// The libraries `ldd` resolves for `binary` (absolute paths), and its loader.
Status ListLibraries(const fs::path& binary, std::vector<fs::path>* libs, fs::path* loader) {
  SubprocessOptions run;
  run.argv = {"ldd", binary.string()};
  run.capture_stdout = true;
  run.capture_stderr = true;
  auto out = RunCommand(run, std::chrono::seconds(30));
  if (!out) return tl::unexpected(out.error());
  if (!out->exited_ok()) {
    return MakeError(ErrorCode::kInternal, fmt::format("ldd {}: {} {}", binary.string(),
                                                       DescribeWaitStatus(out->wait_status),
                                                       out->err));
  }
  std::istringstream lines(out->out);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    std::string first, second, third;
    words >> first >> second >> third;
    if (second == "=>" && third == "not") {
      return MakeError(ErrorCode::kNotFound,
                       fmt::format("{} needs {}, which is not found", binary.string(), first));
    }
    if (second == "=>" && !third.empty() && third.front() == '/') {
      libs->emplace_back(third);
    } else if (!first.empty() && first.front() == '/') {
      *loader = first;  // "/lib64/ld-linux-x86-64.so.2 (0x...)"
    }
  }
  if (loader->empty()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("{} is not a dynamically linked program", binary.string()));
  }
  return {};
}

}  // namespace

Result<fs::path> EnsureSandboxdBundle(const fs::path& binary, const fs::path& bundles_dir) {
  struct stat st {};
  if (stat(binary.c_str(), &st) != 0) return MakeSyscallError("stat", errno, binary.string());
  const fs::path bundle =
      bundles_dir / fmt::format("{:x}-{:x}-{:x}-{:x}", std::hash<std::string>{}(binary.string()),
                                static_cast<uint64_t>(st.st_size),
                                static_cast<uint64_t>(st.st_mtim.tv_sec) * 1000000000ULL +
                                    static_cast<uint64_t>(st.st_mtim.tv_nsec),
                                static_cast<uint64_t>(st.st_ino));
  struct stat done {};
  if (lstat(bundle.c_str(), &done) == 0 && S_ISDIR(done.st_mode)) return bundle;
  if (mkdir(bundles_dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return MakeSyscallError("mkdir", errno, bundles_dir.string());
  }
  std::vector<fs::path> libs;
  fs::path loader;
  if (auto s = ListLibraries(binary, &libs, &loader); !s) return tl::unexpected(s.error());
  std::string tmp = (bundles_dir / ".tmp-XXXXXX").string();
  if (mkdtemp(tmp.data()) == nullptr) return MakeSyscallError("mkdtemp", errno, tmp);
  auto fail = [&](Error e) -> Result<fs::path> {
    (void)RemoveTree(tmp);
    return tl::unexpected(std::move(e));
  };
  const fs::path work = tmp;
  for (const char* sub : {"bin", "lib"}) {
    if (mkdir((work / sub).c_str(), 0755) != 0) {
      return fail(SyscallError("mkdir", errno, (work / sub).string()));
    }
  }
  if (auto s = CopyFileTo(binary, work / "bin/deepbox-sandboxd"); !s) return fail(s.error());
  for (const auto& lib : libs) {
    if (auto s = CopyFileTo(lib, work / "lib" / lib.filename()); !s) return fail(s.error());
  }
  if (auto s = CopyFileTo(loader, work / "lib" / loader.filename()); !s) return fail(s.error());
  if (loader.filename() != "ld.so" && symlink(loader.filename().c_str(), (work / "lib/ld.so").c_str()) != 0) {
    return fail(SyscallError("symlink", errno, (work / "lib/ld.so").string()));
  }
  if (chmod(work.c_str(), 0755) != 0) return fail(SyscallError("chmod", errno, tmp));
  if (rename(tmp.c_str(), bundle.c_str()) != 0) {
    int err = errno;
    (void)RemoveTree(tmp);
    // Another sandbox made the same bundle meanwhile: use that one.
    if ((err == EEXIST || err == ENOTEMPTY) && lstat(bundle.c_str(), &done) == 0) return bundle;
    return MakeSyscallError("rename", err, bundle.string());
  }
  return bundle;
}

std::vector<std::string> SandboxdBundleArgv(const std::vector<std::string>& args) {
  const std::string mount = kSandboxdBundleMount;
  std::vector<std::string> argv = {mount + "/lib/ld.so", "--library-path", mount + "/lib",
                                   kBundledSandboxdPath};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

}  // namespace deepbox::local
