// Replay recordings (JSONL, `--model replay:FILE`): files users share and
// download. Property: every response a file yields survives the recorder's
// own round trip (what deepbox writes, it reads back identically).
#include "agent/model/replay.h"
#include "common/json.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto file = deepbox::agent::ParseReplay(text, "fuzz.replay.jsonl");
  if (!file) return 0;
  (void)deepbox::ToJson(deepbox::agent::ReplayHeaderToJson(file->header));
  for (const auto& turn : file->turns) {
    const auto json = deepbox::agent::ResponseToJson(turn.response);
    auto back = deepbox::agent::ResponseFromJson(json);
    FUZZ_CHECK(back.has_value(), "a response written by the recorder does not read back");
    FUZZ_CHECK(deepbox::ToJson(deepbox::agent::ResponseToJson(*back)) == deepbox::ToJson(json),
               "a response changes in the recorder's round trip");
  }
  return 0;
}
