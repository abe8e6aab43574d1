#include "k8s/watch.h"

#include <fmt/format.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <utility>

#include "net/url.h"

namespace deepbox::k8s {

namespace {

using SteadyClock = std::chrono::steady_clock;

constexpr size_t kMaxWatchLine = 64u << 20;
constexpr size_t kMaxErrorBody = 64u << 10;
// How long a watch request without a deadline may outlive the server's
// timeoutSeconds before the client gives up on a silent connection.
constexpr std::chrono::seconds kStreamGrace{30};

std::string ObjectName(const json::object& obj) { return FindString(obj, {"metadata", "name"}); }
std::string ObjectVersion(const json::object& obj) {
  return FindString(obj, {"metadata", "resourceVersion"});
}

// Whether `fd` is readable within `wait_ms` (0: now); never for fd -1.
bool Readable(int fd, int wait_ms) {
  if (fd < 0) return false;
  pollfd p{fd, POLLIN, 0};
  int n;
  while ((n = ::poll(&p, 1, wait_ms)) < 0 && errno == EINTR) {
  }
  return n > 0;
}

// Waits `d`, but not past the deadline. A cancellable watch waits on its fd
// instead (Stop() must not wait out a backoff).
void WaitBounded(const KubeClient& client, const WatchOptions& options,
                 std::chrono::milliseconds d) {
  auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(options.deadline - SteadyClock::now());
  d = std::min(d, left);
  if (d.count() <= 0) return;
  if (options.cancel_fd >= 0) {
    (void)Readable(options.cancel_fd, static_cast<int>(std::min<int64_t>(d.count(), INT32_MAX)));
  } else {
    client.Sleep(d);
  }
}

// One watch request: its lines go to the machine and its events to the
// caller (through `deliver`); how it ended goes to the machine. The error:
// the request could not be sent at all.
Status StreamOnce(KubeClient& client, WatchMachine& machine, const WatchOptions& options,
                  const std::function<void(const WatchEvent&)>& deliver) {
  WatchMachine::Request request =
      machine.NextRequest(client.options().watch_timeout, SteadyClock::now());
  machine.OnRequestSent();
  int status = 0;
  std::string error_body;
  std::string buffer;
  // Whether to read on after `line`.
  auto feed = [&](std::string_view line) {
    if (auto event = machine.OnLine(line)) deliver(*event);
    return machine.state() == WatchMachine::State::kWatching;
  };
  auto sent = client.SendStreamingOnce(
      request.target, options.deadline, request.timeout + kStreamGrace, options.cancel_fd,
      [&](const net::Response& head) {
        status = head.status;
        return true;
      },
      [&](std::string_view data) {
        if (status != 200) {
          if (error_body.size() < kMaxErrorBody) error_body.append(data);
          return true;
        }
        buffer.append(data);
        size_t start = 0;
        for (;;) {
          auto nl = buffer.find('\n', start);
          if (nl == std::string::npos) break;
          if (!feed(std::string_view(buffer).substr(start, nl - start))) return false;
          start = nl + 1;
        }
        buffer.erase(0, start);
        if (buffer.size() > kMaxWatchLine) {
          machine.OnLineTooLong(kMaxWatchLine);
          return false;
        }
        return true;
      });
  if (!sent) return tl::unexpected(sent.error());
  // A line ended it: the caller stopped, an error, or 410 Gone.
  if (machine.state() != WatchMachine::State::kWatching) return {};
  const Result<net::Response>& response = *sent;
  if (!response) {
    if (Readable(options.cancel_fd, 0)) {
      machine.OnCancelled();
    } else if (SteadyClock::now() >= options.deadline) {
      machine.OnDeadlinePassed();
    } else {
      machine.OnStreamDropped();
    }
  } else if (status == 200) {
    // A last line may lack its newline.
    if (!buffer.empty() && !feed(buffer)) return {};
    machine.OnStreamEnded();
  } else {
    machine.OnHttpError(status, error_body);
  }
  return {};
}

}  // namespace

std::string_view WatchEventTypeName(WatchEventType type) {
  switch (type) {
    case WatchEventType::kAdded:
      return "ADDED";
    case WatchEventType::kModified:
      return "MODIFIED";
    case WatchEventType::kDeleted:
      return "DELETED";
    case WatchEventType::kBookmark:
      return "BOOKMARK";
  }
  return "?";
}

Result<WatchStats> WatchObjects(KubeClient& client, const ResourceType& type, std::string_view ns,
                                const WatchOptions& options,
                                const std::function<bool(const WatchEvent&)>& on_event) {
  using State = WatchMachine::State;
  const ClientOptions& client_options = client.options();
  WatchMachine machine(type.Path(ns), options,
                       {client_options.initial_backoff, client_options.max_backoff,
                        client_options.max_retries + 5, client.CanRefreshCredentials()});
  auto deliver = [&](const WatchEvent& event) {
    if (!on_event(event)) machine.OnCallerStopped();
  };
  while (!machine.done()) {
    if (Readable(options.cancel_fd, 0)) {
      machine.OnCancelled();
      break;
    }
    if (SteadyClock::now() >= options.deadline) {
      machine.OnDeadlinePassed();
      break;
    }
    if (machine.state() == State::kListing) {
      auto list = client.List(type, ns, {options.label_selector, options.field_selector, "", 0});
      for (const auto& event : machine.OnListed(std::move(list))) {
        deliver(event);
        if (machine.done()) break;
      }
    }
    // A list that worked goes on to the watch at once.
    if (machine.state() == State::kWatching) {
      if (auto s = StreamOnce(client, machine, options, deliver); !s) {
        return tl::unexpected(s.error());
      }
    }
    if (machine.state() == State::kBackingOff) {
      WaitBounded(client, options, machine.backoff());
      machine.OnBackoffDone();
    } else if (machine.state() == State::kRefreshingCredentials) {
      client.InvalidateCredentials();
      machine.OnCredentialsRefreshed();
    }
  }
  if (machine.state() == State::kStopped) return machine.stats();
  return tl::unexpected(machine.error());
}

// ------------------------------------------------------------------ WatchMachine

WatchMachine::WatchMachine(std::string path, const WatchOptions& options, WatchRetryPolicy policy)
    : path_(std::move(path)),
      label_selector_(options.label_selector),
      field_selector_(options.field_selector),
      allow_bookmarks_(options.allow_bookmarks),
      deadline_(options.deadline),
      policy_(policy),
      state_(options.resource_version.empty() ? State::kListing : State::kWatching),
      resource_version_(options.resource_version) {
  for (const auto& o : options.known_objects) known_[ObjectName(o)] = o;
}

WatchMachine::Request WatchMachine::NextRequest(std::chrono::seconds max_timeout,
                                                SteadyClock::time_point now) const {
  int64_t timeout_s = max_timeout.count();
  if (deadline_ != SteadyClock::time_point::max()) {
    auto remaining = std::chrono::duration_cast<std::chrono::seconds>(deadline_ - now);
    // Rounded up: the server ends the stream no earlier than the deadline.
    timeout_s = std::clamp<int64_t>(remaining.count() + 1, 1, timeout_s);
  }
  std::vector<std::pair<std::string, std::string>> q{{"watch", "1"}};
  if (allow_bookmarks_) q.emplace_back("allowWatchBookmarks", "true");
  if (!resource_version_.empty()) q.emplace_back("resourceVersion", resource_version_);
  q.emplace_back("timeoutSeconds", std::to_string(timeout_s));
  if (!label_selector_.empty()) q.emplace_back("labelSelector", label_selector_);
  if (!field_selector_.empty()) q.emplace_back("fieldSelector", field_selector_);
  return Request{path_ + "?" + net::BuildQuery(q), std::chrono::seconds(timeout_s)};
}

std::vector<WatchEvent> WatchMachine::OnListed(Result<ObjectList> list) {
  if (!list) {
    auto code = list.error().code;
    // The server (or the way to it) is unwell: a list is safe to repeat.
    if (code == ErrorCode::kUnavailable || code == ErrorCode::kTimeout ||
        code == ErrorCode::kInternal || code == ErrorCode::kResourceExhausted) {
      ++stats_.reconnects;
      BackOff(State::kListing);
    } else {
      Fail(std::move(list.error()));
    }
    return {};
  }
  ++stats_.relists;
  resource_version_ = list->resource_version;
  stats_.resource_version = resource_version_;
  std::vector<WatchEvent> events;
  std::map<std::string, json::object> now_known;
  for (auto& item : list->items) {
    std::string name = ObjectName(item);
    auto it = known_.find(name);
    if (it == known_.end()) {
      events.push_back(WatchEvent{WatchEventType::kAdded, item, true});
    } else if (ObjectVersion(it->second) != ObjectVersion(item)) {
      events.push_back(WatchEvent{WatchEventType::kModified, item, true});
    }
    now_known.emplace(std::move(name), std::move(item));
  }
  for (auto& [name, obj] : known_) {
    if (!now_known.contains(name))
      events.push_back(WatchEvent{WatchEventType::kDeleted, obj, true});
  }
  known_ = std::move(now_known);
  state_ = State::kWatching;
  return events;
}

void WatchMachine::OnRequestSent() {
  ++stats_.watch_requests;
  got_event_ = false;
}

std::optional<WatchEvent> WatchMachine::OnLine(std::string_view line) {
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.remove_suffix(1);
  if (line.empty()) return std::nullopt;
  auto doc = ParseJsonObject(line);
  if (!doc) {
    Fail(Error(ErrorCode::kInternal,
               fmt::format("kubernetes API watch {}: bad event: {}", path_, doc.error().message)));
    return std::nullopt;
  }
  std::string type_name = FindString(*doc, {"type"});
  const json::value* obj = Find(*doc, {"object"});
  if (obj == nullptr || !obj->is_object()) {
    Fail(Error(ErrorCode::kInternal,
               fmt::format("kubernetes API watch {}: event without an object", path_)));
    return std::nullopt;
  }
  const json::object& o = obj->get_object();
  if (type_name == "ERROR") {
    ApiStatus st = ParseApiStatus(500, ToJson(o));
    if (st.code == 410) {
      // Too old a resourceVersion: list again, then resume from the list's.
      resource_version_.clear();
      state_ = State::kListing;
    } else {
      Fail(ApiStatusError(st, "watch " + path_));
    }
    return std::nullopt;
  }
  std::string v = ObjectVersion(o);
  if (!v.empty()) {
    resource_version_ = v;
    stats_.resource_version = v;
  }
  got_event_ = true;
  if (type_name == "BOOKMARK") {
    ++stats_.bookmarks;
    return WatchEvent{WatchEventType::kBookmark, o, false};
  }
  WatchEventType t;
  if (type_name == "ADDED") {
    t = WatchEventType::kAdded;
  } else if (type_name == "MODIFIED") {
    t = WatchEventType::kModified;
  } else if (type_name == "DELETED") {
    t = WatchEventType::kDeleted;
  } else {
    Fail(Error(ErrorCode::kInternal,
               fmt::format("kubernetes API watch {}: unknown event type '{}'", path_, type_name)));
    return std::nullopt;
  }
  std::string name = ObjectName(o);
  if (t == WatchEventType::kDeleted) {
    known_.erase(name);
  } else {
    known_[name] = o;
  }
  return WatchEvent{t, o, false};
}

void WatchMachine::OnLineTooLong(size_t limit) {
  Fail(Error(ErrorCode::kResourceExhausted,
             fmt::format("kubernetes API watch {}: event larger than {} bytes", path_, limit)));
}

void WatchMachine::OnStreamDropped() {
  ++stats_.reconnects;
  if (got_event_) {
    failures_ = 0;  // the stream was working: resume at once
    state_ = State::kWatching;
  } else {
    BackOff(State::kWatching);
  }
}

void WatchMachine::OnStreamEnded() {
  ++stats_.reconnects;
  failures_ = 0;
  state_ = State::kWatching;
}

void WatchMachine::OnHttpError(int http_status, std::string_view body) {
  ApiStatus st = ParseApiStatus(http_status, body);
  if (http_status == 410 || st.code == 410) {
    resource_version_.clear();
    state_ = State::kListing;
    return;
  }
  if (http_status == 401 && policy_.can_refresh_credentials && failures_ == 0) {
    ++failures_;
    state_ = State::kRefreshingCredentials;
    return;
  }
  if (IsRetryableStatus(http_status) && failures_ < policy_.max_failures) {
    ++stats_.reconnects;
    BackOff(State::kWatching);
    return;
  }
  Fail(ApiStatusError(st, "watch " + path_));
}

void WatchMachine::OnBackoffDone() { state_ = after_backoff_; }

void WatchMachine::OnCredentialsRefreshed() { state_ = State::kWatching; }

void WatchMachine::OnCallerStopped() { state_ = State::kStopped; }

void WatchMachine::OnCancelled() {
  Fail(Error(ErrorCode::kCancelled, fmt::format("kubernetes API watch {}: stopped", path_)));
}

void WatchMachine::OnDeadlinePassed() {
  Fail(Error(ErrorCode::kTimeout, fmt::format("kubernetes API watch {}: deadline passed", path_)));
}

void WatchMachine::BackOff(State then) {
  backoff_ = BackoffDelay(policy_.initial_backoff, policy_.max_backoff, failures_++);
  after_backoff_ = then;
  state_ = State::kBackingOff;
}

void WatchMachine::Fail(Error error) {
  error_ = std::move(error);
  state_ = State::kFailed;
}

}  // namespace deepbox::k8s
