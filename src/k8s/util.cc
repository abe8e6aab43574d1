#include "k8s/util.h"

#include <arpa/inet.h>
#include <fmt/format.h>

#include <algorithm>

namespace deepbox::k8s {

std::string NameHash(std::string_view name) {
  uint32_t h = 2166136261u;
  for (unsigned char c : name) {
    h ^= c;
    h *= 16777619u;
  }
  return fmt::format("{:08x}", h);
}

namespace {

bool IsAlnum(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; }

// ^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$
bool IsLabelName(std::string_view s) {
  if (s.empty() || !IsAlnum(s.front()) || !IsAlnum(s.back())) return false;
  for (char c : s) {
    if (!IsAlnum(c) && c != '-' && c != '_' && c != '.') return false;
  }
  return true;
}

// ^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$
bool IsDnsSubdomain(std::string_view s) {
  auto ok_end = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (s.empty() || !ok_end(s.front()) || !ok_end(s.back())) return false;
  for (char c : s) {
    if (!ok_end(c) && c != '-' && c != '.') return false;
  }
  return true;
}

}  // namespace

bool IsHeaderToken(std::string_view token) {
  if (token.empty() || token.size() > kMaxHeaderToken) return false;
  for (unsigned char c : token) {
    if (c < 0x21 || c > 0x7e) return false;
  }
  return true;
}

bool IsObjectName(std::string_view name) { return name.size() <= 253 && IsDnsSubdomain(name); }

Status ValidateLabels(const std::map<std::string, std::string>& labels) {
  auto check_name = [&](const std::string& s, std::string_view what) -> Status {
    if (s.size() > 63) {
      return MakeError(ErrorCode::kInvalidArgument,
                       fmt::format("label {} '{}' is longer than 63 characters", what, s));
    }
    if (!IsLabelName(s)) {
      return MakeError(ErrorCode::kInvalidArgument,
                       fmt::format("label {} '{}' must start and end with an alphanumeric "
                                   "character and contain only [-A-Za-z0-9_.]",
                                   what, s));
    }
    return {};
  };
  for (const auto& [key, value] : labels) {
    if (key.empty()) return MakeError(ErrorCode::kInvalidArgument, "label key is empty");
    std::string name = key;
    if (auto slash = key.find('/'); slash != std::string::npos) {
      std::string prefix = key.substr(0, slash);
      name = key.substr(slash + 1);
      if (prefix.empty() || prefix.size() > 253 || !IsDnsSubdomain(prefix)) {
        return MakeError(ErrorCode::kInvalidArgument,
                         fmt::format("label key prefix '{}' must be a DNS subdomain", prefix));
      }
      if (name.empty()) {
        return MakeError(ErrorCode::kInvalidArgument,
                         fmt::format("label key '{}' has an empty name after the prefix", key));
      }
    }
    if (auto s = check_name(name, fmt::format("key '{}'", key)); !s) return s;
    if (!value.empty()) {
      if (auto s = check_name(value, fmt::format("value for key '{}'", key)); !s) return s;
    }
  }
  return {};
}

std::string LabelValueFor(std::string_view text) {
  if (text.size() <= 63 && IsLabelName(text)) return std::string(text);
  std::string clean;
  for (char c : text) {
    bool ok = IsAlnum(c) || c == '-' || c == '_' || c == '.';
    if (clean.empty() && !IsAlnum(c)) continue;  // a value starts alphanumeric
    clean += ok ? c : '_';
  }
  // The hash keeps two texts that clean up alike apart, and ends it alphanumeric.
  clean.resize(std::min<size_t>(clean.size(), 54));
  return clean.empty() ? NameHash(text) : clean + "-" + NameHash(text);
}

std::string SelectPodIp(const std::vector<std::string>& ips) {
  std::string first_v6;
  for (const auto& raw : ips) {
    std::string ip = raw;
    while (!ip.empty() && std::isspace(static_cast<unsigned char>(ip.back()))) ip.pop_back();
    while (!ip.empty() && std::isspace(static_cast<unsigned char>(ip.front()))) ip.erase(0, 1);
    in_addr v4{};
    if (::inet_pton(AF_INET, ip.c_str(), &v4) == 1) {
      char buf[INET_ADDRSTRLEN];
      ::inet_ntop(AF_INET, &v4, buf, sizeof buf);
      return buf;
    }
    in6_addr v6{};
    if (::inet_pton(AF_INET6, ip.c_str(), &v6) == 1) {
      if (IN6_IS_ADDR_V4MAPPED(&v6)) {
        char buf[INET_ADDRSTRLEN];
        ::inet_ntop(AF_INET, &v6.s6_addr[12], buf, sizeof buf);
        return buf;
      }
      if (first_v6.empty()) {
        char buf[INET6_ADDRSTRLEN];
        ::inet_ntop(AF_INET6, &v6, buf, sizeof buf);
        first_v6 = buf;
      }
    }
  }
  return first_v6;
}

}  // namespace deepbox::k8s
