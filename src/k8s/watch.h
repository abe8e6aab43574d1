// Kubernetes watches over KubeClient: newline-delimited JSON events read as
// they arrive, bookmarks, 410 Gone -> re-list and resume (reporting what the
// re-list no longer shows as DELETED), dropped connections and server
// timeouts -> re-watch from the last resourceVersion. The decisions are a
// state machine without I/O (WatchMachine), WatchObjects does the I/O.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/json.h"
#include "k8s/rest_client.h"

namespace deepbox::k8s {

enum class WatchEventType { kAdded, kModified, kDeleted, kBookmark };
std::string_view WatchEventTypeName(WatchEventType type);

struct WatchEvent {
  WatchEventType type = WatchEventType::kAdded;
  json::object object;
  bool synthetic = false;  // produced by a (re-)list rather than the stream
};

struct WatchOptions {
  std::string label_selector;
  std::string field_selector;
  // "" = list first, then watch from the list's version; "0" = the server's
  // current state as ADDED events, then changes; else resume after it.
  std::string resource_version;
  // Objects the caller already holds (read at resource_version): a re-list
  // after 410 Gone that no longer shows one of them reports its DELETED.
  std::vector<json::object> known_objects;
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  bool allow_bookmarks = true;
  // An fd (eventfd/pipe) that ends the watch with CANCELLED once readable:
  // the stream and the waits between attempts stop at once.
  int cancel_fd = -1;
};

struct WatchStats {
  int watch_requests = 0;
  int relists = 0;  // after 410 Gone (or the initial list)
  int bookmarks = 0;
  int reconnects = 0;            // dropped connections, refused connections, server timeouts
  std::string resource_version;  // last seen
};

// Watches objects of `type` in `ns` ("" = all namespaces). Calls on_event for
// every event until it returns false (then OK), the deadline passes (TIMEOUT),
// the cancel_fd is readable (CANCELLED) or a non-retryable error happens.
Result<WatchStats> WatchObjects(KubeClient& client, const ResourceType& type, std::string_view ns,
                                const WatchOptions& options,
                                const std::function<bool(const WatchEvent&)>& on_event);

// ------------------------------------------------------------------ step by step

// How a watch retries. WatchObjects takes it from the client's options.
struct WatchRetryPolicy {
  std::chrono::milliseconds initial_backoff{200};
  std::chrono::milliseconds max_backoff{10000};
  // Error answers (429, 5xx) to watch requests without progress before the
  // watch gives up: more than a plain request's retries, since a watch is
  // meant to outlast a restarting server. Refused and dropped connections are
  // retried until the deadline.
  int max_failures = 10;
  // A 401 is worth one more try with fresh credentials (an exec plugin or a
  // token file: the token may have expired).
  bool can_refresh_credentials = false;
};

// The watch loop's decisions, without I/O or clock reads: WatchObjects does
// what state() asks (list, send a watch request, wait, refresh credentials)
// and reports what came of it with the On* calls. OnListed and OnLine return
// the events for the caller; once the caller's on_event returns false, call
// OnCallerStopped and deliver no more.
class WatchMachine {
 public:
  enum class State {
    kListing,                // list (the current state), then watch from the list's version
    kWatching,               // send a watch request from resource_version()
    kBackingOff,             // wait backoff(), then OnBackoffDone()
    kRefreshingCredentials,  // drop cached credentials, then OnCredentialsRefreshed()
    kStopped,                // done: the caller stopped it; the watch returns stats()
    kFailed,                 // done: the watch returns error()
  };

  // `path` names the watched collection in errors ("/apis/.../sandboxclaims").
  // It starts listing when options.resource_version is "", else watching.
  WatchMachine(std::string path, const WatchOptions& options, WatchRetryPolicy policy);

  State state() const { return state_; }
  bool done() const { return state_ == State::kStopped || state_ == State::kFailed; }
  const WatchStats& stats() const { return stats_; }
  // Where the next watch request resumes; "" while listing (after 410 Gone
  // the version it had is too old to resume from).
  const std::string& resource_version() const { return resource_version_; }
  // kBackingOff: how long to wait (WatchObjects cuts it at the deadline).
  std::chrono::milliseconds backoff() const { return backoff_; }
  // kFailed: why.
  const Error& error() const { return error_; }

  struct Request {
    std::string target;            // path and query
    std::chrono::seconds timeout;  // the server's (timeoutSeconds): at most until the deadline
  };
  // kWatching: the next watch request at `now`; the server ends it after
  // `max_timeout` at most.
  Request NextRequest(std::chrono::seconds max_timeout,
                      std::chrono::steady_clock::time_point now) const;

  // kListing: what the list answered. On success the events that bring the
  // caller up to date with it (synthetic ADDED, MODIFIED for a changed
  // resourceVersion, DELETED for a known object it no longer shows), then
  // kWatching. A transient failure backs off and lists again.
  std::vector<WatchEvent> OnListed(Result<ObjectList> list);
  // kWatching: a watch request went out.
  void OnRequestSent();
  // kWatching: one line of the stream; the event for the caller, if any. An
  // ERROR event with 410 Gone lists again; other ERROR events, lines that are
  // not events and unknown types fail.
  std::optional<WatchEvent> OnLine(std::string_view line);
  // kWatching: a line without its end grew past `limit` bytes.
  void OnLineTooLong(size_t limit);
  // kWatching: the connection was refused or dropped. After events, resume at
  // once from the last version; else back off first.
  void OnStreamDropped();
  // kWatching: the server ended the stream (its timeoutSeconds): resume.
  void OnStreamEnded();
  // kWatching: the watch request was answered with an error status.
  void OnHttpError(int http_status, std::string_view body);
  void OnBackoffDone();
  void OnCredentialsRefreshed();
  void OnCallerStopped();
  void OnCancelled();
  void OnDeadlinePassed();

 private:
  void BackOff(State then);
  void Fail(Error error);

  std::string path_;
  std::string label_selector_;
  std::string field_selector_;
  bool allow_bookmarks_;
  std::chrono::steady_clock::time_point deadline_;
  WatchRetryPolicy policy_;

  State state_;
  State after_backoff_ = State::kWatching;
  std::string resource_version_;
  std::map<std::string, json::object> known_;  // by name: for DELETED after a re-list
  int failures_ = 0;                           // failed requests since the last progress
  bool got_event_ = false;                     // in the current stream
  std::chrono::milliseconds backoff_{0};
  Error error_;
  WatchStats stats_;
};

}  // namespace deepbox::k8s
