#include "mcp/client.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#include "common/io.h"
#include "common/subprocess.h"
#include "common/unique_fd.h"
#include "common/utf8.h"
#include "mcp/elicitation.h"
#include "mcp/protocol.h"
#include "net/http_client.h"
#include "net/sse.h"
#include "net/url.h"

namespace deepbox::mcp {
namespace {

// Sets `stop` and joins `thread` when the scope ends: the watcher threads a
// request starts end with it, whichever way it returns.
struct StopAndJoin {
  std::atomic<bool>& stop;
  std::thread& thread;
  ~StopAndJoin() {
    stop.store(true);
    if (thread.joinable()) thread.join();
  }
};

constexpr size_t kStderrTail = 4096;
constexpr size_t kMaxLine = 64u << 20;

void KeepTail(std::string& tail, std::string_view data) {
  tail.append(data);
  if (tail.size() > kStderrTail) tail.erase(0, tail.size() - kStderrTail);
}

std::string TailText(const std::string& tail) {
  std::string t = SanitizeUtf8(tail);
  while (!t.empty() && (t.back() == '\n' || t.back() == '\r')) t.pop_back();
  // The end says most (the last error), within reason.
  if (t.size() > 600) t = "..." + t.substr(t.size() - 600);
  return t;
}

// Splits a byte stream into lines; too long a line ends the stream.
class LineSplitter {
 public:
  // Returns false once a line exceeded the limit.
  bool Feed(std::string_view data, const std::function<void(std::string_view)>& on_line) {
    size_t start = 0;
    for (size_t i = 0; i < data.size(); ++i) {
      if (data[i] != '\n') continue;
      buf_.append(data.substr(start, i - start));
      if (!buf_.empty() && buf_.back() == '\r') buf_.pop_back();
      if (!buf_.empty()) on_line(buf_);
      buf_.clear();
      start = i + 1;
    }
    buf_.append(data.substr(start));
    return buf_.size() <= kMaxLine;
  }

 private:
  std::string buf_;
};

class ProcessChannel : public LineChannel {
 public:
  ProcessChannel(Subprocess child, std::string name)
      : child_(std::move(child)),
        pid_(child_.pid()),
        in_(child_.TakeStdin()),
        out_(child_.TakeStdout()),
        err_(child_.TakeStderr()),
        name_(std::move(name)) {}
  ~ProcessChannel() override { Close(); }

  void Start(std::function<void(std::string_view)> on_line,
             std::function<void(const Error&)> on_closed) override {
    err_thread_ = std::thread([this] {
      char buf[4096];
      for (;;) {
        ssize_t n = ::read(err_.get(), buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        std::lock_guard<std::mutex> lock(mu_);
        KeepTail(stderr_, std::string_view(buf, static_cast<size_t>(n)));
      }
    });
    out_thread_ =
        std::thread([this, on_line = std::move(on_line), on_closed = std::move(on_closed)] {
          LineSplitter split;
          char buf[65536];
          bool too_long = false;
          for (;;) {
            ssize_t n = ::read(out_.get(), buf, sizeof buf);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) break;
            if (!split.Feed(std::string_view(buf, static_cast<size_t>(n)), on_line)) {
              too_long = true;
              ::kill(pid_, SIGKILL);
              break;
            }
          }
          const int status = child_.Wait();
          if (err_thread_.joinable()) err_thread_.join();
          std::string why;
          if (too_long) {
            why = "sent a message longer than 64 MiB";
          } else if (WIFEXITED(status)) {
            why = fmt::format("exited with status {}", WEXITSTATUS(status));
          } else if (WIFSIGNALED(status)) {
            why = fmt::format("was killed by signal {}", WTERMSIG(status));
          } else {
            why = "ended";
          }
          std::string tail;
          {
            std::lock_guard<std::mutex> lock(mu_);
            tail = TailText(stderr_);
            exited_ = true;
          }
          cv_.notify_all();
          if (!tail.empty()) why += ": " + tail;
          on_closed(Error(ErrorCode::kUnavailable, fmt::format("{} {}", name_, why)));
        });
  }

  Status Send(std::string_view line) override {
    std::string l(line);
    l.push_back('\n');
    std::lock_guard<std::mutex> lock(write_mu_);
    if (!in_.valid()) return MakeError(ErrorCode::kUnavailable, name_ + " is closed");
    // A server that exited makes the write fail with EPIPE, which must not
    // raise SIGPIPE in a program that did not ignore it (a library user):
    // blocked on this thread for the write, a pending one consumed after.
    sigset_t pipe_only, old;
    sigemptyset(&pipe_only);
    sigaddset(&pipe_only, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_only, &old);
    Status result = WriteAll(in_.get(), l, name_ + " stdin");
    if (!result && result.error().sys_errno == EPIPE && !sigismember(&old, SIGPIPE)) {
      struct timespec zero = {0, 0};
      (void)sigtimedwait(&pipe_only, nullptr, &zero);
    }
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    return result;
  }

  void Close() override {
    {
      std::lock_guard<std::mutex> lock(write_mu_);
      if (closed_) return;
      closed_ = true;
      in_.reset();  // EOF: the spec's graceful shutdown
    }
    auto wait = [&](std::chrono::milliseconds d) {
      std::unique_lock<std::mutex> lock(mu_);
      return cv_.wait_for(lock, d, [&] { return exited_; });
    };
    if (out_thread_.joinable()) {
      if (!wait(std::chrono::seconds(2))) {
        ::kill(pid_, SIGTERM);
        if (!wait(std::chrono::seconds(2))) ::kill(pid_, SIGKILL);
      }
      out_thread_.join();
    } else {
      ::kill(pid_, SIGKILL);
      child_.Wait();
    }
    if (err_thread_.joinable()) err_thread_.join();
  }

