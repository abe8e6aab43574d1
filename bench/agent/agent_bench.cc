// Deep agent harness benchmark (issue 4): the production DeepAgent loop with
// its default middleware, a scripted in-process model that answers at once,
// and a real local sandbox (deepbox-sandboxd in fresh namespaces). See
// README.md.
//
//   bench_agent [--turns N] [--memory-turns N] [--payload-bytes B] [--fib-runs R]
//               [--sections memory,turn,fib] [--replay FILE]
//
// Sections (always run in this order, whatever the order given):
//   memory  a 1,000-turn thread (write_file / read_file of ~2 KiB each turn):
//           process VmRSS / VmHWM before and after. First, so that the
//           process peak is this thread's and not another section's.
//   turn    N turns, each one read_file call of a small file: per-turn wall
//           time from one model call to the next, split into the scripted
//           model, the sandbox calls and the harness; beside it the same read
//           straight through the Sandbox interface (no harness).
//   fib     the scripted Fibonacci conversation (examples/fib) replayed R
//           times against the sandbox; ends with a BENCH_AGENT_FIB line that
//           python/compare_deepagents.sh reads.
#include <fmt/format.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "agent/deep_agent.h"
#include "agent/model/replay.h"
#include "agent/thread_store.h"
#include "common/testing/temp_dir.h"
#include "local/lifecycle/provider.h"

namespace {

using namespace deepbox;
using namespace deepbox::agent;
using Clock = std::chrono::steady_clock;

// The task and prompt of examples/fib/main.cc (the compare script's Python
// side sends the same two strings).
constexpr const char* kFibTask =
    "Write a Python script /workspace/fib.py that prints the first 10 Fibonacci numbers "
    "(starting 0, 1), then run it with `python3 /workspace/fib.py` and tell me what it "
    "printed.";
constexpr const char* kFibSystemPrompt = "You are a careful Python developer.";
constexpr const char* kFibExpected = "0\n1\n1\n2\n3\n5\n8\n13\n21\n34\n";

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

struct Stats {
  std::vector<double> v;
  double Pct(double p) const {
    if (v.empty()) return 0;
    std::vector<double> s = v;
    std::sort(s.begin(), s.end());
    size_t i = static_cast<size_t>(p / 100.0 * static_cast<double>(s.size() - 1) + 0.5);
    return s[std::min(i, s.size() - 1)];
  }
  double Mean() const {
    double sum = 0;
    for (double x : v) sum += x;
    return v.empty() ? 0 : sum / static_cast<double>(v.size());
  }
  double MeanOf(size_t from, size_t to) const {
    to = std::min(to, v.size());
    double sum = 0;
    for (size_t i = from; i < to; ++i) sum += v[i];
    return to > from ? sum / static_cast<double>(to - from) : 0;
  }
};

// A field of /proc/self/status in KiB ("VmRSS:", "VmHWM:").
int64_t StatusKb(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field, 0) == 0) {
      std::istringstream ss(line.substr(std::strlen(field)));
      int64_t kb = 0;
      ss >> kb;
      return kb;
    }
  }
  return 0;
}

double Mib(int64_t kb) { return static_cast<double>(kb) / 1024.0; }

std::string LoadAvg() {
  std::ifstream in("/proc/loadavg");
  std::string s;
  std::getline(in, s);
  return s;
}

// Forwards to the real sandbox and adds up the time spent in it, per method
// (every call is a request to deepbox-sandboxd). Thread-safe: tools may run
// on worker threads.
class TimedSandbox : public Sandbox {
 public:
  enum Method { kExec, kStat, kList, kRead, kWrite, kEdit, kOther, kMethods };
  static constexpr const char* kMethodNames[kMethods] = {"Exec",  "Stat", "List", "Read",
                                                         "Write", "Edit", "other"};

  explicit TimedSandbox(Sandbox& inner) : inner_(inner) {}

  int64_t ns() const { return ns_.load(); }
  int64_t calls() const { return calls_.load(); }
  struct Counts {
    int64_t calls[kMethods] = {};
    int64_t ns[kMethods] = {};
  };
  Counts counts() const {
    Counts c;
    for (int m = 0; m < kMethods; ++m) {
      c.calls[m] = method_calls_[m].load();
      c.ns[m] = method_ns_[m].load();
    }
    return c;
  }

