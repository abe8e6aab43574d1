#include "k8s/yaml_json.h"

#include <fmt/format.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <charconv>
#include <cmath>
#include <limits>
#include <optional>
#include <sstream>
#include <string>

namespace deepbox::k8s {

namespace {

bool IsDigits(std::string_view s, int base) {
  if (s.empty()) return false;
  for (char c : s) {
    bool ok = base == 8    ? (c >= '0' && c <= '7')
              : base == 16 ? std::isxdigit(static_cast<unsigned char>(c)) != 0
                           : (c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

std::optional<json::value> ParseInteger(std::string_view s) {
  bool negative = false;
  std::string_view digits = s;
  int base = 10;
  if (s.starts_with("0o")) {
    digits = s.substr(2);
    base = 8;
  } else if (s.starts_with("0x")) {
    digits = s.substr(2);
    base = 16;
  } else {
    if (!digits.empty() && (digits[0] == '-' || digits[0] == '+')) {
      negative = digits[0] == '-';
      digits.remove_prefix(1);
    }
  }
  if (!IsDigits(digits, base)) return std::nullopt;
  uint64_t magnitude = 0;
  auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), magnitude, base);
  if (ec == std::errc::result_out_of_range || ptr != digits.data() + digits.size()) {
    // Too large for 64 bits: keep the value as a double, as a JSON decoder would.
    double d = 0;
    for (char c : digits) {
      int v = std::isdigit(static_cast<unsigned char>(c)) ? c - '0' : std::tolower(c) - 'a' + 10;
      d = d * base + v;
    }
    return json::value(negative ? -d : d);
  }
  if (negative) {
    if (magnitude > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) + 1) {
      return json::value(-static_cast<double>(magnitude));
    }
    return json::value(static_cast<int64_t>(0 - magnitude));
  }
  if (magnitude > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return json::value(magnitude);
  }
  return json::value(static_cast<int64_t>(magnitude));
}

// [-+]? ( \. [0-9]+ | [0-9]+ ( \. [0-9]* )? ) ( [eE] [-+]? [0-9]+ )?
bool IsCoreFloat(std::string_view s) {
  size_t i = 0;
  if (i < s.size() && (s[i] == '-' || s[i] == '+')) ++i;
  size_t int_digits = 0;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i, ++int_digits;
  size_t frac_digits = 0;
  bool dot = false;
  if (i < s.size() && s[i] == '.') {
    dot = true;
    ++i;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i, ++frac_digits;
  }
  if (int_digits == 0 && frac_digits == 0) return false;
  if (int_digits == 0 && !dot) return false;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '-' || s[i] == '+')) ++i;
    size_t exp_digits = 0;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i, ++exp_digits;
    if (exp_digits == 0) return false;
  }
  return i == s.size();
}

struct Converter {
  const YamlLimits& limits;
  std::string_view source;
  size_t nodes = 0;

  Error Fail(const YAML::Node& node, std::string_view what) const {
    const auto mark = node.Mark();
    if (mark.line >= 0) {
      return Error(ErrorCode::kInvalidArgument, fmt::format("{}: line {}, column {}: {}", source,
                                                            mark.line + 1, mark.column + 1, what));
    }
    return Error(ErrorCode::kInvalidArgument, fmt::format("{}: {}", source, what));
  }

  Result<json::value> Convert(const YAML::Node& node, int depth) {
    if (depth > limits.max_depth) {
      return tl::unexpected(
          Fail(node, fmt::format("nesting deeper than {} levels", limits.max_depth)));
    }
    if (++nodes > limits.max_nodes) {
      return tl::unexpected(
          Fail(node, fmt::format("more than {} nodes (alias expansion?)", limits.max_nodes)));
    }
    switch (node.Type()) {
      case YAML::NodeType::Undefined:
      case YAML::NodeType::Null:
        return json::value(nullptr);
      case YAML::NodeType::Scalar:
        return Scalar(node);
      case YAML::NodeType::Sequence: {
        json::array arr;
        arr.reserve(node.size());
        for (const auto& item : node) {
          auto v = Convert(item, depth + 1);
          if (!v) return v;
          arr.push_back(std::move(*v));
        }
        return json::value(std::move(arr));
      }
      case YAML::NodeType::Map: {
        json::object obj;
        for (const auto& kv : node) {
          if (!kv.first.IsScalar()) {
            return tl::unexpected(Fail(kv.first, "mapping keys must be scalars"));
          }
          const std::string& key = kv.first.Scalar();
          if (obj.contains(key)) {
            return tl::unexpected(Fail(kv.first, fmt::format("duplicate key '{}'", key)));
          }
          auto v = Convert(kv.second, depth + 1);
          if (!v) return v;
          obj.emplace(key, std::move(*v));
        }
        return json::value(std::move(obj));
      }
    }
    return json::value(nullptr);
  }

  Result<json::value> Scalar(const YAML::Node& node) {
    const std::string& text = node.Scalar();
    const std::string& tag = node.Tag();
    if (tag == "!" || tag == "tag:yaml.org,2002:str") return json::value(JsonString(text));
    if (tag == "?" || tag.empty()) return ResolvePlainScalar(text);
    if (tag == "tag:yaml.org,2002:int") {
      if (auto v = ParseInteger(text)) return *v;
      return tl::unexpected(Fail(node, fmt::format("'{}' is not an integer", text)));
    }
    if (tag == "tag:yaml.org,2002:bool" || tag == "tag:yaml.org,2002:null" ||
        tag == "tag:yaml.org,2002:float") {
      return ResolvePlainScalar(text);
    }
    // Unknown tags (e.g. !Ref): keep the text.
    return json::value(JsonString(text));
  }
};

