#include "sandboxd/server/process_proto.h"

#include <fmt/format.h>

namespace deepbox::sandboxd::proto {

namespace {

Error Malformed(std::string_view what) {
  return Error(ErrorCode::kInvalidArgument, fmt::format("malformed protobuf message: {}", what));
}

// Adds `message: ` before a nested decoder's error.
Error Within(std::string_view message, const Error& error) {
  return Error(error.code, fmt::format("{} ({})", error.message, message));
}

}  // namespace

Result<uint64_t> WireReader::ReadVarint() {
  uint64_t value = 0;
  for (int i = 0; i < 10; ++i) {
    if (pos_ >= data_.size()) return tl::unexpected(Malformed("a varint runs past the end"));
    const auto byte = static_cast<uint8_t>(data_[pos_++]);
    // The 10th byte carries bit 63 only.
    if (i == 9 && (byte & 0xfe) != 0) return tl::unexpected(Malformed("a varint exceeds 64 bits"));
    value |= static_cast<uint64_t>(byte & 0x7f) << (7 * i);
    if ((byte & 0x80) == 0) return value;
  }
  return tl::unexpected(Malformed("a varint exceeds 64 bits"));
}

Result<WireReader::Tag> WireReader::ReadTag() {
  auto raw = ReadVarint();
  if (!raw) return tl::unexpected(raw.error());
  if (*raw > 0xffffffffu) return tl::unexpected(Malformed("a tag exceeds 32 bits"));
  Tag tag{static_cast<uint32_t>(*raw >> 3), static_cast<uint32_t>(*raw & 7)};
  if (tag.field == 0) return tl::unexpected(Malformed("field number 0"));
  if (tag.wire_type != kVarint && tag.wire_type != kFixed64 && tag.wire_type != kLengthDelimited &&
      tag.wire_type != kFixed32) {
    return tl::unexpected(Malformed(fmt::format(
        "field {} has wire type {} (groups are not supported)", tag.field, tag.wire_type)));
  }
  return tag;
}

Result<std::string_view> WireReader::ReadBytes() {
  auto length = ReadVarint();
  if (!length) return tl::unexpected(length.error());
  if (*length > data_.size() - pos_) {
    return tl::unexpected(Malformed(
        fmt::format("a field of {} bytes where only {} are left", *length, data_.size() - pos_)));
  }
  std::string_view bytes = data_.substr(pos_, static_cast<size_t>(*length));
  pos_ += static_cast<size_t>(*length);
  return bytes;
}

Status WireReader::Skip(uint32_t wire_type) {
  auto fixed = [this](size_t n) -> Status {
    if (data_.size() - pos_ < n)
      return tl::unexpected(Malformed("a fixed field runs past the end"));
    pos_ += n;
    return {};
  };
  switch (wire_type) {
    case kVarint:
      if (auto v = ReadVarint(); !v) return tl::unexpected(v.error());
      return {};
    case kFixed64:
      return fixed(8);
    case kFixed32:
      return fixed(4);
    case kLengthDelimited:
      if (auto b = ReadBytes(); !b) return tl::unexpected(b.error());
      return {};
    default:
      return tl::unexpected(Malformed(fmt::format("wire type {}", wire_type)));
  }
}

void WireWriter::RawVarint(uint64_t value) {
  while (value >= 0x80) {
    out_.push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out_.push_back(static_cast<char>(value));
}

void WireWriter::Varint(uint32_t field, uint64_t value) {
  RawVarint((uint64_t{field} << 3) | WireReader::kVarint);
  RawVarint(value);
}

void WireWriter::Int32(uint32_t field, int32_t value) {
  Varint(field, static_cast<uint64_t>(static_cast<int64_t>(value)));
}

void WireWriter::Bytes(uint32_t field, std::string_view value) {
  RawVarint((uint64_t{field} << 3) | WireReader::kLengthDelimited);
  RawVarint(value.size());
  out_.append(value);
}

namespace {

// Decodes a message into `out`: for each field, `on_field(tag, reader)`
// returns true when it consumed the value, false to skip it as unknown.
template <typename OnField>
Status DecodeFields(std::string_view data, OnField&& on_field) {
  WireReader reader(data);
  while (!reader.done()) {
    auto tag = reader.ReadTag();
    if (!tag) return tl::unexpected(tag.error());
    auto consumed = on_field(*tag, reader);
    if (!consumed) return tl::unexpected(consumed.error());
    if (!*consumed) {
      if (auto s = reader.Skip(tag->wire_type); !s) return s;
    }
  }
  return {};
}

// A string or bytes field; a known field number with another wire type is
// skipped like an unknown field, as protobuf parsers do.
Result<std::optional<std::string_view>> BytesField(const WireReader::Tag& tag, WireReader& reader) {
  if (tag.wire_type != WireReader::kLengthDelimited) return std::nullopt;
  auto bytes = reader.ReadBytes();
  if (!bytes) return tl::unexpected(bytes.error());
  return *bytes;
}

Status DecodeEnvEntry(std::string_view data, ProcessConfig& config) {
  std::string key, value;
  auto s = DecodeFields(data, [&](const WireReader::Tag& tag, WireReader& r) -> Result<bool> {
    if (tag.field != 1 && tag.field != 2) return false;
    auto bytes = BytesField(tag, r);
    if (!bytes) return tl::unexpected(bytes.error());
    if (!*bytes) return false;
    (tag.field == 1 ? key : value).assign(**bytes);
    return true;
  });
  if (!s) return tl::unexpected(Within("ProcessConfig.env_vars", s.error()));
  config.env_vars[std::move(key)] = std::move(value);
  return {};
}

Status MergeProcessConfig(std::string_view data, ProcessConfig& config) {
  auto s = DecodeFields(data, [&](const WireReader::Tag& tag, WireReader& r) -> Result<bool> {
    if (tag.field < 1 || tag.field > 3) return false;
    auto bytes = BytesField(tag, r);
    if (!bytes) return tl::unexpected(bytes.error());
    if (!*bytes) return false;
    switch (tag.field) {
      case 1:
        config.command.emplace_back(**bytes);
        break;
      case 2:
        if (auto e = DecodeEnvEntry(**bytes, config); !e) return tl::unexpected(e.error());
        break;
      default:
        config.cwd = std::string(**bytes);
        break;
    }
    return true;
  });
  if (!s) return tl::unexpected(Within("ProcessConfig", s.error()));
  return {};
}

}  // namespace

Result<ProcessConfig> DecodeProcessConfig(std::string_view data) {
  ProcessConfig config;
  if (auto s = MergeProcessConfig(data, config); !s) return tl::unexpected(s.error());
  return config;
}

Result<ExecuteRequest> DecodeExecuteRequest(std::string_view data) {
  ExecuteRequest request;
  // A message field given twice is merged, as protobuf does.
  auto s = DecodeFields(data, [&](const WireReader::Tag& tag, WireReader& r) -> Result<bool> {
    if (tag.field != 1) return false;
    auto bytes = BytesField(tag, r);
    if (!bytes) return tl::unexpected(bytes.error());
    if (!*bytes) return false;
    if (auto m = MergeProcessConfig(**bytes, request.config); !m) return tl::unexpected(m.error());
    return true;
  });
  if (!s) return tl::unexpected(Within("ExecuteRequest", s.error()));
  return request;
}

std::string EncodeProcessConfig(const ProcessConfig& config) {
  WireWriter w;
  for (const auto& arg : config.command) w.Bytes(1, arg);
  for (const auto& [key, value] : config.env_vars) {
    WireWriter entry;
    entry.Bytes(1, key);
    entry.Bytes(2, value);
    w.Bytes(2, entry.data());
  }
  if (config.cwd) w.Bytes(3, *config.cwd);
  return std::move(w.data());
}

std::string EncodeExecuteRequest(const ExecuteRequest& request) {
  WireWriter w;
  w.Bytes(1, EncodeProcessConfig(request.config));
  return std::move(w.data());
}

std::string EncodeExecuteResponse(const ExecuteResponse& response) {
  // Proto3: fields holding their default value are not written.
  WireWriter w;
  if (response.exit_code != 0) w.Int32(1, response.exit_code);
  if (!response.stdout_data.empty()) w.Bytes(2, response.stdout_data);
  if (!response.stderr_data.empty()) w.Bytes(3, response.stderr_data);
  return std::move(w.data());
}

Result<ExecuteResponse> DecodeExecuteResponse(std::string_view data) {
  ExecuteResponse response;
  auto s = DecodeFields(data, [&](const WireReader::Tag& tag, WireReader& r) -> Result<bool> {
    if (tag.field == 1 && tag.wire_type == WireReader::kVarint) {
      auto v = r.ReadVarint();
      if (!v) return tl::unexpected(v.error());
      response.exit_code = static_cast<int32_t>(static_cast<uint32_t>(*v));  // int32 truncation
      return true;
    }
    if (tag.field != 2 && tag.field != 3) return false;
    auto bytes = BytesField(tag, r);
    if (!bytes) return tl::unexpected(bytes.error());
    if (!*bytes) return false;
    (tag.field == 2 ? response.stdout_data : response.stderr_data).assign(**bytes);
    return true;
  });
  if (!s) return tl::unexpected(Within("ExecuteResponse", s.error()));
  return response;
}

}  // namespace deepbox::sandboxd::proto
