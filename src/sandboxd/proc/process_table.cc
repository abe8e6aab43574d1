#include "sandboxd/proc/process_table.h"

#include <fmt/format.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <limits>
#include <utility>

#include "sandboxd/proc/output_buffer.h"
#include "sandboxd/proc/quiet_thread.h"

namespace deepbox::sandboxd::proc {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kTableReadChunk = 64 * 1024;

// epoll data: serial << 3 | tag.
enum Tag : uint64_t { kTagStdout = 0, kTagStderr = 1, kTagStdin = 2, kTagPidfd = 3 };
constexpr uint64_t kWakeData = std::numeric_limits<uint64_t>::max();

uint64_t EventData(uint64_t serial, Tag tag) { return (serial << 3) | tag; }

}  // namespace

struct ProcessTable::Entry {
  uint64_t serial = 0;
  std::string id;
  std::string command;
  std::vector<std::string> argv;
  std::string cwd;
  Child child;
  UniqueFd in, out, err;
  LogRing log;
  uint64_t stdout_bytes = 0;
  uint64_t stderr_bytes = 0;
  std::string pending_stdin;   // queued, not yet written
  bool stdin_watched = false;  // in epoll for EPOLLOUT
  bool close_stdin_when_flushed = false;
  std::optional<ExitStatus> status;  // direct child exited
  std::optional<Outcome> outcome;
  std::chrono::system_clock::time_point started_at;
  std::optional<std::chrono::system_clock::time_point> exited_at;
  std::chrono::milliseconds timeout{0};
  std::chrono::milliseconds kill_grace{0};  // after a timeout
  std::optional<Clock::time_point> timeout_at;
  std::optional<Clock::time_point> kill_at;
  bool timed_out = false;
  bool kill_requested = false;
  bool sigkilled = false;
  bool removed = false;
  bool reaped = false;

  explicit Entry(size_t log_capacity) : log(log_capacity) {}
};

std::string_view ProcessStateName(ProcessState state) {
  return state == ProcessState::kRunning ? "running" : "exited";
}

Result<std::unique_ptr<ProcessTable>> ProcessTable::Create(Options options) {
  std::unique_ptr<ProcessTable> table(new ProcessTable(options));
  table->epoll_fd_.reset(epoll_create1(EPOLL_CLOEXEC));
  if (!table->epoll_fd_) return MakeSyscallError("epoll_create1", errno);
  table->wake_fd_.reset(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!table->wake_fd_) return MakeSyscallError("eventfd", errno);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kWakeData;
  if (epoll_ctl(table->epoll_fd_.get(), EPOLL_CTL_ADD, table->wake_fd_.get(), &ev) != 0) {
    return MakeSyscallError("epoll_ctl", errno);
  }
  table->read_buf_.resize(kTableReadChunk);
  table->thread_ = StartQuietThread([t = table.get()] { t->Loop(); });
  return table;
}

ProcessTable::ProcessTable(Options options) : options_(options) {}

ProcessTable::~ProcessTable() { Shutdown(std::chrono::milliseconds(0)); }

void ProcessTable::Wake() {
  const uint64_t one = 1;
  while (::write(wake_fd_.get(), &one, sizeof(one)) < 0 && errno == EINTR) {
  }
}