// yaml-cpp 0.7's LoadAll loops for ever, allocating, on some malformed
// streams (`''e\n? `, found by fuzz/kubeconfig_fuzz.cc; upstream
// jbeder/yaml-cpp#1319): a document whose first token no node rule takes is
// "parsed" as a null without consuming that token, so the next document starts
// at the same token again. This pass runs the same parser over the stream with
// events counted only and stops when a document starts where the previous one
// did; LoadAll runs only on streams that passed it.
class ProgressCheck : public YAML::EventHandler {
 public:
  explicit ProgressCheck(size_t max_events) : max_events_(max_events) {}
  void OnDocumentStart(const YAML::Mark& mark) override { document_start_ = mark; }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override { Count(); }
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override { Count(); }
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {
    Count();
  }
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {
    Count();
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {
    Count();
  }
  void OnMapEnd() override {}

  const YAML::Mark& document_start() const { return document_start_; }
  bool too_many_events() const { return events_ > max_events_; }

 private:
  void Count() { ++events_; }
  size_t max_events_;
  size_t events_ = 0;
  YAML::Mark document_start_ = YAML::Mark::null_mark();
};

Error YamlError(std::string_view source, const YAML::Mark& mark, std::string_view what) {
  if (mark.line >= 0) {
    return Error(ErrorCode::kInvalidArgument, fmt::format("{}: line {}, column {}: {}", source,
                                                          mark.line + 1, mark.column + 1, what));
  }
  return Error(ErrorCode::kInvalidArgument, fmt::format("{}: {}", source, what));
}

// Throws what the parser throws (a YAML::Exception), as LoadAll would.
Status CheckParserProgress(const std::string& text, std::string_view source,
                           const YamlLimits& limits) {
  std::istringstream in(text);
  YAML::Parser parser(in);
  ProgressCheck check(limits.max_nodes);
  std::optional<int> previous_start;
  while (parser.HandleNextDocument(check)) {
    const int start = check.document_start().pos;
    if (previous_start && *previous_start == start) {
      return tl::unexpected(YamlError(source, check.document_start(),
                                      "malformed YAML: the parser cannot go past this token"));
    }
    if (check.too_many_events()) {
      return tl::unexpected(
          YamlError(source, check.document_start(),
                    fmt::format("more than {} nodes before alias expansion", limits.max_nodes)));
    }
    previous_start = start;
  }
  return {};
}

}  // namespace

json::value ResolvePlainScalar(std::string_view s) {
  if (s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL") {
    return json::value(nullptr);
  }
  if (s == "true" || s == "True" || s == "TRUE") return json::value(true);
  if (s == "false" || s == "False" || s == "FALSE") return json::value(false);
  if (auto v = ParseInteger(s)) return *v;
  if (IsCoreFloat(s)) {
    double d = 0;
    auto [ptr, ec] = std::from_chars(s.data() + (s[0] == '+' ? 1 : 0), s.data() + s.size(), d);
    if (ec == std::errc() && ptr == s.data() + s.size()) return json::value(d);
    if (ec == std::errc::result_out_of_range) {
      return json::value(s[0] == '-' ? -HUGE_VAL : HUGE_VAL);
    }
  }
  std::string_view lower_inf = s;
  if (!lower_inf.empty() && (lower_inf[0] == '+' || lower_inf[0] == '-'))
    lower_inf.remove_prefix(1);
  if (lower_inf == ".inf" || lower_inf == ".Inf" || lower_inf == ".INF") {
    return json::value(s[0] == '-' ? -HUGE_VAL : HUGE_VAL);
  }
  if (s == ".nan" || s == ".NaN" || s == ".NAN") return json::value(std::nan(""));
  return json::value(JsonString(s));
}

Result<std::vector<json::value>> YamlToJsonDocuments(std::string_view text, std::string_view source,
                                                     const YamlLimits& limits) {
  if (text.size() > limits.max_bytes) {
    return MakeError(ErrorCode::kResourceExhausted,
                     fmt::format("{}: larger than {} bytes", source, limits.max_bytes));
  }
  const std::string owned(text);
  std::vector<YAML::Node> docs;
  try {
    if (auto checked = CheckParserProgress(owned, source, limits); !checked) {
      return tl::unexpected(checked.error());
    }
    docs = YAML::LoadAll(owned);
  } catch (const YAML::Exception& e) {
    return tl::unexpected(YamlError(source, e.mark, e.msg));
  }
  std::vector<json::value> out;
  Converter conv{limits, source};
  for (const auto& doc : docs) {
    try {
      auto v = conv.Convert(doc, 0);
      if (!v) return tl::unexpected(v.error());
      out.push_back(std::move(*v));
    } catch (const YAML::Exception& e) {
      return MakeError(ErrorCode::kInvalidArgument, fmt::format("{}: {}", source, e.msg));
    }
  }
  return out;
}

Result<json::value> YamlToJson(std::string_view text, std::string_view source,
                               const YamlLimits& limits) {
  auto docs = YamlToJsonDocuments(text, source, limits);
  if (!docs) return tl::unexpected(docs.error());
  // A trailing "---" yields an extra null document: ignore null documents.
  json::value result(nullptr);
  int count = 0;
  for (auto& d : *docs) {
    if (d.is_null()) continue;
    if (++count > 1) {
      return MakeError(ErrorCode::kInvalidArgument,
                       fmt::format("{}: expected one YAML document, found several", source));
    }
    result = std::move(d);
  }
  return result;
}

}  // namespace deepbox::k8s
