// A minimal multipart/form-data parser (RFC 7578) for upload endpoints.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace deepbox::sandboxd {

struct FormPart {
  std::string name;      // form field name
  std::string filename;  // from Content-Disposition, if any
  std::string content_type;
  std::string_view data;  // points into the request body
};

// Parses `body` given the request's Content-Type header value.
Result<std::vector<FormPart>> ParseMultipart(std::string_view content_type, std::string_view body);

}  // namespace deepbox::sandboxd
