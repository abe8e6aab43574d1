#include "local/mounts.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <linux/mount.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <set>
#include <sstream>

#include "local/image_root.h"
#include "local/sandboxd_bundle.h"

namespace deepbox::local {
namespace {

namespace fs = std::filesystem;
using Kind = MountOp::Kind;

constexpr uint64_t kRoFlags = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;

class PlanBuilder {
 public:
  explicit PlanBuilder(MountPlan* plan) : plan_(plan) {}

  // Path of `inside` relative to the new root (the child's cwd during the ops).
  static std::string Rel(std::string_view inside) {
    std::string_view r = inside;
    while (!r.empty() && r.front() == '/') r.remove_prefix(1);
    return r.empty() ? "." : std::string(r);
  }
  std::string Host(std::string_view inside) const { return Rel(inside); }
  void Push(MountOp op) { plan_->ops.push_back(std::move(op)); }
  int Source(const std::string& host_path) {
    for (size_t i = 0; i < plan_->sources.size(); ++i) {
      if (plan_->sources[i] == host_path) return static_cast<int>(i);
    }
    plan_->sources.push_back(host_path);
    return static_cast<int>(plan_->sources.size() - 1);
  }
  // A bind of a host path (opened O_PATH in the prologue).
  void BindHost(const std::string& host_path, std::string_view inside, unsigned long flags,
                const char* what, bool optional = false) {
    Mount("", inside, "", flags, "", what, optional);
    plan_->ops.back().src_index = Source(host_path);
  }

  void Mkdir(std::string_view inside, const char* what, mode_t mode = 0755) {
    MountOp op;
    op.kind = Kind::kMkdir;
    op.dst = Host(inside);
    op.mode = mode;
    op.what = what;
    op.display = std::string(inside);
    plan_->ops.push_back(std::move(op));
  }
  void Touch(std::string_view inside, const char* what) {
    MountOp op;
    op.kind = Kind::kTouch;
    op.dst = Host(inside);
    op.mode = 0444;
    op.what = what;
    op.display = std::string(inside);
    plan_->ops.push_back(std::move(op));
  }
  void Mount(std::string src, std::string_view inside, std::string fstype, unsigned long flags,
             std::string data, const char* what, bool optional = false) {
    MountOp op;
    op.kind = Kind::kMount;
    op.src = std::move(src);
    op.dst = Host(inside);
    op.fstype = std::move(fstype);
    op.flags = flags;
    op.data = std::move(data);
    op.what = what;
    op.optional = optional;
    op.display = std::string(inside);
    plan_->ops.push_back(std::move(op));
  }
  void SetAttr(std::string_view inside, uint64_t attrs, bool recursive, const char* what,
               bool optional = false) {
    MountOp op;
    op.kind = Kind::kSetAttr;
    op.dst = Host(inside);
    op.attr_set = attrs;
    op.recursive = recursive;
    op.what = what;
    op.optional = optional;
    op.display = std::string(inside);
    plan_->ops.push_back(std::move(op));
  }
  void Symlink(std::string target, std::string_view inside, const char* what) {
    MountOp op;
    op.kind = Kind::kSymlink;
    op.src = std::move(target);
    op.dst = Host(inside);
    op.what = what;
    op.display = std::string(inside);
    plan_->ops.push_back(std::move(op));
  }
  void WriteFile(std::string_view inside, std::string content, const char* what,
                 mode_t mode = 0644) {
    MountOp op;
    op.kind = Kind::kWriteFile;
    op.dst = Host(inside);
    op.content = std::move(content);
    op.mode = mode;
    op.what = what;
    op.display = std::string(inside);
    plan_->ops.push_back(std::move(op));
  }
  // Bind a host path read-only at `inside`, creating the mount point; symlinks are recreated.
  Status BindReadOnly(const fs::path& host, std::string_view inside, const char* what,
                      bool skip_missing) {
    struct stat st;
    if (lstat(host.c_str(), &st) != 0) {
      if (errno == ENOENT && skip_missing) return {};
      return MakeSyscallError("lstat", errno, host.string());
    }
    if (S_ISLNK(st.st_mode)) {
      std::error_code ec;
      fs::path target = fs::read_symlink(host, ec);
      if (ec) return MakeSyscallError("readlink", ec.value(), host.string());
      Symlink(target.string(), inside, what);
      return {};
    }
    if (S_ISDIR(st.st_mode)) {
      Mkdir(inside, what);
    } else {
      Touch(inside, what);
    }
    BindHost(host.string(), inside, MS_BIND | MS_REC, what);
    SetAttr(inside, kRoFlags, /*recursive=*/true, what);
    return {};
  }

