// The sandbox's filesystem: a fresh root on a tmpfs, pivot_root into it.
//
// Layout (host mode):
//   /                 tmpfs, read-only after setup
//   /usr /bin /lib /lib64 /lib32 /libx32 /sbin
//                     host dirs, bind read-only + nosuid + nodev (recursive,
//                     via mount_setattr); symlinks such as /bin -> usr/bin are
//                     recreated as symlinks
//   /etc              generated passwd/group/hosts/hostname/nsswitch.conf/
//                     resolv.conf + a few host entries bound read-only
//                     (ld.so.cache, alternatives, ssl, ca-certificates, ...)
//   /workspace        bind of the per-sandbox host dir, rw, nosuid, nodev
//   /tmp              private tmpfs, size-limited, nosuid, nodev
//   /proc             fresh proc of the sandbox's PID namespace; /proc/sys,
//                     sysrq-trigger, irq, bus read-only; kcore, keys,
//                     timer_list, sched_debug masked with /dev/null
//   /dev              tmpfs (read-only after setup) with null, zero, full,
//                     random, urandom, tty bound from the host; devpts new
//                     instance at /dev/pts (+ /dev/ptmx link); /dev/shm tmpfs;
//                     fd, stdin, stdout, stderr symlinks
//   /.deepbox/sandboxd  the daemon binary, read-only
//   /.deepbox/bin     read-only; `python` -> python3 when the sandbox has a
//                     python3 (as Debian's python-is-python3 does, without
//                     touching the host): put it last on PATH
// Rootfs mode: each top-level entry of the given directory (an unpacked OCI
// image) is bound read-only instead of the host dirs; generated passwd, group,
// hosts, hostname and resolv.conf are bound over the image's when it has them.
// Image mode (image_root.h): the image's layers are mounted as overlayfs
// (read-only lower layers; the upper layer on a size-limited tmpfs of the
// sandbox's own) on /.deepbox/image, each of its top-level entries is bound
// (read-write: writes go to the upper layer, nosuid + nodev) into the root,
// and the overlay's and the tmpfs' own mounts are detached; the generated /etc files are bound over
// the image's (over an empty mount point made for a missing one); the
// daemon is bound read-only at `sandboxd_at` (kImageSandboxdPath, where the
// k8s template puts it).
//
// Every step is a MountOp built before the clone; the child executes the list
// with raw syscalls and reports the failing index.
//
// Ids: the child starts as host root (kuid 0) with capabilities only in its new
// user namespace. Host root is not mapped there, so it cannot create inodes in
// its own tmpfs (EOVERFLOW), and once it becomes uid 1000 it can no longer
// traverse root-owned 0700 host dirs (such as the runtime dir). Hence two
// phases: the prologue runs as kuid 0 (make mounts private, mount the root
// tmpfs on the staging dir, chdir into it, open every bind source O_PATH);
// then the child switches to uid 1000 (keeping its userns capabilities), and
// the ops run with paths relative to the new root and bind sources taken from
// /proc/self/fd/N.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "local/child.h"

