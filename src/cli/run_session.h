// `deepbox run` itself, free of CLI11: resolves the configuration, creates the
// model (before anything else, so a missing API key costs nothing), claims a
// sandbox, runs the deep agent on the task (or on each line typed at an
// interactive prompt), and releases the sandbox on every exit path. Returns
// the process exit code (cli/run_exit_codes.h).
#pragma once

#include "cli/run_config.h"

namespace deepbox::run {

int RunAgentCommand(const RunFlags& flags);

}  // namespace deepbox::run
