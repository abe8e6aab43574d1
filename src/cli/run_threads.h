// `deepbox threads ls`: the conversation threads `deepbox run` saved, newest
// first, with what each is about (to continue one with --thread ID).
#pragma once

#include <optional>
#include <string>

namespace deepbox::run {

struct ThreadsFlags {
  std::optional<std::string> threads_dir;  // else DEEPBOX_THREADS_DIR, else the default
  bool json = false;
};

// Returns the exit code (0, or 2 when the directory cannot be read).
int ThreadsListCommand(const ThreadsFlags& flags);

}  // namespace deepbox::run