 private:
  // Reaped by the output thread (or Close when it never started); signalled
  // by pid, the server alone and not its group, from any thread.
  Subprocess child_;
  const pid_t pid_;
  UniqueFd in_, out_, err_;
  std::string name_;
  std::mutex write_mu_;
  bool closed_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
  bool exited_ = false;
  std::string stderr_;
  std::thread out_thread_, err_thread_;
};

// A process inside a sandbox, through the daemon's streamed exec.
class SandboxChannel : public LineChannel {
 public:
  SandboxChannel(Sandbox& sandbox, ExecRequest req, std::string name)
      : sandbox_(sandbox), req_(std::move(req)), name_(std::move(name)) {}
  ~SandboxChannel() override { Close(); }

  void Start(std::function<void(std::string_view)> on_line,
             std::function<void(const Error&)> on_closed) override {
    thread_ = std::thread([this, on_line = std::move(on_line), on_closed = std::move(on_closed)] {
      LineSplitter split;
      ExecRequest req = req_;
      req.stdin_stream = true;
      req.on_started = [this](ExecInput& input) {
        std::lock_guard<std::mutex> lock(mu_);
        input_ = &input;
        cv_.notify_all();
      };
      // Send writes under mu_: taking it waits for a write in progress, and
      // none starts after (the input dies when ExecStream returns).
      req.on_input_closing = [this] {
        std::lock_guard<std::mutex> lock(mu_);
        input_ = nullptr;
        input_closed_ = true;
        cv_.notify_all();
      };
      auto r = sandbox_.ExecStream(req, [&](OutputStream stream, std::string_view data) {
        if (stop_.load()) return false;
        if (stream == OutputStream::kStderr) {
          std::lock_guard<std::mutex> lock(mu_);
          KeepTail(stderr_, data);
          return true;
        }
        return split.Feed(data, on_line);
      });
      std::string why;
      if (!r) {
        why = "failed: " + r.error().message;
      } else if (r->kind == ExitKind::kExited) {
        why = fmt::format("exited with status {}", r->exit_code);
      } else if (r->kind == ExitKind::kSpawnFailed) {
        why = "could not start: " + r->error;
      } else {
        why = fmt::format("ended ({})", ExitKindName(r->kind));
      }
      std::string tail;
      {
        std::lock_guard<std::mutex> lock(mu_);
        input_ = nullptr;
        ended_ = true;
        tail = TailText(stderr_);
      }
      cv_.notify_all();
      if (!tail.empty()) why += ": " + tail;
      on_closed(Error(ErrorCode::kUnavailable, fmt::format("{} {}", name_, why)));
    });
  }

  Status Send(std::string_view line) override {
    std::unique_lock<std::mutex> lock(mu_);
    // The first message may come before the daemon reported the start.
    cv_.wait_for(lock, std::chrono::seconds(30),
                 [&] { return input_ != nullptr || ended_ || input_closed_; });
    if (!input_) return MakeError(ErrorCode::kUnavailable, name_ + " is not running");
    std::string l(line);
    l.push_back('\n');
    return input_->Write(l);
  }

  void Close() override {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (closed_) return;
      closed_ = true;
      if (input_) (void)input_->Close();
      if (!cv_.wait_for(lock, std::chrono::seconds(3), [&] { return ended_; })) {
        stop_.store(true);  // the next output or keepalive kills it
      }
    }
    if (thread_.joinable()) thread_.join();
  }

 private:
  Sandbox& sandbox_;
  ExecRequest req_;
  std::string name_;
  std::mutex mu_;
  std::condition_variable cv_;
  ExecInput* input_ = nullptr;
  bool input_closed_ = false;  // ExecStream is destroying the input: no more writes
  bool ended_ = false;
  bool closed_ = false;
  std::atomic<bool> stop_{false};
  std::string stderr_;
  std::thread thread_;
};

}  // namespace

Result<std::unique_ptr<LineChannel>> SpawnProcessChannel(
    const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
    const std::string& cwd) {
  if (argv.empty()) return MakeError(ErrorCode::kInvalidArgument, "no command");
  SubprocessOptions options;
  options.argv = argv;
  options.env.assign(env.begin(), env.end());
  options.cwd = cwd;
  // Its own process group: the terminal's Ctrl-C is the agent's, not the server's.
  options.new_process_group = true;
  options.stdin_pipe = true;
  options.capture_stdout = true;
  options.capture_stderr = true;
  auto child = Subprocess::Spawn(options);
  if (!child) return tl::unexpected(child.error());
  return std::unique_ptr<LineChannel>(new ProcessChannel(std::move(*child), "`" + argv[0] + "`"));
}

Result<std::unique_ptr<LineChannel>> SandboxProcessChannel(
    Sandbox& sandbox, const std::vector<std::string>& argv,
    const std::map<std::string, std::string>& env, const std::string& cwd) {
  if (argv.empty()) return MakeError(ErrorCode::kInvalidArgument, "no command");
  ExecRequest req;
  req.argv = argv;
  req.env = env;
  req.cwd = cwd;
  return std::unique_ptr<LineChannel>(
      new SandboxChannel(sandbox, std::move(req), "`" + argv[0] + "` (in the sandbox)"));
}

// ---------------------------------------------------------------- transports

struct RpcRequest {
  std::string method;
  json::object params;
  bool has_params = true;
  std::function<void(const Message&)> on_notification;  // progress of this request
  const std::atomic<bool>* cancel = nullptr;
  int cancel_fd = -1;
  std::chrono::milliseconds timeout{60000};
};

