// The confined path resolution (src/fs/path_resolver.h: the daemon's file
// API and `sandbox cp`'s host destination walk with it) against a real tree
// full of symlinks: inside and escaping, relative and absolute, loops,
// dangling, a sibling directory whose name extends the root's. Input: API
// paths, one per line; a leading "@" stands for the root's absolute path and
// "%" for its parent's (the fuzzer cannot guess the temporary names).
// Properties, for each path and both resolvers (openat2 and the user-space
// walk): nothing resolves outside the root (every fd returned is checked in
// /proc/self/fd), directories made without following symlinks are made at
// root/path itself, and the two resolvers agree on what succeeds and where it
// leads.
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "common/strings.h"
#include "fs/path_resolver.h"
#include "fuzz/fuzz_util.h"

namespace {

namespace dfs = deepbox::fs;
using deepbox::fuzz::FdPath;
using deepbox::fuzz::IsWithin;

struct Fixture {
  deepbox::fuzz::TempTree base{"resolver"};
  std::string root_path;
  dfs::Root kernel = Open(false);
  dfs::Root walk = Open(true);

  dfs::Root Open(bool fallback) {
    if (root_path.empty()) Build();
    auto r = dfs::Root::Open(root_path, dfs::RootOptions{.force_fallback = fallback});
    if (!r) deepbox::fuzz::Fail("fixture: " + r.error().ToString());
    return std::move(*r);
  }

