#include "local/launcher.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "local/capabilities.h"
#include "local/cgroups.h"
#include "local/testing/sandbox_fixture.h"

namespace deepbox::local {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::SandboxFixture;

class LauncherTest : public SandboxFixture {};

#define RUN_OK(script)                                                \
  ({                                                                  \
    auto _r = Run(script);                                            \
    EXPECT_TRUE(_r.has_value()) << (_r ? "" : _r.error().ToString()); \
    _r ? *_r : testing::RunResult{};                                  \
  })

TEST_F(LauncherTest, RunsAsUid1000) {
  auto r = RUN_OK("id -u; id -g; id -G");
  EXPECT_TRUE(r.status.success()) << r.output;
  EXPECT_EQ(r.output, "1000\n1000\n1000\n");
}

TEST_F(LauncherTest, NoCapabilitiesNoNewPrivsSeccomp) {
  auto r = RUN_OK("cat /proc/self/status");
  ASSERT_TRUE(r.status.success()) << r.output;
  auto st = ParseProcStatus(r.output);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->cap_eff, 0u);
  EXPECT_EQ(st->cap_prm, 0u);
  EXPECT_EQ(st->cap_inh, 0u);
  EXPECT_EQ(st->cap_bnd, 0u);
  EXPECT_EQ(st->cap_amb, 0u);
  EXPECT_EQ(st->no_new_privs, 1);
  EXPECT_EQ(st->seccomp, 2);
  EXPECT_EQ(st->uid, 1000u);
}

TEST_F(LauncherTest, SystemDirsAreReadOnly) {
  auto r = RUN_OK(
      "touch /usr/x 2>&1; touch /etc/x 2>&1; touch /x 2>&1; "
      "echo hi > /.deepbox/x 2>&1; echo done");
  EXPECT_THAT(r.output, HasSubstr("/usr/x"));
  EXPECT_THAT(r.output, HasSubstr("Read-only file system"));
  EXPECT_THAT(r.output, HasSubstr("done"));
  EXPECT_FALSE(std::filesystem::exists("/usr/x"));
}

TEST_F(LauncherTest, PythonIsPython3) {
  if (access("/usr/bin/python3", X_OK) != 0) GTEST_SKIP() << "python3 not installed";
  const bool host_has_python = access("/usr/bin/python", F_OK) == 0;
  // The supervisor's PATH ends with /.deepbox/bin (mounts.h).
  spec_.env = {"PATH=/usr/local/bin:/usr/bin:/bin:/.deepbox/bin", "HOME=/workspace",
               "LANG=C.UTF-8"};
  auto r = RUN_OK(
      "python -c 'import sys; print(sys.version_info[0])' 2>&1; readlink /.deepbox/bin/python; "
      "ln -s /bin/sh /.deepbox/bin/x 2>&1 || echo read-only");
  EXPECT_TRUE(r.status.success()) << r.output;
  EXPECT_THAT(r.output, HasSubstr("3\n"));
  EXPECT_THAT(r.output, HasSubstr("/python3\n"));
  EXPECT_THAT(r.output, HasSubstr("read-only"));
  // The host is untouched.
  EXPECT_EQ(access("/usr/bin/python", F_OK) == 0, host_has_python);
}

TEST_F(LauncherTest, WorkspaceIsWritableAndBackedByHostDir) {
  auto r = RUN_OK("echo hello > /workspace/out.txt && pwd && stat -c %u /workspace/out.txt");
  ASSERT_TRUE(r.status.success()) << r.output;
  EXPECT_EQ(r.output, "/workspace\n1000\n");
  std::ifstream in(workspace_ / "out.txt");
  std::string content;
  std::getline(in, content);
  EXPECT_EQ(content, "hello");
  struct stat st;
  ASSERT_EQ(stat((workspace_ / "out.txt").c_str(), &st), 0);
  if (geteuid() == 0) {
    EXPECT_EQ(st.st_uid, kDefaultRootHostId);
  }
}

