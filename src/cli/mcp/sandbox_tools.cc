#include "cli/mcp/sandbox_tools.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <mutex>

#include "agent/middleware_eviction.h"
#include "agent/paths.h"
#include "agent/text.h"
#include "agent/tool.h"
#include "common/base64.h"
#include "common/utf8.h"
#include "sandbox/forwarding_sandbox.h"

namespace deepbox::mcp {
namespace {

// The output of a command as the model sees it (valid UTF-8): its first
// head_cap bytes, its last tail_cap bytes and how many there were.
class OutputCapture {
 public:
  OutputCapture(size_t head_cap, size_t tail_cap) : head_cap_(head_cap), tail_cap_(tail_cap) {}

  // Raw bytes of the command; returns the text they complete (for progress).
  std::string Add(std::string_view raw) {
    pending_.append(raw);
    size_t n = Utf8CompletePrefix(pending_);
    if (n == 0) return {};
    std::string text = SanitizeUtf8(std::string_view(pending_).substr(0, n));
    pending_.erase(0, n);
    Append(text);
    return text;
  }
  std::string Flush() {  // a sequence cut at the end
    if (pending_.empty()) return {};
    std::string text = SanitizeUtf8(pending_);
    pending_.clear();
    Append(text);
    return text;
  }

  uint64_t total() const { return total_; }
  const std::string& head() const { return head_; }
  // The last min(total, tail_cap) bytes.
  std::string_view tail() const {
    std::string_view t = tail_;
    return t.size() > tail_cap_ ? t.substr(t.size() - tail_cap_) : t;
  }
  // Everything, if it was kept (total <= head_cap + tail_cap).
  bool complete() const { return total_ <= head_cap_ + tail_cap_; }
  std::string All() const {
    std::string out = head_;
    uint64_t rest = total_ - head_.size();
    std::string_view t = tail();
    if (rest > 0) out.append(t.substr(t.size() - static_cast<size_t>(rest)));
    return out;
  }

 private:
  void Append(std::string_view text) {
    total_ += text.size();
    if (head_.size() < head_cap_) head_.append(text.substr(0, head_cap_ - head_.size()));
    tail_.append(text);
    if (tail_.size() > 2 * tail_cap_ + 65536) tail_.erase(0, tail_.size() - tail_cap_);
  }

  size_t head_cap_;
  size_t tail_cap_;
  std::string pending_;
  std::string head_;
  std::string tail_;
  uint64_t total_ = 0;
};

// Forwards every call to the real sandbox and remembers what the MCP layer
// needs beyond the tool's text: the exit status of a command, and whether the
// sandbox stopped answering. With a capture, a streamed command's output goes
// to it (and to `progress`) instead of to the tool, which then sees only its
// keepalives: its text is the status lines alone.
class ObservedSandbox : public ForwardingSandbox {
 public:
  explicit ObservedSandbox(Sandbox& inner) : ForwardingSandbox(inner) {}

  std::optional<ExecResult> exec_result() const {
    std::lock_guard<std::mutex> lock(mu_);
    return exec_;
  }
  bool unreachable() const {
    std::lock_guard<std::mutex> lock(mu_);
    return unreachable_;
  }
  void Capture(OutputCapture* capture, std::function<void(std::string_view)> progress) {
    capture_ = capture;
    progress_ = std::move(progress);
  }

  Result<ExecResult> ExecStream(const ExecRequest& r, const OutputCallback& cb) override {
    if (!capture_) return ForwardingSandbox::ExecStream(r, cb);
    auto forward = [&](OutputStream stream, std::string_view data) -> bool {
      std::string text;
      {
        std::lock_guard<std::mutex> lock(mu_);
        text = capture_->Add(data);
      }
      if (!text.empty() && progress_) progress_(text);
      return cb(stream, std::string_view());  // its cancellation check
    };
    auto res = ForwardingSandbox::ExecStream(r, forward);
    std::string rest;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (res && capture_->total() == 0 && !res->combined.empty()) capture_->Add(res->combined);
      rest = capture_->Flush();
    }
    if (!rest.empty() && progress_) progress_(rest);
    if (res) res->combined.clear();
    return res;
  }

 private:
  void OnExecResult(const ExecResult& r) override {
    std::lock_guard<std::mutex> lock(mu_);
    exec_ = r;
  }
  void OnError(const Error& e) override {
    if (e.code != ErrorCode::kUnavailable) return;
    std::lock_guard<std::mutex> lock(mu_);
    unreachable_ = true;
  }

