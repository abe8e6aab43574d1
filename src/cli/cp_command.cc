// deepbox sandbox cp SRC DST: files, symlinks and directories between the host
// and a sandbox. The copy itself (streaming, and never trusting the sandbox's
// answers) is SandboxCopier (sandbox_copy.h); this file parses the arguments.
#include <fmt/format.h>

#include <cstdio>
#include <string_view>

#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/provider_util.h"
#include "cli/providers.h"
#include "cli/sandbox_copy.h"
#include "common/terminal_text.h"
#include "sandbox/registry.h"

namespace deepbox::cli {
namespace {

using local::lifecycle::Store;

struct Ref {
  bool in_sandbox = false;
  bool malformed_id = false;  // looks like ID:PATH but ID is not a valid id
  std::string id;
  std::string path;
};

Ref ParseRef(const std::string& text) {
  Ref r;
  size_t colon = text.find(':');
  size_t slash = text.find('/');
  // NAMESPACE/CLAIM:PATH, a Kubernetes claim: an id with a slash that a
  // provider's id form matches (a host path with one slash and a colon,
  // e.g. out/a:b, is written ./out/a:b).
  if (colon != std::string::npos && slash != std::string::npos && slash < colon &&
      ProviderRegistry::Global().ForId(std::string_view(text).substr(0, colon)) != nullptr) {
    r.in_sandbox = true;
    r.id = text.substr(0, colon);
    r.path = text.substr(colon + 1);
    if (r.path.empty()) r.path = ".";
    return r;
  }
  if (colon != std::string::npos && colon > 0 && (slash == std::string::npos || slash > colon)) {
    std::string id = text.substr(0, colon);
    // NAME:PATH when NAME names a sandbox here (else it is a host path, or
    // a malformed id).
    if (!Store::ValidId(id) && Store::ValidName(id)) {
      auto provider = MakeProvider();
      if (provider) {
        if (auto named = (*provider)->store().IdOfName(id)) id = *named;
      }
    }
    if (Store::ValidId(id)) {
      r.in_sandbox = true;
      r.id = id;
      r.path = text.substr(colon + 1);
      if (r.path.empty()) r.path = ".";
      return r;
    }
    r.malformed_id = true;
    r.id = id;
  }
  r.path = text;
  return r;
}

int UsageError(const std::string& message) {
  std::fprintf(stderr, "deepbox: %s\n", SanitizeForTerminal(message).c_str());
  return kExitUsage;
}

}  // namespace

int RunSandboxCp(const SandboxCpArgs& args) {
  Ref src = ParseRef(args.src);
  Ref dst = ParseRef(args.dst);
  if (src.in_sandbox && dst.in_sandbox) {
    return UsageError("both SRC and DST are in sandboxes: copy through the host");
  }
  if (!src.in_sandbox && !dst.in_sandbox) {
    const Ref& bad = src.malformed_id ? src : dst;
    if (bad.malformed_id) {
      return UsageError(fmt::format(
          "'{}' is not a sandbox id (a local id is sb- and 12 hex digits, e.g. sb-0123456789ab; "
          "a Kubernetes one is NAMESPACE/CLAIM); for a host path with a colon, write ./{}",
          bad.id, bad.path));
    }
    return UsageError(
        "one of SRC and DST must be a sandbox path ID:PATH (e.g. sb-0123456789ab:/workspace/x)");
  }
  if (auto name = CopyNameFromArgument(src.path); !name) return UsageError(name.error().message);
  const Ref& remote = src.in_sandbox ? src : dst;
  // The sandbox's daemon, whichever provider it is of (its id says).
  auto provider = ProviderOfSandbox(remote.id);
  if (!provider) return ReportError(provider.error());
  auto access = (*provider)->ConnectDaemon(remote.id);
  if (!access) return ReportError(access.error());  // no such sandbox: 3
  SandboxCopier copier(*access->client);
  auto copied = src.in_sandbox ? copier.FromSandbox(src.path, dst.path)
                               : copier.ToSandbox(src.path, dst.path);
  if (!copied) {
    // Whatever went wrong with the copy itself (a missing file on either side
    // included) is "the operation failed"; 3 is only for a missing sandbox.
    if (auto gone = access->why_gone(copied.error()); gone && gone->code == ErrorCode::kNotFound) {
      return ReportError(*gone);
    }
    Error e = access->explain(copied.error());
    std::fprintf(stderr, "deepbox: %s\n", SanitizeForTerminal(e.message).c_str());
    return kExitError;
  }
  return kExitOk;
}

}  // namespace deepbox::cli
