// The protobuf messages of upstream agent-sandbox's process.v1.ProcessService
// that deepbox-sandboxd serves over gRPC (grpc_connection.h), encoded and
// decoded by hand: a few messages do not justify libprotobuf in the daemon.
// Only the wire format is used (varints and length-delimited fields);
// unknown fields of any wire type are skipped, as protobuf requires, and
// every length is checked against what is left, so hostile bytes give
// INVALID_ARGUMENT and never read past the input.
//
// Field numbers (process/v1/process.proto):
//   ProcessConfig   { repeated string command = 1; map<string,string> env_vars = 2;
//                     optional string cwd = 3; }
//   ExecuteRequest  { ProcessConfig config = 1; }
//   ExecuteResponse { int32 exit_code = 1; bytes stdout = 2; bytes stderr = 3; }
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace deepbox::sandboxd::proto {

// Reads protobuf wire format from a byte string it does not own.
class WireReader {
 public:
  enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };
  struct Tag {
    uint32_t field = 0;
    uint32_t wire_type = 0;
  };

  explicit WireReader(std::string_view data) : data_(data) {}
  bool done() const { return pos_ == data_.size(); }
  // The next field's tag; field 0 and wire types 3/4/6/7 (groups, reserved)
  // are malformed.
  Result<Tag> ReadTag();
  // At most 10 bytes; the 10th may only hold the top bit.
  Result<uint64_t> ReadVarint();
  // A length-delimited field's bytes (a view into the input).
  Result<std::string_view> ReadBytes();
  // Skips one field's value of this wire type.
  Status Skip(uint32_t wire_type);

 private:
  std::string_view data_;
  size_t pos_ = 0;
};

// Appends protobuf wire format.
class WireWriter {
 public:
  void Varint(uint32_t field, uint64_t value);
  // int32: negative values are sign-extended to 64 bits (10 bytes), as protobuf does.
  void Int32(uint32_t field, int32_t value);
  void Bytes(uint32_t field, std::string_view value);
  std::string& data() { return out_; }

 private:
  void RawVarint(uint64_t value);
  std::string out_;
};

struct ProcessConfig {
  std::vector<std::string> command;
  // A key given twice keeps its last value (protobuf map semantics).
  std::map<std::string, std::string> env_vars;
  std::optional<std::string> cwd;
};

struct ExecuteRequest {
  ProcessConfig config;
};

struct ExecuteResponse {
  int32_t exit_code = 0;
  std::string stdout_data;
  std::string stderr_data;
};

// INVALID_ARGUMENT (naming the message and field) for malformed input.
Result<ProcessConfig> DecodeProcessConfig(std::string_view data);
Result<ExecuteRequest> DecodeExecuteRequest(std::string_view data);
std::string EncodeProcessConfig(const ProcessConfig& config);
std::string EncodeExecuteRequest(const ExecuteRequest& request);
std::string EncodeExecuteResponse(const ExecuteResponse& response);
Result<ExecuteResponse> DecodeExecuteResponse(std::string_view data);

}  // namespace deepbox::sandboxd::proto