class RpcTransport {
 public:
  virtual ~RpcTransport() = default;
  // The response (a result or an error message); CANCELLED, TIMEOUT or
  // UNAVAILABLE when there is none.
  virtual Result<Message> Request(const RpcRequest& r) = 0;
  virtual Status Notify(const std::string& method, const json::object& params) = 0;
  virtual std::optional<Error> failure() const = 0;
  virtual void Close() = 0;
  // HTTP only: what the headers say about the protocol in use.
  virtual void SetProtocol(const std::string& version, bool modern) {
    (void)version;
    (void)modern;
  }
  virtual bool is_http() const { return false; }
  // HTTP legacy sessions: opens the GET stream on which a server sends its
  // own requests (elicitation/create) outside any of ours.
  virtual void ListenForServerRequests() {}

  // The serialized response to a request the server sent: elicitation/create
  // when the client has a handler, "method not found" for anything else
  // (deepbox offers no sampling or roots).
  std::string AnswerServerRequest(const Message& m) const {
    if (m.method == "elicitation/create" && on_elicitation) {
      return SerializeResult(m.id, AnswerElicitation(m.params, on_elicitation));
    }
    return SerializeError(m.id, RpcError(kMethodNotFound, "Method not found: " + m.method));
  }
  ElicitationHandler on_elicitation;  // set before the first request
};

namespace {

class StdioRpc : public RpcTransport {
 public:
  explicit StdioRpc(std::unique_ptr<LineChannel> ch) : ch_(std::move(ch)) {
    ch_->Start([this](std::string_view line) { OnLine(line); },
               [this](const Error& e) {
                 std::lock_guard<std::mutex> lock(mu_);
                 failure_ = e;
                 cv_.notify_all();
               });
  }
  ~StdioRpc() override { Close(); }

  Result<Message> Request(const RpcRequest& r) override {
    auto slot = std::make_shared<Slot>();
    slot->on_notification = r.on_notification;
    int64_t id;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (failure_) return tl::unexpected(*failure_);
      id = ++next_id_;
      pending_[id] = slot;
    }
    json::object params = r.params;
    if (r.on_notification) {
      // Our progress tokens are the request ids.
      json::object meta;
      if (const json::value* m = params.if_contains("_meta"); m && m->is_object()) {
        meta = m->get_object();
      }
      meta["progressToken"] = id;
      params["_meta"] = std::move(meta);
    }
    auto done = [&] {
      std::lock_guard<std::mutex> lock(mu_);
      pending_.erase(id);
    };
    if (auto st = ch_->Send(SerializeRequest(id, r.method, params)); !st) {
      done();
      // A server that exited (EPIPE): its exit status and stderr say more
      // than the write did, and the channel reports them in a moment.
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::seconds(2), [&] { return failure_.has_value(); });
      if (failure_) return tl::unexpected(*failure_);
      return tl::unexpected(st.error());
    }
    auto deadline = std::chrono::steady_clock::now() + r.timeout;
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      if (slot->response) {
        pending_.erase(id);
        return std::move(*slot->response);
      }
      if (failure_) {
        pending_.erase(id);
        return tl::unexpected(*failure_);
      }
      bool cancelled = r.cancel && r.cancel->load();
      if (cancelled || std::chrono::steady_clock::now() >= deadline) {
        pending_.erase(id);
        lock.unlock();
        json::object p;
        p["requestId"] = id;
        p["reason"] = cancelled ? "cancelled by the user" : "timed out";
        (void)ch_->Send(SerializeNotification("notifications/cancelled", p));
        if (cancelled) return MakeError(ErrorCode::kCancelled, "cancelled");
        return MakeError(
            ErrorCode::kTimeout,
            fmt::format("no answer to {} within {} s", r.method,
                        std::chrono::duration_cast<std::chrono::seconds>(r.timeout).count()));
      }
      cv_.wait_for(lock, std::chrono::milliseconds(50));
    }
  }

  Status Notify(const std::string& method, const json::object& params) override {
    return ch_->Send(SerializeNotification(method, params));
  }
  std::optional<Error> failure() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return failure_;
  }
  void Close() override { ch_->Close(); }

 private:
  struct Slot {
    std::optional<Message> response;
    std::function<void(const Message&)> on_notification;
  };

  void OnLine(std::string_view line) {
    auto m = ParseMessage(line);
    if (!m) return;  // not ours to answer: a client ignores what it cannot read
    if (m->is_response()) {
      auto id = JsonToInt64(m->id);
      std::lock_guard<std::mutex> lock(mu_);
      if (!id) return;
      auto it = pending_.find(*id);
      if (it == pending_.end()) return;  // late (cancelled or timed out)
      it->second->response = std::move(*m);
      cv_.notify_all();
      return;
    }
    if (m->is_notification() && m->method == "notifications/progress") {
      auto token = JsonToInt64(ProgressTokenOf(m->params));
      std::shared_ptr<Slot> slot;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (!token) return;
        auto it = pending_.find(*token);
        if (it == pending_.end()) return;
        slot = it->second;
      }
      if (slot->on_notification) slot->on_notification(*m);
      return;
    }
    if (m->is_request()) {
      // On the reading thread: the server waits for this answer anyway.
      (void)ch_->Send(AnswerServerRequest(*m));
    }
  }

  static json::value ProgressTokenOf(const json::object& params) {
    const json::value* t = params.if_contains("progressToken");
    return t ? *t : json::value(nullptr);
  }

  std::unique_ptr<LineChannel> ch_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int64_t next_id_ = 0;
  std::map<int64_t, std::shared_ptr<Slot>> pending_;
  std::optional<Error> failure_;
};

