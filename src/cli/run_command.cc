// Placeholder for `deepbox run` (issue 5): replace this file with the real
// command. It only has to define RegisterRunCommand (see cli.h).
#include <cstdio>

#include <CLI/CLI.hpp>

#include "cli/cli.h"

namespace deepbox::cli {

void RegisterRunCommand(CLI::App& app) {
  CLI::App* run = app.add_subcommand("run", "Run the deep agent on a task (not yet available)");
  run->allow_extras();
  run->callback([] {
    std::fprintf(stderr, "deepbox: `deepbox run` is not yet available in this build\n");
    SetExitCode(kExitError);
  });
}

}  // namespace deepbox::cli