  std::string id() const override { return inner_.id(); }
  std::string root() const override { return inner_.root(); }
  Result<ExecResult> Exec(const ExecRequest& r) override {
    return Timed(kExec, [&] { return inner_.Exec(r); });
  }
  Result<ExecResult> ExecStream(const ExecRequest& r, const OutputCallback& cb) override {
    return Timed(kExec, [&] { return inner_.ExecStream(r, cb); });
  }
  Result<FileInfo> Stat(const std::string& p) override {
    return Timed(kStat, [&] { return inner_.Stat(p); });
  }
  Result<std::vector<FileInfo>> List(const std::string& p) override {
    return Timed(kList, [&] { return inner_.List(p); });
  }
  Result<ReadResult> Read(const std::string& p, const ReadOptions& o) override {
    return Timed(kRead, [&] { return inner_.Read(p, o); });
  }
  Status Write(const std::string& p, std::string_view c, uint32_t mode) override {
    return Timed(kWrite, [&] { return inner_.Write(p, c, mode); });
  }
  Result<EditResult> Edit(const std::string& p, const std::string& o, const std::string& n,
                          bool all) override {
    return Timed(kEdit, [&] { return inner_.Edit(p, o, n, all); });
  }
  Status Mkdir(const std::string& p, bool parents) override {
    return Timed(kOther, [&] { return inner_.Mkdir(p, parents); });
  }
  Status Move(const std::string& f, const std::string& t, bool overwrite) override {
    return Timed(kOther, [&] { return inner_.Move(f, t, overwrite); });
  }
  Status Delete(const std::string& p, bool recursive) override {
    return Timed(kOther, [&] { return inner_.Delete(p, recursive); });
  }
  Result<GlobResult> Glob(const std::string& pat, const std::string& p, size_t max) override {
    return Timed(kOther, [&] { return inner_.Glob(pat, p, max); });
  }
  Result<GrepResult> Grep(const GrepRequest& r) override {
    return Timed(kOther, [&] { return inner_.Grep(r); });
  }
  Result<std::string> Download(const std::string& p) override {
    return Timed(kOther, [&] { return inner_.Download(p); });
  }
  Status Upload(const std::string& p, std::string_view c, uint32_t mode) override {
    return Timed(kOther, [&] { return inner_.Upload(p, c, mode); });
  }

 private:
  template <typename F>
  auto Timed(Method m, F&& f) -> decltype(f()) {
    int64_t t0 = NowNs();
    auto r = f();
    int64_t ns = NowNs() - t0;
    ns_ += ns;
    ++calls_;
    method_ns_[m] += ns;
    ++method_calls_[m];
    return r;
  }
  Sandbox& inner_;
  std::atomic<int64_t> ns_{0};
  std::atomic<int64_t> calls_{0};
  std::atomic<int64_t> method_ns_[kMethods] = {};
  std::atomic<int64_t> method_calls_[kMethods] = {};
};

// One agent model call, as the scripted model saw it.
struct CallRecord {
  int64_t in_ns = 0;           // Generate entered
  int64_t out_ns = 0;          // Generate about to return
  int64_t sandbox_ns = 0;      // TimedSandbox::ns() at entry
  int64_t sandbox_calls = 0;   // TimedSandbox::calls() at entry
  int64_t extra_model_ns = 0;  // summary calls made since the previous agent call
};

// The scripted model: the script returns the response of agent call `turn`
// at once. A call without tools is the summarization middleware asking for a
// summary; it gets a short fixed summary. Usage is reported like a real
// model's (input ~ 4 chars/token of the request, counted incrementally), so
// the summarization trigger follows the usual path. Keeps no requests.
class BenchModel : public ChatModel {
 public:
  using Script = std::function<ModelResponse(size_t turn)>;

  BenchModel(Script script, const TimedSandbox* sandbox, size_t expected_calls,
             size_t rss_every = 0)
      : script_(std::move(script)), sandbox_(sandbox), rss_every_(rss_every) {
    records_.reserve(expected_calls + 1);
  }

  std::string name() const override { return "bench:scripted"; }
  ModelProfile profile() const override {
    return ProfileForModelName("anthropic:claude-sonnet-4-6");
  }

