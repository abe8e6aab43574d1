// An AuthorizationUserAgent for authorization servers that grant at once (the
// conformance suite's, the tests'): it requests the authorization URL and
// returns where the server redirects to, without a browser or a listener.
#pragma once

#include <fmt/format.h>

#include <memory>
#include <string>

#include "mcp/oauth.h"
#include "net/http_client.h"
#include "net/url.h"

namespace deepbox::mcp::testing {

class RedirectFollowingUserAgent : public AuthorizationUserAgent {
 public:
  // The redirect URI is only ever read back from the Location header.
  explicit RedirectFollowingUserAgent(std::string redirect_uri = "http://127.0.0.1:1/callback")
      : redirect_uri_(std::move(redirect_uri)) {}

  Result<std::string> RedirectUri() override { return redirect_uri_; }

  Result<std::string> Authorize(const std::string& authorization_url) override {
    ++authorizations;
    last_authorization_url = authorization_url;
    auto u = net::ParseUrl(authorization_url);
    if (!u) return tl::unexpected(u.error());
    std::string host = u->host.find(':') != std::string::npos ? "[" + u->host + "]" : u->host;
    auto http = net::HttpClient::Create(fmt::format("{}://{}:{}", u->scheme, host, u->port));
    if (!http) return tl::unexpected(http.error());
    net::ClientRequest req;
    req.target = u->path + (u->query.empty() ? "" : "?" + u->query);
    req.timeout = std::chrono::seconds(30);
    auto res = (*http)->Send(req);
    if (!res) return tl::unexpected(res.error());
    auto location = res->headers.Get("Location");
    if (res->status < 300 || res->status > 399 || !location) {
      return MakeError(ErrorCode::kUnauthenticated,
                       fmt::format("the authorization endpoint answered HTTP {} without a redirect",
                                   res->status));
    }
    return *location;
  }

  int authorizations = 0;
  std::string last_authorization_url;

 private:
  std::string redirect_uri_;
};

}  // namespace deepbox::mcp::testing