class HttpRpc : public RpcTransport {
 public:
  HttpRpc(std::unique_ptr<net::HttpClient> http, std::string target, net::Headers headers,
          std::shared_ptr<OAuthSession> oauth, std::chrono::milliseconds default_retry,
          int max_resumptions)
      : http_(std::move(http)),
        target_(std::move(target)),
        headers_(std::move(headers)),
        oauth_(std::move(oauth)),
        default_retry_(default_retry),
        max_resumptions_(max_resumptions) {}
  ~HttpRpc() override { Close(); }

  bool is_http() const override { return true; }
  void SetProtocol(const std::string& version, bool modern) override {
    std::lock_guard<std::mutex> lock(mu_);
    version_ = version;
    modern_ = modern;
  }

  Result<Message> Request(const RpcRequest& r) override {
    int64_t id;
    std::string version, session;
    bool modern;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (closed_) return MakeError(ErrorCode::kUnavailable, "the MCP connection is closed");
      id = ++next_id_;
      version = version_;
      session = session_;
      modern = modern_;
    }
    json::object params = r.params;
    if (r.on_notification) {
      json::object meta;
      if (const json::value* m = params.if_contains("_meta"); m && m->is_object()) {
        meta = m->get_object();
      }
      meta["progressToken"] = id;
      params["_meta"] = std::move(meta);
    }
    // A silent stream must end at once on cancellation too: an eventfd the
    // client's waits watch, signalled from the cancel flag.
    int cancel_fd = r.cancel_fd;
    UniqueFd cancel_event;
    std::atomic<bool> finished{false};
    std::thread cancel_watch;
    if (r.cancel && r.cancel_fd < 0) {
      cancel_event.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
      if (cancel_event.valid()) {
        cancel_fd = cancel_event.get();
        cancel_watch = std::thread([&] {
          while (!finished.load()) {
            if (r.cancel->load()) {
              uint64_t one = 1;
              (void)!::write(cancel_event.get(), &one, sizeof one);
              return;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
          }
        });
      }
    }
    StopAndJoin joiner{finished, cancel_watch};
    const auto cancelled = [&] { return r.cancel && r.cancel->load(); };
    // The answer may also come on the standalone GET stream (Listen): it is
    // left in mailbox_, and `wake` ends a resumption's wait for it.
    UniqueFd wake(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!wake.valid()) return MakeSyscallError("eventfd", errno);
    {
      std::lock_guard<std::mutex> lock(mu_);
      waiters_[id] = wake.get();
    }
    struct Unwait {
      HttpRpc& rpc;
      int64_t id;
      ~Unwait() {
        std::lock_guard<std::mutex> lock(rpc.mu_);
        rpc.waiters_.erase(id);
        rpc.mailbox_.erase(id);
      }
    } unwait{*this, id};

    std::optional<Message> answer;
    // The stream's resumption state (SSE): the last event id and retry: delay.
    std::string last_event_id;
    int retry_ms = -1;
    auto on_event = [&](const net::SseEvent& e) {
      if (!e.id.empty()) last_event_id = e.id;
      if (e.retry_ms >= 0) retry_ms = e.retry_ms;
      auto m = ParseMessage(e.data);
      if (!m) return true;  // a priming event (empty data) or one we cannot read
      if (m->is_response()) {
        answer = std::move(*m);
        return false;  // the stream's work is done
      }
      if (m->is_request()) {
        PostAnswer(AnswerServerRequest(*m));
      } else if (m->is_notification() && r.on_notification) {
        r.on_notification(*m);
      }
      return true;
    };

    int authorizations = 0;
    std::string ctype;
    std::string body;
    int status = 0;
    bool sse_mode = false;
    for (;;) {
      net::ClientRequest req = EndpointRequest("POST", "application/json, text/event-stream",
                                               version, modern ? std::string() : session);
      if (modern) {
        req.headers.Set("Mcp-Method", r.method);
        if (const json::value* n = params.if_contains("name"); n && n->is_string()) {
          req.headers.Set("Mcp-Name", EncodeHeaderValue(n->get_string()));
        }
      }
      req.body = SerializeRequest(id, r.method, params);
      req.timeout = r.timeout;
      req.cancel_fd = cancel_fd;
      ctype.clear();
      body.clear();
      status = 0;
      sse_mode = false;
      std::string challenge;
      net::SseParser sse(on_event);
      auto res = http_->SendStreaming(
          req,
          [&](const net::Response& head) {
            status = head.status;
            if (oauth_ && (status == 401 || status == 403)) {
              challenge = head.headers.Get("WWW-Authenticate").value_or("");
              return false;  // answered below, then sent again
            }
            ctype = head.headers.Get("Content-Type").value_or("");
            sse_mode = ctype.rfind("text/event-stream", 0) == 0;
            if (auto sid = head.headers.Get("Mcp-Session-Id"); sid && r.method == "initialize") {
              std::lock_guard<std::mutex> lock(mu_);
              session_ = *sid;
            }
            return true;
          },
          [&](std::string_view data) {
            if (cancelled()) return false;  // closing the stream cancels
            if (sse_mode) return sse.Feed(data);
            if (body.size() + data.size() > (64u << 20)) return false;
            body.append(data);
            return true;
          });
      if (cancelled()) {
        if (!modern) CancelLegacy(id, session, version);
        return MakeError(ErrorCode::kCancelled, "cancelled");
      }
      if (!res) return tl::unexpected(res.error());
      if (oauth_ && (status == 401 || status == 403)) {
        if (auto st = oauth_->HandleChallenge(status, challenge, authorizations); !st) {
          return tl::unexpected(st.error());
        }
        continue;
      }
      if (sse_mode && !answer) sse.Finish();
      break;
    }
    if (sse_mode) {
      // A stream that ended before the answer is resumed from its last event
      // (the server replays what followed it), after the delay it asked for.
      std::atomic<bool> resumed_done{false};
      std::thread forward_cancel;
      if (cancel_fd >= 0) {
        forward_cancel = std::thread([&] {
          while (!resumed_done.load()) {
            struct pollfd p = {cancel_fd, POLLIN, 0};
            if (::poll(&p, 1, 50) > 0) {
              uint64_t one = 1;
              (void)!::write(wake.get(), &one, sizeof one);
              return;
            }
          }
        });
      }
      StopAndJoin stop_forwarding{resumed_done, forward_cancel};
      const auto take_delivered = [&] {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = mailbox_.find(id);
        if (it == mailbox_.end()) return false;
        answer = std::move(it->second);
        mailbox_.erase(it);
        return true;
      };
      const auto user_cancelled = [&] {
        if (cancelled()) return true;
        struct pollfd p = {cancel_fd, POLLIN, 0};
        return cancel_fd >= 0 && ::poll(&p, 1, 0) > 0;
      };
      int idle_resumptions = 0;
      while (!answer && !take_delivered() && !last_event_id.empty() &&
             idle_resumptions < max_resumptions_) {
        ++idle_resumptions;
        const std::string before = last_event_id;
        const auto delay = retry_ms >= 0 ? std::chrono::milliseconds(retry_ms) : default_retry_;
        struct pollfd p = {wake.get(), POLLIN, 0};
        (void)::poll(&p, 1, static_cast<int>(delay.count()));
        if (take_delivered()) break;
        if (user_cancelled()) {
          if (!modern) CancelLegacy(id, session, version);
          return MakeError(ErrorCode::kCancelled, "cancelled");
        }
        net::ClientRequest get =
            EndpointRequest("GET", "text/event-stream", version, modern ? std::string() : session);
        get.headers.Set("Last-Event-ID", last_event_id);
        get.timeout = r.timeout;
        get.cancel_fd = wake.get();
        bool get_sse = false;
        net::SseParser resumed(on_event);
        auto res = http_->SendStreaming(
            get,
            [&](const net::Response& head) {
              get_sse =
                  head.status == 200 &&
                  head.headers.Get("Content-Type").value_or("").rfind("text/event-stream", 0) == 0;
              return get_sse;
            },
            [&](std::string_view data) { return !cancelled() && resumed.Feed(data); });
        if (answer || take_delivered()) break;
        if (user_cancelled()) {
          if (!modern) CancelLegacy(id, session, version);
          return MakeError(ErrorCode::kCancelled, "cancelled");
        }
        if (!res || !get_sse) break;  // the server cannot resume this stream
        resumed.Finish();
        if (last_event_id != before) idle_resumptions = 0;
      }
      if (answer) return std::move(*answer);
      return MakeError(
          ErrorCode::kUnavailable,
          fmt::format("the server closed the stream of {} without an answer", r.method));
    }
    if (ctype.rfind("application/json", 0) == 0) {
      auto m = ParseMessage(body);
      if (m && m->is_response()) return std::move(*m);
    }
    // No JSON-RPC answer: an HTTP-level rejection.
    Message err;
    err.kind = MessageKind::kError;
    err.id = id;
    err.error =
        RpcError(status == 404 ? kMethodNotFound : kInvalidRequest,
                 fmt::format("HTTP {}: {}", status,
                             SanitizeUtf8(body.substr(0, std::min<size_t>(200, body.size())))));
    err.error.data = json::object{{"http_status", status}};
    return err;
  }

