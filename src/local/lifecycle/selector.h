// Labels and label selectors, with the syntax and rules of Kubernetes labels
// (so a selector means the same thing for the local and the k8s provider).
//
//   key:   [prefix/]name; name 1-63 chars [A-Za-z0-9_.-], starting and ending
//          alphanumeric; prefix a DNS subdomain of at most 253 chars.
//   value: empty, or 1-63 chars like a name.
//   selector: comma-separated terms, all of which must hold:
//          k=v  k==v  (label k equals v)     k!=v  (k absent or different)
//          k          (k present)            !k    (k absent)
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/error.h"

namespace deepbox::local::lifecycle {

using Labels = std::map<std::string, std::string>;

Status ValidateLabelKey(std::string_view key);
Status ValidateLabelValue(std::string_view key, std::string_view value);
// "K=V" -> {K, V}, validated. INVALID_ARGUMENT says what is wrong.
Result<std::pair<std::string, std::string>> ParseLabel(std::string_view text);

class Selector {
 public:
  enum class Op { kEquals, kNotEquals, kExists, kNotExists };
  struct Term {
    Op op = Op::kExists;
    std::string key;
    std::string value;
  };

  // Empty text = matches everything.
  static Result<Selector> Parse(std::string_view text);
  // A selector matching exactly these labels (each k=v).
  static Selector FromLabels(const Labels& labels);

  bool Matches(const Labels& labels) const;
  bool empty() const { return terms_.empty(); }
  const std::vector<Term>& terms() const { return terms_; }
  std::string ToString() const;

 private:
  std::vector<Term> terms_;
};

}  // namespace deepbox::local::lifecycle