 private:
  MountPlan* plan_;
};

std::string ReadSmallFile(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The sandbox's root tree as the plan sees it on the host: the host's own
// root, a rootfs dir, or an image's merged layers (image_root.h).
class TreeView {
 public:
  explicit TreeView(const MountSpec& spec) : spec_(spec) {
    if (!spec.image_layers.empty()) merged_.emplace(spec.image_layers);
  }
  // The host path showing `inside` (absolute; the last component not
  // followed), nullopt when missing.
  std::optional<fs::path> Locate(std::string_view inside) const {
    if (merged_) return merged_->Find(inside);
    fs::path root = spec_.rootfs ? *spec_.rootfs : fs::path("/");
    fs::path at = root / fs::path(inside).relative_path();
    struct stat st;
    if (lstat(at.c_str(), &st) != 0) return std::nullopt;
    return at;
  }
  const MergedLayers* merged() const { return merged_ ? &*merged_ : nullptr; }

 private:
  const MountSpec& spec_;
  std::optional<MergedLayers> merged_;
};

struct EtcFiles {
  std::vector<std::pair<std::string, std::string>> files;  // name, content
};

EtcFiles GenerateEtc(const MountSpec& spec, const TreeView& tree) {
  std::string shell = access("/bin/bash", X_OK) == 0 ? "/bin/bash" : "/bin/sh";
  if (spec.rootfs) {
    shell = fs::exists(*spec.rootfs / "bin/bash") ? "/bin/bash" : "/bin/sh";
  } else if (tree.merged()) {
    shell = tree.Locate("/bin/bash") ? "/bin/bash" : "/bin/sh";
  }
  EtcFiles etc;
  etc.files.emplace_back("passwd",
                         fmt::format("root:x:0:0:root:/root:/usr/sbin/nologin\n"
                                     "sandbox:x:{}:{}:sandbox:/workspace:{}\n"
                                     "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
                                     spec.uid, spec.gid, shell));
  etc.files.emplace_back("group",
                         fmt::format("root:x:0:\nsandbox:x:{}:\nnogroup:x:65534:\n", spec.gid));
  etc.files.emplace_back("hostname", spec.hostname + "\n");
  etc.files.emplace_back("hosts", fmt::format("127.0.0.1\tlocalhost\n::1\tlocalhost "
                                              "ip6-localhost ip6-loopback\n127.0.1.1\t{}\n",
                                              spec.hostname));
  etc.files.emplace_back("nsswitch.conf",
                         "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\n"
                         "networks: files\nprotocols: files\nservices: files\n");
  std::string resolv = "# generated by deepbox\n";
  for (const auto& ns : spec.nameservers) resolv += "nameserver " + ns + "\n";
  etc.files.emplace_back("resolv.conf", resolv);
  return etc;
}

void AddProc(PlanBuilder& b, const MountSpec& spec) {
  const char* what = "mount /proc";
  b.Mkdir("/proc", what, 0555);
  b.Mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC,
          spec.proc_subset_pid ? "subset=pid" : "", what);
  if (spec.proc_subset_pid) return;
  const char* mask = "mask /proc";
  for (const char* dir : {"/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus"}) {
    b.Mount(b.Host(dir), dir, "", MS_BIND | MS_REC, "", mask, /*optional=*/true);
    b.SetAttr(dir, kRoFlags | MOUNT_ATTR_NOEXEC, true, mask, /*optional=*/true);
  }
  for (const char* file : {"/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/sched_debug",
                           "/proc/latency_stats"}) {
    b.BindHost("/dev/null", file, MS_BIND, mask, /*optional=*/true);
  }
}

void AddDev(PlanBuilder& b, const MountSpec& spec) {
  const char* what = "build /dev";
  b.Mkdir("/dev", what);
  b.Mount("tmpfs", "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=64k,nr_inodes=64", what);
  for (const char* node : {"null", "zero", "full", "random", "urandom", "tty"}) {
    std::string inside = std::string("/dev/") + node;
    b.Touch(inside, what);
    b.BindHost(inside, inside, MS_BIND, what);  // the host's /dev/<node>
    b.SetAttr(inside, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC, false, what);
  }
  b.Mkdir("/dev/pts", what);
  b.Mount("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
          "newinstance,ptmxmode=0666,mode=0620", what);
  b.Symlink("pts/ptmx", "/dev/ptmx", what);
  b.Mkdir("/dev/shm", what, 01777);
  b.Mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
          fmt::format("mode=1777,size={}", spec.shm_bytes), what);
  b.Symlink("/proc/self/fd", "/dev/fd", what);
  b.Symlink("/proc/self/fd/0", "/dev/stdin", what);
  b.Symlink("/proc/self/fd/1", "/dev/stdout", what);
  b.Symlink("/proc/self/fd/2", "/dev/stderr", what);
  b.SetAttr("/dev", MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC, false, what);
}

// Where the sandbox's python3 is, as a path inside it ("" if none): the
// first of the usual PATH dirs that has one (a symlink counts; it resolves
// inside the sandbox).
std::string SandboxPython3(const TreeView& tree) {
  for (const char* dir : {"/usr/local/bin", "/usr/bin", "/bin"}) {
    std::string inside = std::string(dir) + "/python3";
    auto host = tree.Locate(inside);
    struct stat st;
    if (host && lstat(host->c_str(), &st) == 0 && !S_ISDIR(st.st_mode)) return inside;
  }
  return "";
}

// Whether `rel` (absolute, inside the sandbox) is a regular file of the
// tree with no symlink on the way: only then may a bind mount target it
// before pivot_root (a symlink would resolve against the host's root).
bool PlainFileInTree(const TreeView& tree, std::string_view rel) {
  fs::path prefix = "/";
  fs::path inside(rel);
  for (auto it = inside.begin(); it != inside.end(); ++it) {
    if (*it == "/") continue;
    prefix /= *it;
    auto at = tree.Locate(prefix.string());
    struct stat st;
    if (!at || lstat(at->c_str(), &st) != 0) return false;
    bool last = std::next(it) == inside.end();
    if (last ? !S_ISREG(st.st_mode) : !S_ISDIR(st.st_mode)) return false;
  }
  return true;
}

void AddSandboxCa(PlanBuilder& b, const MountSpec& spec, const TreeView& tree) {
  const char* what = "install the sandbox CA";
  b.Mkdir("/.deepbox/ca", what);
  std::string pem = spec.extra_ca_pem;
  if (!pem.empty() && pem.back() != '\n') pem += '\n';
  b.WriteFile(kSandboxCaFile, pem, what);
  std::string bundle;
  std::vector<std::string> targets;
  for (const char* path : kSystemCaBundles) {
    if (!PlainFileInTree(tree, path)) continue;
    targets.push_back(path);
    if (!bundle.empty()) continue;
    // The root tmpfs is small: a bundle over 1 MiB is not copied (the
    // environment still points at ours).
    auto host = tree.Locate(path);
    std::error_code ec;
    if (!host || fs::file_size(*host, ec) > (1u << 20) || ec) continue;
    bundle = ReadSmallFile(*host);
    if (!bundle.empty() && bundle.back() != '\n') bundle += '\n';
  }
  b.WriteFile(kSandboxCaBundle, bundle + pem, what);
  for (const auto& target : targets) {
    b.Mount(b.Host(kSandboxCaBundle), target, "", MS_BIND, "", what);
    b.SetAttr(target, kRoFlags, false, what);
  }
}

// The overlay's mount point while its top-level entries are bound, and its
// upper layer's tmpfs (both detached then).
constexpr const char* kImageMountPoint = "/.deepbox/image";
constexpr const char* kImageUpperMountPoint = "/.deepbox/image-rw";

// Image mode (see mounts.h and image_root.h).
Status AddImageRoot(PlanBuilder& b, const MountSpec& spec, const TreeView& tree,
                    const EtcFiles& etc) {
  auto top = tree.merged()->TopLevel();
  if (!top) return tl::unexpected(top.error());
  const char* what =
      "mount the image's layers (overlayfs with userxattr in the sandbox's user namespace: "
      "Linux 5.11+, see `deepbox doctor`)";
  b.Mkdir("/.deepbox", "create dirs");
  // The upper layer: a tmpfs of the sandbox's own (its size bounds what the
  // sandbox can write into the image's files).
  const char* rw = "mount the image's writable layer";
  b.Mkdir(kImageUpperMountPoint, rw, 0700);
  b.Mount(
      "tmpfs", kImageUpperMountPoint, "tmpfs", MS_NOSUID | MS_NODEV,
      fmt::format("mode=0700,size={},uid={},gid={}", spec.image_upper_bytes, spec.uid, spec.gid),
      rw);
  b.Mkdir(std::string(kImageUpperMountPoint) + "/upper", rw);
  b.Mkdir(std::string(kImageUpperMountPoint) + "/work", rw, 0700);
  b.Mkdir(kImageMountPoint, what);
  {
    MountOp op;
    op.kind = Kind::kOverlay;
    op.dst = PlanBuilder::Rel(kImageMountPoint);
    op.flags = MS_NOSUID | MS_NODEV;
    op.src = PlanBuilder::Rel(std::string(kImageUpperMountPoint) + "/upper");
    op.data = PlanBuilder::Rel(std::string(kImageUpperMountPoint) + "/work");
    for (const auto& layer : tree.merged()->top_first()) {
      op.lowers.push_back(b.Source(layer.string()));
    }
    op.what = what;
    op.display = kImageMountPoint;
    b.Push(std::move(op));
  }
  // What the sandbox gets from us, not from the image.
  std::set<std::string> reserved = {"proc", "dev", "tmp", "workspace", ".deepbox", "sys"};
  if (!spec.sandboxd_bundle.empty()) {
    reserved.insert(fs::path(kSandboxdBundleMount).filename().string());
  }
  const char* bind = "bind the image's root";
  bool has_etc = false;
  for (const auto& entry : *top) {
    if (reserved.count(entry.name) != 0) continue;
    const std::string inside = "/" + entry.name;
    const std::string from = PlanBuilder::Rel(std::string(kImageMountPoint) + inside);
    if (entry.type == S_IFLNK) {
      std::error_code ec;
      fs::path target = fs::read_symlink(entry.host, ec);
      if (ec) return MakeSyscallError("readlink", ec.value(), entry.host.string());
      b.Symlink(target.string(), inside, bind);
      continue;
    }
    if (entry.type == S_IFDIR) {
      b.Mkdir(inside, bind);
      has_etc = has_etc || entry.name == "etc";
    } else if (entry.type == S_IFREG) {
      b.Touch(inside, bind);
    } else {
      continue;  // the layers hold no devices, fifos or sockets (oci/layer_extract.h)
    }
    b.Mount(from, inside, "", MS_BIND | MS_REC, "", bind);
    b.SetAttr(inside, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, /*recursive=*/true, bind);
  }
  for (const char* mount_point : {kImageMountPoint, kImageUpperMountPoint}) {
    MountOp op;
    op.kind = Kind::kUnmount;
    op.dst = PlanBuilder::Rel(mount_point);
    op.what = what;
    op.display = mount_point;
    b.Push(std::move(op));
  }
  if (!has_etc) {
    b.Mkdir("/etc", "generate /etc");
    for (const auto& [name, content] : etc.files) {
      b.WriteFile("/etc/" + name, content, "generate /etc");
    }
    return {};
  }
  // Generated files bound over the image's; a missing one gets an empty
  // mount point (in the upper layer). ld.so.preload is emptied: the daemon
  // runs on its own loader and libraries (sandboxd_bundle.h), and the image
  // must not put a library into it (nor, through nsswitch.conf, an NSS
  // module). A symlink there cannot be bound over safely (it would resolve
  // on the host before pivot_root): the image is refused.
  std::vector<std::pair<std::string, std::string>> files = etc.files;
  files.emplace_back("ld.so.preload", "");
  b.Mkdir("/.deepbox/etc", "generate /etc");
  for (const auto& [name, content] : files) {
    const std::string target = "/etc/" + name;
    auto host = tree.Locate(target);
    struct stat st;
    if (!host) {
      b.Touch(target, "bind generated /etc");
    } else if (lstat(host->c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
      return MakeError(ErrorCode::kInvalidArgument,
                       fmt::format("the image's {} is not a regular file: deepbox replaces it "
                                   "in every sandbox and cannot do so through a symlink",
                                   target));
    }
    b.WriteFile("/.deepbox/etc/" + name, content, "generate /etc");
    b.Mount(b.Host("/.deepbox/etc/" + name), target, "", MS_BIND, "", "bind generated /etc");
    b.SetAttr(target, kRoFlags, false, "bind generated /etc");
  }
  return {};
}

}  // namespace

std::vector<std::string> SandboxCaEnv() {
  std::string bundle = kSandboxCaBundle;
  return {"SSL_CERT_FILE=" + bundle, "REQUESTS_CA_BUNDLE=" + bundle, "CURL_CA_BUNDLE=" + bundle,
          "GIT_SSL_CAINFO=" + bundle, std::string("NODE_EXTRA_CA_CERTS=") + kSandboxCaFile};
}

Result<MountPlan> BuildMountPlan(const MountSpec& spec) {
  if (spec.staging_dir.empty() || !spec.staging_dir.is_absolute()) {
    return MakeError(ErrorCode::kInvalidArgument, "staging_dir must be an absolute path");
  }
  if (spec.workspace_dir.empty() || !spec.workspace_dir.is_absolute()) {
    return MakeError(ErrorCode::kInvalidArgument, "workspace_dir must be an absolute path");
  }
  if (!spec.image_layers.empty() && spec.rootfs) {
    return MakeError(ErrorCode::kInvalidArgument, "a sandbox has an image or a rootfs, not both");
  }
  MountPlan plan;
  plan.root = spec.staging_dir.lexically_normal().string();
  while (plan.root.size() > 1 && plan.root.back() == '/') plan.root.pop_back();
  PlanBuilder b(&plan);

  {
    MountOp op;
    op.kind = Kind::kMount;
    op.src = "none";
    op.dst = "/";
    op.flags = MS_REC | MS_PRIVATE;
    op.what = "make mounts private";
    op.display = "/";
    plan.prologue.push_back(std::move(op));
  }
  {
    MountOp op;
    op.kind = Kind::kMount;
    op.src = "tmpfs";
    op.dst = plan.root;
    op.fstype = "tmpfs";
    op.flags = MS_NOSUID | MS_NODEV;
    // Owned by the sandbox id so the ops (run as uid 1000) can create the mount points.
    op.data = fmt::format("mode=0755,size=4m,nr_inodes=4096,uid={},gid={}", spec.uid, spec.gid);
    op.what = "mount root tmpfs";
    op.display = plan.root;
    plan.prologue.push_back(std::move(op));
  }

  const TreeView tree(spec);
  EtcFiles etc = GenerateEtc(spec, tree);
  if (tree.merged()) {
    if (auto st = AddImageRoot(b, spec, tree, etc); !st) return tl::unexpected(st.error());
  } else if (!spec.rootfs) {
    for (const auto& dir : spec.system_dirs) {
      if (auto st = b.BindReadOnly(dir, dir, "bind system dirs", /*skip_missing=*/true); !st) {
        return tl::unexpected(st.error());
      }
    }
    b.Mkdir("/etc", "generate /etc");
    for (const auto& [name, content] : etc.files) {
      b.WriteFile("/etc/" + name, content, "generate /etc");
    }
    for (const auto& name : spec.etc_entries) {
      if (auto st = b.BindReadOnly(fs::path("/etc") / name, "/etc/" + name, "bind /etc entries",
                                   /*skip_missing=*/true);
          !st) {
        return tl::unexpected(st.error());
      }
    }
    b.Mkdir("/var", "create dirs");
    b.Symlink("/tmp", "/var/tmp", "create dirs");
    b.Mkdir("/run", "create dirs");
    b.Mkdir("/home", "create dirs");
  } else {
    const fs::path& rootfs = *spec.rootfs;
    std::error_code ec;
    if (!fs::is_directory(rootfs, ec)) {
      return MakeError(ErrorCode::kNotFound,
                       fmt::format("rootfs '{}' is not a directory", rootfs.string()));
    }
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(rootfs, ec)) {
      names.push_back(entry.path().filename().string());
    }
    if (ec) return MakeSyscallError("opendir", ec.value(), rootfs.string());
    std::sort(names.begin(), names.end());
    for (const auto& name : names) {
      if (name == "proc" || name == "dev" || name == "tmp" || name == "workspace" ||
          name == ".deepbox" || name == "sys") {
        continue;
      }
      if (auto st = b.BindReadOnly(rootfs / name, "/" + name, "bind rootfs", false); !st) {
        return tl::unexpected(st.error());
      }
    }
    struct stat st;
    bool has_etc = lstat((rootfs / "etc").c_str(), &st) == 0 && S_ISDIR(st.st_mode);
    if (!has_etc) b.Mkdir("/etc", "generate /etc");
    b.Mkdir("/.deepbox", "create dirs");
    b.Mkdir("/.deepbox/etc", "generate /etc");
    for (const auto& [name, content] : etc.files) {
      if (!has_etc) {
        b.WriteFile("/etc/" + name, content, "generate /etc");
        continue;
      }
      b.WriteFile("/.deepbox/etc/" + name, content, "generate /etc");
      fs::path target = rootfs / "etc" / name;
      if (lstat(target.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
        b.Mount(b.Host("/.deepbox/etc/" + name), "/etc/" + name, "", MS_BIND, "",
                "bind generated /etc");
        b.SetAttr("/etc/" + name, kRoFlags, false, "bind generated /etc");
      }
    }
  }

  const char* ws = "mount /workspace";
  b.Mkdir("/workspace", ws);
  b.BindHost(spec.workspace_dir.string(), "/workspace", MS_BIND, ws);
  b.SetAttr("/workspace", MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, false, ws);

  const char* tmp = "mount /tmp";
  b.Mkdir("/tmp", tmp, 01777);
  b.Mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV,
          fmt::format("mode=1777,size={}", spec.tmp_bytes), tmp);

