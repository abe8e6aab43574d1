// Exit codes of `deepbox run` and of the Fibonacci example
// (examples/fib/main.cc): one table, so scripts can tell failures apart.
//
//   0    success (the example: the sandbox verification passed)
//   2    usage error: a bad flag, label, config file or model spec
//   3    sandbox error: no sandbox could be claimed, or it failed or went away
//   4    model error: no API key, authentication, rate limit after retries,
//        a replay file that does not match the conversation, ...
//   5    verification failure (the example: fib.py is missing, crashes or
//        prints the wrong sequence)
//   6    step limit: the agent used --max-steps model turns without finishing
//   7    truncated: the final answer was cut off at the model's output token
//        limit (it is printed, but incomplete)
//   130  interrupted: Ctrl-C (SIGINT) or SIGTERM; the sandbox was released
#pragma once

namespace deepbox::run {

inline constexpr int kRunExitOk = 0;
inline constexpr int kRunExitUsage = 2;
inline constexpr int kRunExitSandbox = 3;
inline constexpr int kRunExitModel = 4;
inline constexpr int kRunExitVerification = 5;
inline constexpr int kRunExitStepLimit = 6;
inline constexpr int kRunExitTruncated = 7;
inline constexpr int kRunExitInterrupted = 130;

// The same table for --help texts and READMEs.
inline constexpr const char* kRunExitCodesHelp =
    "Exit codes: 0 success, 2 usage error (bad flag, label, config file or model spec),\n"
    "3 sandbox error (claim failed, or the sandbox failed or went away), 4 model error\n"
    "(no or bad API key, rate limit, replay mismatch, ...), 5 verification failure\n"
    "(examples), 6 step limit (--max-steps) reached, 7 answer truncated at the model's\n"
    "output token limit, 130 interrupted (Ctrl-C or SIGTERM; the sandbox is released first).";

}  // namespace deepbox::run