TEST_F(LauncherTest, TmpIsPrivateAndWritable) {
  auto r = RUN_OK(
      "echo x > /tmp/f && cat /tmp/f && ls -a /tmp | wc -l && "
      "df -k /tmp | tail -1 | awk '{print $2}'");
  ASSERT_TRUE(r.status.success()) << r.output;
  EXPECT_THAT(r.output, HasSubstr("x\n3\n"));
  EXPECT_THAT(r.output, HasSubstr("262144"));  // 256 MiB default
}

TEST_F(LauncherTest, OnlyOwnProcessesVisible) {
  auto r = RUN_OK("ls /proc | grep -E '^[0-9]+$' | sort -n | tr '\\n' ' '; echo; echo $$");
  ASSERT_TRUE(r.status.success()) << r.output;
  // sh is pid 1; ls and grep etc. are its children: all small pids.
  std::istringstream in(r.output);
  std::string line;
  std::getline(in, line);
  std::istringstream pids(line);
  int pid, count = 0;
  while (pids >> pid) {
    EXPECT_LT(pid, 20) << r.output;
    ++count;
  }
  EXPECT_GE(count, 1);
  EXPECT_LE(count, 6) << r.output;
  std::getline(in, line);
  EXPECT_EQ(line, "1");
}

TEST_F(LauncherTest, HostnameIsSet) {
  spec_.hostname = "box-under-test";
  auto r = RUN_OK("hostname; cat /etc/hostname; grep box-under-test /etc/hosts | wc -l");
  EXPECT_EQ(r.output, "box-under-test\nbox-under-test\n1\n");
}

TEST_F(LauncherTest, NoInheritedFds) {
  // An fd without CLOEXEC in the launcher must not reach the sandbox.
  int leak = open("/etc/hostname", O_RDONLY);  // no O_CLOEXEC on purpose
  ASSERT_GE(leak, 0);
  auto r = RUN_OK("ls /proc/self/fd | tr '\\n' ' '");
  close(leak);
  // 0 1 2 and the fd of ls's own directory listing.
  EXPECT_EQ(r.output, "0 1 2 3 ");
}

TEST_F(LauncherTest, EnvironmentIsClean) {
  setenv("DEEPBOX_TEST_SECRET", "hunter2", 1);
  spec_.env.push_back("VISIBLE=yes");
  auto r = RUN_OK("env | sort");
  unsetenv("DEEPBOX_TEST_SECRET");
  EXPECT_THAT(r.output, Not(HasSubstr("hunter2")));
  EXPECT_THAT(r.output, HasSubstr("VISIBLE=yes"));
  EXPECT_THAT(r.output, Not(HasSubstr("DEEPBOX_TEST_SECRET")));
}

TEST_F(LauncherTest, UnshareUserFails) {
  auto r = RUN_OK("unshare -U true 2>&1; echo rc=$?; unshare -r true 2>&1; echo rc=$?");
  EXPECT_THAT(r.output, HasSubstr("rc=1"));
  EXPECT_THAT(r.output, Not(HasSubstr("rc=0")));
}

TEST_F(LauncherTest, MountFails) {
  auto r = RUN_OK("mount -t tmpfs none /tmp 2>&1; echo rc=$?; umount /proc 2>&1; echo rc=$?");
  EXPECT_THAT(r.output, Not(HasSubstr("rc=0")));
}

TEST_F(LauncherTest, PtraceFails) {
  // /proc/self/mem of the parent: write access needs ptrace rights; plus ptrace(2) is EPERM.
  auto r = RUN_OK(
      "sleep 5 & P=$!; "
      "if command -v gdb >/dev/null; then gdb -p $P -batch 2>&1 | head -1; fi; "
      "cat /proc/$P/environ >/dev/null 2>&1 && echo environ-readable; "
      "(command -v strace >/dev/null && strace -p $P -o /dev/null & sleep 0.2; kill $! "
      "2>/dev/null);"
      "kill $P; echo end");
  EXPECT_THAT(r.output, HasSubstr("end"));
}