  AddProc(b, spec);
  AddDev(b, spec);

  if (spec.sandboxd_binary && !spec.rootfs && !tree.merged()) b.Mkdir("/.deepbox", "create dirs");
  bool have_deepbox_dir = spec.rootfs || spec.sandboxd_binary || tree.merged();
  if (std::string python3 = spec.python_alias ? SandboxPython3(tree) : ""; !python3.empty()) {
    // On the root tmpfs, read-only once the root is remounted below.
    const char* what = "create /.deepbox/bin";
    if (!have_deepbox_dir) b.Mkdir("/.deepbox", what);
    have_deepbox_dir = true;
    b.Mkdir(kSandboxBinDir, what);
    b.Symlink(python3, std::string(kSandboxBinDir) + "/python", what);
  }
  if (spec.sandboxd_binary) {
    const char* what = "bind sandboxd";
    b.Touch("/.deepbox/sandboxd", what);
    b.BindHost(spec.sandboxd_binary->string(), "/.deepbox/sandboxd", MS_BIND, what);
    b.SetAttr("/.deepbox/sandboxd", kRoFlags, false, what);
  }
  if (!spec.sandboxd_bundle.empty()) {
    // On the root tmpfs (read-only once it is remounted below).
    const char* what = "bind the sandboxd bundle";
    const std::string mount = kSandboxdBundleMount;
    b.Mkdir(mount, what);
    b.Mkdir(mount + "/bin", what);
    b.Mkdir(mount + "/lib", what);
    for (const auto& [inside, host] : spec.sandboxd_bundle) {
      b.Touch(inside, what);
      b.BindHost(host, inside, MS_BIND, what);
      b.SetAttr(inside, kRoFlags, false, what);
    }
    if (!spec.sandboxd_bundle_loader.empty() && spec.sandboxd_bundle_loader != "ld.so") {
      b.Symlink(spec.sandboxd_bundle_loader, mount + "/lib/ld.so", what);
    }
  }
  if (!spec.extra_ca_pem.empty()) {
    if (!have_deepbox_dir) b.Mkdir("/.deepbox", "install the sandbox CA");
    AddSandboxCa(b, spec, tree);
  }

