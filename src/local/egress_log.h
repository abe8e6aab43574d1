// The egress log of one sandbox: every connection and request its proxy
// allowed or refused, and every change of its network policy, one JSON object
// per line (`deepbox sandbox logs --network SB`, `run --json` events).
//
// A line: {"time":"2026-12-06T18:20:01.123Z","event":"request","verdict":
// "allowed","host":"api.github.com","port":443,"sni":"api.github.com",
// "method":"GET","protocol":"h2","rule":"api.github.com","bytes_up":512,
// "bytes_down":2048,"intercepted":true,"secrets":["GH_TOKEN"],"withheld":[]}
// Events: "connect" (a tunnel or an intercepted connection, logged when it
// ends, with its byte counts), "request" (an HTTP request: plain, or inside
// an intercepted connection), "refused" connections carry the reason in
// "rule", "policy" (a change: "rule" holds the new policy).
// Never in it: a secret's value, a request's path or query (they may carry
// tokens), header values. Names of the secrets substituted ("secrets") or
// seen but withheld because the host was not theirs ("withheld") are.
//
// Bounded: when the file passes max_bytes it is renamed to "<path>.1"
// (replacing the previous one) and a new one starts, so a sandbox never holds
// more than twice max_bytes of log. Writes are whole lines (one write(2) of
// an O_APPEND fd), so a reader never sees half a line.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/json.h"
#include "common/unique_fd.h"

namespace deepbox::local {

struct EgressEvent {
  int64_t unix_ms = 0;  // 0: now
  std::string event;    // "connect" | "request" | "policy"
  std::string verdict;  // "allowed" | "refused"
  std::string host;
  int port = 0;
  std::string sni;
  std::string method;    // requests
  std::string protocol;  // "http/1.1" | "h2" | "tunnel" | "tls" ...
  std::string rule;      // the allow entry that matched, the refusal's reason, the new policy
  uint64_t bytes_up = 0;
  uint64_t bytes_down = 0;
  bool intercepted = false;
  std::vector<std::string> secrets;   // substituted (names)
  std::vector<std::string> withheld;  // placeholder seen, host not the secret's (names)

  json::object ToJson() const;
  static Result<EgressEvent> FromJson(const json::object& o);
  std::string ToText() const;  // one human line for `sandbox logs --network`
};

inline constexpr uint64_t kDefaultEgressLogBytes = 4u << 20;

class EgressLog {
 public:
  static Result<std::unique_ptr<EgressLog>> Open(std::filesystem::path path,
                                                 uint64_t max_bytes = kDefaultEgressLogBytes);
  // Thread-safe; a failing write is counted, never thrown or fatal.
  void Append(EgressEvent event);
  const std::filesystem::path& path() const { return path_; }
  uint64_t write_failures() const;

 private:
  EgressLog() = default;
  std::filesystem::path path_;
  uint64_t max_bytes_ = 0;
  mutable std::mutex mu_;
  UniqueFd fd_;
  uint64_t size_ = 0;
  uint64_t failures_ = 0;
};

// The events of a log (its rotated half first), oldest first; at most the
// last `limit` (0 = all). Malformed lines are skipped.
Result<std::vector<EgressEvent>> ReadEgressLog(const std::filesystem::path& path, size_t limit = 0);

}  // namespace deepbox::local
