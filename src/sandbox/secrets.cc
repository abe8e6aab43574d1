#include "sandbox/secrets.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <set>

#include "common/random.h"
#include "common/strings.h"
#include "common/subprocess.h"
#include "common/unique_fd.h"
#include "sandbox/network_policy.h"

namespace deepbox {

namespace {
constexpr size_t kMaxSourceBytes = 64 * 1024;

bool IsEnvName(std::string_view s) {
  if (s.empty() || s.size() > 128) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    bool ok = c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
              (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

void StripOneNewline(std::string* s) {
  if (!s->empty() && s->back() == '\n') {
    s->pop_back();
    if (!s->empty() && s->back() == '\r') s->pop_back();
  }
}

std::string Normalize(std::string_view host) {
  std::string h = AsciiLower(host);
  while (!h.empty() && h.back() == '.') h.pop_back();
  return h;
}
}  // namespace

std::string SecretSource::ToString() const {
  switch (kind) {
    case Kind::kFile:
      return "file:" + ref;
    case Kind::kCommand:
      return "cmd:" + ref;
    case Kind::kEnv:
      break;
  }
  return "env:" + ref;
}

Result<SecretSpec> ParseSecretSpec(std::string_view text) {
  auto bad = [&](std::string_view why) {
    return MakeError(
        ErrorCode::kInvalidArgument,
        fmt::format("bad --secret '{}': {} (expected NAME=SOURCE@HOST[,HOST...][;query], "
                    "SOURCE one of env:VAR, file:PATH, cmd:COMMAND; e.g. "
                    "GH_TOKEN=env:GITHUB_TOKEN@api.github.com,github.com)",
                    text, why));
  };
  size_t eq = text.find('=');
  if (eq == std::string_view::npos) return bad("no '='");
  SecretSpec spec;
  spec.name = std::string(text.substr(0, eq));
  if (!IsEnvName(spec.name)) {
    return bad("NAME must be an environment variable name (letters, digits, '_')");
  }
  size_t at = text.rfind('@');
  if (at == std::string_view::npos || at < eq) return bad("no '@HOST'");
  std::string_view source = text.substr(eq + 1, at - eq - 1);
  std::string_view hosts = text.substr(at + 1);
  if (size_t semi = hosts.find(';'); semi != std::string_view::npos) {
    if (hosts.substr(semi) != ";query") return bad("the only option after the hosts is ';query'");
    spec.in_query = true;
    hosts = hosts.substr(0, semi);
  }
  if (source.substr(0, 4) == "env:") {
    spec.source = {SecretSource::Kind::kEnv, std::string(source.substr(4))};
    if (!IsEnvName(spec.source.ref)) return bad("env: needs a variable name");
  } else if (source.substr(0, 5) == "file:") {
    spec.source = {SecretSource::Kind::kFile, std::string(source.substr(5))};
    if (spec.source.ref.empty()) return bad("file: needs a path");
  } else if (source.substr(0, 4) == "cmd:") {
    spec.source = {SecretSource::Kind::kCommand, std::string(source.substr(4))};
    if (spec.source.ref.empty()) return bad("cmd: needs a command");
  } else {
    return bad("unknown SOURCE");
  }
  if (hosts.empty()) return bad("no HOST after '@'");
  auto policy = ParseNetworkPolicy("allow=" + std::string(hosts));
  if (!policy) return bad(policy.error().message);
  for (const auto& h : policy->allow) {
    if (h.find_first_of(":!") != std::string::npos) {
      return bad(fmt::format("host '{}': no port or flag (secrets go to HTTPS, port 443)", h));
    }
    if (std::find(spec.hosts.begin(), spec.hosts.end(), h) == spec.hosts.end()) {
      spec.hosts.push_back(h);
    }
  }
  return spec;
}

Status ValidateSecretValue(std::string_view value) {
  if (value.empty()) return MakeError(ErrorCode::kInvalidArgument, "the value is empty");
  if (value.size() > kMaxSecretValueBytes) {
    return MakeError(ErrorCode::kInvalidArgument, fmt::format("the value is {} bytes (at most {})",
                                                              value.size(), kMaxSecretValueBytes));
  }
  for (char c : value) {
    auto u = static_cast<unsigned char>(c);
    if (c != '\t' && (u < 0x20 || u == 0x7f)) {
      return MakeError(ErrorCode::kInvalidArgument,
                       "the value holds a control byte (NUL, CR, LF, ...): it must fit in an "
                       "HTTP header");
    }
  }
  if (value.front() == ' ' || value.front() == '\t' || value.back() == ' ' ||
      value.back() == '\t') {
    return MakeError(ErrorCode::kInvalidArgument,
                     "the value starts or ends with whitespace (HTTP/2 forbids it in a header)");
  }
  return {};
}

std::string MakeSecretPlaceholder() {
  return std::string(kSecretPlaceholderPrefix) + RandomHex(32);
}

bool IsSecretPlaceholder(std::string_view text) {
  if (text.size() != kSecretPlaceholderPrefix.size() + 32) return false;
  if (text.substr(0, kSecretPlaceholderPrefix.size()) != kSecretPlaceholderPrefix) return false;
  for (char c : text.substr(kSecretPlaceholderPrefix.size())) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

Result<SecretGrant> ResolveSecret(const SecretSpec& spec,
                                  std::chrono::milliseconds command_timeout) {
  auto fail = [&](std::string_view why) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("secret {} ({}): {}", spec.name, spec.source.ToString(), why));
  };
  std::string value;
  switch (spec.source.kind) {
    case SecretSource::Kind::kEnv: {
      const char* v = getenv(spec.source.ref.c_str());
      if (v == nullptr) return fail("the variable is not set");
      value = v;
      break;
    }
    case SecretSource::Kind::kFile: {
      UniqueFd fd(open(spec.source.ref.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY));
      if (!fd) return fail(SyscallError("open", errno, spec.source.ref).message);
      char buf[8192];
      for (;;) {
        ssize_t n = read(fd.get(), buf, sizeof(buf));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return fail(SyscallError("read", errno, spec.source.ref).message);
        if (n == 0) break;
        value.append(buf, static_cast<size_t>(n));
        if (value.size() > kMaxSourceBytes) return fail("the file is larger than 64 KiB");
      }
      StripOneNewline(&value);
      break;
    }
    case SecretSource::Kind::kCommand: {
      SubprocessOptions o;
      o.argv = {"/bin/sh", "-c", spec.source.ref};
      auto r = RunCommand(o, command_timeout, kMaxSourceBytes + 1);
      if (!r) return fail(r.error().message);
      // Its diagnostics are the caller's to read (they may say why it failed);
      // they never go into our error, which could be logged anywhere.
      if (!r->err.empty()) (void)!write(STDERR_FILENO, r->err.data(), r->err.size());
      if (!r->exited_ok()) return fail("the command " + DescribeWaitStatus(r->wait_status));
      if (r->out.size() > kMaxSourceBytes) return fail("the command printed more than 64 KiB");
      value = std::move(r->out);
      StripOneNewline(&value);
      break;
    }
  }
  if (auto st = ValidateSecretValue(value); !st) return fail(st.error().message);
  SecretGrant grant;
  grant.name = spec.name;
  grant.hosts = spec.hosts;
  grant.placeholder = MakeSecretPlaceholder();
  grant.value = std::move(value);
  grant.in_query = spec.in_query;
  return grant;
}

Result<std::vector<SecretGrant>> ResolveSecretFlags(const std::vector<std::string>& flags) {
  if (flags.size() > kMaxSecrets) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("at most {} secrets per sandbox", kMaxSecrets));
  }
  std::vector<SecretGrant> out;
  std::set<std::string> names;
  for (const auto& flag : flags) {
    auto spec = ParseSecretSpec(flag);
    if (!spec) return tl::unexpected(spec.error());
    if (!names.insert(spec->name).second) {
      return MakeError(ErrorCode::kInvalidArgument,
                       fmt::format("two --secret flags name {}", spec->name));
    }
    auto grant = ResolveSecret(*spec);
    if (!grant) return tl::unexpected(grant.error());
    out.push_back(std::move(*grant));
  }
  return out;
}

bool SecretHostMatches(const std::vector<std::string>& hosts, std::string_view host) {
  return MatchAllowlist(hosts, Normalize(host), 443).matched;
}

}  // namespace deepbox