Result<ProcessInfo> ProcessTable::Start(const CommandSpec& spec, StartOptions start_options) {
  if (auto ok = ValidateSpec(spec); !ok) return tl::unexpected(ok.error());
  std::unique_lock<std::mutex> lock(mu_);
  if (shutting_down_) return MakeError(ErrorCode::kUnavailable, "the process table is shut down");
  size_t visible = 0;
  for (const auto& [serial, e] : entries_) visible += e->removed ? 0 : 1;
  if (visible >= options_.max_processes) {
    // Evict the oldest finished entry.
    auto it = std::find_if(entries_.begin(), entries_.end(),
                           [](const auto& kv) { return !kv.second->removed && kv.second->reaped; });
    if (it == entries_.end()) {
      return MakeError(ErrorCode::kResourceExhausted,
                       fmt::format("too many processes (limit {})", options_.max_processes));
    }
    entries_.erase(it);
  }

  const bool stdin_pipe = start_options.stdin_pipe || spec.stdin_data.has_value();
  auto started = StartCommand(spec, stdin_pipe ? StdinMode::kPipe : StdinMode::kNull);
  if (!started) return tl::unexpected(started.error());

  auto e = std::make_shared<Entry>(options_.log_capacity);
  e->serial = next_serial_++;
  e->id = fmt::format("p-{}", e->serial);
  e->command = CommandDisplay(spec);
  e->argv = EffectiveArgv(spec);
  e->cwd = spec.cwd;
  e->child = std::move(started->child);
  e->in = std::move(started->stdin_fd);
  e->out = std::move(started->stdout_fd);
  e->err = std::move(started->stderr_fd);
  e->started_at = std::chrono::system_clock::now();
  e->timeout = spec.timeout;
  e->kill_grace = spec.kill_grace;
  if (spec.timeout.count() > 0) e->timeout_at = Clock::now() + spec.timeout;
  if (spec.stdin_data) e->pending_stdin = *spec.stdin_data;
  if (!start_options.stdin_pipe) e->close_stdin_when_flushed = true;

  const int epfd = epoll_fd_.get();
  auto watch = [&](int fd, Tag tag, uint32_t events) -> Status {
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = EventData(e->serial, tag);
    if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) != 0) return MakeSyscallError("epoll_ctl", errno);
    return {};
  };
  Status ok = watch(e->out.get(), kTagStdout, EPOLLIN);
  if (ok) ok = watch(e->err.get(), kTagStderr, EPOLLIN);
  if (ok) ok = watch(e->child.pidfd(), kTagPidfd, EPOLLIN);
  if (!ok) {
    // e->child's destructor kills and reaps it; fds close with e.
    for (int fd : {e->out.get(), e->err.get(), e->child.pidfd()}) {
      epoll_ctl(epfd, EPOLL_CTL_DEL, fd, nullptr);
    }
    return tl::unexpected(ok.error());
  }
  entries_[e->serial] = e;
  if (e->in) FlushStdin(*e);
  ProcessInfo info = InfoOf(*e);
  lock.unlock();
  Wake();  // a new deadline, maybe
  return info;
}

std::shared_ptr<ProcessTable::Entry> ProcessTable::Find(std::string_view id) const {
  if (!id.starts_with("p-")) return nullptr;
  uint64_t serial = 0;
  std::string_view digits = id.substr(2);
  auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), serial);
  if (ec != std::errc() || ptr != digits.data() + digits.size()) return nullptr;
  auto it = entries_.find(serial);
  if (it == entries_.end() || it->second->removed) return nullptr;
  return it->second;
}

namespace {
tl::unexpected<Error> NotFound(std::string_view id) {
  return MakeError(ErrorCode::kNotFound, fmt::format("no process '{}'", id));
}
}  // namespace

ProcessInfo ProcessTable::InfoOf(const Entry& e) const {
  ProcessInfo info;
  info.id = e.id;
  info.pid = e.child.pid();
  info.command = e.command;
  info.argv = e.argv;
  info.cwd = e.cwd;
  info.state = e.outcome ? ProcessState::kExited : ProcessState::kRunning;
  info.outcome = e.outcome;
  info.started_at = e.started_at;
  info.exited_at = e.exited_at;
  info.stdin_open = e.in.valid() && !e.close_stdin_when_flushed;
  info.output_open = e.out.valid() || e.err.valid();
  info.stdout_bytes = e.stdout_bytes;
  info.stderr_bytes = e.stderr_bytes;
  info.log_start_offset = e.log.start_offset();
  info.log_end_offset = e.log.end_offset();
  return info;
}

std::vector<ProcessInfo> ProcessTable::List() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ProcessInfo> out;
  for (const auto& [serial, e] : entries_) {
    if (!e->removed) out.push_back(InfoOf(*e));
  }
  return out;
}

Result<ProcessInfo> ProcessTable::Get(std::string_view id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto e = Find(id);
  if (!e) return NotFound(id);
  return InfoOf(*e);
}

