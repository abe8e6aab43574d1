// The stdio transport of the server: newline-delimited JSON-RPC on a pair of
// fds (the process's stdin/stdout). Cheap methods are answered in order on
// the reading thread; each tools/call runs on its own thread, so a long
// `execute` does not hold up the rest, and notifications/cancelled stops it
// (no response is sent for a cancelled request). End of input means the
// client went away: every call is cancelled, awaited, then on_close runs
// (which deletes the client's default sandbox).
#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include "common/error.h"
#include "mcp/server.h"

namespace deepbox::mcp {

struct StdioOptions {
  int in_fd = 0;
  int out_fd = 1;
  int stop_fd = -1;                      // readable = shut down (a signal)
  size_t max_message_bytes = 64u << 20;  // longer lines are refused (-32600)
  size_t max_concurrent_calls = 64;      // beyond it a call gets an isError result
  std::string owner = "stdio";           // ToolCallContext::owner()
  std::function<void()> on_close;        // after the last call finished
};

// Serves until end of input, a failed write (the client is gone) or stop_fd.
// Returns an error only for a failing read.
Status ServeStdio(const McpServer& server, const StdioOptions& options);

}  // namespace deepbox::mcp
