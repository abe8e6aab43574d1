// Glob matching with the semantics deepagents gets from wcmatch
// (BRACE | GLOBSTAR, no DOTMATCH), used for permission rules:
//   *      any characters within one path segment
//   **     (a whole segment) zero or more segments
//   ?      one character; [abc], [a-z], [!a] / [^a] character classes
//   {a,b}  alternatives (nested allowed; at most 1000 expansions)
// Wildcards never match a leading "." of a segment: dot names need a pattern
// segment that itself starts with ".".
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace deepbox::agent {

// Whole-path match of `path` against `pattern`.
bool GlobMatch(std::string_view path, std::string_view pattern);

// Brace expansion ("a{b,c}" -> "ab", "ac"); capped at `limit` results.
std::vector<std::string> ExpandBraces(std::string_view pattern, size_t limit = 1000);

// True when the segment contains a wildcard character (* ? [ {).
bool HasGlobMagic(std::string_view text);

// Longest leading directory of `pattern` without wildcards ("/a/*/b" -> "/a").
std::string GlobAnchor(std::string_view pattern);

}  // namespace deepbox::agent
