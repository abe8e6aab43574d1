// Upstream agent-sandbox's process.v1.ProcessService over gRPC: Execute, the
// one method the k8s-agent-sandbox SDK calls (its sandboxd runtime's
// commands.run). Start, WriteStdin, SendSignal and ResizeTTY are not served
// (UNIMPLEMENTED).
#include <fmt/format.h>

#include <cmath>

#include "sandboxd/proc/runner.h"
#include "sandboxd/server/daemon.h"
#include "sandboxd/server/process_proto.h"

namespace deepbox::sandboxd {

namespace {

constexpr std::string_view kProcessService = "/process.v1.ProcessService/";

GrpcReply GrpcError(GrpcStatus status, std::string message) {
  return GrpcReply{status, std::move(message), {}};
}

GrpcStatus GrpcStatusOf(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
      return GrpcStatus::kInvalidArgument;
    case ErrorCode::kNotFound:
      return GrpcStatus::kNotFound;
    case ErrorCode::kPermissionDenied:
      return GrpcStatus::kPermissionDenied;
    case ErrorCode::kUnauthenticated:
      return GrpcStatus::kUnauthenticated;
    case ErrorCode::kResourceExhausted:
      return GrpcStatus::kResourceExhausted;
    case ErrorCode::kTimeout:
      return GrpcStatus::kDeadlineExceeded;
    case ErrorCode::kUnavailable:
      return GrpcStatus::kUnavailable;
    default:
      return GrpcStatus::kInternal;
  }
}

}  // namespace

std::optional<GrpcReply> Daemon::GrpcUnauthorized(const std::string& method,
                                                  const net::Headers& metadata) const {
  // The HTTP API's check: X-Sandboxd-Token or Authorization: Bearer, here as
  // call metadata (gRPC sends header names in lower case; Headers ignores case).
  net::Request head;
  head.method = "POST";
  head.path = method;
  head.headers = metadata;
  if (auto refused = Unauthorized(head)) {
    return GrpcError(GrpcStatus::kUnauthenticated, refused->message);
  }
  return std::nullopt;
}

GrpcReply Daemon::HandleGrpc(const GrpcCall& call) {
  // Checked again here: the connection's early check is optional.
  if (auto refused = GrpcUnauthorized(call.method, call.metadata)) return *refused;
  in_flight_.fetch_add(1);
  struct Done {
    Daemon& d;
    ~Done() {
      d.last_request_ns_.store(std::chrono::steady_clock::now().time_since_epoch().count());
      d.in_flight_.fetch_sub(1);
    }
  } done{*this};
  if (call.method == std::string(kProcessService) + "Execute") return GrpcExecute(call);
  if (call.method.starts_with(kProcessService)) {
    return GrpcError(GrpcStatus::kUnimplemented,
                     fmt::format("{} is not served by deepbox-sandboxd: only Execute is "
                                 "(use the deepbox API's exec/stream for streamed processes)",
                                 call.method));
  }
  return GrpcError(GrpcStatus::kUnimplemented, fmt::format("unknown method {}", call.method));
}

GrpcReply Daemon::GrpcExecute(const GrpcCall& call) {
  auto request = proto::DecodeExecuteRequest(call.message);
  if (!request) return GrpcError(GrpcStatus::kInvalidArgument, request.error().message);
  proto::ProcessConfig& config = request->config;
  if (config.command.empty()) {
    return GrpcError(GrpcStatus::kInvalidArgument, "ProcessConfig.command is empty");
  }
  proc::CommandSpec spec = proc::CommandSpec::Argv(std::move(config.command));
  // Like the other upstream APIs, confined to --root-dir: a relative cwd is
  // taken beneath it, an absolute one must lie beneath it.
  const std::string cwd = config.cwd.value_or("");
  auto rel = root_.ToRelative(cwd.empty() ? root_.path() : cwd);
  auto canonical = rel ? root_.Canonicalize(*rel) : rel;
  if (!canonical) {
    Error e = canonical.error();
    return GrpcError(GrpcStatusOf(e.code),
                     fmt::format("working directory '{}': {}", cwd, e.message));
  }
  spec.cwd = root_.ToAbsolute(*canonical);
  spec.inherit_env = true;
  spec.env = std::move(config.env_vars);
  // The call's deadline is the command's timeout; without one, the daemon's
  // default (as for the deepbox API's exec).
  spec.timeout = call.timeout ? std::max(*call.timeout, std::chrono::milliseconds(1))
                              : config_.default_timeout;
  spec.kill_grace = config_.kill_grace;
  spec.max_stdout_bytes = spec.max_stderr_bytes = config_.max_output_bytes;
  spec.max_combined_bytes = 0;
  if (auto valid = proc::ValidateSpec(spec); !valid) {
    return GrpcError(GrpcStatus::kInvalidArgument, valid.error().message);
  }
  proc::RunResult r = proc::Run(spec, call.cancel_fd);
  if (std::holds_alternative<proc::TimedOut>(r.outcome)) {
    return GrpcError(GrpcStatus::kDeadlineExceeded,
                     fmt::format("the command ran past the call's deadline ({:g} s) and was killed",
                                 static_cast<double>(spec.timeout.count()) / 1000));
  }
  if (std::holds_alternative<proc::Killed>(r.outcome)) {
    return GrpcError(GrpcStatus::kCancelled, "the call was cancelled; the command was killed");
  }
  proto::ExecuteResponse response;
  response.exit_code = proc::ShellExitCode(r.outcome);
  response.stdout_data = std::move(r.stdout_data);
  response.stderr_data = std::move(r.stderr_data);
  if (auto* failed = std::get_if<proc::SpawnFailed>(&r.outcome)) {
    // Like a shell: 127 (not found) or 126 (not executable), and why.
    response.stderr_data =
        fmt::format("deepbox-sandboxd: cannot run '{}': {}\n", spec.argv[0], failed->error.message);
  }
  return GrpcReply{GrpcStatus::kOk, {}, proto::EncodeExecuteResponse(response)};
}

}  // namespace deepbox::sandboxd
