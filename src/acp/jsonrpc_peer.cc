#include "acp/jsonrpc_peer.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>

#include "common/io.h"

namespace deepbox::acp {

namespace {

bool IsRpcId(const json::value& id) {
  if (id.is_string() || id.is_int64()) return true;
  return id.is_uint64() && id.get_uint64() <= static_cast<uint64_t>(INT64_MAX);
}

RpcParseFailure InvalidRequest(std::string message, json::value id = nullptr) {
  return RpcParseFailure{RpcError{kInvalidRequest, std::move(message), nullptr}, std::move(id)};
}

}  // namespace

tl::expected<RpcMessage, RpcParseFailure> ParseRpcMessage(std::string_view line) {
  boost::system::error_code ec;
  json::value v = json::parse(line, ec);
  if (ec) {
    return tl::unexpected(
        RpcParseFailure{RpcError{kParseError, "Parse error: " + ec.message(), nullptr}, nullptr});
  }
  if (v.is_array()) return tl::unexpected(InvalidRequest("Invalid Request: batches are not used"));
  if (!v.is_object()) return tl::unexpected(InvalidRequest("Invalid Request: not a JSON object"));
  const json::object& o = v.get_object();
  const json::value* idv = o.if_contains("id");
  json::value id = idv && IsRpcId(*idv) ? *idv : json::value(nullptr);
  const json::value* version = o.if_contains("jsonrpc");
  if (!version || !version->is_string() || version->get_string() != "2.0") {
    return tl::unexpected(InvalidRequest("Invalid Request: \"jsonrpc\" must be \"2.0\"", id));
  }
  RpcMessage m;
  if (const json::value* method = o.if_contains("method")) {
    if (!method->is_string()) {
      return tl::unexpected(InvalidRequest("Invalid Request: \"method\" must be a string", id));
    }
    m.method = std::string(method->get_string());
    if (const json::value* p = o.if_contains("params"); p && !p->is_null()) {
      if (!p->is_object()) {
        return tl::unexpected(InvalidRequest("Invalid Request: \"params\" must be an object", id));
      }
      m.params = p->get_object();
    }
    if (idv) {
      if (!IsRpcId(*idv)) {
        return tl::unexpected(
            InvalidRequest("Invalid Request: \"id\" must be a string or an integer"));
      }
      m.kind = RpcMessage::Kind::kRequest;
      m.id = *idv;
    } else {
      m.kind = RpcMessage::Kind::kNotification;
    }
    return m;
  }
  const json::value* result = o.if_contains("result");
  const json::value* error = o.if_contains("error");
  if ((result == nullptr) == (error == nullptr)) {
    return tl::unexpected(InvalidRequest(
        "Invalid Request: a message needs \"method\", or exactly one of \"result\" and \"error\"",
        id));
  }
  m.id = id;
  if (result) {
    if (id.is_null())
      return tl::unexpected(InvalidRequest("Invalid Request: a result needs an id"));
    m.kind = RpcMessage::Kind::kResult;
    m.result = *result;
    return m;
  }
  const json::object* e = error->if_object();
  const json::value* code = e ? e->if_contains("code") : nullptr;
  auto code_int = code ? JsonToInt64(*code) : std::nullopt;
  if (!code_int || *code_int < INT32_MIN || *code_int > INT32_MAX) {
    return tl::unexpected(InvalidRequest("Invalid Request: error \"code\" must be an integer", id));
  }
  m.kind = RpcMessage::Kind::kError;
  m.error.code = static_cast<int>(*code_int);
  m.error.message = FindString(*e, {"message"});
  if (const json::value* d = e->if_contains("data")) m.error.data = *d;
  return m;
}

std::string SerializeRpcRequest(const json::value& id, std::string_view method,
                                const json::object& params) {
  return ToJson(
      json::object{{"jsonrpc", "2.0"}, {"id", id}, {"method", method}, {"params", params}});
}

std::string SerializeRpcNotification(std::string_view method, const json::object& params) {
  return ToJson(json::object{{"jsonrpc", "2.0"}, {"method", method}, {"params", params}});
}

std::string SerializeRpcResult(const json::value& id, const json::value& result) {
  return ToJson(json::object{{"jsonrpc", "2.0"}, {"id", id}, {"result", result}});
}

std::string SerializeRpcError(const json::value& id, const RpcError& error) {
  json::object e{{"code", error.code}, {"message", JsonString(error.message)}};
  if (!error.data.is_null()) e["data"] = error.data;
  return ToJson(json::object{{"jsonrpc", "2.0"}, {"id", id}, {"error", std::move(e)}});
}

Status JsonRpcPeer::Send(const std::string& line) {
  std::lock_guard<std::mutex> lock(write_mu_);
  if (closed_.load()) return MakeError(ErrorCode::kUnavailable, "the client went away");
  auto st = WriteAll(options_.out_fd, line + "\n", "the client's stdin");
  if (!st) {
    closed_.store(true);
    CloseCalls();
  }
  return st;
}

Status JsonRpcPeer::Notify(std::string_view method, const json::object& params) {
  return Send(SerializeRpcNotification(method, params));
}

Status JsonRpcPeer::Respond(const json::value& id, const json::value& result) {
  return Send(SerializeRpcResult(id, result));
}

Status JsonRpcPeer::RespondError(const json::value& id, const RpcError& error) {
  return Send(SerializeRpcError(id, error));
}

Result<json::value> JsonRpcPeer::Call(std::string_view method, const json::object& params,
                                      const std::atomic<bool>* cancel) {
  int64_t id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_.load()) return MakeError(ErrorCode::kUnavailable, "the client went away");
    id = next_id_++;
    pending_[id];
  }
  if (auto st = Send(SerializeRpcRequest(id, method, params)); !st) {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.erase(id);
    return tl::unexpected(st.error());
  }
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    Pending& p = pending_[id];
    if (p.done) break;
    if (cancel && cancel->load()) {
      pending_.erase(id);
      return MakeError(ErrorCode::kCancelled, std::string(method) + ": cancelled");
    }
    cv_.wait_for(lock, std::chrono::milliseconds(50));
  }
  Pending p = std::move(pending_[id]);
  pending_.erase(id);
  if (p.result) return std::move(*p.result);
  if (p.error) {
    Error e(ErrorCode::kConflict,
            std::string(method) + ": the client answered: " + p.error->message);
    e.reason = "rpc:" + std::to_string(p.error->code);
    return tl::unexpected(e);
  }
  return MakeError(ErrorCode::kUnavailable,
                   std::string(method) + ": the client went away before answering");
}

