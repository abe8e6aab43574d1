// The process.v1 protobuf decoder of the daemon's gRPC service
// (src/sandboxd/server/process_proto.h) on any bytes. Properties: an
// ExecuteRequest or ExecuteResponse that decodes encodes to bytes that decode
// to the same message, and encoding is then a fixed point.
#include <string>

#include "fuzz/fuzz_util.h"
#include "sandboxd/server/process_proto.h"

namespace proto = deepbox::sandboxd::proto;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  if (auto request = proto::DecodeExecuteRequest(bytes)) {
    const std::string encoded = proto::EncodeExecuteRequest(*request);
    auto again = proto::DecodeExecuteRequest(encoded);
    FUZZ_CHECK(again.has_value(), "an encoded ExecuteRequest does not decode");
    FUZZ_CHECK(again->config.command == request->config.command, "command changed");
    FUZZ_CHECK(again->config.env_vars == request->config.env_vars, "env_vars changed");
    FUZZ_CHECK(again->config.cwd == request->config.cwd, "cwd changed");
    FUZZ_CHECK(proto::EncodeExecuteRequest(*again) == encoded, "encoding is not a fixed point");
  }
  if (auto response = proto::DecodeExecuteResponse(bytes)) {
    const std::string encoded = proto::EncodeExecuteResponse(*response);
    auto again = proto::DecodeExecuteResponse(encoded);
    FUZZ_CHECK(again.has_value(), "an encoded ExecuteResponse does not decode");
    FUZZ_CHECK(again->exit_code == response->exit_code &&
                   again->stdout_data == response->stdout_data &&
                   again->stderr_data == response->stderr_data,
               "ExecuteResponse changed");
  }
  return 0;
}
