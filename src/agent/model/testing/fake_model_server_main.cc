// deepbox-fake-model-server: a fake Anthropic or OpenAI-compatible server as a
// process, serving a replay file's turns (for shell and terminal tests).
//
//   deepbox-fake-model-server --script FILE.jsonl [--provider anthropic|openai]
//       [--tls] [--api-key KEY] [--port N] [--exit-on-stdin-eof]
//
// Prints the base URL on the first line of stdout (with --tls, the CA file on
// the second), then serves until SIGTERM/SIGINT (or stdin EOF if asked).
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

#include "agent/model/testing/fake_anthropic.h"
#include "agent/model/testing/fake_openai.h"

namespace {

int Usage() {
  std::fprintf(stderr,
               "usage: deepbox-fake-model-server --script FILE.jsonl [--provider "
               "anthropic|openai] [--tls] [--api-key KEY] [--port N] [--exit-on-stdin-eof]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace deepbox::agent::testing;
  std::string script, provider = "anthropic";
  FakeServerOptions options;
  bool stdin_eof = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    const char* v = nullptr;
    if (arg == "--script" && (v = value())) {
      script = v;
    } else if (arg == "--provider" && (v = value())) {
      provider = v;
    } else if (arg == "--api-key" && (v = value())) {
      options.api_key = v;
    } else if (arg == "--port" && (v = value())) {
      options.port = std::atoi(v);
    } else if (arg == "--tls") {
      options.tls = true;
    } else if (arg == "--exit-on-stdin-eof") {
      stdin_eof = true;
    } else {
      return Usage();
    }
  }
  if (script.empty() || (provider != "anthropic" && provider != "openai")) return Usage();
  auto turns = ScriptFromReplayFile(script);
  if (!turns) {
    std::fprintf(stderr, "deepbox-fake-model-server: %s\n", turns.error().message.c_str());
    return 1;
  }
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);  // before any thread starts
  std::unique_ptr<FakeAnthropicServer> anthropic;
  std::unique_ptr<FakeOpenAiServer> openai;
  std::string url, ca;
  if (provider == "anthropic") {
    anthropic = std::make_unique<FakeAnthropicServer>(options);
    anthropic->Enqueue(std::move(*turns));
    url = anthropic->url();
    ca = anthropic->ca_file();
  } else {
    openai = std::make_unique<FakeOpenAiServer>(options);
    openai->Enqueue(std::move(*turns));
    url = openai->url();
    ca = openai->ca_file();
  }
  std::printf("%s\n", url.c_str());
  if (!ca.empty()) std::printf("%s\n", ca.c_str());
  std::fflush(stdout);
  if (stdin_eof) {
    std::thread([] {
      char buf[256];
      while (::read(STDIN_FILENO, buf, sizeof buf) > 0) {
      }
      ::kill(::getpid(), SIGTERM);
    }).detach();
  }
  int sig = 0;
  sigwait(&set, &sig);
  return 0;
}
