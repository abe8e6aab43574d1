#include "oci/reference.h"

#include <arpa/inet.h>
#include <fmt/format.h>

#include "oci/digest.h"

namespace deepbox::oci {

namespace {

constexpr size_t kMaxReferenceBytes = 512;

bool IsLowerAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

// One path component of a repository: [a-z0-9]+ joined by '.', '_', '__' or
// runs of '-' (the distribution spec's grammar).
bool ValidRepositoryComponent(std::string_view c) {
  if (c.empty() || !IsLowerAlnum(c.front()) || !IsLowerAlnum(c.back())) return false;
  for (size_t i = 0; i < c.size(); ++i) {
    char ch = c[i];
    if (IsLowerAlnum(ch)) continue;
    if (ch == '.') {
      if (!IsLowerAlnum(c[i + 1])) return false;
    } else if (ch == '_') {
      if (c[i + 1] == '_') {
        ++i;
        if (!IsLowerAlnum(c[i + 1])) return false;
      } else if (!IsLowerAlnum(c[i + 1])) {
        return false;
      }
    } else if (ch == '-') {
      // runs of '-' are fine; the end check above keeps the last one inner
    } else {
      return false;
    }
  }
  return true;
}

bool ValidTag(std::string_view tag) {
  if (tag.empty() || tag.size() > 128) return false;
  auto word = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  };
  if (!word(tag.front())) return false;
  for (char c : tag) {
    if (!word(c) && c != '.' && c != '-') return false;
  }
  return true;
}

// host, host:port, [v6]:port, with host made of letters, digits, '.', '-'.
bool ValidRegistry(std::string_view r) {
  if (r.empty() || r.size() > 255) return false;
  std::string_view host = r;
  std::string_view port;
  if (r.front() == '[') {
    size_t close = r.find(']');
    if (close == std::string_view::npos) return false;
    std::string v6(r.substr(1, close - 1));
    in6_addr addr{};
    if (inet_pton(AF_INET6, v6.c_str(), &addr) != 1) return false;
    std::string_view rest = r.substr(close + 1);
    if (rest.empty()) return true;
    if (rest.front() != ':') return false;
    port = rest.substr(1);
    host = {};
  } else if (size_t colon = r.find(':'); colon != std::string_view::npos) {
    host = r.substr(0, colon);
    port = r.substr(colon + 1);
    if (port.empty()) return false;
  }
  for (char c : host) {
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
          c == '-')) {
      return false;
    }
  }
  if (r.front() != '[' && (host.empty() || host.front() == '-' || host.front() == '.')) {
    return false;
  }
  if (port.size() > 5) return false;
  int value = 0;
  for (char c : port) {
    if (c < '0' || c > '9') return false;
    value = value * 10 + (c - '0');
  }
  return port.empty() || (value > 0 && value < 65536);
}

tl::unexpected<Error> BadReference(std::string_view text, std::string_view why) {
  return MakeError(ErrorCode::kInvalidArgument,
                   fmt::format("image reference '{}': {}", text.substr(0, 200), why));
}

}  // namespace

std::string ImageReference::ToString() const {
  std::string out = registry + "/" + repository;
  if (!tag.empty()) out += ":" + tag;
  if (!digest.empty()) out += "@" + digest;
  return out;
}

std::string ImageReference::ApiHost() const {
  return registry == kDockerHub ? "registry-1.docker.io" : registry;
}

std::string ImageReference::HostName() const {
  if (!registry.empty() && registry.front() == '[') {
    return registry.substr(1, registry.find(']') - 1);
  }
  return registry.substr(0, registry.find(':'));
}

bool IsLoopbackHost(std::string_view host) {
  if (host == "localhost") return true;
  std::string h(host);
  in_addr v4{};
  if (inet_pton(AF_INET, h.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (inet_pton(AF_INET6, h.c_str(), &v6) == 1) return IN6_IS_ADDR_LOOPBACK(&v6);
  return false;
}

Result<ImageReference> ParseImageReference(std::string_view text) {
  if (text.empty()) return BadReference(text, "empty");
  if (text.size() > kMaxReferenceBytes) {
    return BadReference(text, fmt::format("longer than {} bytes", kMaxReferenceBytes));
  }
  ImageReference ref;
  std::string_view rest = text;
  if (size_t at = rest.find('@'); at != std::string_view::npos) {
    ref.digest = std::string(rest.substr(at + 1));
    rest = rest.substr(0, at);
    if (!ValidDigest(ref.digest)) {
      return BadReference(text, "the digest after '@' must be sha256:<64 lowercase hex>");
    }
  }
  // The registry: a first component with '.', ':' or "localhost" before a '/'.
  if (size_t slash = rest.find('/'); slash != std::string_view::npos) {
    std::string_view first = rest.substr(0, slash);
    if (first.find_first_of(".:[") != std::string_view::npos || first == "localhost") {
      if (!ValidRegistry(first)) {
        return BadReference(text, fmt::format("'{}' is not a registry host[:port]", first));
      }
      ref.registry = std::string(first);
      rest = rest.substr(slash + 1);
    }
  }
  if (ref.registry.empty() || ref.registry == "index.docker.io" ||
      ref.registry == "registry-1.docker.io") {
    ref.registry = std::string(kDockerHub);
  }
  // The tag: after the last ':' of what follows the registry.
  if (size_t colon = rest.rfind(':'); colon != std::string_view::npos) {
    ref.tag = std::string(rest.substr(colon + 1));
    rest = rest.substr(0, colon);
    if (!ValidTag(ref.tag)) {
      return BadReference(text,
                          fmt::format("'{}' is not a tag ([A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}})",
                                      ref.tag.substr(0, 200)));
    }
  }
  if (rest.empty()) return BadReference(text, "no repository name");
  size_t start = 0;
  while (start <= rest.size()) {
    size_t slash = rest.find('/', start);
    if (slash == std::string_view::npos) slash = rest.size();
    std::string_view component = rest.substr(start, slash - start);
    if (!ValidRepositoryComponent(component)) {
      return BadReference(
          text, fmt::format("'{}' is not a repository name component (lower case letters and "
                            "digits, separated by '.', '_', '__' or '-')",
                            component));
    }
    start = slash + 1;
  }
  ref.repository = std::string(rest);
  if (ref.registry == kDockerHub && ref.repository.find('/') == std::string::npos) {
    ref.repository = "library/" + ref.repository;
  }
  if (ref.repository.size() > 255) return BadReference(text, "repository longer than 255 bytes");
  if (ref.tag.empty() && ref.digest.empty()) ref.tag = "latest";
  return ref;
}

}  // namespace deepbox::oci
