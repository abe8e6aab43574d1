#include "mcp/stdio.h"

#include <fmt/format.h>
#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "mcp/protocol.h"

namespace deepbox::mcp {
namespace {

// Serializes whole lines onto the output fd; once a write fails the client is
// gone and nothing more is written.
class LineWriter {
 public:
  explicit LineWriter(int fd) : fd_(fd) {}

  bool Write(std::string line) {
    line.push_back('\n');
    std::lock_guard<std::mutex> lock(mu_);
    if (broken_) return false;
    std::string_view rest = line;
    while (!rest.empty()) {
      ssize_t n = ::write(fd_, rest.data(), rest.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        pollfd p{fd_, POLLOUT, 0};
        ::poll(&p, 1, 1000);
        continue;
      }
      if (n <= 0) {
        broken_ = true;
        return false;
      }
      rest.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }
  bool broken() const {
    std::lock_guard<std::mutex> lock(mu_);
    return broken_;
  }

 private:
  int fd_;
  mutable std::mutex mu_;
  bool broken_ = false;
};

class StdioCall : public ToolCallContext {
 public:
  StdioCall(LineWriter& writer, json::value token, const std::string& owner,
            const LegacySession* session)
      : writer_(writer), token_(std::move(token)), owner_(owner), session_(session) {}

  const std::atomic<bool>* cancel_flag() const override { return &cancel_; }
  bool wants_progress() const override { return !token_.is_null(); }
  void Progress(double progress, std::optional<double> total, std::string_view message) override {
    if (token_.is_null() || cancel_.load()) return;
    json::object p;
    p["progressToken"] = token_;
    p["progress"] = JsonNumber(progress);
    if (total) p["total"] = JsonNumber(*total);
    if (!message.empty()) p["message"] = JsonString(message);
    writer_.Write(SerializeNotification("notifications/progress", p));
  }
  void Log(LogLevel level, std::string_view logger, const json::value& data) override {
    if (session_ == nullptr || !session_->WantsLog(level) || cancel_.load()) return;
    writer_.Write(SerializeLogMessage(level, logger, data));
  }
  const std::string& owner() const override { return owner_; }
  void Cancel() { cancel_.store(true); }

 private:
  LineWriter& writer_;
  json::value token_;
  const std::string& owner_;
  const LegacySession* session_;  // the connection's, which outlives its calls
  std::atomic<bool> cancel_{false};
};

struct Worker {
  std::thread thread;
  std::shared_ptr<std::atomic<bool>> done = std::make_shared<std::atomic<bool>>(false);
};

class StdioConnection {
 public:
  StdioConnection(const McpServer& server, const StdioOptions& options)
      : server_(server), options_(options), writer_(options.out_fd) {}

  ~StdioConnection() { Finish(); }

  Status Run() {
    std::string buf;
    bool discarding = false;  // inside an over-long line
    char chunk[65536];
    for (;;) {
      if (writer_.broken()) break;
      pollfd fds[2] = {{options_.in_fd, POLLIN, 0}, {options_.stop_fd, POLLIN, 0}};
      int n = ::poll(fds, options_.stop_fd >= 0 ? 2 : 1, -1);
      if (n < 0) {
        if (errno == EINTR) continue;
        return MakeSyscallError("poll", errno, "stdin");
      }
      if (options_.stop_fd >= 0 && (fds[1].revents & POLLIN)) break;
      ssize_t r = ::read(options_.in_fd, chunk, sizeof chunk);
      if (r < 0) {
        if (errno == EINTR || errno == EAGAIN) continue;
        return MakeSyscallError("read", errno, "stdin");
      }
      if (r == 0) break;  // the client closed our input: it is gone
      size_t start = 0;
      for (size_t i = 0; i < static_cast<size_t>(r); ++i) {
        if (chunk[i] != '\n') continue;
        if (!discarding) {
          buf.append(chunk + start, i - start);
          if (buf.size() > options_.max_message_bytes) {
            RefuseLong();
          } else {
            OnLine(buf);
          }
        }
        buf.clear();
        discarding = false;
        start = i + 1;
      }
      if (!discarding) buf.append(chunk + start, static_cast<size_t>(r) - start);
      if (!discarding && buf.size() > options_.max_message_bytes) {
        discarding = true;
        buf.clear();
        RefuseLong();
      }
    }
    return {};
  }

