// Skills (deepagents SkillsMiddleware, Agent Skills format): each configured
// directory in the sandbox holds <dir>/<name>/SKILL.md files that start with
// YAML front matter (`---` ... `---`, parsed with yaml-cpp):
//   name (required, <= 64 chars, lowercase letters/digits and single hyphens,
//   equal to the directory name — violations are warned about but loaded),
//   description (required, cut at 1 024 chars), license, compatibility (cut at
//   500), metadata (string map), allowed-tools (string or list).
// Files over 10 MiB, without front matter, with invalid YAML or missing
// name/description are skipped. Later directories override earlier ones by
// name. Skills are loaded once (first run) and listed in the system prompt
// with their SKILL.md path; the model reads a skill's full instructions with
// read_file(..., limit=1000) when it applies.
#pragma once

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "agent/middleware.h"

namespace deepbox::agent {

struct SkillMetadata {
  std::string name;
  std::string description;
  std::string path;  // of SKILL.md
  std::string license;
  std::string compatibility;
  std::map<std::string, std::string> metadata;
  std::vector<std::string> allowed_tools;
};

// Parses one SKILL.md. nullopt when it must be skipped; `warnings` collects
// why (and spec violations that still load).
std::optional<SkillMetadata> ParseSkillMd(std::string_view content, const std::string& skill_path,
                                          const std::string& directory_name,
                                          std::vector<std::string>* warnings = nullptr);

// "" when valid, else the reason.
std::string ValidateSkillName(std::string_view name, std::string_view directory_name);

struct SkillsLoad {
  std::vector<SkillMetadata> skills;
  std::vector<std::string> errors;    // source-level problems (shown to the model)
  std::vector<std::string> warnings;  // per-file problems (logged via events)
};

// Loads every skill from the directories (later ones override earlier ones).
SkillsLoad LoadSkills(Sandbox& sandbox, const std::vector<std::string>& dirs);

// The system prompt section.
std::string FormatSkillsSection(const std::vector<std::string>& dirs,
                                const std::vector<SkillMetadata>& skills,
                                const std::vector<std::string>& errors);

class SkillsMiddleware : public Middleware {
 public:
  explicit SkillsMiddleware(std::vector<std::string> dirs) : dirs_(std::move(dirs)) {}
  std::string_view name() const override { return "skills"; }
  void BeforeAgent(RunEnv& env) override;
  Result<ModelResponse> WrapModelCall(ModelCallRequest& request, RunEnv& env,
                                      const ModelCallFn& next) override;
  std::vector<SkillMetadata> skills() const;

 private:
  std::vector<std::string> dirs_;
  mutable std::mutex mu_;
  bool loaded_ = false;
  std::string section_;
  std::vector<SkillMetadata> skills_;
};

}  // namespace deepbox::agent
