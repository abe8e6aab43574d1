#include "agent/model/http_stream.h"

#include <cctype>

#include "agent/model/retry.h"
#include "common/utf8.h"

namespace deepbox::agent::internal {

Result<std::unique_ptr<net::HttpClient>> MakeHttpClient(const std::string& base_url,
                                                        const HttpOptions& options) {
  net::ClientOptions co;
  co.connect_timeout = options.connect_timeout;
  co.read_idle_timeout = options.read_idle_timeout;
  co.tls.ca_file = options.ca_file;
  co.tls.ca_pem = options.ca_pem;
  co.max_idle_connections = 4;
  return net::HttpClient::Create(base_url, std::move(co));
}

Result<PostOutcome> StreamingPost(net::HttpClient& client, const std::string& target,
                                  const net::Headers& headers, const std::string& body,
                                  const HttpOptions& options, const std::atomic<bool>* cancel,
                                  int cancel_fd,
                                  const std::function<bool(const net::SseEvent&)>& on_event) {
  constexpr size_t kMaxErrorBody = 1 << 20;
  net::ClientRequest req;
  req.method = "POST";
  req.target = target;
  req.headers = headers;
  req.body = body;
  req.timeout = options.request_timeout;
  req.cancel_fd = cancel_fd;
  PostOutcome out;
  net::SseParser parser([&](const net::SseEvent& ev) { return on_event(ev); });
  auto on_head = [&](const net::Response& head) {
    out.status = head.status;
    out.headers = head.headers;
    std::string type = head.headers.Get("content-type").value_or("");
    out.event_stream =
        head.status / 100 == 2 && type.find("text/event-stream") != std::string::npos;
    return !IsCancelled(cancel);
  };
  auto on_data = [&](std::string_view data) {
    if (IsCancelled(cancel)) {
      out.stopped = true;
      return false;
    }
    if (out.event_stream) {
      if (!parser.Feed(data) || IsCancelled(cancel)) {
        out.stopped = true;
        return false;
      }
    } else if (out.body.size() < kMaxErrorBody) {
      out.body.append(data.substr(0, kMaxErrorBody - out.body.size()));
    }
    return true;
  };
  auto r = client.SendStreaming(req, on_head, on_data);
  if (IsCancelled(cancel)) return tl::unexpected(CancelledError());
  if (!r) return tl::unexpected(r.error());
  if (out.status == 0) out.status = r->status;
  if (out.event_stream && !out.stopped && !parser.Finish()) out.stopped = true;
  return out;
}

namespace {
bool IsCertificateFailure(const Error& error) { return error.reason == kReasonTlsCertificate; }
}  // namespace

std::string ContextOverflowReason(std::string_view api_type, std::string_view message) {
  if (api_type == "context_length_exceeded" || api_type == "request_too_large") {
    return std::string(kReasonContextOverflow);
  }
  std::string m(message);
  for (char& c : m) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (std::string_view phrase : {"prompt is too long", "context length", "context window",
                                  "maximum context", "too many tokens"}) {
    if (m.find(phrase) != std::string::npos) return std::string(kReasonContextOverflow);
  }
  return "";
}

bool IsRetryableTransportError(const Error& error) {
  if (IsCertificateFailure(error)) return false;
  return error.code == ErrorCode::kUnavailable || error.code == ErrorCode::kTimeout;
}

std::string DescribeTransportError(const Error& error) {
  if (!IsCertificateFailure(error)) return error.message;
  return error.message +
         " (to trust a private or test CA, point SSL_CERT_FILE or ModelConfig::ca_file at its "
         "PEM bundle)";
}

std::string BodySnippet(std::string_view body, size_t max) {
  if (body.size() > max) body = body.substr(0, Utf8CompletePrefix(body.substr(0, max)));
  std::string s = SanitizeUtf8(body);
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

}  // namespace deepbox::agent::internal
