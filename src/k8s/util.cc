#include "k8s/util.h"

#include <arpa/inet.h>
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <ctime>
#include <random>

namespace deepbox::k8s {

namespace {

bool ParseInt(std::string_view s, int& out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

}  // namespace

Result<SystemTime> ParseRfc3339(std::string_view text) {
  auto bad = [&] {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("'{}' is not an RFC 3339 timestamp", text));
  };
  if (text.size() < 20 || text[4] != '-' || text[7] != '-' ||
      (text[10] != 'T' && text[10] != 't' && text[10] != ' ') || text[13] != ':' ||
      text[16] != ':') {
    return bad();
  }
  std::tm tm{};
  int year, mon, day, hour, min, sec;
  if (!ParseInt(text.substr(0, 4), year) || !ParseInt(text.substr(5, 2), mon) ||
      !ParseInt(text.substr(8, 2), day) || !ParseInt(text.substr(11, 2), hour) ||
      !ParseInt(text.substr(14, 2), min) || !ParseInt(text.substr(17, 2), sec)) {
    return bad();
  }
  if (mon < 1 || mon > 12 || day < 1 || day > 31 || hour > 23 || min > 59 || sec > 60) {
    return bad();
  }
  size_t i = 19;
  std::chrono::nanoseconds frac{0};
  if (i < text.size() && text[i] == '.') {
    ++i;
    int64_t value = 0;
    int digits = 0;
    while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
      if (digits < 9) {
        value = value * 10 + (text[i] - '0');
        ++digits;
      }
      ++i;
    }
    if (digits == 0) return bad();
    while (digits++ < 9) value *= 10;
    frac = std::chrono::nanoseconds(value);
  }
  if (i >= text.size()) return bad();
  int offset_seconds = 0;
  if (text[i] == 'Z' || text[i] == 'z') {
    ++i;
  } else if (text[i] == '+' || text[i] == '-') {
    int sign = text[i] == '-' ? -1 : 1;
    int oh, om;
    if (i + 6 != text.size() || text[i + 3] != ':' || !ParseInt(text.substr(i + 1, 2), oh) ||
        !ParseInt(text.substr(i + 4, 2), om) || oh > 23 || om > 59) {
      return bad();
    }
    offset_seconds = sign * (oh * 3600 + om * 60);
    i += 6;
  } else {
    return bad();
  }
  if (i != text.size()) return bad();
  tm.tm_year = year - 1900;
  tm.tm_mon = mon - 1;
  tm.tm_mday = day;
  tm.tm_hour = hour;
  tm.tm_min = min;
  tm.tm_sec = sec;
  time_t t = ::timegm(&tm) - offset_seconds;
  // system_clock counts nanoseconds in 64 bits (years 1678..2261): a date
  // beyond that (a server may send 9999-12-31) would overflow the conversion.
  using Duration = std::chrono::system_clock::duration;
  constexpr int64_t kLimit =
      std::chrono::duration_cast<std::chrono::seconds>(Duration::max()).count() - 1;
  if (t > kLimit || t < -kLimit) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("'{}' is outside the representable range of times", text));
  }
  return std::chrono::system_clock::from_time_t(t) + std::chrono::duration_cast<Duration>(frac);
}

std::string FormatRfc3339(SystemTime t) {
  time_t tt =
      std::chrono::system_clock::to_time_t(std::chrono::time_point_cast<std::chrono::seconds>(t));
  std::tm tm{};
  ::gmtime_r(&tt, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string FormatIsoMicros(SystemTime t) {
  auto secs = std::chrono::floor<std::chrono::seconds>(t);
  auto micros = std::chrono::duration_cast<std::chrono::microseconds>(t - secs).count();
  time_t tt = std::chrono::system_clock::to_time_t(secs);
  std::tm tm{};
  ::gmtime_r(&tt, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  return fmt::format("{}.{:06d}+00:00", buf, micros);
}

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

namespace {

const json::value* FindFrom(const json::value* cur, const std::string_view* begin,
                            const std::string_view* end) {
  for (auto it = begin; it != end; ++it) {
    const auto* obj = cur->if_object();
    if (obj == nullptr) return nullptr;
    auto found = obj->find(*it);
    if (found == obj->end()) return nullptr;
    cur = &found->value();
  }
  return cur;
}

std::string AsString(const json::value* v) {
  if (v == nullptr || !v->is_string()) return {};
  return std::string(v->get_string());
}

}  // namespace

const json::value* Find(const json::object& o, std::initializer_list<std::string_view> path) {
  if (path.size() == 0) return nullptr;
  auto first = o.find(*path.begin());
  if (first == o.end()) return nullptr;
  return FindFrom(&first->value(), path.begin() + 1, path.end());
}

std::string FindString(const json::object& o, std::initializer_list<std::string_view> path) {
  return AsString(Find(o, path));
}

const json::value* Find(const json::value& v, std::initializer_list<std::string_view> path) {
  const json::value* cur = &v;
  for (auto key : path) {
    const auto* obj = cur->if_object();
    if (obj == nullptr) return nullptr;
    auto it = obj->find(key);
    if (it == obj->end()) return nullptr;
    cur = &it->value();
  }
  return cur;
}

std::string FindString(const json::value& v, std::initializer_list<std::string_view> path) {
  const json::value* f = Find(v, path);
  if (f == nullptr || !f->is_string()) return {};
  return std::string(f->get_string());
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
