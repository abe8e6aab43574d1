#include "sandboxd/server/exec_sessions.h"

#include <fmt/format.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/random.h>

#include <cerrno>

#include "sandboxd/proc/spawn.h"

namespace deepbox::sandboxd {

struct ExecSessions::Session {
  std::string id;
  bool tty = false;
  UniqueFd ended;    // eventfd: readable once the command has ended
  std::mutex io_mu;  // serializes writers; guards the fields below
  UniqueFd input;    // the command's stdin (pipe write end or terminal master)
  bool stdin_closed = false;
  bool over = false;
};

namespace {

Error Ended(std::string_view id) {
  return Error(ErrorCode::kConflict, fmt::format("exec session {} has ended", id));
}

}  // namespace

Result<std::shared_ptr<ExecSessions::Session>> ExecSessions::Open(bool tty) {
  unsigned char random[16];
  if (getrandom(random, sizeof random, 0) != static_cast<ssize_t>(sizeof random)) {
    return MakeSyscallError("getrandom", errno);
  }
  auto s = std::make_shared<Session>();
  s->id = "x-";
  for (unsigned char c : random) s->id += fmt::format("{:02x}", c);
  s->tty = tty;
  s->ended.reset(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!s->ended) return MakeSyscallError("eventfd", errno);
  std::lock_guard<std::mutex> lock(mu_);
  sessions_[s->id] = s;
  return s;
}

const std::string& ExecSessions::IdOf(const Session& session) { return session.id; }

void ExecSessions::Attach(Session& session, UniqueFd input) {
  std::lock_guard<std::mutex> lock(session.io_mu);
  session.input = std::move(input);
}

void ExecSessions::End(const std::shared_ptr<Session>& session) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    sessions_.erase(session->id);
  }
  // Wake a writer waiting for room, then close the input once it has left.
  uint64_t one = 1;
  (void)::write(session->ended.get(), &one, sizeof one);
  std::lock_guard<std::mutex> lock(session->io_mu);
  session->over = true;
  session->input.reset();
}

std::shared_ptr<ExecSessions::Session> ExecSessions::Find(std::string_view id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sessions_.find(id);
  return it == sessions_.end() ? nullptr : it->second;
}

Status ExecSessions::Write(std::string_view id, std::string_view data, bool eof) {
  auto s = Find(id);
  if (!s) {
    return MakeError(ErrorCode::kNotFound,
                     fmt::format("no running exec session '{}' (its command has ended)", id));
  }
  std::lock_guard<std::mutex> lock(s->io_mu);
  if (s->over || !s->input) return tl::unexpected(Ended(id));
  if (s->stdin_closed) {
    return MakeError(ErrorCode::kConflict, fmt::format("stdin of exec session {} is closed", id));
  }
  while (!data.empty()) {
    ssize_t n = proc::WriteNoSigpipe(s->input.get(), data.data(), data.size());
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EAGAIN) {
      // Full: wait for room or for the end of the command (which wakes us
      // through `ended`, so this never outlives the session).
      pollfd fds[2] = {{s->input.get(), POLLOUT, 0}, {s->ended.get(), POLLIN, 0}};
      if (::poll(fds, 2, -1) < 0 && errno != EINTR) return MakeSyscallError("poll", errno);
      if ((fds[1].revents & POLLIN) != 0) return tl::unexpected(Ended(id));
      continue;
    }
    if (n < 0 && (errno == EPIPE || errno == EIO)) {
      // Nobody reads the pipe any more (EPIPE), or the terminal is gone (EIO).
      s->input.reset();
      return MakeError(ErrorCode::kConflict,
                       fmt::format("the command of exec session {} closed its stdin", id));
    }
    return MakeSyscallError("write", n < 0 ? errno : EIO, "exec session stdin");
  }
  if (eof) {
    s->stdin_closed = true;
    // A pipe reports EOF once closed. A terminal stays open for resizes and
    // for output (its EOF is a ^D byte the caller sends).
    if (!s->tty) s->input.reset();
  }
  return {};
}

Status ExecSessions::Resize(std::string_view id, proc::WindowSize size) {
  auto s = Find(id);
  if (!s) {
    return MakeError(ErrorCode::kNotFound,
                     fmt::format("no running exec session '{}' (its command has ended)", id));
  }
  if (!s->tty) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("exec session {} has no terminal to resize", id));
  }
  std::lock_guard<std::mutex> lock(s->io_mu);
  if (s->over || !s->input) return tl::unexpected(Ended(id));
  return proc::ResizePty(s->input.get(), size);
}

}  // namespace deepbox::sandboxd