  Status Notify(const std::string& method, const json::object& params) override {
    std::string version, session;
    {
      std::lock_guard<std::mutex> lock(mu_);
      version = version_;
      session = session_;
    }
    net::ClientRequest req =
        EndpointRequest("POST", "application/json, text/event-stream", version, session);
    req.body = SerializeNotification(method, params);
    req.timeout = std::chrono::seconds(30);
    auto res = http_->Send(req);
    if (!res) return tl::unexpected(res.error());
    if (res->status >= 300) {
      return MakeError(ErrorCode::kUnavailable,
                       fmt::format("{} was refused with HTTP {}", method, res->status));
    }
    return {};
  }

  std::optional<Error> failure() const override { return std::nullopt; }

  void ListenForServerRequests() override {
    std::unique_lock<std::mutex> lock(mu_);
    if (closed_ || session_.empty() || listener_.joinable()) return;
    listen_cancel_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!listen_cancel_.valid()) return;
    listener_ = std::thread([this] { Listen(); });
    // Until the server has the stream (or refused it): what it sends there
    // about requests made after this call then reaches us.
    listen_cv_.wait_for(lock, std::chrono::seconds(10), [&] { return listen_ready_; });
  }

  void Close() override {
    std::string session, version;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (closed_) return;
      closed_ = true;
      session = session_;
      version = version_;
    }
    if (listener_.joinable()) {
      uint64_t one = 1;
      (void)!::write(listen_cancel_.get(), &one, sizeof one);
      listener_.join();
    }
    if (session.empty()) return;
    // Ends the legacy session (the server then deletes what belongs to it).
    net::ClientRequest req;
    req.method = "DELETE";
    req.target = target_;
    req.headers = headers_;
    req.headers.Set("Mcp-Session-Id", session);
    SetAuthorization(req.headers);
    if (!version.empty()) req.headers.Set("MCP-Protocol-Version", version);
    req.timeout = std::chrono::seconds(10);
    (void)http_->Send(req);
  }

 private:
  // A response that came outside its request's stream, for a request that
  // waits to resume its own.
  void Deliver(Message m) {
    auto id = JsonToInt64(m.id);
    std::lock_guard<std::mutex> lock(mu_);
    if (!id) return;
    auto it = waiters_.find(*id);
    if (it == waiters_.end()) return;
    mailbox_[*id] = std::move(m);
    uint64_t one = 1;
    (void)!::write(it->second, &one, sizeof one);
  }

  // The standalone GET stream: server requests answered by POST, resumed
  // with Last-Event-ID when it ends; given up when the server offers none
  // (405, or not SSE) or after a few attempts that brought no event.
  void Listen() {
    std::string last_event_id;
    int retry_ms = -1;
    int fruitless = 0;
    auto closed = [&] {
      std::lock_guard<std::mutex> lock(mu_);
      return closed_;
    };
    auto ready = [&] {
      std::lock_guard<std::mutex> lock(mu_);
      listen_ready_ = true;
      listen_cv_.notify_all();
    };
    struct Ready {
      decltype(ready)& f;
      ~Ready() { f(); }
    } ready_at_exit{ready};
    while (!closed() && fruitless < 3) {
      std::string version, session;
      {
        std::lock_guard<std::mutex> lock(mu_);
        version = version_;
        session = session_;
      }
      net::ClientRequest get = EndpointRequest("GET", "text/event-stream", version, session);
      if (!last_event_id.empty()) get.headers.Set("Last-Event-ID", last_event_id);
      get.cancel_fd = listen_cancel_.get();
      bool sse = false;
      bool got_event = false;
      net::SseParser parser([&](const net::SseEvent& e) {
        got_event = true;
        if (!e.id.empty()) last_event_id = e.id;
        if (e.retry_ms >= 0) retry_ms = e.retry_ms;
        auto m = ParseMessage(e.data);
        if (m && m->is_request()) PostAnswer(AnswerServerRequest(*m));
        if (m && m->is_response()) Deliver(std::move(*m));
        return true;
      });
      auto res = http_->SendStreaming(
          get,
          [&](const net::Response& head) {
            sse = head.status == 200 &&
                  head.headers.Get("Content-Type").value_or("").rfind("text/event-stream", 0) == 0;
            ready();
            return sse;
          },
          [&](std::string_view data) { return parser.Feed(data); });
      if (!res || !sse || closed()) return;
      fruitless = got_event ? 0 : fruitless + 1;
      struct pollfd p = {listen_cancel_.get(), POLLIN, 0};
      (void)::poll(&p, 1, static_cast<int>(retry_ms >= 0 ? retry_ms : default_retry_.count()));
    }
  }

  // The OAuth token, when there is one (it replaces a configured header).
  void SetAuthorization(net::Headers& headers) {
    if (!oauth_) return;
    if (std::string a = oauth_->AuthorizationHeader(); !a.empty()) {
      headers.Set("Authorization", a);
    }
  }

  // A request to the server's endpoint with the transport's headers: what
  // it accepts, the OAuth token, and the protocol version and session when
  // there are ones. A POST carries JSON.
  net::ClientRequest EndpointRequest(const char* method, const char* accept,
                                     const std::string& version, const std::string& session) {
    net::ClientRequest req;
    req.method = method;
    req.target = target_;
    req.headers = headers_;
    if (req.method == "POST") req.headers.Set("Content-Type", "application/json");
    req.headers.Set("Accept", accept);
    SetAuthorization(req.headers);
    if (!version.empty()) req.headers.Set("MCP-Protocol-Version", version);
    if (!session.empty()) req.headers.Set("Mcp-Session-Id", session);
    return req;
  }

  // POSTs the client's answer to a server's request (legacy sessions).
  void PostAnswer(const std::string& message) {
    std::string version, session;
    {
      std::lock_guard<std::mutex> lock(mu_);
      version = version_;
      session = session_;
    }
    net::ClientRequest req =
        EndpointRequest("POST", "application/json, text/event-stream", version, session);
    req.body = message;
    req.timeout = std::chrono::seconds(30);
    (void)http_->Send(req);
  }

  void CancelLegacy(int64_t id, const std::string& session, const std::string& version) {
    if (session.empty()) return;
    json::object p;
    p["requestId"] = id;
    p["reason"] = "cancelled by the user";
    (void)Notify("notifications/cancelled", p);
    (void)version;
  }

  std::unique_ptr<net::HttpClient> http_;
  std::string target_;
  net::Headers headers_;
  std::shared_ptr<OAuthSession> oauth_;
  std::chrono::milliseconds default_retry_;
  int max_resumptions_;
  UniqueFd listen_cancel_;
  std::thread listener_;
  std::condition_variable listen_cv_;
  bool listen_ready_ = false;
  std::map<int64_t, int> waiters_;      // request id -> its wake eventfd
  std::map<int64_t, Message> mailbox_;  // answers Listen received for them
  std::mutex mu_;
  int64_t next_id_ = 0;
  std::string version_;
  std::string session_;
  bool modern_ = false;
  bool closed_ = false;
};

}  // namespace

