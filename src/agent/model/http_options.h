// Transport settings shared by the HTTP model clients.
#pragma once

#include <chrono>
#include <string>

#include "agent/model/retry.h"

namespace deepbox::agent {

struct HttpOptions {
  // CA bundle trusted instead of the system CAs (a private CA, a test CA).
  // Empty = system CAs (OpenSSL honours SSL_CERT_FILE / SSL_CERT_DIR there).
  std::string ca_file{};
  std::string ca_pem{};  // PEM text alternative to ca_file
  std::chrono::milliseconds connect_timeout{10000};
  // Whole-call deadline of one attempt, streaming included (0 = none).
  std::chrono::milliseconds request_timeout{600000};
  // Longest silence on the stream (the APIs send pings meanwhile), before the
  // response head too; `deepbox run` sets it (--model-idle-timeout, default
  // 90 s: src/cli/run_config.h).
  std::chrono::milliseconds read_idle_timeout{300000};
  RetryPolicy retry{};
};

}  // namespace deepbox::agent
