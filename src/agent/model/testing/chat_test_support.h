// Test support for the HTTP chat clients' tests: CreateTestModel points a
// client at a fake server, RetryRecorder records backoff waits instead of
// sleeping, Observed collects the streaming callbacks.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "agent/model/model.h"
#include "agent/model/retry.h"

namespace deepbox::agent::testing {

struct RetryRecorder {
  std::vector<std::chrono::milliseconds> delays;
  // Short backoff (1 ms base, 4 ms cap) so that jitter bounds are checkable.
  RetryPolicy Policy(int max_retries = 5) {
    RetryPolicy p;
    p.max_retries = max_retries;
    p.base_delay = std::chrono::milliseconds(1);
    p.max_delay = std::chrono::milliseconds(4);
    p.sleep = [this](std::chrono::milliseconds d, const std::atomic<bool>* cancel) {
      delays.push_back(d);
      return cancel == nullptr || !cancel->load();
    };
    return p;
  }
};

struct Observed {
  std::vector<std::string> deltas;
  std::vector<std::pair<std::string, std::string>> tool_starts;  // (id, name)
  int retries = 0;
  std::vector<RetryNotice> notices;
  StreamCallbacks Callbacks() {
    StreamCallbacks cb;
    cb.on_text_delta = [this](std::string_view d) { deltas.emplace_back(d); };
    cb.on_tool_call_start = [this](const std::string& id, const std::string& name) {
      tool_starts.emplace_back(id, name);
    };
    cb.on_retry = [this](const RetryNotice& n) {
      ++retries;
      notices.push_back(n);
    };
    return cb;
  }
  std::string Joined() const {
    std::string s;
    for (const auto& d : deltas) s += d;
    return s;
  }
};

// A Model (AnthropicModel, OpenAiModel) of `options` pointed at `server`
// (trusting its CA, if any) with `retry`; null, after a test failure, if
// Create failed.
template <typename Model, typename Options, typename Server>
std::unique_ptr<Model> CreateTestModel(Options options, const Server& server, RetryPolicy retry) {
  options.base_url = server.url();
  options.http.ca_file = server.ca_file();
  options.http.retry = std::move(retry);
  auto m = Model::Create(std::move(options));
  EXPECT_TRUE(m) << m.error().ToString();
  return m ? std::move(*m) : nullptr;
}

}  // namespace deepbox::agent::testing