TEST_F(LauncherTest, LoopbackOnlyInNoneMode) {
  auto r = RUN_OK(
      "cat /proc/net/dev | awk -F: 'NR>2{print $1}' | tr -d ' '; "
      "grep -c . /proc/net/route");
  EXPECT_EQ(r.output, "lo\n1\n");  // only lo, and only the route table's header line
}

TEST_F(LauncherTest, LoopbackWorks) {
  if (access("/usr/bin/python3", X_OK) != 0) GTEST_SKIP() << "python3 not installed";
  auto r = RUN_OK(
      "python3 -c 'import socket; s=socket.socket(); s.bind((\"127.0.0.1\",0)); s.listen(); "
      "c=socket.create_connection(s.getsockname()); a,_=s.accept(); c.send(b\"ok\"); "
      "print(a.recv(2).decode())'");
  EXPECT_EQ(r.output, "ok\n");
}

TEST_F(LauncherTest, DevNodes) {
  auto r = RUN_OK(
      "head -c 4 /dev/zero | wc -c; head -c 4 /dev/urandom | wc -c; echo x > /dev/null && echo n;"
      "ls /dev | tr '\\n' ' '; echo; touch /dev/foo 2>&1 | grep -c Read-only; "
      "echo s > /dev/shm/s && cat /dev/shm/s; test -c /dev/pts/ptmx && echo pts");
  EXPECT_THAT(r.output, HasSubstr("4\n4\nn\n"));
  EXPECT_THAT(r.output, HasSubstr("full null ptmx pts random shm stderr stdin stdout tty urandom "
                                  "zero"));
  EXPECT_THAT(r.output, HasSubstr("\n1\ns\npts"));
}

TEST_F(LauncherTest, HostFilesAreNotVisible) {
  auto r = RUN_OK(
      "ls / | tr '\\n' ' '; test -e /root && echo has-root; "
      "test -e /home/x || echo ok; cat /etc/shadow 2>&1 | head -c 0; "
      "cut -d: -f1 /etc/passwd | tr '\\n' ' '");
  EXPECT_THAT(r.output, Not(HasSubstr("has-root")));
  EXPECT_THAT(r.output, Not(HasSubstr(" work ")));
  EXPECT_THAT(r.output, HasSubstr("root sandbox nobody"));
}