Result<LogChunk> ProcessTable::ReadLog(std::string_view id, uint64_t offset, size_t max_bytes,
                                       std::chrono::milliseconds wait) const {
  std::unique_lock<std::mutex> lock(mu_);
  auto e = Find(id);
  if (!e) return NotFound(id);
  if (wait.count() > 0) {
    cv_.wait_for(lock, wait, [&] {
      return e->removed || e->log.end_offset() > offset || (!e->out && !e->err);
    });
    if (e->removed) return NotFound(id);
  }
  LogRing::Slice slice = e->log.Read(offset, max_bytes);
  LogChunk chunk;
  chunk.data = std::move(slice.data);
  chunk.offset = slice.offset;
  chunk.next_offset = slice.next_offset;
  chunk.dropped = slice.dropped;
  chunk.eof = !e->out && !e->err && chunk.next_offset >= e->log.end_offset();
  return chunk;
}

Status ProcessTable::WriteStdin(std::string_view id, std::string_view data) {
  std::lock_guard<std::mutex> lock(mu_);
  auto e = Find(id);
  if (!e) return NotFound(id);
  if (!e->in || e->close_stdin_when_flushed) {
    return MakeError(ErrorCode::kConflict, fmt::format("stdin of {} is closed", id));
  }
  if (e->pending_stdin.size() + data.size() > options_.max_pending_stdin) {
    return MakeError(ErrorCode::kResourceExhausted,
                     fmt::format("stdin of {} has {} bytes queued already (limit {})", id,
                                 e->pending_stdin.size(), options_.max_pending_stdin));
  }
  e->pending_stdin.append(data);
  FlushStdin(*e);
  if (!e->in && !data.empty()) {
    return MakeError(ErrorCode::kConflict,
                     fmt::format("stdin of {} is closed (the process does not read it)", id));
  }
  return {};
}

Status ProcessTable::CloseStdin(std::string_view id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto e = Find(id);
  if (!e) return NotFound(id);
  e->close_stdin_when_flushed = true;
  FlushStdin(*e);
  return {};
}

Status ProcessTable::Signal(std::string_view id, int signal) {
  if (signal < 0 || signal > 64) {
    return MakeError(ErrorCode::kInvalidArgument, fmt::format("invalid signal {}", signal));
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto e = Find(id);
  if (!e) return NotFound(id);
  if (e->reaped) {
    return MakeError(ErrorCode::kConflict, fmt::format("process {} has exited", id));
  }
  return e->child.SignalGroup(signal);
}

Result<ProcessInfo> ProcessTable::Wait(std::string_view id,
                                       std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  auto e = Find(id);
  if (!e) return NotFound(id);
  cv_.wait_for(lock, timeout, [&] { return e->removed || e->outcome.has_value(); });
  if (e->removed) return NotFound(id);
  return InfoOf(*e);
}

void ProcessTable::TerminateGroup(Entry& e, std::chrono::milliseconds grace) {
  if (e.reaped) return;
  if (e.status) {
    // The direct child is gone: whatever is left of the group gets SIGKILL.
    (void)e.child.SignalGroup(SIGKILL);
    return;
  }
  if (grace.count() == 0) {
    (void)e.child.SignalGroup(SIGKILL);
    e.sigkilled = true;
    e.kill_at.reset();
  } else {
    (void)e.child.SignalGroup(SIGTERM);
    auto at = Clock::now() + grace;
    if (!e.kill_at || at < *e.kill_at) e.kill_at = at;
  }
}

Result<ProcessInfo> ProcessTable::Kill(std::string_view id, std::chrono::milliseconds grace) {
  std::unique_lock<std::mutex> lock(mu_);
  auto e = Find(id);
  if (!e) return NotFound(id);
  if (!e->status && !e->timed_out) e->kill_requested = true;
  TerminateGroup(*e, grace);
  ProcessInfo info = InfoOf(*e);
  lock.unlock();
  Wake();
  return info;
}

Status ProcessTable::Remove(std::string_view id) {
  std::unique_lock<std::mutex> lock(mu_);
  auto e = Find(id);
  if (!e) return NotFound(id);
  e->removed = true;
  if (e->reaped) {
    entries_.erase(e->serial);
  } else {
    if (!e->status && !e->timed_out) e->kill_requested = true;
    TerminateGroup(*e, std::chrono::milliseconds(0));
    CloseStdinLocked(*e);
    if (e->status) {
      // Exited already; stop draining whatever still holds the pipes, reap.
      CloseOutput(*e, true);
      CloseOutput(*e, false);
      MaybeReap(*e);
      if (e->reaped) entries_.erase(e->serial);
    }
  }
  lock.unlock();
  cv_.notify_all();
  Wake();
  return {};
}

void ProcessTable::Shutdown(std::chrono::milliseconds grace) {
  std::unique_lock<std::mutex> lock(mu_);
  if (shutting_down_) return;
  shutting_down_ = true;
  for (auto& [serial, e] : entries_) {
    if (!e->status && !e->timed_out) e->kill_requested = true;
    TerminateGroup(*e, grace);
  }
  lock.unlock();
  Wake();
  lock.lock();
  auto all_exited = [&] {
    return std::all_of(entries_.begin(), entries_.end(),
                       [](const auto& kv) { return kv.second->status.has_value(); });
  };
  // The loop escalates to SIGKILL at each kill_at (now + grace); this bounds the
  // wait in case a process is stuck in uninterruptible sleep.
  cv_.wait_for(lock, grace + std::chrono::seconds(30), all_exited);
  stop_loop_ = true;
  lock.unlock();
  Wake();
  if (thread_.joinable()) thread_.join();
  lock.lock();
  for (auto& [serial, e] : entries_) {
    if (e->reaped) continue;
    for (int fd : {e->out.get(), e->err.get(), e->in.get()}) {
      if (fd >= 0) epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, fd, nullptr);
    }
    e->out.reset();
    e->err.reset();
    e->in.reset();
    (void)e->child.SignalGroup(SIGKILL);
    if (!e->status) {
      auto st = e->child.Wait();
      e->status = st.value_or(ExitStatus{});
      OnExit(*e);
    }
    MaybeReap(*e);
  }
  // Forget removed entries.
  std::erase_if(entries_, [](const auto& kv) { return kv.second->removed; });
  lock.unlock();
  cv_.notify_all();
}

