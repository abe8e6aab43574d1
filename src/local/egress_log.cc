#include "local/egress_log.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <deque>

#include "common/io.h"
#include "common/time.h"

namespace deepbox::local {

namespace {
json::array Names(const std::vector<std::string>& names) {
  json::array a;
  for (const auto& n : names) a.emplace_back(JsonString(n));
  return a;
}

std::vector<std::string> NamesFrom(const json::object& o, std::string_view key) {
  std::vector<std::string> out;
  if (const auto* v = o.if_contains(key); v && v->is_array()) {
    for (const auto& e : v->as_array()) {
      if (e.is_string()) out.emplace_back(e.as_string());
    }
  }
  return out;
}

int64_t UnixNowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string Join(const std::vector<std::string>& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? "," : "") + v[i];
  return out;
}
}  // namespace

json::object EgressEvent::ToJson() const {
  json::object o;
  o["time"] = FormatRfc3339Ms(unix_ms ? unix_ms : UnixNowMs());
  o["event"] = JsonString(event);
  o["verdict"] = JsonString(verdict);
  if (!host.empty()) o["host"] = JsonString(host);
  if (port) o["port"] = port;
  if (!sni.empty()) o["sni"] = JsonString(sni);
  if (!method.empty()) o["method"] = JsonString(method);
  if (!protocol.empty()) o["protocol"] = JsonString(protocol);
  if (!rule.empty()) o["rule"] = JsonString(rule);
  if (event != "policy") {
    o["bytes_up"] = bytes_up;
    o["bytes_down"] = bytes_down;
    o["intercepted"] = intercepted;
    o["secrets"] = Names(secrets);
    o["withheld"] = Names(withheld);
  }
  return o;
}

Result<EgressEvent> EgressEvent::FromJson(const json::object& o) {
  EgressEvent e;
  auto time = GetString(o, "time");
  if (!time) return tl::unexpected(time.error());
  auto ms = ParseRfc3339Ms(*time);
  if (!ms) return tl::unexpected(ms.error());
  e.unix_ms = *ms;
  auto event = GetString(o, "event");
  if (!event) return tl::unexpected(event.error());
  e.event = *event;
  e.verdict = GetOptString(o, "verdict").value_or("");
  e.host = GetOptString(o, "host").value_or("");
  e.port = static_cast<int>(GetOptInt(o, "port").value_or(std::nullopt).value_or(0));
  e.sni = GetOptString(o, "sni").value_or("");
  e.method = GetOptString(o, "method").value_or("");
  e.protocol = GetOptString(o, "protocol").value_or("");
  e.rule = GetOptString(o, "rule").value_or("");
  e.bytes_up = static_cast<uint64_t>(GetOptInt(o, "bytes_up").value_or(std::nullopt).value_or(0));
  e.bytes_down =
      static_cast<uint64_t>(GetOptInt(o, "bytes_down").value_or(std::nullopt).value_or(0));
  e.intercepted = GetOptBool(o, "intercepted").value_or(std::nullopt).value_or(false);
  e.secrets = NamesFrom(o, "secrets");
  e.withheld = NamesFrom(o, "withheld");
  return e;
}

std::string EgressEvent::ToText() const {
  std::string out = fmt::format("{} {:<8} {:<7}", FormatRfc3339Ms(unix_ms ? unix_ms : UnixNowMs()),
                                event, verdict);
  if (event == "policy") return out + " " + rule;
  std::string where = port ? fmt::format("{}:{}", host, port) : host;
  out += " " + where;
  if (!method.empty()) out += " " + method;
  if (!protocol.empty()) out += " " + protocol;
  if (event != "request" || bytes_up || bytes_down) {
    out += fmt::format(" up={} down={}", bytes_up, bytes_down);
  }
  if (intercepted) out += " intercepted";
  if (!secrets.empty()) out += " secrets=" + Join(secrets);
  if (!withheld.empty()) out += " withheld=" + Join(withheld);
  if (!rule.empty()) out += (verdict == "refused" ? " reason: " : " rule=") + rule;
  return out;
}

Result<std::unique_ptr<EgressLog>> EgressLog::Open(std::filesystem::path path, uint64_t max_bytes) {
  std::unique_ptr<EgressLog> log(new EgressLog());
  log->path_ = std::move(path);
  log->max_bytes_ = max_bytes;
  log->fd_.reset(
      open(log->path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!log->fd_) return MakeSyscallError("open", errno, log->path_.string());
  struct stat st;
  if (fstat(log->fd_.get(), &st) != 0) return MakeSyscallError("fstat", errno, log->path_.string());
  log->size_ = static_cast<uint64_t>(st.st_size);
  return log;
}

void EgressLog::Append(EgressEvent event) {
  if (event.unix_ms == 0) event.unix_ms = UnixNowMs();
  std::string line = deepbox::ToJson(event.ToJson()) + "\n";
  std::lock_guard<std::mutex> lock(mu_);
  if (size_ > 0 && size_ + line.size() > max_bytes_) {
    std::filesystem::path old = path_;
    old += ".1";
    UniqueFd next;
    if (rename(path_.c_str(), old.c_str()) == 0) {
      next.reset(open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600));
    }
    if (next) {
      fd_ = std::move(next);
      size_ = 0;
    } else {
      ++failures_;  // keep appending to what we have: losing lines is worse
    }
  }
  ssize_t n;
  do {
    n = write(fd_.get(), line.data(), line.size());
  } while (n < 0 && errno == EINTR);
  if (n == static_cast<ssize_t>(line.size())) {
    size_ += line.size();
  } else {
    ++failures_;
  }
}

uint64_t EgressLog::write_failures() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failures_;
}

Result<std::vector<EgressEvent>> ReadEgressLog(const std::filesystem::path& path, size_t limit) {
  std::deque<EgressEvent> events;
  bool any = false;
  for (std::filesystem::path p : {std::filesystem::path(path.string() + ".1"), path}) {
    UniqueFd fd(open(p.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    if (!fd) {
      if (errno == ENOENT) continue;
      return MakeSyscallError("open", errno, p.string());
    }
    any = true;
    auto text = ReadAll(fd.get(), p.string(), 64u << 20);
    if (!text) return tl::unexpected(text.error());
    size_t start = 0;
    while (start < text->size()) {
      size_t end = text->find('\n', start);
      if (end == std::string::npos) break;  // a line still being written
      auto obj = ParseJsonObject(std::string_view(*text).substr(start, end - start));
      start = end + 1;
      if (!obj) continue;
      auto e = EgressEvent::FromJson(*obj);
      if (!e) continue;
      events.push_back(std::move(*e));
      if (limit && events.size() > limit) events.pop_front();
    }
  }
  if (!any) return std::vector<EgressEvent>{};
  return std::vector<EgressEvent>(std::make_move_iterator(events.begin()),
                                  std::make_move_iterator(events.end()));
}

}  // namespace deepbox::local