// ---------------------------------------------------------------- client

McpClient::McpClient(std::unique_ptr<RpcTransport> t, ClientOptions o)
    : transport_(std::move(t)), options_(std::move(o)) {
  transport_->on_elicitation = options_.on_elicitation;
}

McpClient::~McpClient() { Close(); }

void McpClient::Close() {
  if (transport_) transport_->Close();
}

std::optional<Error> McpClient::failure() const { return transport_->failure(); }

Result<std::unique_ptr<McpClient>> McpClient::ConnectStdio(std::unique_ptr<LineChannel> channel,
                                                           ClientOptions options) {
  std::unique_ptr<McpClient> c(
      new McpClient(std::make_unique<StdioRpc>(std::move(channel)), std::move(options)));
  if (auto st = c->Negotiate(); !st) {
    c->Close();
    return tl::unexpected(st.error());
  }
  return c;
}

Result<std::unique_ptr<McpClient>> McpClient::ConnectHttp(const std::string& url,
                                                          const net::Headers& headers,
                                                          ClientOptions options) {
  auto u = net::ParseUrl(url);
  if (!u || (u->scheme != "http" && u->scheme != "https")) {
    return MakeError(ErrorCode::kInvalidArgument, fmt::format("'{}' is not an http(s) URL", url));
  }
  std::string base =
      fmt::format("{}://{}:{}", u->scheme,
                  u->host.find(':') != std::string::npos ? "[" + u->host + "]" : u->host, u->port);
  net::ClientOptions co;
  co.read_idle_timeout = std::chrono::hours(1);  // a tool may run long and stay silent
  auto http = net::HttpClient::Create(base, co);
  if (!http) return tl::unexpected(http.error());
  std::string target = u->path.empty() ? "/" : u->path;
  if (!u->query.empty()) target += "?" + u->query;
  std::shared_ptr<OAuthSession> oauth;
  if (options.oauth) oauth = options.oauth(url);
  auto transport =
      std::make_unique<HttpRpc>(std::move(*http), target, headers, std::move(oauth),
                                options.default_sse_retry, options.max_stream_resumptions);
  std::unique_ptr<McpClient> c(new McpClient(std::move(transport), std::move(options)));
  if (auto st = c->Negotiate(); !st) {
    c->Close();
    return tl::unexpected(st.error());
  }
  return c;
}

