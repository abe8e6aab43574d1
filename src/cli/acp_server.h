// `deepbox acp`, free of CLI11: an Agent Client Protocol agent on stdin/stdout
// (docs/acp.md). Each ACP session is one deep-agent thread (its id is the
// session id) in its own sandbox holding a copy of the client's project
// (acp/project_copy.h); every tool runs there. File changes reach the
// project only through the client: proposed as a tool call with a diff,
// asked with session/request_permission (per the session's mode), written
// with fs/write_text_file. Returns the process exit code.
#pragma once

#include <chrono>

#include "acp/project_copy.h"
#include "acp/protocol.h"
#include "cli/run_config.h"

namespace deepbox::cli {

struct AcpConfig {
  run::RunConfig run;  // model, sandbox provider and its settings, threads, limits
  acp::ApprovalMode mode = acp::ApprovalMode::kApproveAll;
  acp::ProjectCopyOptions copy;
  // A session's sandbox is paused (its processes frozen: memory kept, no
  // CPU) after this long with no prompt running; the next prompt resumes
  // it. 0 = never.
  std::chrono::seconds idle_pause{300};
  // After this long with no prompt running it is suspended instead (every
  // process in it ends: memory freed, files kept); the next prompt resumes
  // it with fresh processes (the client's stdio MCP servers are started
  // again in it). 0 = never.
  std::chrono::seconds idle_suspend{1800};
};

int RunAcpServer(const AcpConfig& config);

}  // namespace deepbox::cli
