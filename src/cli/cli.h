// The `deepbox` command line: shared pieces for every command family.
//
// Each family registers itself on the root CLI11 app (main.cc calls every
// Register* function) and reports its outcome through SetExitCode(). CLI11 is
// costly to compile: only main.cc and run_command.cc include it; the command
// implementations (sandbox_command.cc, cp_command.cc, pool_command.cc,
// doctor_command.cc) take plain structs (commands.h).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/error.h"

namespace CLI {
class App;
}

namespace deepbox::cli {

// Exit codes of deepbox's own commands (`deepbox sandbox exec` passes the
// command's status through instead, see commands.h).
inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;        // the operation failed
inline constexpr int kExitUsage = 2;        // bad flags, labels or selector
inline constexpr int kExitNotFound = 3;     // no such sandbox (or it expired / is gone)
inline constexpr int kExitUnsupported = 4;  // this host cannot run sandboxes (see doctor)

void SetExitCode(int code);
int ExitCode();

// Prints "deepbox: <message>" on stderr and returns the exit code for `error`.
int ReportError(const Error& error);
int ExitCodeFor(const Error& error);
// A duration for tables: "42s", "5m", "3h", "2d"; "-" when negative.
std::string FormatAge(int64_t ms);

void RegisterSandboxCommands(CLI::App& app);     // deepbox sandbox ...
void RegisterPoolCommands(CLI::App& app);        // deepbox pool ...
void RegisterDoctorCommand(CLI::App& app);       // deepbox doctor
void RegisterRunCommand(CLI::App& app);          // deepbox run (run_command.cc)
void RegisterMcpCommand(CLI::App& app);          // deepbox mcp (mcp_command.cc)
void RegisterAcpCommand(CLI::App& app);          // deepbox acp (acp_command.cc)
void RegisterEgressProxyCommand(CLI::App& app);  // deepbox egress-proxy
void RegisterImageCommands(CLI::App& app);       // deepbox image ...

}  // namespace deepbox::cli
