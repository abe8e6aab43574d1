// Exec records: what a streamed exec sent, kept for a while under an id the
// client chose, so a client whose stream was cut (a proxy or router dropped
// the connection; see issue 12) re-attaches and receives the rest and the
// exit status instead of running the command a second time.
//
// A record holds the stream's events (NDJSON lines, keepalives excluded) in
// order, numbered from 0, up to a byte budget: beyond it the oldest events
// are dropped and a re-attach that needs them learns how many were lost.
// Records are forgotten `keep_after_exit` after their command ended, and the
// oldest finished ones first when there are too many.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "common/error.h"
#include "common/unique_fd.h"

namespace deepbox::sandboxd {

struct ExecRecordsOptions {
  size_t max_bytes_per_exec = 4u << 20;
  size_t max_records = 512;
  std::chrono::milliseconds keep_after_exit{10 * 60 * 1000};
};

class ExecRecord {
 public:
  ~ExecRecord();
  ExecRecord(const ExecRecord&) = delete;
  ExecRecord& operator=(const ExecRecord&) = delete;

  // Appends one event (a complete NDJSON line) and wakes followers.
  void Append(std::string line);
  // The last event; the record is complete.
  void Finish(std::string exit_line);

  // Sends events numbered >= `from` to `sink` as they become available, up to
  // and including the exit event. If some of them were dropped (byte budget),
  // `on_gap(first_kept, dropped_events)` is called first. Returns when the
  // exit event was sent (true), or false when `sink` failed, or when
  // `keep_going` (called every `poll` while waiting) says to stop.
  bool Follow(uint64_t from, const std::function<bool(std::string_view line)>& sink,
              const std::function<void(uint64_t first_kept, uint64_t dropped)>& on_gap,
              const std::function<bool()>& keep_going,
              std::chrono::milliseconds poll = std::chrono::milliseconds(1000));

  bool finished() const;
  uint64_t events() const;  // appended so far (dropped ones included)

  // The client asked to stop the command (its stream carries on to the exit).
  // Also makes cancel_fd() readable, so that the runner stops the command at
  // once instead of at its next keepalive tick.
  void Cancel();
  bool cancelled() const { return cancelled_; }
  // An eventfd readable once Cancel() was called (-1 if none could be made:
  // then the stream's keepalive tick notices the cancel).
  int cancel_fd() const { return cancel_event_.get(); }
  // Clients following the record right now (re-attached after a cut).
  int followers() const { return followers_; }

 private:
  friend class ExecRecords;
  explicit ExecRecord(size_t max_bytes);

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> lines_;  // events first_kept_ .. first_kept_ + size - 1
  uint64_t first_kept_ = 0;
  size_t bytes_ = 0;
  size_t max_bytes_;
  bool finished_ = false;
  std::chrono::steady_clock::time_point finished_at_;
  std::atomic<bool> cancelled_{false};
  UniqueFd cancel_event_;
  std::atomic<int> followers_{0};
};

class ExecRecords {
 public:
  explicit ExecRecords(ExecRecordsOptions options = {}) : options_(options) {}

  // Whether `id` can name an exec: 8-64 of [A-Za-z0-9_-].
  static bool ValidId(std::string_view id);

  // A new record for `id`, or the existing one with `existed` set (the same
  // exec sent twice: the caller attaches to it instead of running again).
  // INVALID_ARGUMENT for a malformed id; RESOURCE_EXHAUSTED when every slot
  // holds a running exec.
  Result<std::shared_ptr<ExecRecord>> Begin(const std::string& id, bool* existed);
  // NOT_FOUND when unknown or forgotten.
  Result<std::shared_ptr<ExecRecord>> Find(const std::string& id);
  size_t size() const;

 private:
  void ExpireLocked(std::chrono::steady_clock::time_point now);

  ExecRecordsOptions options_;
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<ExecRecord>> records_;
};

}  // namespace deepbox::sandboxd
