// A throwaway PKI for the local tests' upstream servers
// (tls_echo_server.h): a CA and a server leaf for some DNS names, as PEM,
// made by net/testing/test_certs.h. The code under test trusts the CA (and
// nothing else).
#pragma once

#include <string>

#include "common/strings.h"
#include "net/testing/test_certs.h"

namespace deepbox::local::testing {

struct TestPki {
  std::string ca_pem;
  std::string chain_pem;  // leaf, then the CA (a chain as a server sends it)
  std::string key_pem;    // the leaf's
};

// A CA and a leaf for `dns_names` ("a.test,b.test").
inline TestPki MakeTestPki(const std::string& dns_names) {
  std::string san;
  for (std::string_view name : Split(dns_names, ',')) {
    san += (san.empty() ? "DNS:" : ",DNS:") + std::string(name);
  }
  auto pki = net::testing::GenerateTestPki("test-client", "", san);
  return TestPki{pki.ca_cert_pem, pki.server_cert_pem + pki.ca_cert_pem, pki.server_key_pem};
}

}  // namespace deepbox::local::testing
