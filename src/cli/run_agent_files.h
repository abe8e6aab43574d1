// Skills and memory for `deepbox run`: host files the agent reads in the
// sandbox. They are read before a sandbox is claimed (a missing or oversized
// file is a usage error that costs nothing), then copied under
// <root>/.deepagents/ once the sandbox is there:
//   skills directory k (1-based) -> <root>/.deepagents/skills/<k>/<name>/SKILL.md ...
//   memory file k                -> <root>/.deepagents/memory/<k>/<file name>
// Later skills directories win by skill name (the agent's rule). Only regular
// files are copied (symlinks are skipped and said so: nothing outside the
// directory is read), at most kMaxAgentFileBytes each, kMaxAgentFilesBytes in
// all. The agent's edits stay in the sandbox: nothing is copied back.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/error.h"
#include "sandbox/sandbox.h"

namespace deepbox::run {

inline constexpr uint64_t kMaxAgentFileBytes = 10u << 20;   // the agent's own SKILL.md cap
inline constexpr uint64_t kMaxAgentFilesBytes = 64u << 20;  // all of them together

struct AgentFiles {
  struct File {
    std::string relative;  // to the source directory (memory: the file name)
    std::string content;
    uint32_t mode = 0644;
  };
  struct Source {
    std::string host_path;
    std::vector<File> files;
    size_t skills = 0;  // skills dirs: how many <name>/SKILL.md
  };
  std::vector<Source> skills;
  std::vector<Source> memory;
  std::vector<std::string> skipped;  // what was left out, and why
};

Result<AgentFiles> ReadAgentFiles(const std::vector<std::string>& skills_dirs,
                                  const std::vector<std::string>& memory_files);

struct CopiedAgentFiles {
  std::vector<std::string> skills_dirs;   // sandbox paths, for DeepAgentOptions
  std::vector<std::string> memory_paths;  // sandbox paths
  std::string summary;                    // one line for the user ("" = nothing copied)
};

Result<CopiedAgentFiles> CopyAgentFiles(Sandbox& sandbox, const AgentFiles& files);

// The threads directory can be created and written (checked before a claim).
Status CheckThreadsDir(const std::string& dir);

}  // namespace deepbox::run
