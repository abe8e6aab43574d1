// Helpers for the process library's tests: /proc inspection and bounded polling.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "common/testing/temp_dir.h"

namespace deepbox::sandboxd::proc::testing {

// Processes of process group `pgid` that are not zombies (or dying).
std::vector<pid_t> LiveGroupMembers(pid_t pgid);
// State letter from /proc/<pid>/stat ('R', 'S', 'Z', ...), or 0 if there is no
// such process.
char ProcState(pid_t pid);
// Parent pid from /proc/<pid>/stat, or 0.
pid_t ParentOf(pid_t pid);
// Zombie children of the test process.
std::vector<pid_t> ZombieChildrenOfSelf();
// Polls `done` every few ms until it holds or `bound` (a generous safety bound,
// not a performance expectation) passes. Returns the last value of `done`.
bool WaitFor(const std::function<bool()>& done,
             std::chrono::milliseconds bound = std::chrono::seconds(30));
// A fresh directory, removed (recursively) at destruction.
using TempDir = deepbox::testing::TempDir;
// Writes `content` to `path` with `mode`.
void WriteFile(const std::string& path, const std::string& content, int mode = 0644);

}  // namespace deepbox::sandboxd::proc::testing
