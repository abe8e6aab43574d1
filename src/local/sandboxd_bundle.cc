#include "local/sandboxd_bundle.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <iterator>
#include <set>
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

// Libraries the daemon dlopen()s on first use, which ldd does not list:
// fs/archive_loader.cc (libarchive: tar uploads and downloads),
// sandboxd/server/nghttp2_loader.cc (libnghttp2: gRPC) and
// net/openssl_loader.cc (libssl and its libcrypto: token checks), as
// deploy/k8s/bundle-sandboxd.sh bundles them for the pod.
constexpr const char* kDlopenedLibraries[] = {"libarchive.so.13", "libnghttp2.so.14",
                                              "libssl.so.3"};

// The ELF class byte (ELFCLASS32/64) of `path`, 0 when it is not ELF.
int ElfClass(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  char ident[5] = {};
  if (!in.read(ident, sizeof(ident)) || std::string_view(ident, 4) !=
                                            "\x7f"
                                            "ELF")
    return 0;
  return ident[4];
}

bool FileContains(const fs::path& path, std::string_view needle) {
  std::ifstream in(path, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return text.find(needle) != std::string::npos;
}

// Where the dynamic loader's cache (`ldconfig -p`) has `soname` for
// binaries of `elf_class`; "" when it has none.
std::string FindInLoaderCache(const std::string& ldconfig_output, std::string_view soname,
                              int elf_class) {
  std::istringstream lines(ldconfig_output);
  std::string line;
  while (std::getline(lines, line)) {
    // "\tlibarchive.so.13 (libc6,x86-64) => /lib/x86_64-linux-gnu/libarchive.so.13"
    std::istringstream words(line);
    std::string name;
    words >> name;
    size_t arrow = line.rfind(" => ");
    if (name != soname || arrow == std::string::npos) continue;
    fs::path path = line.substr(arrow + 4);
    if (path.is_absolute() && ElfClass(path) == elf_class) return path.string();
  }
  return "";
}

// The dlopen()ed libraries `binary` names, found where the host's loader
// would find them, with their own dependencies. One the host lacks is left
// out: the daemon then says what it needs when asked for it.
Result<std::vector<fs::path>> DlopenedLibraries(const fs::path& binary) {
  std::vector<fs::path> out;
  std::vector<const char*> wanted;
  for (const char* soname : kDlopenedLibraries) {
    if (FileContains(binary, soname)) wanted.push_back(soname);
  }
  if (wanted.empty()) return out;
  SubprocessOptions run;
  run.argv = {"ldconfig", "-p"};
  run.capture_stdout = true;
  run.capture_stderr = true;
  auto cache = RunCommand(run, std::chrono::seconds(30));
  if (!cache || !cache->exited_ok()) {
    run.argv = {"/sbin/ldconfig", "-p"};  // not on a user's PATH everywhere
    cache = RunCommand(run, std::chrono::seconds(30));
  }
  if (!cache) return tl::unexpected(cache.error());
  if (!cache->exited_ok()) {
    return MakeError(ErrorCode::kInternal,
                     fmt::format("ldconfig -p: {} {}", DescribeWaitStatus(cache->wait_status),
                                 cache->err.substr(0, 500)));
  }
  const int elf_class = ElfClass(binary);
  for (const char* soname : wanted) {
    std::string lib = FindInLoaderCache(cache->out, soname, elf_class);
    if (lib.empty()) continue;
    auto deps = ListLinkedLibraries(lib);
    if (!deps) return tl::unexpected(deps.error());
    out.emplace_back(lib);
    out.insert(out.end(), deps->libs.begin(), deps->libs.end());
  }
  return out;
}

}  // namespace

Result<SandboxdBundle> ResolveSandboxdBundle(const fs::path& binary, const fs::path& cache_dir) {
  struct stat st {};
  if (stat(binary.c_str(), &st) != 0) return MakeSyscallError("stat", errno, binary.string());
  // "v2": bundles with the dlopen()ed libraries (v1 files are not read).
  const fs::path cached =
      cache_dir / fmt::format("v2-{:x}-{:x}-{:x}-{:x}", std::hash<std::string>{}(binary.string()),
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
  auto dlopened = DlopenedLibraries(binary);
  if (!dlopened) return tl::unexpected(dlopened.error());
  std::set<std::string> names = {bundle.loader};
  const std::vector<fs::path>& more = *dlopened;
  for (const std::vector<fs::path>* list : {&libs, &more}) {
    for (const auto& lib : *list) {
      if (!names.insert(lib.filename().string()).second) continue;  // once, ldd's first
      bundle.files.emplace_back(mount + "/lib/" + lib.filename().string(), lib.string());
    }
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
