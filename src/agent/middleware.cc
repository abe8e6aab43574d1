#include "agent/middleware.h"

namespace deepbox::agent {

namespace {
constexpr size_t kText = static_cast<size_t>(-1);
}  // namespace

void MessageEdit::SetText(size_t i, std::string text) {
  if (saved_.empty()) changes_ = request_.changes_;
  std::string& current = request_.messages_.at(i).text;
  saved_.push_back({i, kText, 0, std::exchange(current, std::move(text)), {}});
}

void MessageEdit::SetArgument(size_t i, size_t call, size_t arg, json::value value) {
  if (saved_.empty()) changes_ = request_.changes_;
  json::object& input = request_.messages_.at(i).tool_calls.at(call).input;
  json::value& current = (input.begin() + static_cast<ptrdiff_t>(arg))->value();
  saved_.push_back({i, call, arg, {}, std::exchange(current, std::move(value))});
}

MessageEdit::~MessageEdit() {
  // Changed otherwise since: the loop does not keep these messages, and the
  // indexes may point elsewhere.
  if (request_.changes_ != changes_) return;
  for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
    Message& m = request_.messages_[it->message];
    if (it->call == kText) {
      m.text = std::move(it->text);
    } else {
      json::object& input = m.tool_calls[it->call].input;
      (input.begin() + static_cast<ptrdiff_t>(it->arg))->value() = std::move(it->value);
    }
  }
}

std::optional<std::vector<Decision>> ModelTurn::Interrupt(const InterruptRequest& request) {
  if (paused_) return std::nullopt;
  if (resuming_ && !resume_taken_) {
    resume_taken_ = true;
    return std::move(resume_decisions_);
  }
  std::optional<std::vector<Decision>> decisions = decide_(request);
  if (!decisions) paused_ = request;
  return decisions;
}

}  // namespace deepbox::agent
