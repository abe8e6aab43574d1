// JSON-RPC 2.0 over a pair of fds, one message per line, as ACP (the Agent
// Client Protocol) uses it: both sides send requests. The reading thread
// (Serve) hands requests and notifications to a handler and matches
// responses to the requests this side sent (Call, from any thread).
//
// ACP is looser than MCP's narrowed JSON-RPC (src/mcp/jsonrpc.h), which this
// does not reuse for that reason: a result may be any JSON value (the SDKs
// answer `"result": null` to fs/write_text_file), params may be absent.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "common/error.h"
#include "common/json.h"

namespace deepbox::acp {

inline constexpr int kParseError = -32700;
inline constexpr int kInvalidRequest = -32600;
inline constexpr int kMethodNotFound = -32601;
inline constexpr int kInvalidParams = -32602;
inline constexpr int kInternalError = -32603;
// ACP's own: the agent needs credentials it does not have.
inline constexpr int kAuthRequired = -32000;
// ACP's own: a resource (a session, a file) does not exist.
inline constexpr int kResourceNotFound = -32002;

struct RpcError {
  int code = kInternalError;
  std::string message;
  json::value data;  // null = absent
};

struct RpcMessage {
  enum class Kind { kRequest, kNotification, kResult, kError };
  Kind kind = Kind::kRequest;
  json::value id;  // requests and responses
  std::string method;
  json::object params;  // absent params read as {}
  json::value result;   // kResult (any JSON value)
  RpcError error;       // kError
};

// Why a line is not a message, and the id to answer it with (null when
// unreadable).
struct RpcParseFailure {
  RpcError error;
  json::value id;
};

// One line. Ids are strings or integers; params, when present, an object.
tl::expected<RpcMessage, RpcParseFailure> ParseRpcMessage(std::string_view line);

std::string SerializeRpcRequest(const json::value& id, std::string_view method,
                                const json::object& params);
std::string SerializeRpcNotification(std::string_view method, const json::object& params);
std::string SerializeRpcResult(const json::value& id, const json::value& result);
std::string SerializeRpcError(const json::value& id, const RpcError& error);

class JsonRpcPeer {
 public:
  // Called on the reading thread for every request and notification; a
  // request must be answered (Respond / RespondError), from any thread.
  using Handler = std::function<void(RpcMessage)>;

  struct Options {
    int in_fd = 0;
    int out_fd = 1;
    int stop_fd = -1;                      // readable = stop reading (a signal)
    size_t max_message_bytes = 64u << 20;  // a longer line is answered -32600 and skipped
  };

  explicit JsonRpcPeer(Options options) : options_(options) {}
  JsonRpcPeer(const JsonRpcPeer&) = delete;
  JsonRpcPeer& operator=(const JsonRpcPeer&) = delete;

  // Reads until end of input, stop_fd or a failed write; malformed lines are
  // answered with the JSON-RPC error they deserve. Then every Call still
  // waiting fails (UNAVAILABLE: the client went away). Returns the read error,
  // if any.
  Status Serve(const Handler& handler);

  // Sends; an error once the output is broken (the client is gone).
  Status Notify(std::string_view method, const json::object& params);
  Status Respond(const json::value& id, const json::value& result);
  Status RespondError(const json::value& id, const RpcError& error);

  // Sends a request and waits for its response. Fails with the peer's error
  // (its message, code in Error::reason as "rpc:<code>"), UNAVAILABLE when the
  // peer went away, CANCELLED when *cancel became true first (polled every
  // 50 ms, so a cancel takes effect within a second).
  Result<json::value> Call(std::string_view method, const json::object& params,
                           const std::atomic<bool>* cancel = nullptr);

  bool closed() const { return closed_.load(); }

 private:
  Status Send(const std::string& line);
  void Dispatch(std::string_view line, const Handler& handler);
  void CloseCalls();

  struct Pending {
    bool done = false;
    std::optional<json::value> result;
    std::optional<RpcError> error;
  };

  Options options_;
  std::mutex write_mu_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<int64_t, Pending> pending_;
  int64_t next_id_ = 1;
  std::atomic<bool> closed_{false};
};

}  // namespace deepbox::acp