  mutable std::mutex mu_;
  std::optional<ExecResult> exec_;
  bool unreachable_ = false;
  OutputCapture* capture_ = nullptr;
  std::function<void(std::string_view)> progress_;
};

// The largest cut <= `at` of valid UTF-8 `text` on a character boundary,
// at a line end when one is in the last quarter before `at`.
size_t HeadCut(std::string_view text, size_t at) {
  if (at >= text.size()) return text.size();
  size_t nl = text.rfind('\n', at == 0 ? 0 : at - 1);
  if (nl != std::string_view::npos && nl + 1 >= at - at / 4) return nl + 1;
  while (at > 0 && (static_cast<unsigned char>(text[at]) & 0xC0) == 0x80) --at;
  return at;
}
// The smallest start >= `at` (a character boundary; after a line end when
// one is in the first quarter of what follows).
size_t TailCut(std::string_view text, size_t at) {
  if (at == 0) return 0;
  size_t keep = text.size() - at;
  size_t nl = text.find('\n', at - 1);
  if (nl != std::string_view::npos && nl + 1 <= at + keep / 4) return nl + 1;
  while (at < text.size() && (static_cast<unsigned char>(text[at]) & 0xC0) == 0x80) ++at;
  return at;
}

// The MCP text of execute: the captured output (whole, or head + tail with
// the omitted byte count and where the whole is saved) + the tool's status
// lines (`footer`: the agent tool's text for a command without output).
std::string ExecuteText(const OutputCapture& out, const std::string& footer,
                        const std::string& saved_path, const std::string& save_error,
                        size_t inline_cap) {
  std::string text;
  if (out.total() <= inline_cap) {
    text = out.head();
  } else {
    size_t half = inline_cap / 2;
    std::string_view head = out.head();
    head = head.substr(0, HeadCut(head, half));
    std::string_view tail = out.tail();
    if (tail.size() > half) tail = tail.substr(TailCut(tail, tail.size() - half));
    uint64_t omitted = out.total() - head.size() - tail.size();
    std::string where;
    if (!saved_path.empty()) {
      where = out.complete() ? fmt::format("All of it is saved in {}", saved_path)
                             : fmt::format("Its first {} and last {} bytes are saved in {}",
                                           out.head().size(), out.tail().size(), saved_path);
      where += ": page through it with read_file (offset/limit) or search it with grep.";
    } else {
      where = "It could not be saved in the sandbox: " + save_error;
    }
    text = fmt::format(
        "{}\n\n... [{} bytes omitted: the output was {} bytes; its first {} and last {} are "
        "shown. {}] ...\n\n{}",
        head, omitted, out.total(), head.size(), tail.size(), where, tail);
  }
  if (!footer.empty() && footer[0] != '\n' && !text.empty() && text.back() != '\n') text += "\n";
  return text + footer;
}

// The deepagents descriptions, made true for MCP: nothing is offloaded but
// execute's long output (by this server), and edit_file does not require a
// read first.
std::string McpDescription(const std::string& tool, std::string d, size_t inline_cap,
                           int64_t default_timeout, int64_t max_timeout) {
  auto replace = [&](std::string_view from, std::string_view to) {
    if (size_t at = d.find(from); at != std::string::npos) d.replace(at, from.size(), to);
  };
  if (tool == "execute") {
    replace(
        "\n\nOnly available on backends implementing SandboxBackendProtocol; otherwise it returns "
        "an error.",
        "");
    replace(" (truncated if very large)", "");
    replace("; use the optional timeout to override the default.",
            fmt::format("; the default timeout is {} seconds, and the optional timeout (at most "
                        "{}, 0 = {}) overrides it.",
                        default_timeout, max_timeout, max_timeout));
    d += fmt::format(
        "\n\nOutput longer than {} bytes keeps its first and last {} bytes with the number of "
        "bytes omitted between them; the whole output is saved to a file in the sandbox whose "
        "path the result gives (read it with read_file, search it with grep).",
        inline_cap, inline_cap / 2);
  } else if (tool == "read_file") {
    replace(
        "- Large tool results may be offloaded to a file; the tool message gives the path. Read "
        "that path here, paging with `offset`/`limit`.",
        "- execute saves long output to a file and gives its path; read that path here, paging "
        "with `offset`/`limit`.");
  } else if (tool == "grep") {
    replace(
        "Offloaded large tool results live under the artifacts root (`/large_tool_results/` by "
        "default); grep that directory to search them when you do not know the exact path.",
        "Long execute output is saved under the workspace's large_tool_results/ directory; grep "
        "that directory to search it.");
  } else if (tool == "edit_file") {
    replace("- You must read the file before editing; this tool errors otherwise.\n",
            "- Read the file before editing it, to match its exact text.\n");
  }
  return d;
}

// An object schema: `strict` ones (tool inputs) refuse unknown properties.
json::object ObjectSchema(json::object properties, json::array required, bool strict = false) {
  json::object schema;
  schema["type"] = "object";
  schema["properties"] = std::move(properties);
  schema["required"] = std::move(required);
  if (strict) schema["additionalProperties"] = false;
  return schema;
}

json::object SandboxIdProperty(bool stateless_clients) {
  json::object p;
  p["type"] = "string";
  p["description"] =
      stateless_clients
          ? "Sandbox to use (from sandbox_create or sandbox_list). Clients of the stateless "
            "protocol (MCP 2026-07-28 over HTTP) must pass it: call sandbox_create first. "
            "Session clients may omit it to use their default sandbox, created on first use "
            "and deleted when the session ends."
          : "Sandbox to use (from sandbox_create or sandbox_list). Omit it to use this client's "
            "default sandbox, created on first use and deleted when the client disconnects.";
  return p;
}

// The agent tool's schema, strict, plus sandbox_id.
json::object StrictSchema(const json::object& base, bool with_sandbox_id, bool stateless_clients) {
  json::object s = base;
  s["type"] = "object";
  json::object props;
  if (const json::value* p = s.if_contains("properties"); p && p->is_object()) {
    props = p->get_object();
  }
  if (with_sandbox_id) props["sandbox_id"] = SandboxIdProperty(stateless_clients);
  s["properties"] = std::move(props);
  if (!s.contains("required")) s["required"] = json::array{};
  s["additionalProperties"] = false;
  return s;
}

json::object Annotations(bool read_only, bool destructive, bool idempotent) {
  json::object a;
  a["readOnlyHint"] = read_only;
  if (!read_only) {
    a["destructiveHint"] = destructive;
    a["idempotentHint"] = idempotent;
  }
  a["openWorldHint"] = false;
  return a;
}

json::object Prop(const char* type, std::string description) {
  json::object p;
  p["type"] = type;
  p["description"] = std::move(description);
  return p;
}

std::string ErrorText(const Error& e) { return "Error: " + e.message; }

struct Shared {
  std::shared_ptr<SandboxBroker> broker;
  SandboxToolsOptions options;
};

std::optional<std::string> SandboxIdArg(const json::object& args) {
  const json::value* v = args.if_contains("sandbox_id");
  if (v && v->is_string()) return std::string(v->get_string());
  return std::nullopt;
}

// Runs `fn` on the resolved sandbox, with the bookkeeping every sandbox tool
// shares: resolving (maybe creating the default), _meta, telling the model
// that its default sandbox is new, one clear error for a sandbox that stopped
// answering.
template <typename Fn>
ToolOutcome WithSandbox(Shared& s, const json::object& args, ToolCallContext& ctx, Fn fn) {
  auto resolved = s.broker->Resolve(SandboxIdArg(args), ctx.owner());
  if (!resolved) {
    ToolOutcome o = ToolOutcome::Error(ErrorText(resolved.error()));
    return o;
  }
  ObservedSandbox observed(*resolved->sandbox);
  ToolOutcome out = fn(observed, resolved->id);
  if (observed.unreachable()) {
    out = ToolOutcome::Error(s.broker->Unreachable(resolved->id, ctx.owner()));
  }
  if (!resolved->notice.empty()) {
    if (!out.content.empty() && out.content[0].as_object().contains("text")) {
      json::object& first = out.content[0].as_object();
      first["text"] = resolved->notice + "\n\n" + std::string(first["text"].as_string());
    } else {
      out.content.insert(out.content.begin(), json::value(TextContent(resolved->notice)));
    }
  }
  out.meta[kMetaSandboxId] = JsonString(resolved->id);
  return out;
}

ToolOutcome ToMcp(const agent::ToolResult& r) {
  ToolOutcome out;
  out.is_error = r.is_error;
  out.content.push_back(TextContent(r.text));
  for (const auto& img : r.images) {
    out.content.push_back(ImageContent(img.base64_data, img.media_type));
  }
  return out;
}

json::object ExecuteStatus(const std::string& id, const std::optional<ExecResult>& e) {
  json::object st;
  st["sandbox_id"] = JsonString(id);
  st["exit_code"] = nullptr;
  st["timed_out"] = false;
  if (!e) return st;
  switch (e->kind) {
    case ExitKind::kExited:
      st["exit_code"] = e->exit_code;
      break;
    case ExitKind::kSignaled:
    case ExitKind::kKilled:
      st["exit_code"] = 128 + (e->signal ? e->signal : 9);
      break;
    case ExitKind::kTimedOut:
      st["exit_code"] = 124;
      st["timed_out"] = true;
      break;
    case ExitKind::kSpawnFailed:
      st["exit_code"] = 127;
      break;
  }
  return st;
}

ToolDef FromAgentTool(std::shared_ptr<Shared> s, agent::ToolPtr tool, std::string title,
                      json::object annotations) {
  ToolDef def;
  def.name = tool->name();
  def.title = std::move(title);
  const auto& eo = s->options.execute;
  def.description =
      McpDescription(def.name, tool->spec().description, s->options.max_inline_output_bytes,
                     eo.default_timeout_seconds, eo.max_timeout_seconds);
  def.input_schema = StrictSchema(tool->spec().input_schema, true, s->options.stateless_clients);
  def.annotations = std::move(annotations);
  bool is_execute = def.name == "execute";
  if (is_execute) {
    json::object props;
    props["sandbox_id"] = Prop("string", "The sandbox that ran the command");
    json::object code;
    code["type"] = json::array{"integer", "null"};
    code["description"] =
        "Exit status (128+N when killed by signal N, 124 on timeout, 127 when it could not "
        "start)";
    props["exit_code"] = std::move(code);
    props["timed_out"] = Prop("boolean", "Whether the command hit its timeout");
    props["output_bytes"] = Prop("integer", "Bytes of output the command wrote (as text)");
    props["output_file"] =
        Prop("string", "Where the whole output is saved, when it was too long to return");
    def.output_schema =
        ObjectSchema(std::move(props), json::array{"sandbox_id", "exit_code", "timed_out"});
    def.description +=
        "\n\nWith a progressToken, output is streamed as notifications/progress while the "
        "command runs (message = the new output).";
  }
  def.handler = [s, tool, is_execute](const json::object& args, ToolCallContext& ctx) {
    return WithSandbox(*s, args, ctx, [&](Sandbox& sandbox, const std::string& id) {
      auto* observed = static_cast<ObservedSandbox*>(&sandbox);
      json::object targs = args;
      targs.erase("sandbox_id");
      agent::ToolCall call;
      call.id = "mcp";
      call.name = tool->name();
      call.input = targs;
      agent::ToolContext tctx;
      tctx.sandbox = &sandbox;
      tctx.root = sandbox.root();
      tctx.call = &call;
      tctx.cancel = ctx.cancel_flag();
      if (!is_execute) return ToMcp(tool->Invoke(tctx, targs));

      // execute: the output is captured here (head and tail), the tool's
      // text is its status lines.
      const SandboxToolsOptions& o = s->options;
      size_t tail_cap = std::max(o.max_saved_output_bytes / 4, o.max_inline_output_bytes);
      size_t head_cap = std::max(o.max_saved_output_bytes, tail_cap + 1) - tail_cap;
      OutputCapture capture(head_cap, tail_cap);
      double sent = 0;
      std::function<void(std::string_view)> progress;
      if (ctx.wants_progress()) {
        progress = [&](std::string_view text) {
          sent += static_cast<double>(text.size());
          ctx.Progress(sent, std::nullopt, text);
        };
      }
      // Log messages (for a client that set a level): the command's start
      // and its end, so a long execute is visible without a progressToken.
      json::object started;
      started["sandbox_id"] = JsonString(id);
      if (const json::value* cmd = targs.if_contains("command")) started["command"] = *cmd;
      ctx.Log(LogLevel::kInfo, "deepbox.execute", started);
      observed->Capture(&capture, progress);
      agent::ToolResult r = tool->Invoke(tctx, targs);
      observed->Capture(nullptr, nullptr);
      if (r.is_error && r.text.rfind("Error:", 0) == 0) {  // it did not run
        json::object failed;
        failed["sandbox_id"] = JsonString(id);
        failed["error"] = JsonString(r.text);
        ctx.Log(LogLevel::kError, "deepbox.execute", failed);
        return ToMcp(r);
      }
      {
        json::object ended = ExecuteStatus(id, observed->exec_result());
        ended["output_bytes"] = static_cast<int64_t>(capture.total());
        const json::value* code = ended.if_contains("exit_code");
        bool ok = code != nullptr && code->is_int64() && code->as_int64() == 0;
        ctx.Log(ok ? LogLevel::kInfo : LogLevel::kWarning, "deepbox.execute", ended);
      }
      std::string saved, save_error;
      if (capture.total() > o.max_inline_output_bytes && !observed->unreachable()) {
        std::string path =
            agent::EvictionMiddleware::EvictionPath(sandbox.root(), "execute_" + RandomHex(12));
        std::string whole =
            capture.complete()
                ? capture.All()
                : fmt::format("{}\n\n... [{} bytes not saved] ...\n\n{}", capture.head(),
                              capture.total() - capture.head().size() - capture.tail().size(),
                              capture.tail());
        std::string full = whole;
        if (!r.text.empty() && r.text[0] != '\n' && !full.empty() && full.back() != '\n') {
          full += '\n';
        }
        full += r.text;
        if (auto st = sandbox.Write(path, full); st) {
          saved = path;
        } else {
          save_error = st.error().message;
        }
      }
      r.text = ExecuteText(capture, r.text, saved, save_error, o.max_inline_output_bytes);
      ToolOutcome out = ToMcp(r);
      if (!r.is_error) {
        json::object st = ExecuteStatus(id, observed->exec_result());
        st["output_bytes"] = static_cast<int64_t>(capture.total());
        if (!saved.empty()) st["output_file"] = JsonString(saved);
        out.structured = json::value(std::move(st));
      }
      return out;
    });
  };
  return def;
}

// sandbox_create / sandbox_list / sandbox_delete ---------------------------

json::object InfoSchema() {
  json::object p;
  p["sandbox_id"] = Prop("string", "Pass it as sandbox_id to the other tools");
  p["provider"] = Prop("string", "local or k8s");
  json::object labels = Prop("object", "Labels of the sandbox");
  json::object str;
  str["type"] = "string";
  labels["additionalProperties"] = std::move(str);
  p["labels"] = std::move(labels);
  p["created_at"] = Prop("string", "RFC 3339");
  json::object exp;
  exp["type"] = json::array{"string", "null"};
  exp["description"] = "When its TTL deletes it (RFC 3339); null = never";
  p["expires_at"] = std::move(exp);
  p["network"] = Prop("string", "Network mode (local sandboxes)");
  p["state"] = Prop("string", "Provider state");
  return ObjectSchema(std::move(p), json::array{"sandbox_id", "provider", "labels"});
}

std::string DescribeInfo(const SandboxInfo& i) {
  std::string labels;
  for (const auto& [k, v] : i.labels) labels += (labels.empty() ? "" : ",") + k + "=" + v;
  return fmt::format("{}  provider={}  network={}  expires={}  labels={}", i.id, i.provider,
                     i.network.empty() ? "-" : i.network,
                     i.expires_at.empty() ? "never" : i.expires_at, labels.empty() ? "-" : labels);
}

ToolDef CreateTool(std::shared_ptr<Shared> s) {
  const BrokerOptions& bo = s->broker->options();
  int64_t server_ttl = bo.defaults.ttl.count();
  const std::string& net = bo.defaults.network;
  ToolDef def;
  def.name = "sandbox_create";
  def.title = "Create a sandbox";
  def.description = fmt::format(
      "Create an isolated sandbox (a fresh Linux environment with a /workspace directory) and "
      "return its id. Pass the id as sandbox_id to execute and the file tools. {}A sandbox "
      "lives until sandbox_delete or its TTL ({}) expires, even after this client "
      "disconnects.{}",
      s->options.stateless_clients
          ? "Clients of the stateless protocol (MCP 2026-07-28 over HTTP) have no default "
            "sandbox and must create one; session clients' calls without sandbox_id use a "
            "default sandbox instead. "
          : "Tools called without sandbox_id use a default sandbox of this client instead, so "
            "create one only to work in several sandboxes or to choose labels, TTL or "
            "network. ",
      server_ttl > 0 ? fmt::format("default and maximum {} seconds", server_ttl)
                     : std::string("default: never"),
      bo.max_per_client > 0
          ? fmt::format(" A client may have at most {} live sandboxes.", bo.max_per_client)
          : std::string());
  json::object props;
  json::object provider = Prop("string", "Where the sandbox runs (default: the server's)");
  json::array providers;
  for (const auto& p : s->broker->providers()) providers.emplace_back(p);
  provider["enum"] = std::move(providers);
  props["provider"] = std::move(provider);
  json::object labels =
      Prop("object",
           "Labels (Kubernetes label syntax), e.g. {\"team\": \"ml\"}, to find it with "
           "sandbox_list; keys under deepbox.dev/ are reserved");
  json::object str;
  str["type"] = "string";
  labels["additionalProperties"] = std::move(str);
  props["labels"] = std::move(labels);
  json::object ttl = Prop(
      "integer", server_ttl > 0 ? fmt::format("Seconds until the sandbox is deleted automatically "
                                              "(default and maximum: {})",
                                              server_ttl)
                                : std::string("Seconds until the sandbox is deleted automatically; "
                                              "0 = never (the default)"));
  ttl["minimum"] = 0;  // 0 gets the handler's explanation
  if (server_ttl > 0) ttl["maximum"] = server_ttl;
  props["ttl_seconds"] = std::move(ttl);
  std::string net_text;
  if (bo.allow_client_network) {
    net_text = fmt::format(
        "Local sandboxes' network: none, public, or allow=HOST[,HOST...] (default: {})", net);
  } else if (net == "none") {
    net_text = "Local sandboxes' network: none, the default and the only one this server allows";
  } else if (net == "public") {
    net_text =
        "Local sandboxes' network: none, allow=HOST[,HOST...], or public (the default, and the "
        "widest this server allows)";
  } else {
    net_text = fmt::format(
        "Local sandboxes' network: {} (the default, and the widest this server allows), none, "
        "or an allow= list of some of its names",
        net);
  }
  props["network"] = Prop("string", net_text);
  props["image"] = Prop("string",
                        "Local sandboxes: the OCI image to run on, e.g. "
                        "python:3.12-slim-bookworm or registry:5000/team/tools:1 (pulled on "
                        "first use; default: the server's). Not for k8s sandboxes (their "
                        "SandboxTemplate sets the image)");
  props["make_default"] =
      Prop("boolean", "Use this sandbox for this client's calls that give no sandbox_id");
  props["from_snapshot"] =
      Prop("string", "Start with the files of this snapshot (a name sandbox_snapshot returned)");
  props["fork_of"] = Prop("string",
                          "Start with a copy of this sandbox's files as they are now (a "
                          "sandbox_id): e.g. to try another approach from the same state");
  def.input_schema = ObjectSchema(std::move(props), json::array{}, /*strict=*/true);
  def.output_schema = InfoSchema();
  def.annotations = Annotations(false, false, false);
  def.handler = [s](const json::object& args, ToolCallContext& ctx) {
    CreateRequest req;
    if (const json::value* l = args.if_contains("labels"); l && l->is_object()) {
      for (const auto& kv : l->get_object()) {
        req.labels[kv.key()] = std::string(kv.value().get_string());
      }
    }
    if (const json::value* t = args.if_contains("ttl_seconds")) req.ttl_seconds = JsonToInt64(*t);
    req.provider = agent::ArgString(args, "provider");
    if (auto n = agent::ArgOptString(args, "network")) {
      if (n->empty()) return ToolOutcome::Error("Error: network must not be empty");
      req.network = *n;
    }
    if (auto image = agent::ArgOptString(args, "image")) {
      if (image->empty()) return ToolOutcome::Error("Error: image must not be empty");
      req.image = *image;
    }
    req.from_snapshot = agent::ArgString(args, "from_snapshot");
    req.fork_of = agent::ArgString(args, "fork_of");
    if (!req.from_snapshot.empty() && !req.fork_of.empty()) {
      return ToolOutcome::Error("Error: give from_snapshot or fork_of, not both");
    }
    bool make_default = agent::ArgBool(args, "make_default", false);
    if (make_default && SandboxBroker::Stateless(ctx.owner())) {
      return ToolOutcome::Error(
          "Error: make_default is not available to stateless clients (MCP 2026-07-28 over "
          "HTTP): they have no default sandbox; pass sandbox_id to every call instead");
    }
    auto info = s->broker->Create(req, ctx.owner());
    if (!info) return ToolOutcome::Error(ErrorText(info.error()));
    if (make_default) s->broker->SetDefault(ctx.owner(), info->id, false);
    ToolOutcome out = ToolOutcome::Text(fmt::format(
        "Created sandbox {} ({}). Pass sandbox_id=\"{}\" to execute and the file tools{}; "
        "delete it with sandbox_delete when done.",
        info->id, DescribeInfo(*info), info->id,
        make_default ? " (it is also this client's default sandbox now)" : ""));
    out.structured = json::value(SandboxInfoJson(*info));
    out.meta[kMetaSandboxId] = JsonString(info->id);
    return out;
  };
  return def;
}

ToolDef ListTool(std::shared_ptr<Shared> s) {
  ToolDef def;
  def.name = "sandbox_list";
  def.title = "List sandboxes";
  def.description =
      "List the sandboxes this client may use (those it created, and any the operator "
      "shares), optionally only those matching a label selector (Kubernetes syntax: k=v, k!=v, "
      "k, !k, comma-separated).";
  json::object props;
  json::object provider = Prop("string", "Which provider's sandboxes (default: the server's)");
  json::array providers;
  for (const auto& p : s->broker->providers()) providers.emplace_back(p);
  provider["enum"] = std::move(providers);
  props["provider"] = std::move(provider);
  props["selector"] = Prop("string", "Label selector, e.g. team=ml,env!=prod");
  def.input_schema = ObjectSchema(std::move(props), json::array{}, /*strict=*/true);
  json::object op;
  json::object arr;
  arr["type"] = "array";
  arr["items"] = InfoSchema();
  op["sandboxes"] = std::move(arr);
  json::object def_id;
  def_id["type"] = json::array{"string", "null"};
  def_id["description"] = "This client's default sandbox, if it has one";
  op["default_sandbox_id"] = std::move(def_id);
  def.output_schema = ObjectSchema(std::move(op), json::array{"sandboxes", "default_sandbox_id"});
  def.annotations = Annotations(true, false, true);
  def.handler = [s](const json::object& args, ToolCallContext& ctx) {
    auto list = s->broker->List(agent::ArgString(args, "provider"),
                                agent::ArgString(args, "selector"), ctx.owner());
    if (!list) return ToolOutcome::Error(ErrorText(list.error()));
    auto def_id = s->broker->DefaultId(ctx.owner());
    std::string text;
    json::array arr;
    for (const auto& i : *list) {
      text += DescribeInfo(i);
      if (def_id && *def_id == i.id) text += "  (default sandbox of this client)";
      text += "\n";
      arr.push_back(SandboxInfoJson(i));
    }
    if (text.empty()) text = "No sandboxes.\n";
    text.pop_back();
    ToolOutcome out = ToolOutcome::Text(text);
    json::object st;
    st["sandboxes"] = std::move(arr);
    st["default_sandbox_id"] = def_id ? json::value(JsonString(*def_id)) : json::value(nullptr);
    out.structured = json::value(std::move(st));
    return out;
  };
  return def;
}

ToolDef DeleteTool(std::shared_ptr<Shared> s) {
  ToolDef def;
  def.name = "sandbox_delete";
  def.title = "Delete a sandbox";
  def.description =
      "Delete a sandbox and everything in it (its processes are killed). Use the id from "
      "sandbox_create or sandbox_list.";
  json::object props;
  props["sandbox_id"] = Prop("string", "The sandbox to delete");
  def.input_schema = ObjectSchema(std::move(props), json::array{"sandbox_id"}, /*strict=*/true);
  def.annotations = Annotations(false, true, true);
  def.handler = [s](const json::object& args, ToolCallContext& ctx) {
    std::string id = agent::ArgString(args, "sandbox_id");
    auto st = s->broker->Delete(id, ctx.owner());
    if (!st) return ToolOutcome::Error(ErrorText(st.error()));
    ToolOutcome out = ToolOutcome::Text(fmt::format("Deleted sandbox {}.", id));
    out.meta[kMetaSandboxId] = JsonString(id);
    return out;
  };
  return def;
}

// sandbox_pause / sandbox_suspend / sandbox_resume ---------------------------

ToolDef ModeTool(std::shared_ptr<Shared> s, SandboxBroker::Mode mode) {
  ToolDef def;
  const char* done = "Resumed";
  switch (mode) {
    case SandboxBroker::Mode::kPause:
      def.name = "sandbox_pause";
      def.title = "Pause a sandbox";
      def.description =
          "Freeze every process of a sandbox: it keeps its memory and files and uses no CPU. "
          "The next call that uses it (or sandbox_resume) resumes it within milliseconds. Its "
          "TTL keeps counting.";
      done = "Paused";
      break;
    case SandboxBroker::Mode::kSuspend:
      def.name = "sandbox_suspend";
      def.title = "Suspend a sandbox";
      def.description =
          "Suspend a sandbox: every process in it ends (memory and CPU are freed); its files "
          "stay. The next call that uses it (or sandbox_resume) starts fresh processes on the "
          "same files. Its TTL keeps counting.";
      done = "Suspended";
      break;
    case SandboxBroker::Mode::kResume:
      def.name = "sandbox_resume";
      def.title = "Resume a sandbox";
      def.description = "Resume a paused or suspended sandbox (a running one stays as it is).";
      break;
  }
  json::object props;
  props["sandbox_id"] = Prop("string", "The sandbox (from sandbox_create or sandbox_list)");
  def.input_schema = ObjectSchema(std::move(props), json::array{"sandbox_id"}, /*strict=*/true);
  def.annotations = Annotations(false, mode == SandboxBroker::Mode::kSuspend, true);
  def.handler = [s, mode, done](const json::object& args, ToolCallContext& ctx) {
    std::string id = agent::ArgString(args, "sandbox_id");
    auto st = s->broker->ChangeMode(id, ctx.owner(), mode);
    if (!st) return ToolOutcome::Error(ErrorText(st.error()));
    ToolOutcome out = ToolOutcome::Text(fmt::format("{} sandbox {}.", done, id));
    out.meta[kMetaSandboxId] = JsonString(id);
    return out;
  };
  return def;
}

ToolDef SnapshotTool(std::shared_ptr<Shared> s) {
  ToolDef def;
  def.name = "sandbox_snapshot";
  def.title = "Snapshot a sandbox's files";
  def.description =
      "Copy a sandbox's files (its /workspace; not its memory or processes) into a snapshot and "
      "return the snapshot's name. Pass it as from_snapshot to sandbox_create to start a new "
      "sandbox from that state (the snapshot outlives the sandbox, until this server stops). A "
      "running local sandbox is paused for the copy; a Kubernetes one is copied as it runs.";
  json::object props;
  props["sandbox_id"] = Prop("string", "The sandbox whose files to copy");
  def.input_schema = ObjectSchema(std::move(props), json::array{"sandbox_id"}, /*strict=*/true);
  json::object op;
  op["name"] = Prop("string", "The snapshot's name (for sandbox_create's from_snapshot)");
  op["size_bytes"] = Prop("integer", "Bytes it takes on disk");
  def.output_schema = ObjectSchema(std::move(op), json::array{"name"});
  def.annotations = Annotations(false, false, false);
  def.handler = [s](const json::object& args, ToolCallContext& ctx) {
    std::string id = agent::ArgString(args, "sandbox_id");
    auto snap = s->broker->Snapshot(id, ctx.owner());
    if (!snap) return ToolOutcome::Error(ErrorText(snap.error()));
    ToolOutcome out = ToolOutcome::Text(fmt::format(
        "Snapshot {} of sandbox {} taken ({} bytes on disk). Start a sandbox from it with "
        "sandbox_create from_snapshot=\"{}\".{}",
        snap->name, id, snap->size_bytes, snap->name,
        snap->note.empty() ? "" : " Note: " + snap->note));
    json::object st;
    st["name"] = JsonString(snap->name);
    st["size_bytes"] = snap->size_bytes;
    out.structured = json::value(std::move(st));
    out.meta[kMetaSandboxId] = JsonString(id);
    return out;
  };
  return def;
}

// upload_file / download_file ----------------------------------------------

ToolDef UploadTool(std::shared_ptr<Shared> s) {
  ToolDef def;
  def.name = "upload_file";
  def.title = "Upload a file";
  def.description = fmt::format(
      "Write a file of any content (binary included) into the sandbox from base64. The file "
      "is replaced atomically and missing parent directories are created. At most {} bytes.",
      s->options.max_transfer_bytes);
  json::object props;
  props["file_path"] =
      Prop("string", "Path in the sandbox: absolute, or relative to the workspace root");
  props["content_base64"] = Prop("string", "The file's bytes, base64 (standard alphabet)");
  json::object mode = Prop("integer", "Permission bits, e.g. 493 (0755); default 420 (0644)");
  mode["minimum"] = 0;
  mode["maximum"] = 07777;
  props["mode"] = std::move(mode);
  props["sandbox_id"] = SandboxIdProperty(s->options.stateless_clients);
  def.input_schema =
      ObjectSchema(std::move(props), json::array{"file_path", "content_base64"}, /*strict=*/true);
  json::object op;
  op["path"] = Prop("string", "Absolute path written");
  op["size"] = Prop("integer", "Bytes written");
  def.output_schema = ObjectSchema(std::move(op), json::array{"path", "size"});
  def.annotations = Annotations(false, true, true);
  def.handler = [s](const json::object& args, ToolCallContext& ctx) {
    return WithSandbox(*s, args, ctx, [&](Sandbox& sandbox, const std::string&) {
      auto path = agent::ResolveToolPath(agent::ArgString(args, "file_path"), sandbox.root());
      if (!path) return ToolOutcome::Error(ErrorText(path.error()));
      std::string b64 = agent::ArgString(args, "content_base64");
      if (b64.size() / 4 * 3 > s->options.max_transfer_bytes + 3) {
        return ToolOutcome::Error(
            fmt::format("Error: the file is larger than {} bytes", s->options.max_transfer_bytes));
      }
      auto bytes = Base64Decode(b64);
      if (!bytes) return ToolOutcome::Error("Error: content_base64 is not valid base64");
      uint32_t mode = static_cast<uint32_t>(agent::ArgOptInt(args, "mode").value_or(0644));
      if (auto st = sandbox.Upload(*path, *bytes, mode); !st) {
        return ToolOutcome::Error(ErrorText(st.error()));
      }
      ToolOutcome out =
          ToolOutcome::Text(fmt::format("Uploaded {} bytes to {}", bytes->size(), *path));
      json::object st;
      st["path"] = JsonString(*path);
      st["size"] = static_cast<int64_t>(bytes->size());
      out.structured = json::value(std::move(st));
      return out;
    });
  };
  return def;
}

ToolDef DownloadTool(std::shared_ptr<Shared> s) {
  ToolDef def;
  def.name = "download_file";
  def.title = "Download a file";
  def.description = fmt::format(
      "Read a whole file (binary included) from the sandbox: the result holds it as an "
      "embedded resource with base64 contents. At most {} bytes; use read_file for text.",
      s->options.max_transfer_bytes);
  json::object props;
  props["file_path"] =
      Prop("string", "Path in the sandbox: absolute, or relative to the workspace root");
  props["sandbox_id"] = SandboxIdProperty(s->options.stateless_clients);
  def.input_schema = ObjectSchema(std::move(props), json::array{"file_path"}, /*strict=*/true);
  json::object op;
  op["path"] = Prop("string", "Absolute path read");
  op["size"] = Prop("integer", "Bytes");
  op["mime_type"] = Prop("string", "Guessed from the extension");
  def.output_schema = ObjectSchema(std::move(op), json::array{"path", "size", "mime_type"});
  def.annotations = Annotations(true, false, true);
  def.handler = [s](const json::object& args, ToolCallContext& ctx) {
    return WithSandbox(*s, args, ctx, [&](Sandbox& sandbox, const std::string&) {
      auto path = agent::ResolveToolPath(agent::ArgString(args, "file_path"), sandbox.root());
      if (!path) return ToolOutcome::Error(ErrorText(path.error()));
      auto info = sandbox.Stat(*path);
      if (!info) return ToolOutcome::Error(ErrorText(info.error()));
      if (info->is_dir()) {
        return ToolOutcome::Error(fmt::format("Error: {} is a directory", *path));
      }
      if (static_cast<uint64_t>(info->size) > s->options.max_transfer_bytes) {
        return ToolOutcome::Error(fmt::format("Error: {} has {} bytes, more than the {} allowed",
                                              *path, info->size, s->options.max_transfer_bytes));
      }
      auto bytes = sandbox.Download(*path);
      if (!bytes) return ToolOutcome::Error(ErrorText(bytes.error()));
      std::string mime = agent::MimeTypeForPath(*path);
      ToolOutcome out;
      out.content.push_back(
          TextContent(fmt::format("Downloaded {} ({} bytes, {})", *path, bytes->size(), mime)));
      out.content.push_back(BlobResourceContent("file://" + *path, mime, Base64Encode(*bytes)));
      json::object st;
      st["path"] = JsonString(*path);
      st["size"] = static_cast<int64_t>(bytes->size());
      st["mime_type"] = mime;
      out.structured = json::value(std::move(st));
      return out;
    });
  };
  return def;
}

}  // namespace

