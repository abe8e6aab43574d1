// Interactive exec sessions: a POST /deepbox/v1/exec/stream with
// "stdin_stream": true runs the command and streams its output; its stdin
// bytes (and, on a terminal, window resizes) arrive on separate requests that
// name the session (POST /deepbox/v1/exec/sessions/{id}/stdin|resize). A
// session lives exactly as long as its streaming request's command.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "common/error.h"
#include "common/unique_fd.h"
#include "sandboxd/proc/pty.h"

namespace deepbox::sandboxd {

class ExecSessions {
 public:
  struct Session;

  // Registers a session with a fresh unguessable id ("x-" + 32 hex digits).
  Result<std::shared_ptr<Session>> Open(bool tty);
  static const std::string& IdOf(const Session& session);
  // The command runs: `input` (O_NONBLOCK) is where its stdin bytes go.
  static void Attach(Session& session, UniqueFd input);
  // The command has ended: blocked and later writers fail, the id is forgotten.
  void End(const std::shared_ptr<Session>& session);

  // Writes all of `data` to the command's stdin, waiting while the pipe (or
  // terminal) is full; then, with `eof`, closes it (on a terminal: refuses
  // further input; the terminal's own EOF is the byte ^D). NOT_FOUND for an
  // unknown or ended session; CONFLICT when the command has ended or closed
  // its stdin meanwhile.
  Status Write(std::string_view id, std::string_view data, bool eof);
  // New window size of a terminal session (SIGWINCH to its foreground group).
  Status Resize(std::string_view id, proc::WindowSize size);

 private:
  std::shared_ptr<Session> Find(std::string_view id);

  std::mutex mu_;
  std::map<std::string, std::shared_ptr<Session>, std::less<>> sessions_;
};

}  // namespace deepbox::sandboxd
