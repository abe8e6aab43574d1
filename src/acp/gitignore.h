// .gitignore rules, enough of git's semantics to decide what of a project
// is copied into an ACP session's sandbox (gitignore(5)):
//   * blank lines and lines starting with '#' are skipped; "\#" and "\!"
//     escape a leading '#' or '!'; trailing unescaped spaces are dropped;
//   * "!" negates (re-includes) what an earlier rule excluded;
//   * a trailing "/" matches directories only;
//   * a pattern with a "/" at its start or middle is anchored to the
//     directory of its .gitignore, else it matches a name at any depth;
//   * "*", "?", "[...]" within one path segment (fnmatch(3)), "**" as a
//     whole segment for any number of segments;
//   * the last matching rule wins; deeper .gitignore files are added after
//     shallower ones, so they win. A directory that is ignored is not
//     entered, so nothing beneath it can be re-included (as in git).
// Not supported: $GIT_DIR/info/exclude and core.excludesFile (a user's
// global ignores).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace deepbox::acp {

class IgnoreRules {
 public:
  // Adds the rules of the .gitignore of directory `dir` (relative to the
  // project, '/'-separated, "" = the project itself).
  void AddFile(std::string_view dir, std::string_view text);
  // Whether `path` (relative to the project) is ignored.
  bool Ignored(std::string_view path, bool is_dir) const;
  size_t size() const { return rules_.size(); }

 private:
  struct Rule {
    std::string base;  // the .gitignore's directory, "" or "a/b"
    std::vector<std::string> segments;
    bool negate = false;
    bool dir_only = false;
    bool anchored = false;
  };
  static bool Matches(const Rule& rule, std::string_view rel, bool is_dir);
  std::vector<Rule> rules_;
};

}  // namespace deepbox::acp
