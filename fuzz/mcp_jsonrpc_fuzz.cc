// MCP's JSON-RPC layer (src/mcp/jsonrpc.h): one message as a peer sends it.
// Properties: a message that parses, serialized again by deepbox, parses
// back as the same kind with the same id and method (what deepbox writes,
// any peer, deepbox included, reads as meant); failures carry a JSON-RPC
// error code.
#include "fuzz/fuzz_util.h"
#include "mcp/jsonrpc.h"

namespace mcp = deepbox::mcp;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto m = mcp::ParseMessage(text);
  if (!m) {
    FUZZ_CHECK(
        m.error().error.code == mcp::kParseError || m.error().error.code == mcp::kInvalidRequest,
        "a parse failure with another code than -32700/-32600");
    return 0;
  }
  std::string again;
  switch (m->kind) {
    case mcp::MessageKind::kRequest:
      again = mcp::SerializeRequest(m->id, m->method, m->params);
      break;
    case mcp::MessageKind::kNotification:
      again = mcp::SerializeNotification(m->method, m->params);
      break;
    case mcp::MessageKind::kResult:
      again = mcp::SerializeResult(m->id, m->result);
      break;
    case mcp::MessageKind::kError:
      again = mcp::SerializeError(m->id, m->error);
      break;
  }
  FUZZ_CHECK(again.find('\n') == std::string::npos, "a serialized message spans lines");
  auto back = mcp::ParseMessage(again);
  FUZZ_CHECK(back.has_value(), "a message deepbox serialized does not parse: " + again);
  FUZZ_CHECK(back->kind == m->kind && back->id == m->id && back->method == m->method,
             "a message changed in the round trip: " + again);
  return 0;
}