void JsonRpcPeer::CloseCalls() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [id, p] : pending_) p.done = true;
  cv_.notify_all();
}

void JsonRpcPeer::Dispatch(std::string_view line, const Handler& handler) {
  auto m = ParseRpcMessage(line);
  if (!m) {
    (void)RespondError(m.error().id, m.error().error);
    return;
  }
  if (m->kind == RpcMessage::Kind::kResult || m->kind == RpcMessage::Kind::kError) {
    auto key = JsonToInt64(m->id);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = key ? pending_.find(*key) : pending_.end();
    if (it == pending_.end()) return;  // late (cancelled) or unknown: nothing waits for it
    if (m->kind == RpcMessage::Kind::kResult) {
      it->second.result = std::move(m->result);
    } else {
      it->second.error = std::move(m->error);
    }
    it->second.done = true;
    cv_.notify_all();
    return;
  }
  handler(std::move(*m));
}

Status JsonRpcPeer::Serve(const Handler& handler) {
  std::string buffer;
  bool skipping = false;  // inside a line longer than the limit
  Status status;
  char chunk[65536];
  while (!closed_.load()) {
    pollfd fds[2] = {{options_.in_fd, POLLIN, 0}, {options_.stop_fd, POLLIN, 0}};
    int n = ::poll(fds, options_.stop_fd >= 0 ? 2 : 1, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      status = MakeSyscallError("poll", errno, "the client's stdout");
      break;
    }
    if (options_.stop_fd >= 0 && (fds[1].revents & POLLIN)) break;
    ssize_t got = ::read(options_.in_fd, chunk, sizeof chunk);
    if (got < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      status = MakeSyscallError("read", errno, "the client's stdout");
      break;
    }
    if (got == 0) break;  // the client closed its end: it went away
    std::string_view data(chunk, static_cast<size_t>(got));
    while (!data.empty()) {
      size_t nl = data.find('\n');
      std::string_view part = data.substr(0, nl);
      if (skipping) {
        if (nl != std::string_view::npos) skipping = false;
      } else if (buffer.size() + part.size() > options_.max_message_bytes) {
        buffer.clear();
        skipping = nl == std::string_view::npos;
        (void)RespondError(nullptr,
                           RpcError{kInvalidRequest,
                                    "Invalid Request: message longer than " +
                                        std::to_string(options_.max_message_bytes) + " bytes",
                                    nullptr});
      } else {
        buffer.append(part);
        if (nl != std::string_view::npos) {
          std::string line = std::move(buffer);
          buffer.clear();
          if (!line.empty() && line.back() == '\r') line.pop_back();
          if (line.find_first_not_of(" \t") != std::string::npos) Dispatch(line, handler);
        }
      }
      if (nl == std::string_view::npos) break;
      data.remove_prefix(nl + 1);
    }
  }
  closed_.store(true);
  CloseCalls();
  return status;
}

}  // namespace deepbox::acp
