// Background processes of deepbox-sandboxd: started, listed, fed, signalled,
// awaited and removed by id ("p-1", "p-2", ...). Thread-safe.
//
// One thread per table runs an epoll loop over every process's stdout/stderr
// pipes, stdin pipe (while bytes are queued) and pidfd, so no process ever
// blocks on a full pipe. Output of both streams goes, in the order read, into a
// per-process LogRing of Options::log_capacity bytes; readers read from a byte
// offset and are told how many bytes the ring dropped before it.
//
// Lifecycle of an entry:
//  running --(direct child exits)--> exited (outcome set, Wait() returns)
//  The direct child is reaped only once both output pipes are closed (all
//  writers gone), so until then its process-group id stays pinned and Signal()
//  still reaches the rest of the group (e.g. `sh -c 'server &'`). Exited
//  entries stay listed (with their logs) until Remove(); when the table is full,
//  the oldest finished entry is evicted.
//  Kill()/Shutdown(): SIGTERM to the group, SIGKILL after the grace period; once
//  the direct child is gone, the rest of the group is SIGKILLed. Outcome Killed.
//  spec.timeout works as in Run(): outcome TimedOut. spec.drain_timeout and the
//  output caps do not apply (logs are bounded by the ring).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/error.h"
#include "common/unique_fd.h"
#include "sandboxd/proc/command.h"

namespace deepbox::sandboxd::proc {

enum class ProcessState { kRunning, kExited };
std::string_view ProcessStateName(ProcessState state);  // "running" / "exited"

struct ProcessInfo {
  std::string id;
  pid_t pid = 0;                  // also the process-group id
  std::string command;            // CommandDisplay(spec)
  std::vector<std::string> argv;  // EffectiveArgv(spec)
  std::string cwd;
  ProcessState state = ProcessState::kRunning;
  std::optional<Outcome> outcome;  // set once exited
  std::chrono::system_clock::time_point started_at;
  std::optional<std::chrono::system_clock::time_point> exited_at;
  bool stdin_open = false;
  bool output_open = false;  // some process still holds the output pipes
  uint64_t stdout_bytes = 0;
  uint64_t stderr_bytes = 0;
  uint64_t log_start_offset = 0;  // oldest byte the log still holds
  uint64_t log_end_offset = 0;    // bytes logged so far
};

struct LogChunk {
  std::string data;
  uint64_t offset = 0;       // offset of data[0]
  uint64_t next_offset = 0;  // ask for this next
  uint64_t dropped = 0;      // bytes before `offset` that the ring dropped
  bool eof = false;          // output closed and everything was read
};

class ProcessTable {
 public:
  struct Options {
    size_t log_capacity = 4 << 20;       // per process
    size_t max_processes = 256;          // entries kept, running or exited
    size_t max_pending_stdin = 4 << 20;  // per process, queued but not yet written
  };
  struct StartOptions {
    // Keep a stdin pipe open (fed by WriteStdin, closed by CloseStdin). When
    // false, stdin is spec.stdin_data followed by EOF, or /dev/null.
    bool stdin_pipe = true;
  };

  static Result<std::unique_ptr<ProcessTable>> Create(Options options);
  static Result<std::unique_ptr<ProcessTable>> Create() { return Create(Options{}); }
  // Shutdown(0) unless already shut down.
  ~ProcessTable();
  ProcessTable(const ProcessTable&) = delete;
  ProcessTable& operator=(const ProcessTable&) = delete;

  // Starts a process; spec.stdin_data, if any, is queued on its stdin first.
  // kResourceExhausted when the table is full of live processes; kUnavailable
  // after Shutdown; spawn failures as Errors (e.g. execve, chdir).
  Result<ProcessInfo> Start(const CommandSpec& spec, StartOptions options);
  Result<ProcessInfo> Start(const CommandSpec& spec) { return Start(spec, StartOptions{}); }

  std::vector<ProcessInfo> List() const;  // in start order
  Result<ProcessInfo> Get(std::string_view id) const;

  // Up to max_bytes of the combined log from `offset`. With wait > 0 and no
  // byte at `offset` yet, blocks until one arrives, the output ends or `wait`
  // passes.
  Result<LogChunk> ReadLog(std::string_view id, uint64_t offset, size_t max_bytes,
                           std::chrono::milliseconds wait = std::chrono::milliseconds(0)) const;

  // Queues bytes for the process's stdin (written as the process reads them).
  // kConflict if stdin is closed; kResourceExhausted past max_pending_stdin.
  Status WriteStdin(std::string_view id, std::string_view data);
  // EOF on stdin once the queued bytes are written.
  Status CloseStdin(std::string_view id);

  // Sends `signal` to the process group. kConflict once the group is no longer
  // pinned (the process has exited and its output is closed).
  Status Signal(std::string_view id, int signal);
  // Blocks until the process has exited or `timeout` passes; returns its info
  // either way (check `state`).
  Result<ProcessInfo> Wait(std::string_view id, std::chrono::milliseconds timeout) const;
  // SIGTERM to the group now, SIGKILL after `grace` (0: SIGKILL now). Does not
  // block; the outcome becomes Killed.
  Result<ProcessInfo> Kill(std::string_view id, std::chrono::milliseconds grace);
  // Forgets the process: SIGKILLs its group if it is still pinned, reaps it in
  // the background. The id is gone at once.
  Status Remove(std::string_view id);

  // Terminates everything: SIGTERM to every group, SIGKILL after `grace`,
  // reaps, stops the thread. Later Start() calls fail; reads still work.
  void Shutdown(std::chrono::milliseconds grace);

 private:
  struct Entry;
  explicit ProcessTable(Options options);

  void Loop();
  std::shared_ptr<Entry> Find(std::string_view id) const;          // visible entries; mu_ held
  ProcessInfo InfoOf(const Entry& e) const;                        // mu_ held
  void HandleEvent(uint64_t data, uint32_t events);                // mu_ held
  void OnExit(Entry& e);                                           // mu_ held
  void ReadOutput(Entry& e, bool is_stdout);                       // mu_ held
  void FlushStdin(Entry& e);                                       // mu_ held
  void CloseStdinLocked(Entry& e);                                 // mu_ held
  void CloseOutput(Entry& e, bool is_stdout);                      // mu_ held
  void MaybeReap(Entry& e);                                        // mu_ held
  void RunDeadlines();                                             // mu_ held
  int NextTimeoutMs() const;                                       // mu_ held
  void TerminateGroup(Entry& e, std::chrono::milliseconds grace);  // mu_ held
  void Wake();

  const Options options_;
  UniqueFd epoll_fd_;
  UniqueFd wake_fd_;  // eventfd: recompute deadlines / stop
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;                  // any change: output, exit, stdin, reap
  std::map<uint64_t, std::shared_ptr<Entry>> entries_;  // by serial, incl. removed
  uint64_t next_serial_ = 1;
  bool shutting_down_ = false;
  bool stop_loop_ = false;
  std::vector<char> read_buf_;
  std::thread thread_;
};

}  // namespace deepbox::sandboxd::proc