  void RefuseLong() {
    writer_.Write(SerializeError(
        nullptr, RpcError(kInvalidRequest, fmt::format("Invalid Request: message longer than {} "
                                                       "bytes",
                                                       options_.max_message_bytes))));
  }

  // Cancels what still runs and waits for it.
  void Finish() {
    if (finished_) return;
    finished_ = true;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& [id, call] : in_flight_) call->Cancel();
    }
    for (auto& w : workers_) {
      if (w.thread.joinable()) w.thread.join();
    }
    workers_.clear();
  }

 private:
  void OnLine(std::string& line) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) return;
    auto msg = ParseMessage(line);
    if (!msg) {
      writer_.Write(SerializeError(msg.error().id, msg.error().error));
      return;
    }
    if (msg->is_response()) return;  // we send no requests; nothing to match
    if (msg->is_notification()) {
      if (msg->method == "notifications/cancelled") {
        const json::value* id = msg->params.if_contains("requestId");
        if (id && IsValidId(*id)) {
          std::lock_guard<std::mutex> lock(mu_);
          auto it = in_flight_.find(IdKey(*id));
          if (it != in_flight_.end()) it->second->Cancel();
        }
        return;
      }
      server_.HandleNotification(*msg, &session_);
      return;
    }
    if (msg->method != "tools/call") {
      // Cheap and order-sensitive (initialize first): answered right here.
      StdioCall ctx(writer_, nullptr, options_.owner, &session_);
      Respond(msg->id, server_.Handle(*msg, &session_, ctx));
      return;
    }
    auto call =
        std::make_shared<StdioCall>(writer_, ProgressToken(msg->params), options_.owner, &session_);
    std::string key = IdKey(msg->id);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (in_flight_.size() >= options_.max_concurrent_calls) {
        Reply busy;
        busy.modern = HasModernMeta(msg->params);
        busy.result = CallToolResultJson(ToolOutcome::Error(
            fmt::format("Error: too many tool calls at once (at most {}); wait for some to "
                        "finish and try again",
                        options_.max_concurrent_calls)));
        Finalize(busy);
        writer_.Write(SerializeResult(msg->id, busy.result));
        return;
      }
      if (in_flight_.count(key)) {
        writer_.Write(SerializeError(
            msg->id,
            RpcError(kInvalidRequest, "Invalid Request: the id of a request still in progress")));
        return;
      }
      in_flight_[key] = call;
    }
    Reap();
    Worker w;
    auto done = w.done;
    w.thread = std::thread([this, call, key, done, m = std::move(*msg)] {
      Reply reply = server_.Handle(m, &session_, *call);
      {
        std::lock_guard<std::mutex> lock(mu_);
        in_flight_.erase(key);
      }
      if (!call->cancelled()) Respond(m.id, std::move(reply));
      done->store(true);
    });
    workers_.push_back(std::move(w));
  }

  static void Finalize(Reply& reply) {
    if (!reply.modern) return;
    reply.result["resultType"] = "complete";
    json::object meta;
    meta[kMetaServerInfo] = ServerImplementation();
    reply.result["_meta"] = std::move(meta);
  }

  void Respond(const json::value& id, Reply reply) {
    if (reply.error) {
      writer_.Write(SerializeError(id, *reply.error));
    } else {
      writer_.Write(SerializeResult(id, reply.result));
    }
  }

  // Joins the threads of finished calls (only the reading thread touches workers_).
  void Reap() {
    for (auto it = workers_.begin(); it != workers_.end();) {
      if (it->done->load()) {
        it->thread.join();
        it = workers_.erase(it);
      } else {
        ++it;
      }
    }
  }

  const McpServer& server_;
  const StdioOptions& options_;
  LineWriter writer_;
  LegacySession session_;
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<StdioCall>> in_flight_;
  std::list<Worker> workers_;
  bool finished_ = false;
};

}  // namespace

Status ServeStdio(const McpServer& server, const StdioOptions& options) {
  Status st;
  {
    StdioConnection conn(server, options);
    st = conn.Run();
    conn.Finish();
  }
  if (options.on_close) options.on_close();
  return st;
}

}  // namespace deepbox::mcp