  Result<ModelResponse> Generate(const ModelRequest& request, const StreamCallbacks&) override {
    std::lock_guard<std::mutex> lock(mu_);
    int64_t in = NowNs();
    if (request.tools.empty()) {  // the summarization middleware's summary call
      ++summaries_;
      ModelResponse r;
      r.message = Message::Assistant(
          "The user asked for a long series of file reads and writes under /workspace/mem; "
          "each succeeded. Continue with the next file.");
      r.usage.input_tokens =
          static_cast<int64_t>(request.messages.empty() ? 0 : request.messages[0].text.size() / 4);
      r.usage.output_tokens = 40;
      r.stop_reason = "end_turn";
      pending_extra_ns_ += NowNs() - in;
      return r;
    }
    CallRecord rec;
    rec.in_ns = in;
    rec.sandbox_ns = sandbox_ != nullptr ? sandbox_->ns() : 0;
    rec.sandbox_calls = sandbox_ != nullptr ? sandbox_->calls() : 0;
    rec.extra_model_ns = pending_extra_ns_;
    pending_extra_ns_ = 0;
    size_t turn = records_.size();
    ModelResponse r = script_(turn);
    r.usage.input_tokens = InputTokens(request);
    r.usage.output_tokens = 30;
    r.stop_reason = r.message.tool_calls.empty() ? "end_turn" : "tool_use";
    r.model = "bench";
    if (rss_every_ > 0 && turn % rss_every_ == 0) {
      rss_samples_.emplace_back(turn, StatusKb("VmRSS:"));
    }
    rec.out_ns = NowNs();
    records_.push_back(rec);
    return r;
  }

  const std::vector<CallRecord>& records() const { return records_; }
  int summaries() const { return summaries_; }
  const std::vector<std::pair<size_t, int64_t>>& rss_samples() const { return rss_samples_; }

 private:
  int64_t InputTokens(const ModelRequest& request) {
    if (fixed_chars_ == 0) {
      fixed_chars_ = request.system.size();
      for (const auto& t : request.tools) {
        fixed_chars_ += t.description.size() + ToJson(t.input_schema).size();
      }
    }
    if (request.messages.size() < counted_messages_) {  // summarized: start over
      counted_messages_ = 0;
      counted_chars_ = 0;
    }
    for (size_t i = counted_messages_; i < request.messages.size(); ++i) {
      const Message& m = request.messages[i];
      counted_chars_ += m.text.size() + 12;
      for (const auto& c : m.tool_calls) counted_chars_ += c.name.size() + ToJson(c.input).size();
    }
    counted_messages_ = request.messages.size();
    return static_cast<int64_t>((fixed_chars_ + counted_chars_) / 4);
  }

  Script script_;
  const TimedSandbox* sandbox_;
  size_t rss_every_;
  std::mutex mu_;
  std::vector<CallRecord> records_;
  int64_t pending_extra_ns_ = 0;
  int summaries_ = 0;
  std::vector<std::pair<size_t, int64_t>> rss_samples_;
  size_t fixed_chars_ = 0;
  size_t counted_messages_ = 0;
  size_t counted_chars_ = 0;
};

// Wraps a model and adds up the time spent in it (the replay model's turns).
class TimedModel : public ChatModel {
 public:
  explicit TimedModel(std::unique_ptr<ChatModel> inner) : inner_(std::move(inner)) {}
  std::string name() const override { return inner_->name(); }
  ModelProfile profile() const override { return inner_->profile(); }
  Result<ModelResponse> Generate(const ModelRequest& request,
                                 const StreamCallbacks& callbacks) override {
    int64_t t0 = NowNs();
    auto r = inner_->Generate(request, callbacks);
    ns_ += NowNs() - t0;
    return r;
  }
  int64_t ns() const { return ns_.load(); }
  ChatModel& inner() { return *inner_; }

 private:
  std::unique_ptr<ChatModel> inner_;
  std::atomic<int64_t> ns_{0};
};

ToolCall MakeCall(std::string id, std::string name, json::object input) {
  ToolCall c;
  c.id = std::move(id);
  c.name = std::move(name);
  c.input = std::move(input);
  return c;
}

ModelResponse ToolTurn(std::string text, ToolCall call) {
  ModelResponse r;
  r.message = Message::Assistant(std::move(text), {std::move(call)});
  return r;
}

ModelResponse FinalTurn(std::string text) {
  ModelResponse r;
  r.message = Message::Assistant(std::move(text));
  return r;
}

