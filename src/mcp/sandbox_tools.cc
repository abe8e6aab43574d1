#include "mcp/sandbox_tools.h"

#include <fmt/format.h>

#include <mutex>

#include "agent/paths.h"
#include "agent/tool.h"
#include "common/base64.h"
#include "local/lifecycle/selector.h"
#include "local/network.h"
#include "sandbox/forwarding_sandbox.h"

namespace deepbox::mcp {
namespace {

// Forwards every call to the real sandbox and remembers what the MCP layer
// needs beyond the tool's text: the exit status of a command, and whether the
// sandbox stopped answering (its cached connection is then dropped).
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
};

// An object schema: `strict` ones (tool inputs) refuse unknown properties.
json::object ObjectSchema(json::object properties, json::array required, bool strict = false) {
  json::object schema;
  schema["type"] = "object";
  schema["properties"] = std::move(properties);
  schema["required"] = std::move(required);
  if (strict) schema["additionalProperties"] = false;
  return schema;
}

json::object SandboxIdProperty() {
  json::object p;
  p["type"] = "string";
  p["description"] =
      "Sandbox to use (from sandbox_create or sandbox_list). Omit it to use this client's "
      "default sandbox, created on first use and deleted when the client disconnects.";
  return p;
}

// The agent tool's schema, strict, plus sandbox_id.
json::object StrictSchema(const json::object& base, bool with_sandbox_id) {
  json::object s = base;
  s["type"] = "object";
  json::object props;
  if (const json::value* p = s.if_contains("properties"); p && p->is_object()) {
    props = p->get_object();
  }
  if (with_sandbox_id) props["sandbox_id"] = SandboxIdProperty();
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
// shares: resolving (maybe creating the default), _meta, dropping a dead
// connection.
template <typename Fn>
ToolOutcome WithSandbox(Shared& s, const json::object& args, ToolCallContext& ctx, Fn fn) {
  auto resolved = s.broker->Resolve(SandboxIdArg(args), ctx.owner());
  if (!resolved) {
    ToolOutcome o = ToolOutcome::Error(ErrorText(resolved.error()));
    return o;
  }
  ObservedSandbox observed(*resolved->sandbox);
  ToolOutcome out = fn(observed, resolved->id);
  if (observed.unreachable()) s.broker->Forget(resolved->id);
  out.meta[kMetaSandboxId] = JsonString(resolved->id);
  return out;
}

ToolDef FromAgentTool(std::shared_ptr<Shared> s, agent::ToolPtr tool, std::string title,
                      json::object annotations) {
  ToolDef def;
  def.name = tool->name();
  def.title = std::move(title);
  def.description = tool->spec().description;
  def.input_schema = StrictSchema(tool->spec().input_schema, true);
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
    def.output_schema =
        ObjectSchema(std::move(props), json::array{"sandbox_id", "exit_code", "timed_out"});
    def.description +=
        "\n\nWith a progressToken, output is streamed as notifications/progress while the "
        "command runs (message = the new output).";
  }
  def.handler = [s, tool, is_execute](const json::object& args, ToolCallContext& ctx) {
    return WithSandbox(*s, args, ctx, [&](Sandbox& sandbox, const std::string& id) {
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
      double sent = 0;
      if (ctx.wants_progress()) {
        tctx.on_output = [&](std::string_view text) {
          if (text.empty()) return;
          sent += static_cast<double>(text.size());
          ctx.Progress(sent, std::nullopt, text);
        };
      }
      agent::ToolResult r = tool->Invoke(tctx, targs);
      ToolOutcome out;
      out.is_error = r.is_error;
      out.content.push_back(TextContent(r.text));
      for (const auto& img : r.images) {
        out.content.push_back(ImageContent(img.base64_data, img.media_type));
      }
      if (is_execute && !r.is_error) {
        auto* obs = static_cast<ObservedSandbox*>(&sandbox);
        json::object st;
        st["sandbox_id"] = JsonString(id);
        st["exit_code"] = nullptr;
        st["timed_out"] = false;
        if (auto e = obs->exec_result()) {
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
        }
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
  ToolDef def;
  def.name = "sandbox_create";
  def.title = "Create a sandbox";
  def.description = fmt::format(
      "Create an isolated sandbox (a fresh Linux environment with a /workspace directory) and "
      "return its id. Pass the id as sandbox_id to execute and the file tools. Tools called "
      "without sandbox_id use a default sandbox of this client instead, so create one only to "
      "work in several sandboxes or to choose labels, TTL or network. A sandbox lives until "
      "sandbox_delete or its TTL (default {} seconds) expires, even after this client "
      "disconnects.",
      s->options.default_ttl_seconds);
  json::object props;
  json::object provider = Prop("string", "Where the sandbox runs (default: the server's)");
  json::array providers;
  for (const auto& p : s->broker->providers()) providers.emplace_back(p);
  provider["enum"] = std::move(providers);
  props["provider"] = std::move(provider);
  json::object labels =
      Prop("object",
           "Labels (Kubernetes label syntax), e.g. {\"team\": \"ml\"}, to find it with "
           "sandbox_list");
  json::object str;
  str["type"] = "string";
  labels["additionalProperties"] = std::move(str);
  props["labels"] = std::move(labels);
  json::object ttl = Prop("integer",
                          "Seconds until the sandbox is deleted automatically; 0 = "
                          "never");
  ttl["minimum"] = 0;
  ttl["maximum"] = 7 * 24 * 3600;
  props["ttl_seconds"] = std::move(ttl);
  props["network"] =
      Prop("string", "Local sandboxes: none (default), public, or allow=HOST[,HOST...]");
  props["make_default"] =
      Prop("boolean", "Use this sandbox for this client's calls that give no sandbox_id");
  def.input_schema = ObjectSchema(std::move(props), json::array{}, /*strict=*/true);
  def.output_schema = InfoSchema();
  def.annotations = Annotations(false, false, false);
  def.handler = [s](const json::object& args, ToolCallContext& ctx) {
    ClaimOptions o;
    if (const json::value* l = args.if_contains("labels"); l && l->is_object()) {
      for (const auto& kv : l->get_object()) {
        std::string v(kv.value().get_string());
        if (auto st = local::lifecycle::ValidateLabelKey(kv.key()); !st) {
          return ToolOutcome::Error(ErrorText(st.error()));
        }
        if (auto st = local::lifecycle::ValidateLabelValue(kv.key(), v); !st) {
          return ToolOutcome::Error(ErrorText(st.error()));
        }
        o.labels[kv.key()] = v;
      }
    }
    int64_t ttl = s->options.default_ttl_seconds;
    if (const json::value* t = args.if_contains("ttl_seconds")) ttl = JsonToInt64(*t).value_or(ttl);
    o.ttl = std::chrono::seconds(ttl);
    std::string provider = agent::ArgString(args, "provider");
    if (auto n = agent::ArgOptString(args, "network")) {
      if (auto p = local::ParseNetworkPolicy(*n); !p) {
        return ToolOutcome::Error(ErrorText(p.error()));
      }
      o.network = *n;
    }
    auto info = s->broker->Create(provider, o);
    if (!info) return ToolOutcome::Error(ErrorText(info.error()));
    bool make_default = agent::ArgBool(args, "make_default", false);
    if (make_default) s->broker->SetDefault(ctx.owner(), info->id, false);
    ToolOutcome out = ToolOutcome::Text(fmt::format(
        "Created sandbox {} ({}). Pass sandbox_id=\"{}\" to execute and the file tools{}; "
        "delete it with sandbox_delete when done.",
        info->id, DescribeInfo(*info), info->id,
        make_default ? " (it is also this client's default sandbox now)" : ""));
    out.structured = json::value(info->ToJson());
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
      "List sandboxes, optionally only those matching a label selector (Kubernetes syntax: "
      "k=v, k!=v, k, !k, comma-separated).";
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
    auto list =
        s->broker->List(agent::ArgString(args, "provider"), agent::ArgString(args, "selector"));
    if (!list) return ToolOutcome::Error(ErrorText(list.error()));
    auto def_id = s->broker->DefaultId(ctx.owner());
    std::string text;
    json::array arr;
    for (const auto& i : *list) {
      text += DescribeInfo(i);
      if (def_id && *def_id == i.id) text += "  (default sandbox of this client)";
      text += "\n";
      arr.push_back(i.ToJson());
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
  def.handler = [s](const json::object& args, ToolCallContext&) {
    std::string id = agent::ArgString(args, "sandbox_id");
    auto st = s->broker->Delete(id);
    if (!st) return ToolOutcome::Error(ErrorText(st.error()));
    ToolOutcome out = ToolOutcome::Text(fmt::format("Deleted sandbox {}.", id));
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
  props["sandbox_id"] = SandboxIdProperty();
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
  props["sandbox_id"] = SandboxIdProperty();
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
  registry.Add(CreateTool(s));
  registry.Add(ListTool(s));
  registry.Add(DeleteTool(s));
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
