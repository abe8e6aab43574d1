#include "sandboxd/server/exec_json.h"

#include <fmt/format.h>

#include "common/base64.h"
#include "sandboxd/server/daemon.h"

namespace deepbox::sandboxd {

Result<std::string> ResolveCwd(const Daemon& daemon, std::string_view cwd) {
  // The native file API's root: a command may start anywhere the file tools
  // reach (relative paths and the default are the workspace's).
  const auto& root = daemon.files_root();
  std::string_view fallback = daemon.config().exec_cwd.empty()
                                  ? std::string_view(daemon.root().path())
                                  : std::string_view(daemon.config().exec_cwd);
  auto rel = root.ToRelative(cwd.empty() ? fallback : cwd);
  if (!rel) return tl::unexpected(rel.error());
  // Canonical (symlinks resolved beneath the root), so chdir cannot escape.
  auto canonical = root.Canonicalize(*rel);
  if (!canonical) return tl::unexpected(canonical.error());
  return root.ToAbsolute(*canonical);
}

Result<proc::CommandSpec> ParseCommandSpec(const json::object& body, const Daemon& daemon) {
  const DaemonConfig& config = daemon.config();
  proc::CommandSpec spec;
  spec.shell_path = config.shell;
  auto argv_it = body.find("argv");
  auto shell = GetOptStringChecked(body, "shell");
  if (!shell) return tl::unexpected(shell.error());
  if (argv_it != body.end() && !argv_it->value().is_null()) {
    if (!argv_it->value().is_array()) {
      return MakeError(ErrorCode::kInvalidArgument, "field 'argv' must be an array of strings");
    }
    for (const auto& a : argv_it->value().as_array()) {
      if (!a.is_string()) {
        return MakeError(ErrorCode::kInvalidArgument, "field 'argv' must be an array of strings");
      }
      spec.argv.emplace_back(a.as_string());
    }
    if (spec.argv.empty()) return MakeError(ErrorCode::kInvalidArgument, "field 'argv' is empty");
    if (*shell) {
      return MakeError(ErrorCode::kInvalidArgument, "give either 'argv' or 'shell', not both");
    }
  } else if (*shell) {
    spec.shell = **shell;
  } else {
    return MakeError(ErrorCode::kInvalidArgument, "an exec request needs 'argv' or 'shell'");
  }
  auto cwd = GetOptStringChecked(body, "cwd");
  if (!cwd) return tl::unexpected(cwd.error());
  auto resolved = ResolveCwd(daemon, cwd->value_or(""));
  if (!resolved) {
    Error e = resolved.error();
    e.message =
        fmt::format("working directory '{}': {}", cwd->value_or(daemon.root().path()), e.message);
    return tl::unexpected(e);
  }
  spec.cwd = *resolved;
  spec.inherit_env = true;
  if (auto env = body.find("env"); env != body.end() && !env->value().is_null()) {
    if (!env->value().is_object()) {
      return MakeError(ErrorCode::kInvalidArgument, "field 'env' must be an object of strings");
    }
    for (const auto& kv : env->value().as_object()) {
      if (!kv.value().is_string() || kv.key().empty() ||
          kv.key().find('=') != std::string_view::npos) {
        return MakeError(ErrorCode::kInvalidArgument,
                         fmt::format("env entry '{}' is invalid", std::string_view(kv.key())));
      }
      spec.env[std::string(kv.key())] = std::string(kv.value().as_string());
    }
  }
  auto stdin_b64 = GetOptStringChecked(body, "stdin_base64");
  if (!stdin_b64) return tl::unexpected(stdin_b64.error());
  auto stdin_text = GetOptStringChecked(body, "stdin");
  if (!stdin_text) return tl::unexpected(stdin_text.error());
  if (*stdin_b64) {
    auto decoded = Base64Decode(**stdin_b64);
    if (!decoded)
      return MakeError(ErrorCode::kInvalidArgument, "field 'stdin_base64' is not valid base64");
    spec.stdin_data = std::move(*decoded);
  } else if (*stdin_text) {
    spec.stdin_data = **stdin_text;
  }
  // Deadlines are computed in nanoseconds: a year keeps that arithmetic far
  // from overflowing (which would be undefined behaviour, not an error).
  constexpr int64_t kMaxDurationMs = int64_t{365} * 24 * 3600 * 1000;
  auto timeout = GetOptInt(body, "timeout_ms");
  if (!timeout) return tl::unexpected(timeout.error());
  if (*timeout && (**timeout < 0 || **timeout > kMaxDurationMs)) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("field 'timeout_ms' must be from 0 to {}", kMaxDurationMs));
  }
  spec.timeout =
      (*timeout && **timeout > 0) ? std::chrono::milliseconds(**timeout) : config.default_timeout;
  auto grace = GetOptInt(body, "grace_ms");
  if (!grace) return tl::unexpected(grace.error());
  if (*grace && **grace > kMaxDurationMs) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("field 'grace_ms' must be at most {}", kMaxDurationMs));
  }
  spec.kill_grace =
      (*grace && **grace >= 0) ? std::chrono::milliseconds(**grace) : config.kill_grace;
  auto cap = GetOptInt(body, "max_output_bytes");
  if (!cap) return tl::unexpected(cap.error());
  size_t max_output = config.max_output_bytes;
  if (*cap) {
    if (**cap < 0)
      return MakeError(ErrorCode::kInvalidArgument,
                       "field 'max_output_bytes' must not be negative");
    max_output = std::min<size_t>(static_cast<size_t>(**cap), 64u << 20);
  }
  spec.max_stdout_bytes = spec.max_stderr_bytes = spec.max_combined_bytes = max_output;
  if (auto v = proc::ValidateSpec(spec); !v) return tl::unexpected(v.error());
  return spec;
}