// Tool results that failed, and tool results the eviction middleware replaced.
struct ThreadCheck {
  int tool_errors = 0;
  int evicted = 0;
  size_t tool_results = 0;
  size_t payload_bytes = 0;  // message text + tool call arguments
  std::string first_error;
};

ThreadCheck CheckThread(const std::vector<Message>& messages) {
  ThreadCheck c;
  for (const auto& m : messages) {
    c.payload_bytes += m.text.size();
    for (const auto& call : m.tool_calls) c.payload_bytes += ToJson(call.input).size();
    if (m.role != Role::kTool) continue;
    ++c.tool_results;
    if (m.is_error) {
      if (c.tool_errors++ == 0) c.first_error = m.tool_name + ": " + m.text.substr(0, 200);
    }
    if (m.text.rfind("Tool result too large", 0) == 0) ++c.evicted;
  }
  return c;
}

struct Options {
  int turns = 500;
  int memory_turns = 1000;
  int fib_runs = 50;
  size_t payload_bytes = 2048;
  std::set<std::string> sections = {"memory", "turn", "fib"};
  std::string replay = DEEPBOX_AGENT_BENCH_REPLAY;
};

int PrintUsage(const char* msg) {
  std::fprintf(stderr,
               "%s%susage: bench_agent [--turns N] [--memory-turns N] [--fib-runs R] "
               "[--payload-bytes B] [--sections memory,turn,fib] [--replay FILE]\n",
               msg, *msg ? "\n" : "");
  return 2;
}

// ------------------------------------------------------------------ memory

int RunMemory(const Options& opt, TimedSandbox& sandbox) {
  const int turns = opt.memory_turns;
  // ~payload_bytes of text per file, 64-char lines, unique per turn.
  auto content = [&](int turn) {
    std::string s;
    for (int line = 0; s.size() < opt.payload_bytes; ++line) {
      std::string l = fmt::format("turn {:05d} line {:03d} ", turn, line);
      l.resize(63, static_cast<char>('a' + (turn + line) % 26));
      s += l + "\n";
    }
    return s;
  };
  int64_t rss_before = StatusKb("VmRSS:"), hwm_before = StatusKb("VmHWM:");

  auto model = std::make_shared<BenchModel>(
      [&](size_t t) -> ModelResponse {
        const int turn = static_cast<int>(t);
        if (turn >= turns) return FinalTurn("All files written and read back.");
        std::string path = fmt::format("/workspace/mem/f{}.txt", (turn / 2) % 16);
        std::string id = fmt::format("toolu_mem_{:05d}", turn);
        if (turn % 2 == 0) {
          return ToolTurn(fmt::format("Writing {} (turn {}).", path, turn),
                          MakeCall(id, "write_file",
                                   json::object{{"file_path", path}, {"content", content(turn)}}));
        }
        return ToolTurn(fmt::format("Reading {} back (turn {}).", path, turn),
                        MakeCall(id, "read_file", json::object{{"file_path", path}}));
      },
      &sandbox, static_cast<size_t>(turns) + 1, 100);
  auto agent = DeepAgent::Create({.model = model, .sandbox = &sandbox, .max_steps = turns + 10});
  if (!agent) {
    std::fprintf(stderr, "agent: %s\n", agent.error().ToString().c_str());
    return 1;
  }
  int64_t t0 = NowNs();
  RunResult result = (*agent)->Run("Write and read back files under /workspace/mem.");
  double secs = static_cast<double>(NowNs() - t0) / 1e9;
  int64_t rss_after = StatusKb("VmRSS:"), hwm_after = StatusKb("VmHWM:");
  if (!result.ok()) {
    std::fprintf(stderr, "memory run failed: %s\n",
                 result.error ? result.error->message.c_str() : "not completed");
    return 1;
  }
  ThreadCheck check = CheckThread(result.messages);
  bool summarized = (*agent)->state().summarization.has_value();
  result = RunResult{};
  agent->reset();
  int64_t rss_freed = StatusKb("VmRSS:");
  if (check.tool_errors > 0) {
    std::fprintf(stderr, "memory run: %d tool errors, first: %s\n", check.tool_errors,
                 check.first_error.c_str());
    return 1;
  }

  std::printf(
      "\n1. A %d-turn thread (alternating write_file / read_file of %zu-byte files, "
      "%zu tool results, %.2f s)\n\n",
      turns, opt.payload_bytes, check.tool_results, secs);
  std::printf("  %-52s %10s %10s\n", "", "VmRSS MiB", "VmHWM MiB");
  std::printf("  %-52s %10.2f %10.2f\n", "before the agent (sandbox lease held)", Mib(rss_before),
              Mib(hwm_before));
  std::printf("  %-52s %10.2f %10.2f\n", "after the run (thread in memory)", Mib(rss_after),
              Mib(hwm_after));
  std::printf("  %-52s %10.2f\n", "after destroying the agent (malloc keeps the pages)",
              Mib(rss_freed));
  std::printf("  growth during the run: %.2f MiB RSS, %.2f MiB peak; %.2f KiB per turn\n",
              Mib(rss_after - rss_before), Mib(hwm_after - hwm_before),
              static_cast<double>(rss_after - rss_before) / turns);
  std::printf("  thread payload (message text + tool arguments): %.2f MiB\n",
              static_cast<double>(check.payload_bytes) / 1048576.0);
  std::printf("  VmRSS by model turn:");
  for (const auto& [turn, kb] : model->rss_samples()) std::printf(" %zu:%.1f", turn, Mib(kb));
  std::printf(" (MiB)\n");
  std::printf("  summarization: %s (%d summary model calls)%s\n",
              model->summaries() > 0 ? "kicked in" : "did not kick in", model->summaries(),
              summarized ? "; the thread keeps every message, requests carry summary + tail" : "");
  std::printf(
      "  large-result eviction: %d tool results evicted (read_file/write_file are "
      "exempt, as in deepagents)\n",
      check.evicted);
  std::printf("  goal: < 50 MiB RSS for a 1,000-turn thread: %s (peak VmHWM %.2f MiB)\n",
              Mib(hwm_after) < 50 ? "met" : "NOT met", Mib(hwm_after));
  return 0;
}

