// deepbox-fib-example: the reference example of deepbox's public C++ API, and
// the C++ version of the "Deep Agents on Agent Sandbox" Python example.
//
//   1. claim a sandbox (local by default; --sandbox k8s: a SandboxClaim from
//      the SandboxWarmPool "deepagents-warmpool"), labelled
//      deepagents.example/claim=true, with a TTL;
//   2. ask a Deep Agent, whose every tool call runs in that sandbox, to write
//      and run a Fibonacci script fib.py;
//   3. print the agent's final message;
//   4. verify against the sandbox itself: re-run `python3 fib.py` there and
//      check that it prints 0, 1, 1, 2, 3, 5, 8, 13, 21, 34;
//   5. delete the sandbox on every exit path: the lease is RAII, and Ctrl-C /
//      SIGTERM delete it at once (which also stops a running command).
//
// The model is Claude when ANTHROPIC_API_KEY is set, else the shipped
// scripted conversation fib.replay.jsonl (the tools still run for real).
// Exit codes: cli/run_exit_codes.h (0 ok, 3 sandbox, 4 model, 5 verification,
// 130 interrupted). See README.md beside this file.
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>

#include "agent/deep_agent.h"
#include "agent/model/factory.h"
#include "cli/run_exit_codes.h"
#include "k8s/provider.h"
#include "local/lifecycle/provider.h"
#include "sequence_check.h"