json::object OutcomeJson(const proc::Outcome& outcome) {
  json::object o;
  proc::OutcomeKind kind = proc::KindOf(outcome);
  o["status"] = std::string(proc::OutcomeKindName(kind));
  int exit_code = 0;
  int signal = 0;
  if (auto* e = std::get_if<proc::Exited>(&outcome)) {
    exit_code = e->code;
  } else if (auto* s = std::get_if<proc::Signaled>(&outcome)) {
    signal = s->signal;
  } else if (auto* t = std::get_if<proc::TimedOut>(&outcome)) {
    signal = t->status.signal;
    o["timeout_ms"] = t->timeout.count();
  } else if (auto* k = std::get_if<proc::Killed>(&outcome)) {
    signal = k->status.signal;
  } else if (auto* f = std::get_if<proc::SpawnFailed>(&outcome)) {
    o["error"] = JsonString(f->error.message);
  }
  o["exit_code"] = kind == proc::OutcomeKind::kExited ? exit_code : proc::ShellExitCode(outcome);
  o["signal"] = signal;
  if (signal != 0) o["signal_name"] = proc::SignalName(signal);
  return o;
}

Result<bool> ParseOutputEncoding(const json::object& body) {
  auto encoding = GetOptStringChecked(body, "output_encoding");
  if (!encoding) return tl::unexpected(encoding.error());
  if (!*encoding || **encoding == "utf-8") return false;
  if (**encoding == "base64") return true;
  return MakeError(ErrorCode::kInvalidArgument,
                   "field 'output_encoding' must be \"utf-8\" or \"base64\"");
}

json::object RunResultJson(const proc::RunResult& r, bool base64) {
  json::object o = OutcomeJson(r.outcome);
  if (base64) {
    o["stdout_base64"] = Base64Encode(r.stdout_data);
    o["stderr_base64"] = Base64Encode(r.stderr_data);
    o["output_base64"] = Base64Encode(r.combined);
  } else {
    o["stdout"] = JsonString(r.stdout_data);
    o["stderr"] = JsonString(r.stderr_data);
    o["output"] = JsonString(r.combined);
  }
  o["stdout_truncated"] = r.stdout_truncated;
  o["stderr_truncated"] = r.stderr_truncated;
  o["output_truncated"] = r.combined_truncated;
  o["stdout_bytes"] = r.stdout_total;
  o["stderr_bytes"] = r.stderr_total;
  o["duration_ms"] = std::chrono::duration_cast<std::chrono::milliseconds>(r.duration).count();
  return o;
}

}  // namespace deepbox::sandboxd