// ------------------------------------------------------------------ turn

struct TurnSeries {
  Stats wall_us, model_us, sandbox_us, harness_tool_us, harness_us;
  double total_per_turn_us = 0;
  int64_t sandbox_calls = 0;
  int summaries = 0;
};

Result<TurnSeries> RunTurns(const Options& opt, TimedSandbox& sandbox, const std::string& path,
                            std::shared_ptr<ThreadStore> store) {
  const int turns = opt.turns;
  auto model = std::make_shared<BenchModel>(
      [&](size_t t) -> ModelResponse {
        if (static_cast<int>(t) >= turns) return FinalTurn("Done.");
        return ToolTurn("", MakeCall(fmt::format("toolu_turn_{:05d}", t), "read_file",
                                     json::object{{"file_path", path}}));
      },
      &sandbox, static_cast<size_t>(turns) + 1);
  auto agent = DeepAgent::Create({.model = model,
                                  .sandbox = &sandbox,
                                  .max_steps = turns + 10,
                                  .thread_store = std::move(store)});
  if (!agent) return tl::unexpected(agent.error());
  int64_t t0 = NowNs();
  RunResult result = (*agent)->Run("Read the file again and again.");
  int64_t total = NowNs() - t0;
  if (!result.ok()) {
    return MakeError(ErrorCode::kInternal,
                     result.error ? result.error->message : "the run did not complete");
  }
  ThreadCheck check = CheckThread(result.messages);
  if (check.tool_errors > 0) return MakeError(ErrorCode::kInternal, check.first_error);

  const auto& r = model->records();
  TurnSeries s;
  s.summaries = model->summaries();
  s.total_per_turn_us = static_cast<double>(total) / 1e3 / turns;
  for (size_t k = 0; k + 1 < r.size(); ++k) {
    double wall = static_cast<double>(r[k + 1].in_ns - r[k].in_ns) / 1e3;
    double model_us = static_cast<double>(r[k].out_ns - r[k].in_ns + r[k + 1].extra_model_ns) / 1e3;
    double sb = static_cast<double>(r[k + 1].sandbox_ns - r[k].sandbox_ns) / 1e3;
    s.sandbox_calls += r[k + 1].sandbox_calls - r[k].sandbox_calls;
    s.wall_us.v.push_back(wall);
    s.model_us.v.push_back(model_us);
    s.sandbox_us.v.push_back(sb);
    s.harness_tool_us.v.push_back(wall - model_us);
    s.harness_us.v.push_back(wall - model_us - sb);
  }
  return s;
}