TEST_F(LauncherTest, SandboxdBinaryIsReadOnlyAndSocketDirIsPrivate) {
  spec_.sandboxd_binary = "/bin/true";
  spec_.argv = {"/bin/sh", "-c",
                "/.deepbox/sandboxd && echo ran > /workspace/ran; "
                "test -e /.deepbox/run || echo no-run-dir > /workspace/run-dir; "
                "grep ' /.deepbox/sandboxd ' /proc/self/mountinfo | cut -d' ' -f6 "
                "  > /workspace/opts.tmp && mv /workspace/opts.tmp /workspace/opts; sleep 30"};
  auto sp = Launch(spec_);
  ASSERT_TRUE(sp.has_value()) << sp.error().ToString();
  auto opts = workspace_ / "opts";
  for (int i = 0; i < 500 && !std::filesystem::exists(opts); ++i) usleep(10000);
  std::ifstream in(opts);
  std::string line;
  std::getline(in, line);
  EXPECT_THAT(line, HasSubstr("ro"));
  EXPECT_THAT(line, HasSubstr("nosuid"));
  EXPECT_TRUE(std::filesystem::exists(workspace_ / "ran"));
  // The host's socket dir is not in the sandbox at all.
  EXPECT_TRUE(std::filesystem::exists(workspace_ / "run-dir"));
  struct stat st;
  ASSERT_EQ(stat(spec_.runtime_dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  EXPECT_EQ(st.st_uid, geteuid());
  ASSERT_EQ(stat((spec_.runtime_dir / "run").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  EXPECT_EQ(st.st_uid, geteuid());  // the launcher's, not the sandbox's
}

// The host binds the daemon's socket and passes the listener to init as fd 3:
// init has it, its children get nothing above 2 unless init passes it on, and
// once init is gone the socket refuses connections (nobody can answer for it).
TEST_F(LauncherTest, DaemonListenerIsPassedAsFd3) {
  spec_.daemon_listener = true;
  // The listing runs in a subshell: while setting up a pipeline the shell (PID 1) briefly holds
  // the pipe's ends, and for a simple command dash saves fd 1 as fd 10 around the redirect; a
  // subshell's redirect is opened in the child, so PID 1 holds only its own fds.
  spec_.argv = {
      "/bin/sh", "-c",
      "readlink /proc/1/fd/3 > /workspace/fd3.tmp; (ls /proc/1/fd) >> /workspace/fd3.tmp; "
      "mv /workspace/fd3.tmp /workspace/fd3; sleep 30"};
  auto sp = Launch(spec_);
  ASSERT_TRUE(sp.has_value()) << sp.error().ToString();
  auto out = workspace_ / "fd3";
  // Generous bound for loaded CI machines; the loop ends as soon as the file appears.
  for (int i = 0; i < 3000 && !std::filesystem::exists(out); ++i) usleep(10000);
  ASSERT_TRUE(std::filesystem::exists(out)) << "the sandbox never wrote " << out;
  std::ifstream in(out);
  std::string fd3_target;
  std::getline(in, fd3_target);
  EXPECT_THAT(fd3_target, HasSubstr("socket:["));
  std::vector<std::string> open_fds;
  for (std::string line; std::getline(in, line);) open_fds.push_back(line);
  EXPECT_THAT(open_fds, ElementsAre("0", "1", "2", "3"));
  ASSERT_EQ(sp->daemon_socket(), spec_.runtime_dir / "run" / "sandboxd.sock");
  struct stat st;
  ASSERT_EQ(lstat(sp->daemon_socket().c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_uid, geteuid());
  auto connect_to = [&](const std::filesystem::path& p) {
    UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, p.c_str(), sizeof(a.sun_path) - 1);
    return connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 ? 0 : errno;
  };
  EXPECT_EQ(connect_to(sp->daemon_socket()), 0);  // queued in init's listener
  ASSERT_TRUE(sp->Kill());
  ASSERT_TRUE(sp->Wait(std::chrono::milliseconds(10000)));
  EXPECT_EQ(connect_to(spec_.runtime_dir / "run" / "sandboxd.sock"), ECONNREFUSED);
}

TEST_F(LauncherTest, ExitCodeAndSignal) {
  auto r = RUN_OK("exit 42");
  EXPECT_EQ(r.status.kind, ExitStatus::Kind::kExited);
  EXPECT_EQ(r.status.code, 42);
  // PID 1 ignores signals without a handler from inside the namespace; kill from outside.
  spec_.argv = {"/bin/sleep", "30"};
  auto sp = Launch(spec_);
  ASSERT_TRUE(sp.has_value()) << sp.error().ToString();
  ASSERT_TRUE(sp->Kill().has_value());
  auto st = sp->Wait();
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->kind, ExitStatus::Kind::kSignaled);
  EXPECT_EQ(st->signal, SIGKILL);
}

TEST_F(LauncherTest, ExecFailureIsReportedWithStep) {
  spec_.argv = {"/no/such/binary"};
  auto sp = Launch(spec_);
  ASSERT_FALSE(sp.has_value());
  EXPECT_THAT(sp.error().message, HasSubstr("execve(/no/such/binary)"));
  EXPECT_THAT(sp.error().message, HasSubstr("ENOENT"));
  EXPECT_THAT(sp.error().message, HasSubstr("during step 'exec'"));
}

TEST_F(LauncherTest, MountFailureNamesCallPathAndStep) {
  spec_.rootfs = tmp_.path() / "missing-rootfs";
  spec_.argv = {"/bin/true"};
  auto sp = Launch(spec_);
  ASSERT_FALSE(sp.has_value());
  EXPECT_THAT(sp.error().message, HasSubstr("rootfs"));
  // A source that vanishes between plan and mount: the child reports it.
  spec_.rootfs.reset();
  spec_.workspace_dir = tmp_.path() / "ws2";
  std::filesystem::create_directory(spec_.workspace_dir);
  spec_.sandboxd_binary = tmp_.path() / "sbd";
  { std::ofstream(tmp_.path() / "sbd") << "#!/bin/sh\n"; }
  chmod((tmp_.path() / "sbd").c_str(), 0755);
  spec_.cwd = "/nonexistent-dir";
  sp = Launch(spec_);
  ASSERT_FALSE(sp.has_value());
  EXPECT_THAT(sp.error().message, HasSubstr("chdir"));
  EXPECT_THAT(sp.error().message, HasSubstr("ENOENT"));
}

TEST_F(LauncherTest, KillOnDestructionLeavesNothing) {
  spec_.argv = {"/bin/sh", "-c", "sleep 100 & sleep 100 & wait"};
  pid_t init;
  std::filesystem::path rt = spec_.runtime_dir;
  std::vector<pid_t> pids;
  {
    auto sp = Launch(spec_);
    ASSERT_TRUE(sp.has_value()) << sp.error().ToString();
    init = sp->pid();
    for (int i = 0; i < 100; ++i) {
      auto p = sp->Pids();
      if (p && p->size() >= 3) {
        pids = *p;
        break;
      }
      usleep(10000);
    }
    EXPECT_GE(pids.size(), 3u);
  }
  EXPECT_NE(kill(init, 0), 0);
  for (pid_t p : pids) EXPECT_NE(kill(p, 0), 0) << p;
  EXPECT_FALSE(std::filesystem::exists(rt));
}

TEST_F(LauncherTest, RootfsMode) {
  // A tiny "image": dash and the libraries it needs, copied in, with usrmerge symlinks.
  auto rootfs = tmp_.path() / "rootfs";
  namespace fs = std::filesystem;
  fs::create_directories(rootfs / "usr/bin");
  fs::create_directories(rootfs / "etc");
  fs::create_directory_symlink("usr/bin", rootfs / "bin");
  { std::ofstream(rootfs / "etc/passwd") << "image:x:0:0::/:/bin/sh\n"; }
  { std::ofstream(rootfs / "etc/image-marker") << "from-image\n"; }
  fs::path sh = fs::canonical("/bin/sh");
  fs::copy_file(sh, rootfs / "usr/bin/sh");
  for (const char* lib : {"/lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/libc.so.6"}) {
    if (!fs::exists(lib)) GTEST_SKIP() << "unexpected libc layout";
    fs::path dst = rootfs / fs::path(lib).relative_path();
    fs::create_directories(dst.parent_path());
    fs::copy_file(fs::canonical(lib), dst);
  }
  spec_.rootfs = rootfs;
  auto r = RUN_OK(
      "while read l; do echo \"$l\"; done < /etc/image-marker; "
      "while read l; do echo \"$l\"; done < /etc/passwd; "
      "test -e /usr/bin/ls || echo no-host-usr; echo x > /usr/f 2>/dev/null || echo ro");
  EXPECT_TRUE(r.status.success()) << r.output;
  EXPECT_THAT(r.output, HasSubstr("from-image"));
  EXPECT_THAT(r.output, HasSubstr("sandbox:x:1000:1000"));  // generated passwd bound over
  EXPECT_THAT(r.output, HasSubstr("no-host-usr"));
  EXPECT_THAT(r.output, HasSubstr("ro"));
}

TEST_F(LauncherTest, SetupTimingsRecorded) {
  auto r = RUN_OK("true");
  EXPECT_GT(r.timings.total_ns, 0);
  EXPECT_GT(r.timings.Get(SetupStep::kMounts), 0);
  EXPECT_GT(r.timings.Get(SetupStep::kClone), 0);
  int64_t sum = 0;
  for (auto v : r.timings.ns) sum += v;
  EXPECT_EQ(sum, r.timings.total_ns);
}

// Cold launches of /bin/true until exit; prints the median of each step.
TEST_F(LauncherTest, ColdLaunchTimingReport) {
  constexpr int kRuns = 21;
  std::vector<SetupTimings> all;
  std::vector<int64_t> to_exit;
  spec_.argv = {"/bin/true"};
  for (int i = 0; i < kRuns; ++i) {
    spec_.id = testing::UniqueId("timing");
    int64_t t0 = MonotonicNs();
    auto sp = Launch(spec_);
    ASSERT_TRUE(sp.has_value()) << sp.error().ToString();
    auto st = sp->Wait();
    ASSERT_TRUE(st.has_value() && st->success());
    to_exit.push_back(MonotonicNs() - t0);
    all.push_back(sp->timings());
  }
  auto median = [](std::vector<int64_t> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2] / 1e6;
  };
  std::string report = "median of " + std::to_string(kRuns) + " cold launches of /bin/true:";
  for (size_t s = 0; s < static_cast<size_t>(SetupStep::kCount); ++s) {
    std::vector<int64_t> v;
    for (const auto& t : all) v.push_back(t.ns[s]);
    report += " " + std::string(SetupStepName(static_cast<SetupStep>(s))) + "=" +
              std::to_string(median(v)).substr(0, 5) + "ms";
  }
  std::vector<int64_t> totals;
  for (const auto& t : all) totals.push_back(t.total_ns);
  report += " | setup total=" + std::to_string(median(totals)).substr(0, 5) +
            "ms, launch->exit=" + std::to_string(median(to_exit)).substr(0, 5) + "ms";
  std::cerr << report << "\n";
  RecordProperty("timings", report);
}

}  // namespace
}  // namespace deepbox::local

