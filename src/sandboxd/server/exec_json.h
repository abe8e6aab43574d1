// JSON <-> process library conversions shared by the deepbox and upstream APIs.
#pragma once

#include "common/error.h"
#include "common/json.h"
#include "sandboxd/proc/command.h"
#include "sandboxd/proc/runner.h"

namespace deepbox::sandboxd {

class Daemon;

// Validates an exec request body (docs/sandboxd-api.md) into a CommandSpec:
// cwd confined beneath the root, defaults from the daemon's configuration.
Result<proc::CommandSpec> ParseCommandSpec(const json::object& body, const Daemon& daemon);
// Resolves a working directory beneath the root to an absolute real path.
Result<std::string> ResolveCwd(const Daemon& daemon, std::string_view cwd);

// {"status","exit_code","signal",...} for an outcome.
json::object OutcomeJson(const proc::Outcome& outcome);

// How process output travels in JSON: "utf-8" (the default; made valid text,
// invalid bytes become U+FFFD) or "base64" (the exact bytes, in *_base64
// fields). From the request's "output_encoding"; true for base64.
Result<bool> ParseOutputEncoding(const json::object& body);
// The full /exec answer.
json::object RunResultJson(const proc::RunResult& result, bool base64 = false);

}  // namespace deepbox::sandboxd
