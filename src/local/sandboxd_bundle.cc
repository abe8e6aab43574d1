#include "local/sandboxd_bundle.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <sstream>

#include "common/random.h"
#include "common/subprocess.h"

namespace deepbox::local {
namespace {

namespace fs = std::filesystem;

}  // namespace

Result<LinkedLibraries> ListLinkedLibraries(const fs::path& binary) {
  LinkedLibraries linked;
  std::vector<fs::path>* libs = &linked.libs;
  fs::path* loader = &linked.loader;
  SubprocessOptions run;
  run.argv = {"ldd", binary.string()};
  run.capture_stdout = true;
  run.capture_stderr = true;
  auto out = RunCommand(run, std::chrono::seconds(30));
  if (!out) return tl::unexpected(out.error());
  if (!out->exited_ok()) {
    return MakeError(ErrorCode::kInternal,
                     fmt::format("ldd {}: {} {}", binary.string(),
                                 DescribeWaitStatus(out->wait_status), out->err));
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
  return linked;
}

namespace {

std::string Serialize(const SandboxdBundle& bundle) {
  std::string out = bundle.loader + "\n";
  for (const auto& [inside, host] : bundle.files) out += inside + "\t" + host + "\n";
  return out;
}

std::optional<SandboxdBundle> Parse(const std::string& text) {
  std::istringstream in(text);
  SandboxdBundle bundle;
  if (!std::getline(in, bundle.loader) || bundle.loader.empty()) return std::nullopt;
  std::string line;
  while (std::getline(in, line)) {
    size_t tab = line.find('\t');
    if (tab == std::string::npos) return std::nullopt;
    bundle.files.emplace_back(line.substr(0, tab), line.substr(tab + 1));
  }
  if (bundle.files.empty()) return std::nullopt;
  return bundle;
}

}  // namespace

Result<SandboxdBundle> ResolveSandboxdBundle(const fs::path& binary, const fs::path& cache_dir) {
  struct stat st {};
  if (stat(binary.c_str(), &st) != 0) return MakeSyscallError("stat", errno, binary.string());
  const fs::path cached =
      cache_dir / fmt::format("{:x}-{:x}-{:x}-{:x}", std::hash<std::string>{}(binary.string()),
                              static_cast<uint64_t>(st.st_size),
                              static_cast<uint64_t>(st.st_mtim.tv_sec) * 1000000000ULL +
                                  static_cast<uint64_t>(st.st_mtim.tv_nsec),
                              static_cast<uint64_t>(st.st_ino));
  {
    std::ifstream in(cached);
    std::stringstream text;
    text << in.rdbuf();
    if (auto bundle = Parse(text.str())) return *bundle;
  }
  auto linked = ListLinkedLibraries(binary);
  if (!linked) return tl::unexpected(linked.error());
  const std::vector<fs::path>& libs = linked->libs;
  const fs::path& loader = linked->loader;
  SandboxdBundle bundle;
  bundle.loader = loader.filename().string();
  const std::string mount = kSandboxdBundleMount;
  bundle.files.emplace_back(kBundledSandboxdPath, binary.string());
  for (const auto& lib : libs) {
    bundle.files.emplace_back(mount + "/lib/" + lib.filename().string(), lib.string());
  }
  bundle.files.emplace_back(mount + "/lib/" + bundle.loader, loader.string());
  if (mkdir(cache_dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return MakeSyscallError("mkdir", errno, cache_dir.string());
  }
  // Written beside and renamed over: a reader sees all of it or nothing.
  const std::string tmp = cached.string() + ".tmp-" + RandomHex(8);
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << Serialize(bundle);
    if (!out) return MakeError(ErrorCode::kInternal, "cannot write " + tmp);
  }
  if (rename(tmp.c_str(), cached.c_str()) != 0) {
    int err = errno;
    unlink(tmp.c_str());
    return MakeSyscallError("rename", err, cached.string());
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