namespace deepbox::local {
namespace {

TEST_F(LauncherTest, WorkspaceDiskLimit) {
  std::string why;
  if (!WorkspaceDiskSupported(&why)) GTEST_SKIP() << why;
  spec_.limits.workspace_bytes = 16ULL << 20;
  std::string image = (spec_.runtime_dir / "workspace.img").string();
  spec_.argv = {"/bin/sh", "-c",
                "dd if=/dev/zero of=/workspace/big bs=1M count=64 2>/dev/null; echo rc=$?; "
                "df -k /workspace | tail -1 | awk '{print $2}'; echo ok > /workspace/small; "
                "touch /workspace/flag; sleep 30"};
  int fds[2];
  ASSERT_EQ(pipe2(fds, O_CLOEXEC), 0);
  spec_.stdout_fd = fds[1];
  {
    auto sp = Launch(spec_);
    close(fds[1]);
    ASSERT_TRUE(sp.has_value()) << sp.error().ToString();
    EXPECT_TRUE(sp->limits().workspace_disk.enforced);
    EXPECT_GT(sp->timings().workspace_disk_ns, 0);  // made on its own thread, and timed
    for (int i = 0; i < 500 && !std::filesystem::exists(workspace_ / "flag"); ++i) usleep(10000);
    ASSERT_TRUE(std::filesystem::exists(workspace_ / "flag"));
    // No root-only lost+found for glob/grep to trip over.
    EXPECT_FALSE(std::filesystem::exists(workspace_ / "lost+found"));
    EXPECT_TRUE(std::filesystem::exists(image));
    std::ifstream mi("/proc/self/mountinfo");
    std::stringstream ss;
    ss << mi.rdbuf();
    EXPECT_THAT(ss.str(), HasSubstr(workspace_.string()));
  }
  std::string out;
  char buf[512];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  EXPECT_THAT(out, HasSubstr("rc=1\n"));  // ENOSPC
  // After destruction: unmounted, image gone, loop device detached.
  std::ifstream mi("/proc/self/mountinfo");
  std::stringstream ss;
  ss << mi.rdbuf();
  EXPECT_THAT(ss.str(), Not(HasSubstr(workspace_.string())));
  EXPECT_FALSE(std::filesystem::exists(image));
}

// The disk is made on a thread beside the rest of the preparation: its
// failure still fails the launch, with its own error, and leaves no mount.
TEST_F(LauncherTest, WorkspaceDiskFailureFailsTheLaunch) {
  std::string why;
  if (!WorkspaceDiskSupported(&why)) GTEST_SKIP() << why;
  spec_.limits.workspace_bytes = 16ULL << 20;
  std::filesystem::create_directories(spec_.runtime_dir);
  std::ofstream(spec_.runtime_dir / "workspace.img") << "in the way";
  spec_.argv = {"/bin/true"};
  auto sp = Launch(spec_);
  ASSERT_FALSE(sp.has_value());
  EXPECT_THAT(sp.error().message, HasSubstr("workspace.img"));
  EXPECT_THAT(sp.error().message, HasSubstr("EEXIST"));
  std::ifstream mi("/proc/self/mountinfo");
  std::stringstream ss;
  ss << mi.rdbuf();
  EXPECT_THAT(ss.str(), Not(HasSubstr(workspace_.string())));
}

TEST_F(LauncherTest, ReportsLimitEnforcement) {
  spec_.limits.memory_bytes = 256ULL << 20;
  spec_.limits.max_processes = 64;
  spec_.limits.cpu_time_seconds = 60;
  spec_.limits.file_size_bytes = 1 << 20;
  auto r = RUN_OK(
      "ulimit -f; ulimit -t; ulimit -c; "
      "(dd if=/dev/zero of=/workspace/f bs=1M count=2 2>/dev/null); "
      "stat -c %s /workspace/f");
  EXPECT_THAT(r.output, HasSubstr("2048\n60\n0\n"));
  EXPECT_THAT(r.output, HasSubstr("\n1048576\n"));
  EXPECT_TRUE(r.limits.cpu_time.enforced);
  EXPECT_EQ(r.limits.cpu_time.mechanism, Mechanism::kRlimitPerProcess);
  EXPECT_TRUE(r.limits.file_size.enforced);
  EXPECT_TRUE(r.limits.processes.enforced);
  std::cerr << r.limits.Describe();
}

// Init moves itself into its v1 cgroups before anything of the sandbox runs
// (launcher.cc, cgroups.h): /proc/self/cgroup of the first program shows them.
// Its cgroup namespace was made at the clone, before the move, so the paths
// are relative to the launcher's own cgroups.
TEST_F(LauncherTest, InitIsInItsV1CgroupsWhenItsProgramStarts) {
  auto host = DetectCgroups();
  ASSERT_TRUE(host) << host.error().ToString();
  if (geteuid() != 0) GTEST_SKIP() << "cgroups need root here";
  spec_.limits.memory_bytes = 256ULL << 20;
  spec_.limits.max_processes = 64;
  std::vector<std::string> v1;
  for (const char* controller : {"memory", "pids"}) {
    if (host->v1_mounts.count(controller) && !host->v2_controllers.count(controller)) {
      v1.push_back(controller);
    }
  }
  if (v1.empty()) GTEST_SKIP() << "neither memory nor pids is a v1 hierarchy here";
  auto r = RUN_OK("cat /proc/self/cgroup");
  EXPECT_TRUE(r.limits.memory.enforced);
  for (const auto& controller : v1) {
    std::string line;
    std::istringstream lines(r.output);
    for (std::string l; std::getline(lines, l);) {
      if (l.find(":" + controller + ":") != std::string::npos) line = l;
    }
    EXPECT_TRUE(line.ends_with("/deepbox/" + spec_.id)) << controller << " in:\n" << r.output;
  }
}

TEST_F(LauncherTest, ForkBombIsContained) {
  spec_.limits.max_processes = 32;
  // dash aborts when fork fails, so keep forking from a loop of subshells.
  spec_.argv = {"/bin/sh", "-c", "while true; do (sleep 5 &) 2>/dev/null; done"};
  auto sp = Launch(spec_);
  ASSERT_TRUE(sp.has_value()) << sp.error().ToString();
  size_t peak = 0;
  for (int i = 0; i < 50; ++i) {
    auto pids = sp->Pids();
    if (pids) peak = std::max(peak, pids->size());
    usleep(20000);
  }
  EXPECT_GT(peak, 10u);
  EXPECT_LE(peak, 32u);
}

}  // namespace
}  // namespace deepbox::local
