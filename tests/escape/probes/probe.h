// Escape probes: small checks run INSIDE a sandbox. Each one tries a way out
// and exits 0 only if it breached isolation (1 when it held, 2 when it could
// not run), printing one line: "<name>: BREACH|HELD: <what it tried and saw>".
//
// All probes live in one static binary (`escape_probe NAME ARGS...`) so the
// driver copies a single file into /workspace. Only raw syscalls and glibc:
// the binary is built without sanitizers and linked statically.
#pragma once

#include <string>
#include <vector>

namespace deepbox::escape {

using Args = std::vector<std::string>;

// Collects what a probe tried; Finish() prints the line and gives the exit code.
class Report {
 public:
  explicit Report(std::string name) : name_(std::move(name)) {}
  // An attempt that the sandbox refused (or that showed nothing of the host).
  void Held(const std::string& what) { Add(what); }
  // An attempt that got through: the probe will exit 0.
  void Breach(const std::string& what) {
    breached_ = true;
    Add("!!" + what);
  }
  // The probe could not run as designed (exit 2, never counted as a breach).
  void Error(const std::string& what) {
    error_ = true;
    Add("error: " + what);
  }
  bool breached() const { return breached_; }
  int Finish() const;

 private:
  void Add(const std::string& what) {
    if (!text_.empty()) text_ += "; ";
    text_ += what;
  }
  std::string name_;
  std::string text_;
  bool breached_ = false;
  bool error_ = false;
};

using ProbeFn = void (*)(Report& r, const Args& args);

struct ProbeInfo {
  const char* name;
  const char* tries;  // one line for --list and the README
  ProbeFn fn;
};

// Registration from each probe file (static initialisers).
struct Registrar {
  Registrar(const char* name, const char* tries, ProbeFn fn);
};
const std::vector<ProbeInfo>& AllProbes();

#define ESCAPE_PROBE(name, tries)                                                              \
  static void Probe_##name(::deepbox::escape::Report& r, const ::deepbox::escape::Args& args); \
  static ::deepbox::escape::Registrar registrar_##name(#name, tries, &Probe_##name);           \
  static void Probe_##name([[maybe_unused]] ::deepbox::escape::Report& r,                      \
                           [[maybe_unused]] const ::deepbox::escape::Args& args)

// ---------------------------------------------------------------- helpers

std::string ErrnoName(int err);  // "EPERM"
// "EPERM" for -1/errno, "ok" otherwise. Call right after the syscall.
std::string Outcome(long rc);
// Reads up to `max` bytes; false (errno set) if it cannot be opened/read.
bool ReadFile(const std::string& path, std::string* out, size_t max = 1 << 20);
bool Contains(const std::string& haystack, const std::string& needle);
std::string Arg(const Args& args, size_t i);  // "" when missing
// A value of /proc/self/status ("CapEff", "Uid", ...); "" when absent.
std::string StatusField(const std::string& status_path, const std::string& key);
// Runs fn in a forked child; returns its wait status.
int InChild(int (*fn)(void*), void* arg);
// Numeric entries of /proc.
std::vector<int> ProcPids();
// True when pid 1 is the sandbox's daemon. Probes that would be dangerous on a
// bare host (attach to pid 1, kill(-1)) only do that part inside a sandbox.
bool InsideSandbox();

}  // namespace deepbox::escape