namespace deepbox::local {

struct MountOp {
  enum class Kind : uint8_t {
    kMkdir,      // dst, mode
    kTouch,      // dst (empty file, mount point for a file bind)
    kMount,      // mount(src, dst, fstype, flags, data)
    kSetAttr,    // mount_setattr(dst, attr_set, recursive), remount fallback
    kSymlink,    // symlink(src, dst)
    kWriteFile,  // dst <- content, mode
    kPivotRoot,  // chdir(dst); pivot_root(".", "."); umount2(".", MNT_DETACH); chdir("/")
    kOverlay,    // overlay on dst, userxattr: lowerdir = sources `lowers` (top first),
                 // upperdir = src, workdir = data (paths relative to the new root)
    kUnmount,    // umount2(dst, MNT_DETACH)
  };
  Kind kind = Kind::kMkdir;
  std::string src;
  std::string dst;
  std::string fstype;
  std::string data;
  std::string content;
  int src_index = -1;       // bind source: index into MountPlan::sources (opened O_PATH)
  int work_index = -1;      // kOverlay
  std::vector<int> lowers;  // kOverlay
  unsigned long flags = 0;
  uint64_t attr_set = 0;
  bool recursive = false;
  bool optional = false;  // ENOENT is not an error (e.g. /proc/irq may not exist)
  mode_t mode = 0755;
  const char* what = "";  // step label for errors: "bind system dirs"
  std::string display;    // the path inside the sandbox
};

struct MountPlan {
  std::string root;                  // host path of the staging dir the root tmpfs goes on
  std::vector<MountOp> prologue;     // as kuid 0, absolute host paths
  std::vector<std::string> sources;  // host paths opened O_PATH at the end of the prologue
  std::vector<MountOp> ops;          // as uid 1000, paths relative to the new root
};

struct MountSpec {
  // An empty host dir; the child mounts the root tmpfs on it in its own mount ns.
  std::filesystem::path staging_dir;
  std::optional<std::filesystem::path> rootfs;  // unpacked image; nullopt = host dirs
  // Image mode (excludes rootfs): the layer dirs, bottom first, and the size
  // of the tmpfs that holds the overlay's upper layer (the sandbox's writes
  // to the image's files; like /tmp, charged to its memory, gone with it).
  std::vector<std::filesystem::path> image_layers;
  uint64_t image_upper_bytes = 256ULL << 20;
  // The daemon with its libraries (sandboxd_bundle.h: inside path -> host
  // file, each bound read-only under kSandboxdBundleMount, and the loader's
  // name for lib/ld.so): for an image root, instead of sandboxd_binary.
  std::vector<std::pair<std::string, std::string>> sandboxd_bundle;
  std::string sandboxd_bundle_loader;
  std::filesystem::path workspace_dir;  // host dir for /workspace
  std::optional<std::filesystem::path> sandboxd_binary;
  std::string hostname = "sandbox";
  uint64_t tmp_bytes = 256ULL << 20;
  uint64_t shm_bytes = 64ULL << 20;
  bool proc_subset_pid = false;  // mount /proc with subset=pid (hides meminfo, etc.)
  // Nameservers for /etc/resolv.conf; empty = no DNS (network none).
  std::vector<std::string> nameservers;
  // /.deepbox/bin/python -> the sandbox's python3 (see above).
  bool python_alias = true;
  uint32_t uid = 1000;
  uint32_t gid = 1000;
  // A CA certificate (PEM) the sandbox must trust: the secrets proxy's
  // (egress_proxy.h). Written to kSandboxCaFile, appended to the system
  // bundle (host's or rootfs's) in kSandboxCaBundle, and that bundle is bound
  // over each of kSystemCaBundles that is a regular file (no symlink on the
  // way), so tools that read the system bundle trust it too.
  std::string extra_ca_pem;
  std::vector<std::string> system_dirs = {"/usr",   "/bin",    "/lib", "/lib64",
                                          "/lib32", "/libx32", "/sbin"};
  std::vector<std::string> etc_entries = {
      "ld.so.cache", "ld.so.conf",      "ld.so.conf.d",         "alternatives",
      "ssl",         "ca-certificates", "ca-certificates.conf", "localtime",
      "timezone",    "os-release",      "debian_version",       "protocols",
      "services",    "mime.types",      "bash.bashrc",          "profile",
      "inputrc",     "gai.conf"};
};

// The sandbox's own command directory (last on PATH; see python_alias).
inline constexpr const char* kSandboxBinDir = "/.deepbox/bin";
inline constexpr const char* kSandboxCaFile = "/.deepbox/ca/sandbox-ca.pem";
inline constexpr const char* kSandboxCaBundle = "/.deepbox/ca/bundle.pem";
// Where distributions keep the system bundle (Debian/Ubuntu/Alpine, Fedora/RHEL, openSUSE).
inline constexpr const char* kSystemCaBundles[] = {"/etc/ssl/certs/ca-certificates.crt",
                                                   "/etc/pki/tls/certs/ca-bundle.crt",
                                                   "/etc/ssl/ca-bundle.pem", "/etc/ssl/cert.pem"};
// The environment that points TLS clients at kSandboxCaBundle (SSL_CERT_FILE,
// REQUESTS_CA_BUNDLE, CURL_CA_BUNDLE, GIT_SSL_CAINFO) and kSandboxCaFile
// (NODE_EXTRA_CA_CERTS: Node adds it to its own store).
std::vector<std::string> SandboxCaEnv();

Result<MountPlan> BuildMountPlan(const MountSpec& spec);

// Child. `source_fds` has room for plan.sources.size() ints. On failure both
// report and exit (never return). Indexes of prologue ops are reported as
// kPrologueIndexBase + i.
inline constexpr int kPrologueIndexBase = 100000;
void ExecuteMountPrologueOrDie(const MountPlan& plan, int* source_fds,
                               const ChildReporter& reporter);
// Reports kMounts before the pivot and kPivotRoot after it.
void ExecuteMountOpsOrDie(const MountPlan& plan, const int* source_fds,
                          const ChildReporter& reporter);

// Parent: "mount(/usr): Permission denied (EACCES) during step 'bind system dirs'".
Error DescribeMountFailure(const MountPlan& plan, int index, ChildCall call, int err);

// The nameservers of the host's /etc/resolv.conf.
std::vector<std::string> HostNameservers(
    const std::filesystem::path& resolv_conf = "/etc/resolv.conf");

}  // namespace deepbox::local
