#include "net/http.h"

#include <algorithm>
#include <cctype>

namespace deepbox::net {

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

void Headers::Set(std::string name, std::string value) {
  Remove(name);
  Add(std::move(name), std::move(value));
}

void Headers::Remove(std::string_view name) {
  std::erase_if(entries_, [&](const auto& e) { return EqualsIgnoreCase(e.first, name); });
}

std::optional<std::string> Headers::Get(std::string_view name) const {
  for (const auto& [k, v] : entries_) {
    if (EqualsIgnoreCase(k, name)) return v;
  }
  return std::nullopt;
}

std::optional<std::string> Request::Query(std::string_view name) const {
  for (const auto& [k, v] : query) {
    if (k == name) return v;
  }
  return std::nullopt;
}

Response Response::Json(int status, std::string body) {
  Response r;
  r.status = status;
  r.headers.Set("Content-Type", "application/json");
  r.body = std::move(body);
  return r;
}

Response Response::Text(int status, std::string body) {
  Response r;
  r.status = status;
  r.headers.Set("Content-Type", "text/plain; charset=utf-8");
  r.body = std::move(body);
  return r;
}

}  // namespace deepbox::net