json::object McpClient::Params(json::object params, const json::value& progress_token) const {
  if (!modern_ && progress_token.is_null()) return params;
  json::object meta;
  if (const json::value* m = params.if_contains("_meta"); m && m->is_object()) {
    meta = m->get_object();
  }
  if (modern_) {
    meta[kMetaProtocolVersion] = version_;
    meta[kMetaClientCapabilities] = Capabilities();
    json::object info;
    info["name"] = options_.client_name;
    info["version"] = options_.client_version;
    meta[kMetaClientInfo] = std::move(info);
  }
  if (!progress_token.is_null()) meta["progressToken"] = progress_token;
  params["_meta"] = std::move(meta);
  return params;
}

json::object McpClient::Capabilities() const {
  json::object caps;
  if (options_.on_elicitation) caps["elicitation"] = json::object{{"form", json::object{}}};
  return caps;
}

namespace {

bool IsModernError(int code) {
  return code == kHeaderMismatch || code == kMissingRequiredClientCapability ||
         code == kUnsupportedProtocolVersion;
}

Error RpcFailure(const std::string& what, const RpcError& e) {
  return Error(ErrorCode::kUnavailable, fmt::format("{}: {} ({})", what, e.message, e.code));
}

}  // namespace

Status McpClient::Negotiate() {
  // 1. The modern probe.
  modern_ = true;
  version_ = std::string(kModernVersion);
  transport_->SetProtocol(version_, true);
  RpcRequest probe;
  probe.method = "server/discover";
  probe.params = Params({});
  probe.timeout = transport_->is_http() ? options_.request_timeout : options_.probe_timeout;
  auto r = transport_->Request(probe);
  if (!r && r.error().code != ErrorCode::kTimeout) return tl::unexpected(r.error());
  bool legacy = !r;  // stdio silence: a legacy server that ignores pre-initialize requests
  if (r && r->kind == MessageKind::kResult) {
    const json::value* sv = r->result.if_contains("supportedVersions");
    bool has_modern = false;
    if (sv && sv->is_array()) {
      for (const auto& v : sv->get_array()) {
        has_modern = has_modern || (v.is_string() && IsModernVersion(v.get_string()));
      }
    }
    if (has_modern) {
      if (const json::value* m = r->result.if_contains("_meta"); m && m->is_object()) {
        if (const json::value* si = m->get_object().if_contains(kMetaServerInfo);
            si && si->is_object()) {
          server_info_ = si->get_object();
        }
      }
      if (const json::value* i = r->result.if_contains("instructions"); i && i->is_string()) {
        instructions_ = std::string(i->get_string());
      }
      return {};
    }
    legacy = true;  // a server answering discover with handshake versions only
  } else if (r && r->kind == MessageKind::kError) {
    if (IsModernError(r->error.code)) {
      bool legacy_offered = false;
      if (r->error.data.is_object()) {
        if (const json::value* s = r->error.data.get_object().if_contains("supported");
            s && s->is_array()) {
          for (const auto& v : s->get_array()) {
            legacy_offered = legacy_offered || (v.is_string() && IsLegacyVersion(v.get_string()));
          }
        }
      }
      if (!legacy_offered) {
        return tl::unexpected(
            RpcFailure("the MCP server speaks no protocol version deepbox does", r->error));
      }
    }
    legacy = true;
  }
  if (!legacy) return {};
  // 2. The legacy handshake.
  modern_ = false;
  version_.clear();
  transport_->SetProtocol("", false);
  RpcRequest init;
  init.method = "initialize";
  init.params["protocolVersion"] = std::string(kLatestLegacyVersion);
  init.params["capabilities"] = Capabilities();
  json::object info;
  info["name"] = options_.client_name;
  info["version"] = options_.client_version;
  init.params["clientInfo"] = std::move(info);
  init.timeout = options_.request_timeout;
  auto ir = transport_->Request(init);
  if (!ir) return tl::unexpected(ir.error());
  if (ir->kind == MessageKind::kError) return tl::unexpected(RpcFailure("initialize", ir->error));
  const json::value* v = ir->result.if_contains("protocolVersion");
  // 2025-03-26 too: its servers differ from 2025-06-18 only in what this
  // client never sends (JSON-RPC batches).
  if (!v || !v->is_string() || !IsAcceptedLegacyHeaderVersion(v->get_string())) {
    return MakeError(ErrorCode::kUnavailable,
                     fmt::format("the MCP server offers protocol version {}, which deepbox does "
                                 "not speak",
                                 v ? ToJson(*v) : std::string("(none)")));
  }
  version_ = std::string(v->get_string());
  if (const json::value* si = ir->result.if_contains("serverInfo"); si && si->is_object()) {
    server_info_ = si->get_object();
  }
  if (const json::value* i = ir->result.if_contains("instructions"); i && i->is_string()) {
    instructions_ = std::string(i->get_string());
  }
  transport_->SetProtocol(version_, false);
  if (auto st = transport_->Notify("notifications/initialized", {}); !st) return st;
  if (options_.on_elicitation) transport_->ListenForServerRequests();
  return {};
}

