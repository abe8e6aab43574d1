#include "agent/middleware_summarization.h"

#include <iterator>
#include <utility>

#include "agent/format.h"
#include "agent/paths.h"
#include "agent/text.h"
#include "common/strings.h"

namespace deepbox::agent {
namespace {

constexpr char kSummaryIdPrefix[] = "summary_";
constexpr char kArgTruncation[] = "...(argument truncated)";

constexpr char kSummaryPrompt[] =
    "You are condensing the earlier part of a long working session between a user and an AI "
    "agent that operates in a sandbox with file and shell tools. The agent will continue from "
    "your summary alone, so it must carry everything needed to keep working.\n\n"
    "Write a structured summary covering:\n"
    "1. The user's goal and all explicit requirements, preferences and constraints.\n"
    "2. What has been done: files created or changed (with absolute paths), commands run and "
    "their outcomes, decisions taken and why.\n"
    "3. Important facts discovered (paths, names, values, errors and how they were resolved).\n"
    "4. The current state and the concrete next steps still open.\n\n"
    "Be specific and factual; keep paths, identifiers and numbers exact. Do not address the "
    "user. Respond with the summary only.\n\n"
    "<messages>\n";

// The model clients say so (agent/model/http_stream.h ContextOverflowReason).
bool IsContextOverflow(const Error& e) { return e.reason == kReasonContextOverflow; }

std::string Attr(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '"') {
      out += "&quot;";
    } else if (c == '<') {
      out += "&lt;";
    } else if (c == '&') {
      out += "&amp;";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

// Index where the kept tail starts, never on a tool result.
size_t SafeCutoff(const std::vector<Message>& msgs, size_t cutoff) {
  while (cutoff > 0 && cutoff < msgs.size() && msgs[cutoff].role == Role::kTool) --cutoff;
  return cutoff;
}

}  // namespace

SummarizationMiddleware::SummarizationMiddleware(SummarizationOptions options)
    : options_(std::move(options)) {}

int64_t SummarizationMiddleware::ApproxTokens(const Message& m) { return ApproxMessageTokens(m); }

int64_t SummarizationMiddleware::ApproxTokens(std::span<const Message> messages) {
  int64_t total = 0;
  for (const auto& m : messages) total += ApproxMessageTokens(m);
  return total;
}

std::string SummarizationMiddleware::RenderHistory(std::span<const Message> messages) {
  std::string out;
  for (const auto& m : messages) {
    switch (m.role) {
      case Role::kUser:
        out += "<human>" + m.text + "</human>\n";
        break;
      case Role::kAssistant:
        out += "<ai>" + m.text;
        for (const auto& c : m.tool_calls) {
          out += "\n<tool_call id=\"" + Attr(c.id) + "\" name=\"" + Attr(c.name) + "\">" +
                 ToJson(c.input) + "</tool_call>";
        }
        out += "</ai>\n";
        break;
      case Role::kTool:
        out += "<tool id=\"" + Attr(m.tool_call_id) + "\" name=\"" + Attr(m.tool_name) +
               (m.is_error ? "\" status=\"error\">" : "\">") + m.text;
        if (!m.images.empty())
          out += "\n<image count=\"" + std::to_string(m.images.size()) + "\" />";
        out += "</tool>\n";
        break;
    }
  }
  if (!out.empty()) out.pop_back();
  return out;
}

Result<ModelResponse> SummarizationMiddleware::WrapModelCall(ModelCallRequest& request, RunEnv& env,
                                                             const ModelCallFn& next) {
  ChatModel& model = *env.config.model;
  ModelProfile profile = model.profile();
  // The effective messages, as the loop keeps them from turn to turn (no
  // copy); without its view (an outer middleware changed them), from the
  // state.
  MessageView* view = request.view();
  if (!view) request.set_messages(AgentLoop::EffectiveMessages(env.state));
  const std::vector<Message>& effective = request.messages();
  const bool has_profile = profile.max_input_tokens > 0;

  auto count = [&]() -> int64_t {
    const AgentState& st = env.state;
    size_t cutoff = st.summarization ? st.summarization->cutoff_index : 0;
    if (st.last_call_tokens > 0 && st.last_call_cutoff == cutoff &&
        st.last_call_message_count <= st.messages.size()) {
      return st.last_call_tokens +
             ApproxTokens(
                 std::span<const Message>(st.messages).subspan(st.last_call_message_count));
    }
    int64_t fixed = static_cast<int64_t>(CodePointCount(request.system) / 4);
    for (const auto& t : request.tools) {
      fixed += static_cast<int64_t>((t.description.size() + ToJson(t.input_schema).size()) / 4);
    }
    return fixed + (view ? view->ApproxTokens(effective) : ApproxTokens(effective));
  };
  int64_t tokens = count();

  // Step 1: shorten old write_file / edit_file arguments (this request only:
  // the edit puts the originals back after the call).
  MessageEdit edit(request);
  bool truncate_trigger =
      has_profile ? tokens >= std::max<int64_t>(1, static_cast<int64_t>(profile.max_input_tokens *
                                                                        options_.trigger_fraction))
                  : effective.size() >= options_.truncate_keep_messages;
  if (truncate_trigger) {
    size_t cutoff = effective.size();
    if (has_profile) {
      int64_t target = std::max<int64_t>(
          1, static_cast<int64_t>(profile.max_input_tokens * options_.keep_fraction));
      int64_t kept = 0;
      cutoff = 0;
      for (size_t i = effective.size(); i-- > 0;) {
        int64_t t = ApproxTokens(effective[i]);
        if (kept + t > target) {
          cutoff = i + 1;
          break;
        }
        kept += t;
      }
    } else if (effective.size() > options_.truncate_keep_messages) {
      cutoff = effective.size() - options_.truncate_keep_messages;
    }
    for (size_t i = 0; i < cutoff && i < effective.size(); ++i) {
      const Message& m = effective[i];
      if (m.role != Role::kAssistant) continue;
      for (size_t ci = 0; ci < m.tool_calls.size(); ++ci) {
        const ToolCall& c = m.tool_calls[ci];
        if (c.name != "write_file" && c.name != "edit_file") continue;
        size_t arg = 0;
        for (const auto& kv : c.input) {
          size_t this_arg = arg++;
          if (!kv.value().is_string()) continue;
          std::string_view s = kv.value().get_string();
          // Bytes >= code points: a short string needs no count.
          if (s.size() <= options_.max_arg_length || CodePointCount(s) <= options_.max_arg_length) {
            continue;
          }
          json::value shortened(std::string(CodePointPrefix(s, 20)) + kArgTruncation);
          edit.SetArgument(i, ci, this_arg, std::move(shortened));
        }
      }
    }
  }

  int64_t threshold = has_profile
                          ? std::max<int64_t>(1, static_cast<int64_t>(profile.max_input_tokens *
                                                                      options_.trigger_fraction))
                          : options_.trigger_tokens;
  if (tokens < threshold) {
    auto resp = next(request);
    if (resp || !IsContextOverflow(resp.error())) return resp;
    // Context overflow: summarize and retry once.
  }
  return Summarize(request, env, next, profile);
}

Result<ModelResponse> SummarizationMiddleware::Summarize(ModelCallRequest& request, RunEnv& env,
                                                         const ModelCallFn& next,
                                                         const ModelProfile& profile) {
  const std::vector<Message>& effective = request.messages();
  // Where the kept tail starts in the effective list.
  size_t cutoff = 0;
  if (profile.max_input_tokens > 0) {
    int64_t target = std::max<int64_t>(
        1, static_cast<int64_t>(profile.max_input_tokens * options_.keep_fraction));
    int64_t kept = 0;
    cutoff = 0;
    for (size_t i = effective.size(); i-- > 0;) {
      int64_t t = ApproxTokens(effective[i]);
      if (kept + t > target) {
        cutoff = i + 1;
        break;
      }
      kept += t;
    }
  } else if (effective.size() > options_.keep_messages) {
    cutoff = effective.size() - options_.keep_messages;
  }
  // Always keep the newest message (the request must end with it).
  if (cutoff >= effective.size()) cutoff = effective.size() - 1;
  cutoff = SafeCutoff(effective, cutoff);
  if (cutoff == 0) return next(request);
  std::span<const Message> to_summarize(effective.data(), cutoff);

  // 1. Offload the summarized messages (previous summaries excluded).
  std::vector<Message> offload;
  for (const auto& m : to_summarize) {
    if (!m.id.starts_with(kSummaryIdPrefix)) offload.push_back(m);
  }
  Sandbox* sb = env.config.sandbox;
  std::string session =
      env.config.session_id.empty() ? "session_" + RandomHex(32) : env.config.session_id;
  std::string path = JoinPath(JoinPath(sb->root(), options_.history_dir_name),
                              SanitizeToolCallId(session) + ".md");
  std::optional<std::string> file_path;
  {
    std::string existing;
    if (auto d = sb->Download(path)) existing = std::move(*d);
    std::string section =
        "## Summarized at " + IsoNowUtc() + "\n\n" + RenderHistory(offload) + "\n\n";
    if (sb->Write(path, existing + section)) {
      file_path = path;
    } else {
      AgentEvent ev;
      ev.type = EventType::kError;
      ev.text = "Offloading conversation history to " + path +
                " failed during summarization. Older messages will not be recoverable.";
      env.emit(std::move(ev));
    }
  }

  // 2. The summary itself, from a model call.
  ChatModel& summarizer = options_.model ? *options_.model : *env.config.model;
  ModelRequest sreq;
  sreq.system = "";
  sreq.cancel = request.cancel;
  sreq.cancel_fd = request.cancel_fd;
  sreq.prompt_caching = false;
  std::string prompt = kSummaryPrompt;
  prompt += RenderHistory(to_summarize);
  prompt += "\n</messages>";
  sreq.messages.push_back(Message::User(std::move(prompt)));
  auto sresp = summarizer.Generate(sreq, {});
  if (!sresp) {
    return MakeError(sresp.error().code, "summarization failed: " + sresp.error().message);
  }
  env.state.usage += sresp->usage;
  if (env.hooks.on_model_response) env.hooks.on_model_response(*sresp);
  std::string summary(Trim(sresp->message.text));

  // 3. Record the event (cutoff as an index into the full state).
  SummarizationEvent event;
  size_t state_cutoff = cutoff;
  if (env.state.summarization) state_cutoff = env.state.summarization->cutoff_index + cutoff - 1;
  event.cutoff_index = state_cutoff;
  event.summary_message = Message::User(SummaryMessageText(summary, file_path));
  event.summary_message.id = std::string(kSummaryIdPrefix) + RandomHex(16);
  event.file_path = file_path;
  env.state.summarization = event;
  if (env.hooks.on_summarization) env.hooks.on_summarization(event);
  {
    AgentEvent ev;
    ev.type = EventType::kSummarized;
    ev.text = file_path.value_or("");
    env.emit(std::move(ev));
  }

  // The summary, then the kept messages (as they were in the request; the
  // loop rebuilds its view from the new summarization for the next call).
  std::vector<Message>& old = request.mutable_messages();
  std::vector<Message> messages;
  messages.reserve(old.size() - cutoff + 1);
  messages.push_back(event.summary_message);
  messages.insert(messages.end(),
                  std::make_move_iterator(old.begin() + static_cast<ptrdiff_t>(cutoff)),
                  std::make_move_iterator(old.end()));
  request.set_messages(std::move(messages));
  return next(request);
}

}  // namespace deepbox::agent
