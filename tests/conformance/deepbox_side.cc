// deepbox's side of the deepagents differential test: replays the scripted
// conversation (conversation.py) through DeepAgent, its tools in a real
// sandbox reached through the daemon's endpoint, and writes what the model
// was offered and every tool result as JSON (the shape
// deepagents_reference.py writes):
//   {"tools": [{name, description, parameters}], "results": [{tool_call_id,
//    name, content, status}], "final_text"}
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>

#include "agent/deep_agent.h"
#include "agent/model/factory.h"
#include "common/json.h"
#include "sandbox/sandboxd_client.h"

namespace {

using namespace deepbox;

int Usage() {
  std::fprintf(stderr,
               "usage: deepagents_diff_deepbox --endpoint unix:SOCK --replay FILE --task TEXT "
               "--out FILE\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string endpoint, replay, task, out_path;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string key = argv[i];
    std::string value = argv[i + 1];
    if (key == "--endpoint") {
      endpoint = value;
    } else if (key == "--replay") {
      replay = value;
    } else if (key == "--task") {
      task = value;
    } else if (key == "--out") {
      out_path = value;
    } else {
      return Usage();
    }
  }
  if (endpoint.empty() || replay.empty() || task.empty() || out_path.empty()) return Usage();

  auto client = SandboxdClient::Connect(endpoint);
  if (!client) {
    std::fprintf(stderr, "connect %s: %s\n", endpoint.c_str(), client.error().ToString().c_str());
    return 1;
  }
  auto model = agent::CreateChatModel("replay:" + replay);
  if (!model) {
    std::fprintf(stderr, "%s\n", model.error().ToString().c_str());
    return 1;
  }
  agent::DeepAgentOptions options;
  options.model = std::shared_ptr<agent::ChatModel>(std::move(*model));
  options.sandbox = client->get();
  options.parallel_subagents = false;  // the replay answers calls in order
  auto agent = agent::DeepAgent::Create(std::move(options));
  if (!agent) {
    std::fprintf(stderr, "%s\n", agent.error().ToString().c_str());
    return 1;
  }
  agent::RunResult run = (*agent)->Run(task);
  if (!run.ok()) {
    std::fprintf(stderr, "run ended with %s: %s\n",
                 std::string(agent::StopReasonName(run.stop_reason)).c_str(),
                 run.error ? run.error->ToString().c_str() : "");
    return 1;
  }

  json::array tools;
  for (const auto& spec : (*agent)->tool_specs()) {
    json::object t;
    t["name"] = spec.name;
    t["description"] = spec.description;
    t["parameters"] = spec.input_schema;
    tools.push_back(std::move(t));
  }
  json::array results;
  for (const auto& m : run.messages) {
    if (m.role != agent::Role::kTool) continue;
    json::object r;
    r["tool_call_id"] = m.tool_call_id;
    r["name"] = m.tool_name;
    r["content"] = JsonString(m.text);
    r["status"] = m.is_error ? "error" : "success";
    if (!m.images.empty()) r["images"] = static_cast<int64_t>(m.images.size());
    results.push_back(std::move(r));
  }
  const size_t count = results.size();
  json::object out;
  out["tools"] = std::move(tools);
  out["results"] = std::move(results);
  out["final_text"] = JsonString(run.final_text);
  std::ofstream f(out_path, std::ios::binary);
  f << ToJson(out) << "\n";
  if (!f) {
    std::fprintf(stderr, "cannot write %s\n", out_path.c_str());
    return 1;
  }
  std::fprintf(stderr, "deepbox: %zu tool results\n", count);
  return 0;
}
