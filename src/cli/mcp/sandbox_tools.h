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
// deleted when the client goes away; stateless HTTP clients have none, see
// sandboxes.h). Every result says which sandbox ran it in
// _meta["dev.deepbox/sandbox_id"]. Input schemas are strict
// (additionalProperties false); see registry.h for how bad arguments are
// reported. The deepagents descriptions are adjusted where they would be
// false over MCP (offloading, read-before-edit).
//
// execute: output up to max_inline_output_bytes is returned whole; longer
// output keeps its first and last halves of that budget with the number of
// bytes omitted between them, and the whole output (up to
// max_saved_output_bytes: then its head and tail) is written to
// <root>/large_tool_results/execute_<random> in the sandbox, whose path the
// result names (as `deepbox run`'s eviction does).
//
// A sandbox that stops answering during a call gives one clear error (which
// sandbox, why, what now: SandboxBroker::Unreachable), never host paths or
// socket errors.
#pragma once

#include <cstddef>
#include <memory>

#include "agent/tools_execute.h"
#include "agent/tools_fs.h"
#include "cli/mcp/sandboxes.h"
#include "mcp/registry.h"

namespace deepbox::mcp {

inline constexpr const char* kMetaSandboxId = "dev.deepbox/sandbox_id";

struct SandboxToolsOptions {
  agent::FsToolOptions fs;
  // default_timeout_seconds 0 = 1800 (the daemon's own default, stated in
  // the tool's description).
  agent::ExecuteToolOptions execute;
  // deepagents evicts tool results over 80 000 characters (20 000 tokens).
  size_t max_inline_output_bytes = 80000;
  size_t max_saved_output_bytes = 10u << 20;  // deepagents' capture cap
  size_t max_transfer_bytes = 32u << 20;      // upload_file / download_file
  // Whether stateless HTTP clients (no default sandbox) may call: the
  // descriptions then say that they must pass sandbox_id.
  bool stateless_clients = false;
};

void AddSandboxTools(ToolRegistry& registry, std::shared_ptr<SandboxBroker> broker,
                     SandboxToolsOptions options = {});

}  // namespace deepbox::mcp