Result<std::vector<RemoteTool>> McpClient::ListTools() {
  std::vector<RemoteTool> out;
  std::string cursor;
  for (int page = 0; page < 100; ++page) {
    RpcRequest req;
    req.method = "tools/list";
    json::object p;
    if (!cursor.empty()) p["cursor"] = cursor;
    req.params = Params(std::move(p));
    req.timeout = options_.request_timeout;
    auto r = transport_->Request(req);
    if (!r) return tl::unexpected(r.error());
    if (r->kind == MessageKind::kError) return tl::unexpected(RpcFailure("tools/list", r->error));
    const json::value* tools = r->result.if_contains("tools");
    if (!tools || !tools->is_array()) {
      return MakeError(ErrorCode::kUnavailable, "tools/list: the answer has no tools array");
    }
    for (const auto& t : tools->get_array()) {
      if (!t.is_object()) continue;
      const json::object& o = t.get_object();
      const json::value* name = o.if_contains("name");
      if (!name || !name->is_string() || name->get_string().empty()) continue;
      RemoteTool rt;
      rt.name = std::string(name->get_string());
      if (const json::value* d = o.if_contains("description"); d && d->is_string()) {
        rt.description = std::string(d->get_string());
      }
      if (const json::value* d = o.if_contains("title"); d && d->is_string()) {
        rt.title = std::string(d->get_string());
      }
      if (const json::value* s = o.if_contains("inputSchema"); s && s->is_object()) {
        rt.input_schema = s->get_object();
      }
      if (!rt.input_schema.contains("type")) rt.input_schema["type"] = "object";
      out.push_back(std::move(rt));
    }
    const json::value* next = r->result.if_contains("nextCursor");
    if (!next || !next->is_string() || next->get_string().empty()) return out;
    cursor = std::string(next->get_string());
  }
  return out;
}

ToolCallResult ToolCallResultFromJson(const json::object& result) {
  ToolCallResult out;
  if (const json::value* e = result.if_contains("isError"); e && e->is_bool()) {
    out.is_error = e->get_bool();
  }
  auto add = [&](const std::string& s) {
    if (!out.text.empty()) out.text += "\n";
    out.text += s;
  };
  if (const json::value* c = result.if_contains("content"); c && c->is_array()) {
    for (const auto& b : c->get_array()) {
      if (!b.is_object()) continue;
      const json::object& o = b.get_object();
      std::string type = o.contains("type") && o.at("type").is_string()
                             ? std::string(o.at("type").get_string())
                             : "";
      auto str = [&](const json::object& obj, const char* k) {
        const json::value* v = obj.if_contains(k);
        return v && v->is_string() ? std::string(v->get_string()) : std::string();
      };
      if (type == "text") {
        add(str(o, "text"));
      } else if (type == "image") {
        out.images.push_back({str(o, "mimeType"), str(o, "data")});
      } else if (type == "audio") {
        add(fmt::format("[audio: {}, {} bytes of base64]", str(o, "mimeType"),
                        str(o, "data").size()));
      } else if (type == "resource_link") {
        add(fmt::format("[resource: {}]", str(o, "uri")));
      } else if (type == "resource") {
        const json::value* r = o.if_contains("resource");
        if (r && r->is_object()) {
          const json::object& ro = r->get_object();
          if (ro.contains("text")) {
            add(str(ro, "text"));
          } else {
            add(fmt::format("[resource {} ({}, {} bytes of base64)]", str(ro, "uri"),
                            str(ro, "mimeType"), str(ro, "blob").size()));
          }
        }
      }
    }
  }
  if (const json::value* s = result.if_contains("structuredContent")) {
    out.structured = *s;
    if (out.text.empty()) out.text = ToJson(*s);
  }
  return out;
}

Result<ToolCallResult> McpClient::CallTool(const std::string& name, const json::object& arguments,
                                           const CallOptions& options) {
  RpcRequest req;
  req.method = "tools/call";
  json::object p;
  p["name"] = name;
  p["arguments"] = arguments;
  req.params = Params(std::move(p));
  req.cancel = options.cancel;
  req.cancel_fd = options.cancel_fd;
  req.timeout = options.timeout;
  if (options.on_progress) {
    req.on_notification = [&](const Message& m) {
      const json::value* pr = m.params.if_contains("progress");
      if (!pr || !pr->is_number()) return;
      std::optional<double> total;
      if (const json::value* t = m.params.if_contains("total"); t && t->is_number()) {
        total = t->to_number<double>();
      }
      std::string msg;
      if (const json::value* s = m.params.if_contains("message"); s && s->is_string()) {
        msg = std::string(s->get_string());
      }
      options.on_progress(pr->to_number<double>(), total, msg);
    };
  }
  auto r = transport_->Request(req);
  if (!r) return tl::unexpected(r.error());
  if (r->kind == MessageKind::kError) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("{} ({})", r->error.message, r->error.code));
  }
  return ToolCallResultFromJson(r->result);
}

}  // namespace deepbox::mcp