int RunTurn(const Options& opt, TimedSandbox& sandbox, const std::string& tmp) {
  const std::string path = "/workspace/bench/small.txt";
  std::string text;
  for (int i = 1; i <= 10; ++i) text += fmt::format("line {} of a small file for read_file\n", i);
  if (auto st = sandbox.Write(path, text, 0644); !st) {
    std::fprintf(stderr, "write %s: %s\n", path.c_str(), st.error().ToString().c_str());
    return 1;
  }

  // The baseline: the read that read_file makes, straight through the Sandbox.
  ReadOptions ro;
  ro.line_offset = 0;
  ro.line_limit = 100;  // read_file's default limit
  ro.max_bytes = 500 * 1024;
  Stats raw;
  for (int i = 0; i < opt.turns + 20; ++i) {
    int64_t t0 = NowNs();
    auto r = sandbox.Read(path, ro);
    int64_t ns = NowNs() - t0;
    if (!r || r->content.empty()) {
      std::fprintf(stderr, "raw read failed\n");
      return 1;
    }
    if (i >= 20) raw.v.push_back(static_cast<double>(ns) / 1e3);  // 20 warm-up reads
  }

  auto plain = RunTurns(opt, sandbox, path, nullptr);
  if (!plain) {
    std::fprintf(stderr, "turn run: %s\n", plain.error().ToString().c_str());
    return 1;
  }
  auto stored = RunTurns(opt, sandbox, path, std::make_shared<ThreadStore>(tmp + "/threads"));
  if (!stored) {
    std::fprintf(stderr, "turn run (thread store): %s\n", stored.error().ToString().c_str());
    return 1;
  }

  const TurnSeries& s = *plain;
  std::printf(
      "\n2. Harness overhead per model turn: %d turns, each one read_file of a %zu-byte "
      "file (%.2f sandbox calls per turn), scripted model\n\n",
      opt.turns, text.size(),
      static_cast<double>(s.sandbox_calls) / static_cast<double>(s.wall_us.v.size()));
  std::printf("  %-58s %9s %9s %9s\n", "per turn", "p50 us", "p99 us", "mean us");
  auto row = [](const char* name, const Stats& st) {
    std::printf("  %-58s %9.1f %9.1f %9.1f\n", name, st.Pct(50), st.Pct(99), st.Mean());
  };
  row("raw Sandbox::Read of the same file (no harness)", raw);
  row("turn: model call -> next model call (wall)", s.wall_us);
  row("  of which the scripted model", s.model_us);
  row("  of which sandbox calls (read_file's Sandbox::Read)", s.sandbox_us);
  row("turn without the model (harness + tool)", s.harness_tool_us);
  row("harness only (turn - model - its sandbox calls)", s.harness_us);
  row("turn without the model, with a thread store (JSONL)", stored->harness_tool_us);
  row("harness only, with a thread store (JSONL)", stored->harness_us);
  size_t n = s.harness_tool_us.v.size(), tenth = std::max<size_t>(1, n / 10);
  std::printf("\n  Run() wall / turns: %.1f us per turn (cross-check of the wall p50)\n",
              s.total_per_turn_us);
  std::printf(
      "  growth with the thread: harness + tool mean %.1f us over the first %zu turns, "
      "%.1f us over the last %zu\n",
      s.harness_tool_us.MeanOf(0, tenth), tenth, s.harness_tool_us.MeanOf(n - tenth, n), tenth);
  std::printf(
      "  harness-only overhead, p50: %.1f us (turn without model p50 - raw read p50) = "
      "%.1f us (p50 of turn - its own sandbox time)\n",
      s.harness_tool_us.Pct(50) - raw.Pct(50), s.harness_us.Pct(50));
  std::printf("  ratio turn without model / raw read (p50): %.2fx\n",
              s.harness_tool_us.Pct(50) / std::max(raw.Pct(50), 1e-9));
  if (s.summaries > 0 || stored->summaries > 0) {
    std::printf("  summarization kicked in (%d summary calls): those turns are included\n",
                s.summaries + stored->summaries);
  }
  std::printf("  goal: p50 < 1 ms for a turn with one read_file call: %s (%.3f ms)\n",
              s.harness_tool_us.Pct(50) < 1000 ? "met" : "NOT met",
              s.harness_tool_us.Pct(50) / 1000);
  return 0;
}

// ------------------------------------------------------------------ fib