// --- The loop ---------------------------------------------------------------

void ProcessTable::Loop() {
  epoll_event events[64];
  for (;;) {
    int timeout_ms;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_loop_) return;
      timeout_ms = NextTimeoutMs();
    }
    int n = epoll_wait(epoll_fd_.get(), events, 64, timeout_ms);
    if (n < 0 && errno != EINTR) return;  // EBADF/EINVAL: nothing sane to do
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (int i = 0; i < n; ++i) {
        if (events[i].data.u64 == kWakeData) {
          uint64_t count;
          while (::read(wake_fd_.get(), &count, sizeof(count)) < 0 && errno == EINTR) {
          }
          continue;
        }
        HandleEvent(events[i].data.u64, events[i].events);
      }
      RunDeadlines();
      std::erase_if(entries_,
                    [](const auto& kv) { return kv.second->removed && kv.second->reaped; });
    }
    cv_.notify_all();
  }
}

int ProcessTable::NextTimeoutMs() const {
  std::optional<Clock::time_point> next;
  for (const auto& [serial, e] : entries_) {
    if (e->status) continue;
    if (e->timeout_at && !e->timed_out && !e->kill_requested) {
      if (!next || *e->timeout_at < *next) next = e->timeout_at;
    }
    if (e->kill_at && (!next || *e->kill_at < *next)) next = e->kill_at;
  }
  if (!next) return -1;
  auto ms = std::chrono::ceil<std::chrono::milliseconds>(*next - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(ms, 0, 24 * 3600 * 1000));
}

void ProcessTable::RunDeadlines() {
  const auto now = Clock::now();
  for (auto& [serial, e] : entries_) {
    if (e->status) continue;
    if (e->timeout_at && !e->timed_out && !e->kill_requested && now >= *e->timeout_at) {
      e->timed_out = true;
      CloseStdinLocked(*e);
      TerminateGroup(*e, e->kill_grace);
    }
    if (e->kill_at && now >= *e->kill_at) {
      (void)e->child.SignalGroup(SIGKILL);
      e->sigkilled = true;
      e->kill_at.reset();
    }
  }
}