  {
    MountOp op;
    op.kind = Kind::kPivotRoot;
    op.dst = ".";
    op.what = "pivot_root";
    op.display = "/";
    plan.ops.push_back(std::move(op));
  }
  {
    MountOp op;
    op.kind = Kind::kSetAttr;
    op.dst = "/";
    op.attr_set = kRoFlags;
    op.what = "remount root read-only";
    op.display = "/";
    plan.ops.push_back(std::move(op));
  }
  return plan;
}

namespace {

// MS_* equivalents of the mount's current per-mount flags (a remount must keep locked ones).
unsigned long CurrentMountFlags(const char* path) {
  struct statfs sfs;
  if (syscall(SYS_statfs, path, &sfs) != 0) return 0;
  unsigned long flags = 0;
  if (sfs.f_flags & ST_NOSUID) flags |= MS_NOSUID;
  if (sfs.f_flags & ST_NODEV) flags |= MS_NODEV;
  if (sfs.f_flags & ST_NOEXEC) flags |= MS_NOEXEC;
  if (sfs.f_flags & ST_NOATIME) flags |= MS_NOATIME;
  if (sfs.f_flags & ST_NODIRATIME) flags |= MS_NODIRATIME;
  if (sfs.f_flags & ST_RELATIME) flags |= MS_RELATIME;
  if (sfs.f_flags & ST_RDONLY) flags |= MS_RDONLY;
  return flags;
}

int SetAttrRaw(const MountOp& op, ChildCall* call) {
  struct mount_attr attr = {};
  attr.attr_set = op.attr_set;
  *call = ChildCall::kMountSetattr;
  unsigned int at = op.recursive ? AT_RECURSIVE : 0;
  if (syscall(SYS_mount_setattr, AT_FDCWD, op.dst.c_str(), at, &attr, sizeof(attr)) == 0) {
    return 0;
  }
  if (errno != ENOSYS) return errno;
  // Pre-5.12 kernels: remount the top mount only, keeping its (possibly locked) flags.
  *call = ChildCall::kMount;
  unsigned long flags = CurrentMountFlags(op.dst.c_str()) | MS_REMOUNT | MS_BIND;
  if (op.attr_set & MOUNT_ATTR_RDONLY) flags |= MS_RDONLY;
  if (op.attr_set & MOUNT_ATTR_NOSUID) flags |= MS_NOSUID;
  if (op.attr_set & MOUNT_ATTR_NODEV) flags |= MS_NODEV;
  if (op.attr_set & MOUNT_ATTR_NOEXEC) flags |= MS_NOEXEC;
  if (mount(nullptr, op.dst.c_str(), nullptr, flags, nullptr) != 0) return errno;
  return 0;
}

// "/proc/self/fd/<fd>" into buf (async-signal-safe).
const char* FdPath(int fd, char* buf, size_t size) {
  static const char kPrefix[] = "/proc/self/fd/";
  size_t n = 0;
  for (; kPrefix[n] != '\0' && n + 1 < size; ++n) buf[n] = kPrefix[n];
  char digits[16];
  int d = 0;
  unsigned v = static_cast<unsigned>(fd);
  do {
    digits[d++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0 && d < 16);
  while (d > 0 && n + 1 < size) buf[n++] = digits[--d];
  buf[n] = '\0';
  return buf;
}

int RunOp(const MountOp& op, const int* source_fds, ChildCall* call) {
  switch (op.kind) {
    case Kind::kMkdir:
      *call = ChildCall::kMkdir;
      if (mkdir(op.dst.c_str(), op.mode) != 0 && errno != EEXIST) return errno;
      if (op.mode & 07000) {
        *call = ChildCall::kChmod;
        if (chmod(op.dst.c_str(), op.mode) != 0) return errno;
      }
      return 0;
    case Kind::kTouch: {
      *call = ChildCall::kOpen;
      int fd = open(op.dst.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, op.mode);
      if (fd < 0) return errno;
      close(fd);
      return 0;
    }
    case Kind::kMount: {
      *call = ChildCall::kMount;
      char fdpath[40];
      const char* src = op.src.empty() ? nullptr : op.src.c_str();
      if (op.src_index >= 0) src = FdPath(source_fds[op.src_index], fdpath, sizeof(fdpath));
      if (mount(src, op.dst.c_str(), op.fstype.empty() ? nullptr : op.fstype.c_str(), op.flags,
                op.data.empty() ? nullptr : op.data.c_str()) != 0) {
        return errno;
      }
      return 0;
    }
    case Kind::kSetAttr:
      return SetAttrRaw(op, call);
    case Kind::kSymlink:
      *call = ChildCall::kSymlink;
      if (symlink(op.src.c_str(), op.dst.c_str()) != 0) return errno;
      return 0;
    case Kind::kWriteFile: {
      *call = ChildCall::kOpen;
      int fd = open(op.dst.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, op.mode);
      if (fd < 0) return errno;
      *call = ChildCall::kWrite;
      const char* p = op.content.data();
      size_t left = op.content.size();
      while (left > 0) {
        ssize_t n = write(fd, p, left);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
          int err = errno;
          close(fd);
          return err;
        }
        p += n;
        left -= static_cast<size_t>(n);
      }
      close(fd);
      return 0;
    }
    case Kind::kOverlay: {
      // lowerdir=/proc/self/fd/N:...: the layers' host paths stay unnamed.
      char data[4096];
      char fdpath[40];
      size_t n = 0;
      bool overflow = false;
      auto put = [&](const char* text) {
        for (; *text != '\0'; ++text) {
          if (n + 1 >= sizeof(data)) {
            overflow = true;
            return;
          }
          data[n++] = *text;
        }
      };
      put("userxattr,lowerdir=");
      for (size_t i = 0; i < op.lowers.size(); ++i) {
        if (i != 0) put(":");
        put(FdPath(source_fds[op.lowers[i]], fdpath, sizeof(fdpath)));
      }
      put(",upperdir=");
      put(op.src.c_str());
      put(",workdir=");
      put(op.data.c_str());
      data[n] = '\0';
      *call = ChildCall::kMount;
      if (overflow) return E2BIG;
      if (mount("overlay", op.dst.c_str(), "overlay", op.flags, data) != 0) return errno;
      return 0;
    }
    case Kind::kUnmount:
      *call = ChildCall::kUmount2;
      if (umount2(op.dst.c_str(), MNT_DETACH) != 0) return errno;
      return 0;
    case Kind::kPivotRoot:
      *call = ChildCall::kChdir;
      if (chdir(op.dst.c_str()) != 0) return errno;
      *call = ChildCall::kPivotRoot;
      if (syscall(SYS_pivot_root, ".", ".") != 0) return errno;
      *call = ChildCall::kUmount2;
      if (umount2(".", MNT_DETACH) != 0) return errno;
      *call = ChildCall::kChdir;
      if (chdir("/") != 0) return errno;
      return 0;
  }
  return EINVAL;
}

}  // namespace

