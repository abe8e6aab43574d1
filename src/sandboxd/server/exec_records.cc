#include "sandboxd/server/exec_records.h"

#include <fmt/format.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <vector>

namespace deepbox::sandboxd {

void ExecRecord::Append(std::string line) {
  {
    std::lock_guard lock(mu_);
    if (finished_) return;
    bytes_ += line.size();
    lines_.push_back(std::move(line));
    // Keep the newest event even if it alone exceeds the budget.
    while (bytes_ > max_bytes_ && lines_.size() > 1) {
      bytes_ -= lines_.front().size();
      lines_.pop_front();
      ++first_kept_;
    }
  }
  cv_.notify_all();
}

void ExecRecord::Finish(std::string exit_line) {
  {
    std::lock_guard lock(mu_);
    if (finished_) return;
    bytes_ += exit_line.size();
    lines_.push_back(std::move(exit_line));
    while (bytes_ > max_bytes_ && lines_.size() > 1) {  // the exit event always stays
      bytes_ -= lines_.front().size();
      lines_.pop_front();
      ++first_kept_;
    }
    finished_ = true;
    finished_at_ = std::chrono::steady_clock::now();
  }
  cv_.notify_all();
}

bool ExecRecord::finished() const {
  std::lock_guard lock(mu_);
  return finished_;
}

uint64_t ExecRecord::events() const {
  std::lock_guard lock(mu_);
  return first_kept_ + lines_.size();
}

bool ExecRecord::Follow(uint64_t from, const std::function<bool(std::string_view line)>& sink,
                        const std::function<void(uint64_t first_kept, uint64_t dropped)>& on_gap,
                        const std::function<bool()>& keep_going, std::chrono::milliseconds poll) {
  ++followers_;
  struct Leave {
    std::atomic<int>& n;
    ~Leave() { --n; }
  } leave{followers_};
  uint64_t next = from;
  bool gap_reported = false;
  for (;;) {
    std::vector<std::string> batch;
    bool done = false;
    {
      std::unique_lock lock(mu_);
      const uint64_t end = first_kept_ + lines_.size();
      if (next >= end && !finished_) {
        cv_.wait_for(lock, poll, [&] { return first_kept_ + lines_.size() > next || finished_; });
      }
      if (next < first_kept_ && !gap_reported) {
        gap_reported = true;
        const uint64_t first = first_kept_, dropped = first_kept_ - next;
        lock.unlock();
        if (on_gap) on_gap(first, dropped);
        lock.lock();
      }
      next = std::max(next, first_kept_);
      const uint64_t now_end = first_kept_ + lines_.size();
      for (uint64_t i = next; i < now_end; ++i) {
        batch.push_back(lines_[static_cast<size_t>(i - first_kept_)]);
      }
      next = now_end;
      done = finished_ && next >= now_end;
    }
    for (const auto& line : batch) {
      if (!sink(line)) return false;
    }
    if (done) return true;
    if (batch.empty() && keep_going && !keep_going()) return false;
  }
}

bool ExecRecords::ValidId(std::string_view id) {
  if (id.size() < 8 || id.size() > 64) return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
  });
}

ExecRecord::ExecRecord(size_t max_bytes)
    : max_bytes_(max_bytes), cancel_event_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}

void ExecRecord::Cancel() {
  cancelled_ = true;
  if (cancel_event_) {
    uint64_t one = 1;
    (void)!::write(cancel_event_.get(), &one, sizeof one);  // full (EAGAIN): readable already
  }
}

ExecRecord::~ExecRecord() {
#ifndef NDEBUG
  // A record destroyed while a guard still holds its mutex: that guard will
  // unlock freed memory (the 10-minute daemon crash). Caught here in debug
  // builds, since the write happens inside glibc where ASan cannot see it.
  if (!mu_.try_lock()) {
    std::fputs("deepbox-sandboxd: an exec record was destroyed while locked\n", stderr);
    std::abort();
  }
  mu_.unlock();
#endif
}

void ExecRecords::ExpireLocked(std::chrono::steady_clock::time_point now) {
  for (auto it = records_.begin(); it != records_.end();) {
    bool expired = false;
    {
      // Decided under the record's lock, erased after it is released: the map
      // may hold the last reference, and erasing frees the mutex itself.
      const ExecRecord& r = *it->second;
      std::lock_guard lock(r.mu_);
      expired = r.finished_ && now - r.finished_at_ >= options_.keep_after_exit;
    }
    it = expired ? records_.erase(it) : std::next(it);
  }
}

Result<std::shared_ptr<ExecRecord>> ExecRecords::Begin(const std::string& id, bool* existed) {
  if (!ValidId(id)) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "exec_id must be 8 to 64 characters of A-Z, a-z, 0-9, '_' and '-'");
  }
  std::lock_guard lock(mu_);
  const auto now = std::chrono::steady_clock::now();
  ExpireLocked(now);
  if (auto it = records_.find(id); it != records_.end()) {
    if (existed != nullptr) *existed = true;
    return it->second;
  }
  if (records_.size() >= options_.max_records) {
    // Forget the finished record that ended first.
    auto oldest = records_.end();
    for (auto it = records_.begin(); it != records_.end(); ++it) {
      std::lock_guard rl(it->second->mu_);
      if (!it->second->finished_) continue;
      if (oldest == records_.end()) {
        oldest = it;
        continue;
      }
      std::lock_guard ol(oldest->second->mu_);
      if (it->second->finished_at_ < oldest->second->finished_at_) oldest = it;
    }
    if (oldest == records_.end()) {
      return MakeError(
          ErrorCode::kResourceExhausted,
          fmt::format("{} identified execs are running; wait for one to end", records_.size()));
    }
    records_.erase(oldest);
  }
  auto record = std::shared_ptr<ExecRecord>(new ExecRecord(options_.max_bytes_per_exec));
  records_.emplace(id, record);
  if (existed != nullptr) *existed = false;
  return record;
}

Result<std::shared_ptr<ExecRecord>> ExecRecords::Find(const std::string& id) {
  std::lock_guard lock(mu_);
  ExpireLocked(std::chrono::steady_clock::now());
  auto it = records_.find(id);
  if (it == records_.end()) {
    return MakeError(
        ErrorCode::kNotFound,
        fmt::format(
            "no exec with id '{}' (unknown, or forgotten {} s after it ended)",
            ValidId(id) ? id : "(malformed)",
            std::chrono::duration_cast<std::chrono::seconds>(options_.keep_after_exit).count()));
  }
  return it->second;
}

size_t ExecRecords::size() const {
  std::lock_guard lock(mu_);
  return records_.size();
}

}  // namespace deepbox::sandboxd
