// The interactive prompt of `deepbox run` (no TASK, stdin a terminal): line
// editing and history from libedit (BSD-licensed), emacs keys by default,
// ~/.editrc honoured. History is kept in a file (mode 0600: tasks can hold
// secrets) and saved after every line.
//
// Signals stay with SignalWatcher (blocked in every thread): libedit installs
// no handlers. Ctrl-C at the prompt reaches the watcher, which makes
// `interrupt_fd` readable; the prompt's own read function polls it, so
// ReadLine returns kInterrupted and the caller shows a fresh prompt.
#pragma once

#include <memory>
#include <string>

#include "common/error.h"

namespace deepbox::run {

class LinePrompt {
 public:
  struct Options {
    int in_fd = 0;             // a terminal
    int out_fd = 1;            // where the prompt and the edited line are drawn
    std::string history_file;  // "" = no history file (history in memory only)
    bool color = false;
    int interrupt_fd = -1;  // readable = abandon the line (drained by ReadLine)
    size_t history_size = 1000;
  };
  enum class Outcome { kLine, kInterrupted, kEof };
  struct Read {
    Outcome outcome = Outcome::kEof;
    std::string line;  // kLine: UTF-8, without the newline
  };

  static Result<std::unique_ptr<LinePrompt>> Create(Options options);
  ~LinePrompt();
  LinePrompt(const LinePrompt&) = delete;
  LinePrompt& operator=(const LinePrompt&) = delete;

  Read ReadLine();
  // Adds to the history and saves the file; a failed save is returned (the
  // caller warns once) but history in memory still works.
  Status AddHistory(const std::string& line);

  struct Impl;

 private:
  explicit LinePrompt(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// $XDG_STATE_HOME/deepbox/run_history, else ~/.local/state/deepbox/run_history
// (next to the threads directory); "" when neither is known.
std::string DefaultHistoryFile();

}  // namespace deepbox::run