void ExecuteMountPrologueOrDie(const MountPlan& plan, int* source_fds,
                               const ChildReporter& reporter) {
  for (size_t i = 0; i < plan.prologue.size(); ++i) {
    ChildCall call = ChildCall::kNone;
    int err = RunOp(plan.prologue[i], source_fds, &call);
    if (err != 0) {
      reporter.Fail(SetupStep::kMounts, call, err, kPrologueIndexBase + static_cast<int>(i));
    }
  }
  if (chdir(plan.root.c_str()) != 0) {
    reporter.Fail(SetupStep::kMounts, ChildCall::kChdir, errno,
                  kPrologueIndexBase + static_cast<int>(plan.prologue.size()) - 1);
  }
  for (size_t i = 0; i < plan.sources.size(); ++i) {
    source_fds[i] = open(plan.sources[i].c_str(), O_PATH | O_CLOEXEC);
    if (source_fds[i] < 0) {
      // Index -2 - i marks a source (see DescribeMountFailure).
      reporter.Fail(SetupStep::kMounts, ChildCall::kOpen, errno, -2 - static_cast<int>(i));
    }
  }
}

void ExecuteMountOpsOrDie(const MountPlan& plan, const int* source_fds,
                          const ChildReporter& reporter) {
  SetupStep step = SetupStep::kMounts;
  for (size_t i = 0; i < plan.ops.size(); ++i) {
    const MountOp& op = plan.ops[i];
    if (op.kind == Kind::kPivotRoot) {
      reporter.Done(SetupStep::kMounts);
      step = SetupStep::kPivotRoot;
    }
    ChildCall call = ChildCall::kNone;
    int err = RunOp(op, source_fds, &call);
    if (err == ENOENT && op.optional) continue;
    if (err != 0) reporter.Fail(step, call, err, static_cast<int>(i));
  }
  for (size_t i = 0; i < plan.sources.size(); ++i) close(source_fds[i]);
  reporter.Done(SetupStep::kPivotRoot);
}