  void Build() {
    using namespace deepbox::fuzz;
    root_path = base.Path("root");
    const std::string& r = root_path;
    MakeDirs(r + "/a/b");
    MakeDirs(r + "/d/e");
    MakeDirs(r + "/.hidden");
    MakeDirs(base.Path("outside"));
    MakeDirs(base.Path("rootevil"));
    WriteFile(r + "/a/b/c.txt", "c");
    WriteFile(r + "/d/file", "d");
    WriteFile(r + "/.hidden/x", "x");
    WriteFile(base.Path("outside/secret"), "secret");
    WriteFile(base.Path("rootevil/secret"), "secret");
    Symlink("../d", r + "/a/link_rel");
    Symlink(r + "/d", r + "/abs_in");
    Symlink(r + "/d/e", r + "/d/e/abs_self_parent");
    Symlink("/etc", r + "/abs_out");
    Symlink(base.Path("outside"), r + "/abs_outside");
    Symlink("../outside", r + "/esc_rel");
    Symlink("../../outside/secret", r + "/a/esc_file");
    Symlink("../rootevil", r + "/sibling");
    Symlink(r + "evil/secret", r + "/sibling_abs");
    Symlink("loop2", r + "/loop1");
    Symlink("loop1", r + "/loop2");
    Symlink(".", r + "/self");
    Symlink("..", r + "/up");
    Symlink("a/..", r + "/dotdot_in");
    Symlink("a/b/c.txt", r + "/file_link");
    Symlink("nonexistent/x", r + "/dangling");
    Symlink("/", r + "/slash");
    Symlink("../../../../../../../../..", r + "/d/e/deep_up");
    Symlink("/proc/self/root", r + "/magic");
  }
};

Fixture& F() {
  static Fixture* f = new Fixture();
  return *f;
}

// Where an fd of `root` points, checked to lie within the root.
std::string Checked(const deepbox::UniqueFd& fd, std::string_view op, std::string_view api_path) {
  std::string where = FdPath(fd.get());
  FUZZ_CHECK(IsWithin(where, F().root_path),
             fmt::format("{}('{}') resolved outside the root: {}", op, api_path, where));
  return where;
}

// One operation on both resolvers: "" for failure, else where it led.
template <typename Op>
void Both(std::string_view name, std::string_view api_path, Op op) {
  std::string a = op(F().kernel);
  std::string b = op(F().walk);
  FUZZ_CHECK(a == b, fmt::format("{}('{}'): openat2 resolver gives '{}', user-space walk '{}'",
                                 name, api_path, a, b));
}

void OnePath(std::string_view line) {
  std::string api_path;
  if (line.starts_with('@')) {
    api_path = F().root_path + std::string(line.substr(1));
  } else if (line.starts_with('%')) {
    api_path = F().base.path() + std::string(line.substr(1));
  } else {
    api_path = std::string(line);
  }
  if (!dfs::ValidatePath(api_path)) return;
  auto rel = F().kernel.ToRelative(api_path);
  auto rel2 = F().walk.ToRelative(api_path);
  FUZZ_CHECK(rel.has_value() == rel2.has_value() && (!rel || *rel == *rel2),
             "ToRelative differs between two roots of the same directory");
  if (!rel) return;
  // A normalized relative path: no "..", ".", empty or leading-slash component.
  FUZZ_CHECK(!rel->starts_with('/'), "ToRelative returned an absolute path");
  for (auto c : deepbox::Split(*rel, '/')) {
    if (rel->empty()) break;
    FUZZ_CHECK(!c.empty() && c != "." && c != "..",
               fmt::format("ToRelative('{}') is not normalized: '{}'", api_path, *rel));
  }
  FUZZ_CHECK(IsWithin(F().kernel.ToAbsolute(*rel), F().root_path), "ToAbsolute left the root");

  Both("Open", api_path, [&](const dfs::Root& root) -> std::string {
    auto fd = root.Open(*rel, O_PATH);
    return fd ? Checked(*fd, "Open", api_path) : "";
  });
  Both("OpenNoSymlinks", api_path, [&](const dfs::Root& root) -> std::string {
    auto fd = root.OpenNoSymlinks(*rel, O_PATH);
    return fd ? Checked(*fd, "OpenNoSymlinks", api_path) : "";
  });
  // With the flags the tree walks of glob and grep use. (With O_PATH alone
  // the user-space walk returns the final symlink itself where openat2 fails
  // with ELOOP: no caller passes that, see fuzz/README.md.)
  for (int flags : {O_RDONLY | O_DIRECTORY, O_RDONLY | O_NONBLOCK | O_NOCTTY}) {
    Both("OpenBeneathNoSymlinks", api_path, [&](const dfs::Root& root) -> std::string {
      auto fd = root.OpenBeneathNoSymlinks(root.fd(), *rel, flags);
      return fd ? Checked(*fd, "OpenBeneathNoSymlinks", api_path) : "";
    });
  }
  Both("Canonicalize", api_path, [&](const dfs::Root& root) -> std::string {
    auto canonical = root.Canonicalize(*rel);
    if (!canonical) return "";
    std::string abs = root.ToAbsolute(*canonical);
    FUZZ_CHECK(IsWithin(abs, F().root_path),
               fmt::format("Canonicalize('{}') left the root: {}", api_path, abs));
    return abs;
  });
  // mkdir -p that follows no symlink (what `sandbox cp` writes through on the
  // host): it must stop at every symlink and file in the way, and what it
  // makes lies at root/rel itself. Removed again, so the tree stays as built.
  Both("MakeDirsNoSymlinks", api_path, [&](const dfs::Root& root) -> std::string {
    std::vector<std::string> made;
    auto fd = root.MakeDirsNoSymlinks(*rel, 0700,
                                      [&made](const std::string& dir) { made.push_back(dir); });
    std::string outcome = fd ? Checked(*fd, "MakeDirsNoSymlinks", api_path) : "";
    for (auto it = made.rbegin(); it != made.rend(); ++it) {
      outcome += "|" + *it;
      const std::string dir = F().root_path + "/" + *it;
      FUZZ_CHECK(::rmdir(dir.c_str()) == 0,
                 fmt::format("MakeDirsNoSymlinks('{}') reported '{}', not made at {}", api_path,
                             *it, dir));
    }
    return outcome;
  });
  if (rel->empty()) return;
  for (bool follow : {false, true}) {
    Both(follow ? "OpenParentFollow" : "OpenParent", api_path,
         [&](const dfs::Root& root) -> std::string {
           auto loc = follow ? root.OpenParentFollow(*rel) : root.OpenParent(*rel);
           if (!loc) return "";
           FUZZ_CHECK(!loc->name.empty() && loc->name != "." && loc->name != ".." &&
                          loc->name.find('/') == std::string::npos,
                      fmt::format("OpenParent('{}') gave the name '{}'", api_path, loc->name));
           return Checked(loc->dir, "OpenParent", api_path) + "/" + loc->name;
         });
  }
  // A narrower root beneath this one stays beneath it.
  auto sub = F().kernel.Sub(*rel);
  if (sub) {
    auto fd = sub->Open("", O_PATH);
    if (fd) Checked(*fd, "Sub", api_path);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  for (auto line : deepbox::Split(in, '\n')) OnePath(line);
  return 0;
}