void AddSandboxTools(ToolRegistry& registry, std::shared_ptr<SandboxBroker> broker,
                     SandboxToolsOptions options) {
  auto s = std::make_shared<Shared>();
  s->broker = std::move(broker);
  s->options = options;
  if (s->options.execute.default_timeout_seconds == 0) {
    s->options.execute.default_timeout_seconds = 1800;  // the daemon's own default
  }
  options = s->options;
  registry.Add(CreateTool(s));
  registry.Add(ListTool(s));
  registry.Add(DeleteTool(s));
  registry.Add(ModeTool(s, SandboxBroker::Mode::kPause));
  registry.Add(ModeTool(s, SandboxBroker::Mode::kSuspend));
  registry.Add(ModeTool(s, SandboxBroker::Mode::kResume));
  registry.Add(SnapshotTool(s));
  registry.Add(FromAgentTool(s, agent::MakeExecuteTool(options.execute), "Run a shell command",
                             Annotations(false, true, false)));
  registry.Add(FromAgentTool(s, agent::MakeLsTool(options.fs), "List a directory",
                             Annotations(true, false, true)));
  registry.Add(FromAgentTool(s, agent::MakeReadFileTool(options.fs), "Read a file",
                             Annotations(true, false, true)));
  registry.Add(FromAgentTool(s, agent::MakeWriteFileTool(options.fs), "Write a new file",
                             Annotations(false, false, false)));
  registry.Add(FromAgentTool(s, agent::MakeEditFileTool(options.fs), "Edit a file",
                             Annotations(false, true, false)));
  registry.Add(FromAgentTool(s, agent::MakeGlobTool(options.fs), "Find files by glob",
                             Annotations(true, false, true)));
  registry.Add(FromAgentTool(s, agent::MakeGrepTool(options.fs), "Search file contents",
                             Annotations(true, false, true)));
  registry.Add(UploadTool(s));
  registry.Add(DownloadTool(s));
}

}  // namespace deepbox::mcp