int RunFib(const Options& opt, TimedSandbox& sandbox) {
  auto file = ReadReplayFile(opt.replay);
  if (!file) {
    std::fprintf(stderr, "%s\n", file.error().ToString().c_str());
    return 1;
  }
  constexpr int kWarmup = 2;
  Stats create_ms, run_ms, total_ms, sandbox_ms, model_ms, harness_ms;
  int64_t sandbox_calls = 0;
  TimedSandbox::Counts before_timed{};
  for (int i = 0; i < opt.fib_runs + kWarmup; ++i) {
    if (i == kWarmup) before_timed = sandbox.counts();
    auto model = std::make_shared<TimedModel>(std::make_unique<ReplayModel>(*file, opt.replay));
    int64_t sb0 = sandbox.ns(), calls0 = sandbox.calls();
    int64_t t0 = NowNs();
    auto agent = DeepAgent::Create(
        {.model = model, .sandbox = &sandbox, .system_prompt = kFibSystemPrompt, .max_steps = 50});
    if (!agent) {
      std::fprintf(stderr, "agent: %s\n", agent.error().ToString().c_str());
      return 1;
    }
    int64_t t1 = NowNs();
    RunResult result = (*agent)->Run(kFibTask);
    int64_t t2 = NowNs();
    agent->reset();
    int64_t t3 = NowNs();
    if (!result.ok()) {
      std::fprintf(stderr, "fib run %d failed: %s\n", i,
                   result.error ? result.error->message.c_str() : "not completed");
      return 1;
    }
    ThreadCheck check = CheckThread(result.messages);
    auto& replay = static_cast<ReplayModel&>(model->inner());
    if (check.tool_errors > 0 || replay.turns_served() != replay.turns_total()) {
      std::fprintf(stderr, "fib run %d: %d tool errors (%s), %zu of %zu turns\n", i,
                   check.tool_errors, check.first_error.c_str(), replay.turns_served(),
                   replay.turns_total());
      return 1;
    }
    if (i < kWarmup) continue;
    double sb = static_cast<double>(sandbox.ns() - sb0) / 1e6;
    double md = static_cast<double>(model->ns()) / 1e6;
    double run = static_cast<double>(t2 - t1) / 1e6;
    sandbox_calls += sandbox.calls() - calls0;
    create_ms.v.push_back(static_cast<double>(t1 - t0) / 1e6);
    run_ms.v.push_back(run);
    total_ms.v.push_back(static_cast<double>(t3 - t0) / 1e6);
    sandbox_ms.v.push_back(sb);
    model_ms.v.push_back(md);
    harness_ms.v.push_back(run - sb - md);
  }
  TimedSandbox::Counts after_timed = sandbox.counts();
  std::string breakdown;
  for (int m = 0; m < TimedSandbox::kMethods; ++m) {
    int64_t c = after_timed.calls[m] - before_timed.calls[m];
    if (c == 0) continue;
    breakdown += fmt::format(
        "{}{} {:.1f} calls {:.2f} ms", breakdown.empty() ? "" : ", ", TimedSandbox::kMethodNames[m],
        static_cast<double>(c) / opt.fib_runs,
        static_cast<double>(after_timed.ns[m] - before_timed.ns[m]) / 1e6 / opt.fib_runs);
  }
  // The sandbox itself says whether the run worked.
  auto run =
      sandbox.Exec({.argv = {"python3", "/workspace/fib.py"}, .timeout = std::chrono::seconds(60)});
  bool verified = run && run->kind == ExitKind::kExited && run->exit_code == 0 &&
                  run->stdout_data == kFibExpected;

  std::printf(
      "\n3. Scripted Fibonacci run (%s: %zu model turns, 6 tool calls), %d runs after "
      "%d warm-up runs, one sandbox\n\n",
      std::filesystem::path(opt.replay).filename().c_str(), file->turns.size(), opt.fib_runs,
      kWarmup);
  std::printf("  %-58s %9s %9s %9s\n", "per run", "p50 ms", "p99 ms", "mean ms");
  auto row = [](const char* name, const Stats& st) {
    std::printf("  %-58s %9.3f %9.3f %9.3f\n", name, st.Pct(50), st.Pct(99), st.Mean());
  };
  row("DeepAgent::Create", create_ms);
  row("Run(task) (harness + tools; model time ~0)", run_ms);
  row("  of which sandbox calls", sandbox_ms);
  row("  of which the replayed model", model_ms);
  row("  harness only (Run - sandbox - model)", harness_ms);
  row("Create + Run + destroy", total_ms);
  std::printf("  sandbox calls per run (mean): %.1f: %s\n",
              static_cast<double>(sandbox_calls) / opt.fib_runs, breakdown.c_str());
  std::printf("  fib.py verified in the sandbox after the runs: %s\n", verified ? "yes" : "NO");
  std::printf(
      "BENCH_AGENT_FIB runs=%d run_p50_ms=%.3f run_mean_ms=%.3f create_p50_ms=%.3f "
      "total_p50_ms=%.3f total_mean_ms=%.3f tools_p50_ms=%.3f harness_p50_ms=%.3f "
      "model_p50_ms=%.3f verified=%d\n",
      opt.fib_runs, run_ms.Pct(50), run_ms.Mean(), create_ms.Pct(50), total_ms.Pct(50),
      total_ms.Mean(), sandbox_ms.Pct(50), harness_ms.Pct(50), model_ms.Pct(50), verified ? 1 : 0);
  return verified ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      PrintUsage("");
      return 0;
    }
    if (i + 1 >= argc) return PrintUsage(("missing value for " + a).c_str());
    std::string v = argv[++i];
    if (a == "--turns") {
      opt.turns = std::atoi(v.c_str());
    } else if (a == "--memory-turns") {
      opt.memory_turns = std::atoi(v.c_str());
    } else if (a == "--fib-runs") {
      opt.fib_runs = std::atoi(v.c_str());
    } else if (a == "--payload-bytes") {
      opt.payload_bytes = static_cast<size_t>(std::atol(v.c_str()));
    } else if (a == "--replay") {
      opt.replay = v;
    } else if (a == "--sections") {
      opt.sections.clear();
      std::stringstream ss(v);
      for (std::string s; std::getline(ss, s, ',');) {
        if (s != "memory" && s != "turn" && s != "fib") {
          return PrintUsage(("unknown section: " + s).c_str());
        }
        opt.sections.insert(s);
      }
    } else {
      return PrintUsage(("unknown argument: " + a).c_str());
    }
  }
  if (opt.turns < 2 || opt.memory_turns < 2 || opt.fib_runs < 1) {
    return PrintUsage("--turns and --memory-turns must be >= 2, --fib-runs >= 1");
  }

  // A private state dir; deepbox and deepbox-sandboxd from this program's dir.
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  std::string bin_dir =
      n > 0 ? std::filesystem::path(std::string(exe, static_cast<size_t>(n))).parent_path().string()
            : ".";
  auto tmp_dir =
      deepbox::testing::TempDir::Make("dbx-abench", "/tmp");  // short: socket paths fit 107 bytes
  if (!tmp_dir) {
    std::fprintf(stderr, "%s\n", tmp_dir.error().ToString().c_str());
    return 1;
  }
  const std::string tmp = tmp_dir->path().string();
  int rc = 0;
  {
    local::lifecycle::LocalProviderOptions o;
    o.state_dir = tmp + "/state";
    o.deepbox_binary = bin_dir + "/deepbox";
    o.sandboxd_binary = bin_dir + "/deepbox-sandboxd";
    o.pool = "";
    auto provider = local::lifecycle::LocalSandboxProvider::Create(o);
    if (!provider) {
      std::fprintf(stderr, "%s\n", provider.error().ToString().c_str());
      return 1;
    }
    auto lease = (*provider)->Claim({.ttl = std::chrono::seconds(3600), .network = "none"});
    if (!lease) {
      std::fprintf(stderr, "claim: %s\n", lease.error().ToString().c_str());
      return 1;
    }
    TimedSandbox sandbox((*lease)->sandbox());
    std::printf("Deep agent harness benchmark: sandbox %s (local, network none), loadavg %s\n",
                sandbox.id().c_str(), LoadAvg().c_str());
    if (opt.sections.count("memory")) rc |= RunMemory(opt, sandbox);
    if (rc == 0 && opt.sections.count("turn")) rc |= RunTurn(opt, sandbox, tmp);
    if (rc == 0 && opt.sections.count("fib")) rc |= RunFib(opt, sandbox);
    std::printf("\nloadavg at the end: %s\n", LoadAvg().c_str());
  }  // the lease deletes the sandbox
  return rc;
}
