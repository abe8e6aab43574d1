// Running a command to completion (Run) or with its output streamed through
// callbacks (RunStreaming). Both block the calling thread, which drives one
// ppoll() loop over the child's pipes, its pidfd and the deadlines; no other
// thread is involved.
//
// Lifecycle, shared by both:
//  * The command runs in its own process group, stdin from spec.stdin_data
//    (written concurrently with reading the output, so any size works) or
//    /dev/null.
//  * Output is read as it comes, in 64 KiB reads; memory stays bounded by the
//    caps whatever the volume (the excess is read and discarded, and counted).
//  * Timeout: SIGTERM to the group, SIGKILL to the group kill_grace later;
//    once the direct child has died the remaining group members are SIGKILLed
//    too, so no process of the group survives a timeout.
//  * When the direct child exits while other processes (e.g. `cmd &`) still
//    hold the pipes, output is read for at most drain_timeout more, then the
//    group is SIGKILLed and the run ends. Group members that do not hold the
//    pipes (`nohup server >log 2>&1 &`) are left alone after a normal exit.
//  * The direct child is reaped last, so its process-group id stays pinned and
//    group signals can never reach an unrelated process.
//  * Failures to start are reported as SpawnFailed, never thrown.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "common/unique_fd.h"
#include "sandboxd/proc/command.h"

namespace deepbox::sandboxd::proc {

enum class StreamKind { kStdout, kStderr };
std::string_view StreamKindName(StreamKind kind);  // "stdout" / "stderr"

struct RunResult {
  Outcome outcome;
  std::string stdout_data;  // head, up to spec.max_stdout_bytes
  std::string stderr_data;  // head, up to spec.max_stderr_bytes
  std::string combined;     // stdout+stderr in the order read, up to max_combined_bytes
  bool stdout_truncated = false;
  bool stderr_truncated = false;
  bool combined_truncated = false;
  uint64_t stdout_total = 0;  // bytes produced, kept or not
  uint64_t stderr_total = 0;
  // True when the group was SIGKILLed because members kept the pipes open
  // drain_timeout after the direct child exited.
  bool drain_killed = false;
  std::chrono::nanoseconds duration{0};
  pid_t pid = 0;  // 0 if the spawn failed
};

// Runs to completion. `cancel_fd` (optional, e.g. an eventfd): when it becomes
// readable the group is terminated (SIGTERM, SIGKILL after kill_grace) and the
// outcome is Killed.
RunResult Run(const CommandSpec& spec, int cancel_fd = -1);

struct StreamCallbacks {
  // Each call carries bytes of one stream only, in the order read. Return
  // false to cancel: the group is terminated and the outcome is Killed.
  std::function<bool(StreamKind, std::string_view)> on_output;
  // Called after every idle_interval without output (keepalives). Return false
  // to cancel. Not called when idle_interval is 0.
  std::function<bool()> on_idle;
  std::chrono::milliseconds idle_interval{0};
  // When true, chunks of a stream end on UTF-8 character boundaries (an
  // incomplete trailing sequence is delivered with the next chunk, or at EOF).
  bool utf8_align = false;
  // Optional fd; readable => cancel (like returning false).
  int cancel_fd = -1;
  // Interactive input: when set, spec.stdin_data is ignored and the command's
  // stdin stays open; once the command runs (before any output is delivered)
  // this receives the writing side (O_NONBLOCK; a pipe, or the terminal's
  // master with spec.tty) and the pid. Whoever holds it feeds stdin from any
  // thread; closing it is EOF (for a pipe). Not called if the spawn fails.
  std::function<void(UniqueFd input, pid_t pid)> on_started;
};

struct StreamResult {
  Outcome outcome;
  uint64_t stdout_total = 0;
  uint64_t stderr_total = 0;
  bool drain_killed = false;
  std::chrono::nanoseconds duration{0};
  pid_t pid = 0;
};

// Like Run, but output goes to the callbacks (spec.max_*_bytes are ignored).
// With spec.tty, all output arrives as kStdout (the terminal merges the
// streams, with its own line discipline: "\n" becomes "\r\n").
StreamResult RunStreaming(const CommandSpec& spec, const StreamCallbacks& callbacks);

}  // namespace deepbox::sandboxd::proc