Error DescribeMountFailure(const MountPlan& plan, int index, ChildCall call, int err) {
  if (index <= -2 && static_cast<size_t>(-2 - index) < plan.sources.size()) {
    Error e = SyscallError(ChildCallName(call), err, plan.sources[static_cast<size_t>(-2 - index)]);
    e.message += " during step 'open mount sources'";
    return e;
  }
  const MountOp* found = nullptr;
  if (index >= kPrologueIndexBase &&
      static_cast<size_t>(index - kPrologueIndexBase) < plan.prologue.size()) {
    found = &plan.prologue[static_cast<size_t>(index - kPrologueIndexBase)];
  } else if (index >= 0 && static_cast<size_t>(index) < plan.ops.size()) {
    found = &plan.ops[static_cast<size_t>(index)];
  }
  if (found == nullptr) return SyscallError(ChildCallName(call), err);
  const MountOp& op = *found;
  Error e = SyscallError(ChildCallName(call), err, op.display);
  e.message += fmt::format(" during step '{}'", op.what);
  return e;
}

std::vector<std::string> HostNameservers(const fs::path& resolv_conf) {
  std::vector<std::string> out;
  std::istringstream in(ReadSmallFile(resolv_conf));
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string key, value;
    if (ls >> key >> value && key == "nameserver") out.push_back(value);
  }
  return out;
}

}  // namespace deepbox::local