void ProcessTable::HandleEvent(uint64_t data, uint32_t events) {
  auto it = entries_.find(data >> 3);
  if (it == entries_.end()) return;
  Entry& e = *it->second;
  switch (static_cast<Tag>(data & 7)) {
    case kTagStdout:
      if (e.out) ReadOutput(e, true);
      break;
    case kTagStderr:
      if (e.err) ReadOutput(e, false);
      break;
    case kTagStdin:
      if (e.in) FlushStdin(e);
      break;
    case kTagPidfd:
      if (!e.status && (events & (EPOLLIN | EPOLLHUP)) != 0) {
        auto polled = e.child.Poll();
        if (polled && !*polled) break;  // spurious
        epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, e.child.pidfd(), nullptr);
        e.status = polled ? **polled : ExitStatus{};
        OnExit(e);
      }
      break;
  }
  MaybeReap(e);
}

void ProcessTable::OnExit(Entry& e) {
  e.exited_at = std::chrono::system_clock::now();
  e.kill_at.reset();
  if (e.timed_out) {
    e.outcome = TimedOut{e.timeout, e.sigkilled, *e.status};
  } else if (e.kill_requested) {
    e.outcome = Killed{e.sigkilled, *e.status};
  } else {
    e.outcome = OutcomeFromStatus(*e.status);
  }
  // Terminated on purpose: nothing of the group may survive.
  if (e.timed_out || e.kill_requested) (void)e.child.SignalGroup(SIGKILL);
  CloseStdinLocked(e);
  if (e.removed) {
    // Nobody will read the logs: stop draining, reap now.
    CloseOutput(e, true);
    CloseOutput(e, false);
  }
}

void ProcessTable::ReadOutput(Entry& e, bool is_stdout) {
  UniqueFd& fd = is_stdout ? e.out : e.err;
  ssize_t n = ::read(fd.get(), read_buf_.data(), read_buf_.size());
  if (n > 0) {
    std::string_view bytes(read_buf_.data(), static_cast<size_t>(n));
    (is_stdout ? e.stdout_bytes : e.stderr_bytes) += bytes.size();
    e.log.Append(bytes);
    return;
  }
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  CloseOutput(e, is_stdout);
}

void ProcessTable::CloseOutput(Entry& e, bool is_stdout) {
  UniqueFd& fd = is_stdout ? e.out : e.err;
  if (!fd) return;
  epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, fd.get(), nullptr);
  fd.reset();
}

void ProcessTable::FlushStdin(Entry& e) {
  while (e.in && !e.pending_stdin.empty()) {
    ssize_t w = WriteNoSigpipe(e.in.get(), e.pending_stdin.data(),
                               std::min(e.pending_stdin.size(), kTableReadChunk));
    if (w > 0) {
      e.pending_stdin.erase(0, static_cast<size_t>(w));
      continue;
    }
    if (w < 0 && errno == EAGAIN) break;
    CloseStdinLocked(e);  // EPIPE: the process no longer reads stdin
    return;
  }
  if (!e.in) return;
  if (e.pending_stdin.empty()) {
    if (e.stdin_watched) {
      epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, e.in.get(), nullptr);
      e.stdin_watched = false;
    }
    if (e.close_stdin_when_flushed) CloseStdinLocked(e);
    return;
  }
  if (!e.stdin_watched) {
    epoll_event ev{};
    ev.events = EPOLLOUT;
    ev.data.u64 = EventData(e.serial, kTagStdin);
    if (epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, e.in.get(), &ev) == 0) {
      e.stdin_watched = true;
    } else {
      CloseStdinLocked(e);
    }
  }
}

void ProcessTable::CloseStdinLocked(Entry& e) {
  if (e.in && e.stdin_watched) epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, e.in.get(), nullptr);
  e.stdin_watched = false;
  e.in.reset();
  e.pending_stdin.clear();
  e.pending_stdin.shrink_to_fit();
}

void ProcessTable::MaybeReap(Entry& e) {
  if (e.reaped || !e.status || e.out || e.err) return;
  CloseStdinLocked(e);
  (void)e.child.Wait();  // exited already: does not block
  e.reaped = true;
}

}  // namespace deepbox::sandboxd::proc