namespace {

using namespace deepbox;
using namespace deepbox::run;  // exit codes

constexpr const char* kTask =
    "Write a Python script /workspace/fib.py that prints the first 10 Fibonacci numbers "
    "(starting 0, 1), then run it with `python3 /workspace/fib.py` and tell me what it "
    "printed.";
constexpr const char* kClaimLabel = "deepagents.example/claim";
constexpr const char* kRunLabel = "deepagents.example/run";  // this run's claim only

std::string Env(const char* name, std::string fallback = "") {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

std::string RandomId() {
  std::random_device rd;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%08x%08x", rd(), rd());
  return buf;
}

// Ctrl-C and SIGTERM without work in a signal handler: the signals are
// blocked in every thread (this object is created before any thread), and
// one thread waits for them with sigwait and runs `on_interrupt` there.
class Interrupts {
 public:
  Interrupts() {
    sigemptyset(&set_);
    for (int s : {SIGINT, SIGTERM, SIGHUP, SIGUSR1}) sigaddset(&set_, s);
    pthread_sigmask(SIG_BLOCK, &set_, nullptr);
    thread_ = std::thread([this] { Wait(); });
  }
  ~Interrupts() {
    pthread_kill(thread_.native_handle(), SIGUSR1);  // SIGUSR1 = stop waiting
    thread_.join();
  }
  const std::atomic<bool>& cancelled() const { return cancel_; }

  // While the returned Scope lives, each signal also runs `f` (on the signal
  // thread); its destructor waits for a running `f` to finish.
  struct Scope {
    Interrupts* owner;
    ~Scope() { owner->Set(nullptr); }
  };
  Scope OnInterrupt(std::function<void()> f) {
    Set(std::move(f));
    return Scope{this};
  }

 private:
  void Set(std::function<void()> f) {
    std::lock_guard<std::mutex> lock(mu_);
    on_interrupt_ = std::move(f);
  }
  void Wait() {
    for (int sig = 0; sigwait(&set_, &sig) == 0 && sig != SIGUSR1;) {
      std::fprintf(stderr, "\n%s: stopping the agent and deleting the sandbox\n",
                   sig == SIGINT ? "Interrupted" : "Terminated");
      cancel_ = true;
      std::lock_guard<std::mutex> lock(mu_);
      if (on_interrupt_) on_interrupt_();
    }
  }
  sigset_t set_;
  std::atomic<bool> cancel_{false};
  std::mutex mu_;
  std::function<void()> on_interrupt_;
  std::thread thread_;
};

struct Options {
  std::string sandbox = "local";
  std::string model;  // "" = Claude with a key, else the recording
  int ttl_seconds = 600;
};

int Usage(const char* msg) {
  std::fprintf(stderr,
               "%s%susage: deepbox-fib-example [--sandbox local|k8s] [--model SPEC] "
               "[--ttl SECONDS]\n  see examples/fib/README.md\n",
               msg, *msg ? "\n" : "");
  return kRunExitUsage;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if ((a == "--sandbox" || a == "--model" || a == "--ttl") && i + 1 < argc) {
      std::string v = argv[++i];
      if (a == "--sandbox") opt.sandbox = v;
      if (a == "--model") opt.model = v;
      if (a == "--ttl") opt.ttl_seconds = std::atoi(v.c_str());
    } else if (a == "--help" || a == "-h") {
      Usage("");
      return kRunExitOk;
    } else {
      return Usage(("unknown argument: " + a).c_str());
    }
  }
  if (opt.sandbox != "local" && opt.sandbox != "k8s") return Usage("--sandbox: local or k8s");
  Interrupts interrupts;  // first: before any other thread exists

  // --- The model: Claude with an API key, else the scripted recording.
  if (opt.model.empty()) opt.model = Env("DEEPBOX_MODEL");
  if (opt.model.empty()) {
    if (!Env("ANTHROPIC_API_KEY").empty()) {
      opt.model = "claude-sonnet-4-6";
    } else {
      std::string file = Env("DEEPBOX_FIB_REPLAY", DEEPBOX_FIB_REPLAY);
      std::fprintf(stderr,
                   "ANTHROPIC_API_KEY is not set: replaying the recorded conversation %s (a "
                   "scripted conversation, not a live model)\n",
                   file.c_str());
      opt.model = "replay:" + file;
    }
  }
  auto model = agent::CreateChatModel(opt.model);
  if (!model) {
    std::fprintf(stderr, "Model error: %s\n", model.error().message.c_str());
    return kRunExitModel;
  }

  // --- The sandbox provider, and how to delete a claim from the signal thread.
  const std::string run_id = RandomId();
  std::unique_ptr<SandboxProvider> provider;
  std::function<void(const std::string& id)> delete_now;
  if (opt.sandbox == "local") {
    auto local = local::lifecycle::LocalSandboxProvider::Create();
    if (!local) {
      std::fprintf(stderr, "Sandbox error: %s\n", local.error().message.c_str());
      return kRunExitSandbox;
    }
    delete_now = [p = local->get()](const std::string& id) { (void)p->Delete(id); };
    provider = std::move(*local);
  } else {
    auto rest = k8s::LoadDefaultConfig({});  // KUBECONFIG, in-cluster, ~/.kube/config
    if (!rest) {
      std::fprintf(stderr, "Sandbox error: %s\n", rest.error().message.c_str());
      return kRunExitSandbox;
    }
    k8s::K8sProviderOptions o{.rest = *rest};
    o.namespace_name = Env("AGENT_SANDBOX_NAMESPACE", "default");
    o.warm_pool = Env("AGENT_SANDBOX_WARMPOOL", "deepagents-warmpool");
    o.connection.router_token = Env("AGENT_SANDBOX_ROUTER_TOKEN");
    if (std::string t = Env("AGENT_SANDBOX_READY_TIMEOUT"); !t.empty()) {
      char* end = nullptr;
      long seconds = std::strtol(t.c_str(), &end, 10);
      if (*end != '\0' || seconds <= 0) {
        return Usage("AGENT_SANDBOX_READY_TIMEOUT must be a number of seconds > 0");
      }
      o.ready_timeout = std::chrono::seconds(seconds);
    }
    if (std::string router = Env("AGENT_SANDBOX_ROUTER_URL"); !router.empty()) {
      o.connection.mode = k8s::ConnectionMode::kDirect;
      o.connection.direct_url = router;
    } else if (k8s::InClusterAvailable()) {
      o.connection.mode = k8s::ConnectionMode::kInCluster;
    }  // else kubectl port-forward to the sandbox router
    auto k = k8s::K8sSandboxProvider::Create(o);
    if (!k) {
      std::fprintf(stderr, "Sandbox error: %s\n", k.error().message.c_str());
      return kRunExitSandbox;
    }
    delete_now = [p = k->get(), sel = std::string(kRunLabel) + "=" + run_id](const std::string&) {
      (void)p->RemoveBySelector(sel);
    };
    provider = std::move(*k);
  }

  // --- Claim. The lease deletes the sandbox when it goes out of scope.
  std::fprintf(stderr, "Claiming a %s sandbox...\n", opt.sandbox.c_str());
  auto lease = provider->Claim({.labels = {{kClaimLabel, "true"}, {kRunLabel, run_id}},
                                .ttl = std::chrono::seconds(opt.ttl_seconds)});
  if (!lease) {
    // "cannot claim" only when the claim failed, not when a claimed sandbox
    // could not be reached (the provider's message says that itself).
    const bool claimed = lease.error().reason == kReasonClaimedButUnreachable;
    std::fprintf(stderr, "Sandbox error: %s%s\n",
                 claimed ? "" : "cannot claim a sandbox: ", lease.error().message.c_str());
    return interrupts.cancelled() ? kRunExitInterrupted : kRunExitSandbox;
  }
  Sandbox& sandbox = (*lease)->sandbox();
  const std::string id = sandbox.id();
  std::fprintf(stderr, "Sandbox %s ready.\n", id.c_str());
  // From now on Ctrl-C deletes the sandbox at once: that stops whatever runs
  // in it, so the agent returns promptly. (The lease's own Release later
  // finds it gone, which is fine.)
  auto delete_on_signal = interrupts.OnInterrupt([&delete_now, id] { delete_now(id); });
  if (interrupts.cancelled()) delete_now(id);  // a signal during the claim

  // --- The agent: every tool call runs in `sandbox`.
  auto deep_agent = agent::DeepAgent::Create({
      .model = std::shared_ptr<agent::ChatModel>(std::move(*model)),
      .sandbox = &sandbox,
      .system_prompt = "You are a careful Python developer.",
      .max_steps = 50,
  });
  if (!deep_agent) {
    std::fprintf(stderr, "Agent error: %s\n", deep_agent.error().message.c_str());
    return kRunExitModel;
  }
  agent::RunCallbacks callbacks;
  callbacks.cancel = &interrupts.cancelled();
  callbacks.on_event = [&interrupts](const agent::AgentEvent& e) {  // one line per tool call
    if (e.type == agent::EventType::kToolCallStart) {
      std::fprintf(stderr, "  [tool] %s %s\n", e.tool_name.c_str(), e.main_argument.c_str());
    } else if (e.type == agent::EventType::kToolCallEnd && !e.ok) {
      // Ctrl-C/SIGTERM ends a running command with no message of its own.
      if (interrupts.cancelled()) {
        std::fprintf(stderr, "  [tool] %s stopped: interrupted\n", e.tool_name.c_str());
      } else {
        std::fprintf(stderr, "  [tool] %s failed: %s\n", e.tool_name.c_str(),
                     e.output_preview.empty() ? "(no message)" : e.output_preview.c_str());
      }
    }
  };
  agent::RunResult result = (*deep_agent)->Run(kTask, callbacks);
  deep_agent->reset();  // done with the sandbox's tools

  if (interrupts.cancelled()) {
    std::fprintf(stderr, "Interrupted: the sandbox %s was deleted.\n", id.c_str());
    return kRunExitInterrupted;
  }
  if (result.stop_reason == agent::StopReason::kStepLimit) {
    std::fprintf(stderr, "The agent hit its step limit: %s\n", result.error->message.c_str());
    return kRunExitStepLimit;
  }
  if (!result.ok()) {
    std::fprintf(stderr, "Model error: %s\n",
                 result.error ? result.error->message.c_str() : "the run did not complete");
    return kRunExitModel;
  }
  std::printf("Agent's final message:\n%s\n\n", result.final_text.c_str());
  std::fflush(stdout);

  // --- Verify against the sandbox itself, not the agent's word.
  auto run = sandbox.Exec({.argv = {"python3", "fib.py"}, .timeout = std::chrono::seconds(60)});
  if (interrupts.cancelled()) return kRunExitInterrupted;
  if (!run) {
    std::fprintf(stderr, "Sandbox verification failed: could not run fib.py in sandbox %s: %s\n",
                 id.c_str(), run.error().message.c_str());
    return kRunExitSandbox;
  }
  if (run->kind != ExitKind::kExited || run->exit_code != 0) {
    std::fprintf(stderr, "Sandbox verification failed: `python3 fib.py` %s %d in the sandbox.\n%s",
                 run->kind == ExitKind::kExited ? "exited with status" : "was killed by signal",
                 run->kind == ExitKind::kExited ? run->exit_code : run->signal,
                 run->stderr_data.c_str());
    return kRunExitVerification;
  }
  examples::SequenceCheck check = examples::CheckFibonacciOutput(run->stdout_data);
  if (!check.ok) {
    std::fprintf(stderr,
                 "Sandbox verification failed: fib.py does not print the sequence 0, 1, 1, 2, "
                 "3, 5, 8, 13, 21, 34: %s\n",
                 check.detail.c_str());
    return kRunExitVerification;
  }
  // A local sandbox is no pod: say where it ran.
  std::printf(
      "Sandbox verification passed: fib.py runs in the %s and prints the expected sequence.\n",
      opt.sandbox == "k8s" ? "pod" : "sandbox");
  return kRunExitOk;
  // Leaving scope: `delete_on_signal` first (no signal can use the lease any
  // more), then `lease` deletes the sandbox.
}
