// The tools of `deepbox mcp`:
//
//   sandbox_create, sandbox_list, sandbox_delete   lifecycle (local or k8s)
//   execute                                        a shell command; output streamed
//                                                  as progress notifications
//   ls, read_file, write_file, edit_file, glob, grep
//                                                  deepagents' file tools: the
//                                                  agent's own implementations
//                                                  (src/agent/tools_fs.h), same
//                                                  arguments and output strings
//   upload_file, download_file                     binary files, base64
//
// Every tool but the lifecycle ones takes an optional sandbox_id; without it
// the call runs in the client's default sandbox (created on first use,
// deleted when the client goes away). Every result says which sandbox ran it
// in _meta["dev.deepbox/sandbox_id"]. Input schemas are strict
// (additionalProperties false); see registry.h for how bad arguments are
// reported.
#pragma once

#include <cstddef>
#include <memory>

#include "agent/tools_execute.h"
#include "agent/tools_fs.h"
#include "mcp/registry.h"
#include "mcp/sandboxes.h"

namespace deepbox::mcp {

inline constexpr const char* kMetaSandboxId = "dev.deepbox/sandbox_id";

struct SandboxToolsOptions {
  agent::FsToolOptions fs;
  agent::ExecuteToolOptions execute;
  size_t max_transfer_bytes = 32u << 20;  // upload_file / download_file
  int64_t default_ttl_seconds = 3600;     // sandbox_create without ttl_seconds
};

void AddSandboxTools(ToolRegistry& registry, std::shared_ptr<SandboxBroker> broker,
                     SandboxToolsOptions options = {});

}  // namespace deepbox::mcp
