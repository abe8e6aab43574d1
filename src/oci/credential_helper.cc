#include "oci/credential_helper.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>

#include "common/json.h"
#include "common/strings.h"
#include "common/subprocess.h"
#include "common/terminal_text.h"
#include "oci/reference.h"

namespace deepbox::oci {

namespace {

constexpr size_t kMaxHelperOutput = 1u << 20;

bool IsPlainHelperName(std::string_view name) {
  if (name.empty() || name.size() > 128 || name == "." || name == "..") return false;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.';
    if (!ok) return false;
  }
  return true;
}

// The first executable `program` in the colon-separated `path`; "" if none.
std::string FindInPath(std::string_view path, const std::string& program) {
  for (std::string_view dir : Split(path, ':')) {
    if (dir.empty()) continue;  // an empty entry (the cwd) is not searched
    std::string candidate = std::string(dir) + "/" + program;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return {};
}

// The last line of a helper's stderr, made safe to print.
std::string LastLine(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.remove_suffix(1);
  size_t nl = text.rfind('\n');
  if (nl != std::string_view::npos) text = text.substr(nl + 1);
  if (text.size() > 300) text = text.substr(0, 300);
  return SanitizeLineForTerminal(text);
}

}  // namespace

std::string CredentialHelperServerUrl(std::string_view registry) {
  if (registry == kDockerHub) return "https://index.docker.io/v1/";
  return std::string(registry);
}

Result<std::optional<RegistryCredentials>> RunCredentialHelper(
    std::string_view helper, std::string_view registry, const CredentialHelperOptions& options) {
  if (!IsPlainHelperName(helper)) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("registry credentials: credential helper name '{}' is not a "
                                 "plain name (letters, digits, '-', '_', '.')",
                                 SanitizeLineForTerminal(helper)));
  }
  const std::string program = "docker-credential-" + std::string(helper);
  std::string path = options.path;
  if (path.empty()) {
    const char* p = std::getenv("PATH");
    path = p != nullptr ? p : "/usr/local/bin:/usr/bin:/bin";
  }
  std::string binary = FindInPath(path, program);
  if (binary.empty()) {
    return MakeError(ErrorCode::kNotFound,
                     fmt::format("registry credentials: the auth file names credential helper "
                                 "'{}' for {}, but {} is not on PATH",
                                 std::string(helper), std::string(registry), program));
  }
  SubprocessOptions run;
  run.argv = {binary, "get"};
  run.stdin_data = CredentialHelperServerUrl(registry);
  run.capture_stdout = true;
  run.capture_stderr = true;
  auto result = RunCommand(run, options.timeout, kMaxHelperOutput);
  if (!result) {
    Error e = result.error();
    e.message = fmt::format("registry credentials: {} get: {}", program, e.message);
    return tl::unexpected(e);
  }
  if (!result->exited_ok()) {
    // The protocol's "no credentials" answer (docker-credential-helpers'
    // ErrCredentialsNotFound) is on stdout; it is not a secret.
    if (result->out.find("credentials not found") != std::string::npos) {
      return std::optional<RegistryCredentials>();
    }
    std::string why = LastLine(result->err);
    return MakeError(
        ErrorCode::kUnavailable,
        fmt::format("registry credentials: {} get for {} {}{}", program, std::string(registry),
                    DescribeWaitStatus(result->wait_status), why.empty() ? "" : ": " + why));
  }
  auto doc = ParseJsonObject(result->out);
  auto user = doc ? GetOptString(*doc, "Username") : std::nullopt;
  auto secret = doc ? GetOptString(*doc, "Secret") : std::nullopt;
  if (!user || !secret) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("registry credentials: {} get for {} did not answer a JSON "
                                 "object with Username and Secret",
                                 program, std::string(registry)));
  }
  RegistryCredentials creds;
  if (*user == "<token>") {
    creds.identity_token = *secret;
  } else {
    creds.username = *user;
    creds.password = *secret;
  }
  return std::optional<RegistryCredentials>(std::move(creds));
}

}  // namespace deepbox::oci
