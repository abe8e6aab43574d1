// Background processes: /deepbox/v1/processes[/{id}[/logs|stdin|signal|wait]].
#include <fmt/format.h>

#include <csignal>
#include <cstring>

#include "common/base64.h"
#include "common/json.h"
#include "common/parse_number.h"
#include "sandboxd/proc/process_table.h"
#include "sandboxd/server/daemon.h"
#include "sandboxd/server/exec_json.h"

namespace deepbox::sandboxd {
namespace {

std::string Rfc3339(std::chrono::system_clock::time_point t) {
  auto secs = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

json::object InfoJson(const proc::ProcessInfo& p) {
  json::object o;
  o["id"] = p.id;
  o["pid"] = p.pid;
  o["command"] = JsonString(p.command);
  o["cwd"] = JsonString(p.cwd);
  o["state"] = std::string(proc::ProcessStateName(p.state));
  o["started_at"] = Rfc3339(p.started_at);
  if (p.exited_at) o["exited_at"] = Rfc3339(*p.exited_at);
  if (p.outcome) o["exit"] = OutcomeJson(*p.outcome);
  o["stdin_open"] = p.stdin_open;
  o["stdout_bytes"] = p.stdout_bytes;
  o["stderr_bytes"] = p.stderr_bytes;
  o["log_start_offset"] = p.log_start_offset;
  o["log_end_offset"] = p.log_end_offset;
  return o;
}

Result<int> ParseSignal(const json::value& v) {
  if (v.is_int64()) {
    int64_t n = v.as_int64();
    if (n <= 0 || n >= NSIG)
      return MakeError(ErrorCode::kInvalidArgument, fmt::format("bad signal {}", n));
    return static_cast<int>(n);
  }
  if (v.is_string()) {
    std::string name(v.as_string());
    if (!name.starts_with("SIG")) name = "SIG" + name;
    static const std::pair<const char*, int> kSignals[] = {
        {"SIGHUP", SIGHUP},   {"SIGINT", SIGINT},   {"SIGQUIT", SIGQUIT},   {"SIGKILL", SIGKILL},
        {"SIGUSR1", SIGUSR1}, {"SIGUSR2", SIGUSR2}, {"SIGTERM", SIGTERM},   {"SIGCONT", SIGCONT},
        {"SIGSTOP", SIGSTOP}, {"SIGTSTP", SIGTSTP}, {"SIGWINCH", SIGWINCH}, {"SIGALRM", SIGALRM}};
    for (auto [n, s] : kSignals) {
      if (name == n) return s;
    }
    return MakeError(ErrorCode::kInvalidArgument, fmt::format("unknown signal '{}'", name));
  }
  return MakeError(ErrorCode::kInvalidArgument, "field 'signal' must be a name or a number");
}

}  // namespace

net::Response Daemon::Processes(const net::Request& request, std::string_view rest) {
  const std::string& m = request.method;
  auto ok = [](const json::object& o) { return JsonResponse(200, ToJson(o)); };
  if (rest.empty()) {
    if (m == "GET") {
      json::array list;
      for (const auto& p : processes_->List()) list.emplace_back(InfoJson(p));
      json::object o;
      o["processes"] = std::move(list);
      return ok(o);
    }
    if (m == "POST") {
      auto body = ParseJsonObject(request.body);
      if (!body) return ErrorResponse(body.error());
      auto spec = ParseCommandSpec(*body, *this);
      if (!spec) return ErrorResponse(spec.error());
      // Background processes run until they end or are killed, unless asked.
      if (!body->contains("timeout_ms")) spec->timeout = std::chrono::milliseconds(0);
      proc::ProcessTable::StartOptions so;
      so.stdin_pipe = true;
      auto info = processes_->Start(*spec, so);
      if (!info) return ErrorResponse(info.error());
      return ok(InfoJson(*info));
    }
    return ErrorResponse(Error(ErrorCode::kInvalidArgument, "use GET or POST on /processes"));
  }
  // rest = "/{id}[/action]"
  std::string_view tail = rest.substr(1);
  auto slash = tail.find('/');
  std::string id(tail.substr(0, slash));
  std::string_view action = slash == std::string_view::npos ? "" : tail.substr(slash + 1);
  if (action.empty()) {
    if (m == "GET") {
      auto info = processes_->Get(id);
      if (!info) return ErrorResponse(info.error());
      return ok(InfoJson(*info));
    }
    if (m == "DELETE") {
      auto killed = processes_->Kill(id, config_.kill_grace);
      if (!killed) return ErrorResponse(killed.error());
      // Let SIGTERM work within the grace period before Remove() SIGKILLs.
      auto info = processes_->Wait(id, config_.kill_grace + std::chrono::milliseconds(500));
      if (!info) return ErrorResponse(info.error());
      (void)processes_->Remove(id);
      return ok(InfoJson(*info));
    }
  } else if (action == "logs" && m == "GET") {
    // Non-negative integers; a bad one is a 400 naming it.
    auto query_u64 = [&](const char* key, uint64_t dflt, uint64_t max) -> Result<uint64_t> {
      auto text = request.Query(key);
      if (!text) return dflt;
      auto n = ParseU64(*text);
      if (!n) {
        return MakeError(ErrorCode::kInvalidArgument,
                         fmt::format("query parameter '{}' must be a non-negative integer", key));
      }
      return std::min(*n, max);
    };
    auto offset = query_u64("offset", 0, UINT64_MAX);
    auto max_bytes = query_u64("max_bytes", 1 << 20, 16 << 20);
    auto wait_ms = query_u64("wait_ms", 0, 60000);
    for (const auto* q : {&offset, &max_bytes, &wait_ms}) {
      if (!*q) return ErrorResponse(q->error());
    }
    auto chunk = processes_->ReadLog(id, *offset, static_cast<size_t>(*max_bytes),
                                     std::chrono::milliseconds(*wait_ms));
    if (!chunk) return ErrorResponse(chunk.error());
    json::object o;
    if (request.Query("encoding").value_or("") == "base64") {
      o["data_base64"] = Base64Encode(chunk->data);
    } else {
      o["data"] = JsonString(chunk->data);
    }
    o["offset"] = chunk->offset;
    o["next_offset"] = chunk->next_offset;
    o["dropped_bytes"] = chunk->dropped;
    o["eof"] = chunk->eof;
    return ok(o);
  } else if (action == "stdin" && m == "POST") {
    auto body = ParseJsonObject(request.body);
    if (!body) return ErrorResponse(body.error());
    std::string data;
    if (auto b64 = GetOptString(*body, "data_base64")) {
      auto d = Base64Decode(*b64);
      if (!d) return ErrorResponse(Error(ErrorCode::kInvalidArgument, "data_base64 is not base64"));
      data = std::move(*d);
    } else {
      data = GetOptString(*body, "data").value_or("");
    }
    if (!data.empty()) {
      if (auto s = processes_->WriteStdin(id, data); !s) return ErrorResponse(s.error());
    }
    auto eof = GetOptBool(*body, "eof");
    if (!eof) return ErrorResponse(eof.error());
    if (eof->value_or(false)) {
      if (auto s = processes_->CloseStdin(id); !s) return ErrorResponse(s.error());
    }
    return ok(json::object{});
  } else if (action == "signal" && m == "POST") {
    auto body = ParseJsonObject(request.body);
    if (!body) return ErrorResponse(body.error());
    auto it = body->find("signal");
    if (it == body->end())
      return ErrorResponse(Error(ErrorCode::kInvalidArgument, "field 'signal' is required"));
    auto sig = ParseSignal(it->value());
    if (!sig) return ErrorResponse(sig.error());
    if (auto s = processes_->Signal(id, *sig); !s) return ErrorResponse(s.error());
    return ok(json::object{});
  } else if (action == "wait" && m == "POST") {
    auto body = ParseJsonObject(request.body.empty() ? "{}" : request.body);
    if (!body) return ErrorResponse(body.error());
    auto t = GetOptInt(*body, "timeout_ms");
    if (!t) return ErrorResponse(t.error());
    auto info = processes_->Wait(
        id, std::chrono::milliseconds(std::clamp<int64_t>(t->value_or(30000), 0, 3600000)));
    if (!info) return ErrorResponse(info.error());
    return ok(InfoJson(*info));
  }
  return ErrorResponse(Error(ErrorCode::kNotFound,
                             fmt::format("no such endpoint: {} {}", request.method, request.path)));
}

}  // namespace deepbox::sandboxd
