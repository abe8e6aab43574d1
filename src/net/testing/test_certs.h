// Test-only: generates a CA plus server and client certificates in memory
// (OpenSSL API), for HTTPS/mTLS tests against real TLS servers on loopback.
#pragma once

#include <string>

namespace deepbox::net::testing {

struct TestPki {
  std::string ca_cert_pem;
  std::string ca_key_pem;
  std::string server_cert_pem;  // SANs: server_san (default DNS localhost, IP 127.0.0.1, IP ::1)
  std::string server_key_pem;
  std::string client_cert_pem;  // CN = client_common_name, O = client_org
  std::string client_key_pem;
};

// server_san: the server certificate's subjectAltName, in OpenSSL's config
// syntax ("DNS:a.test,DNS:b.test").
TestPki GenerateTestPki(const std::string& client_common_name = "test-client",
                        const std::string& client_org = "system:masters",
                        const std::string& server_san = "DNS:localhost,IP:127.0.0.1,IP:::1");

}  // namespace deepbox::net::testing
