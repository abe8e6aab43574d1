// Agent memory (deepagents MemoryMiddleware): AGENTS.md files read from the
// configured sandbox paths (missing files are skipped) are injected into the
// system prompt as
//   <agent_memory>\n{path}\n\n{content}[\n\n{path}\n\n{content}...]\n\n</agent_memory>
// followed by <memory_guidelines> telling the model to keep the memory up to
// date with edit_file and never to store secrets. HTML comments are stripped;
// with nothing loaded the body is "(No memory loaded)". Loaded once per agent.
#pragma once

#include <mutex>
#include <string>
#include <vector>

#include "agent/middleware.h"

namespace deepbox::agent {

// The prompt section for loaded contents (path -> content, in `paths` order).
std::string FormatMemorySection(const std::vector<std::string>& paths,
                                const std::vector<std::pair<std::string, std::string>>& contents);
std::string StripHtmlComments(std::string_view text);

class MemoryMiddleware : public Middleware {
 public:
  explicit MemoryMiddleware(std::vector<std::string> paths) : paths_(std::move(paths)) {}
  std::string_view name() const override { return "memory"; }
  void BeforeAgent(RunEnv& env) override;
  Result<ModelResponse> WrapModelCall(ModelCallRequest& request, RunEnv& env,
                                      const ModelCallFn& next) override;

 private:
  std::vector<std::string> paths_;
  std::mutex mu_;
  bool loaded_ = false;
  std::string section_;
};

}  // namespace deepbox::agent
