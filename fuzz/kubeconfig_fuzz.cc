// Kubeconfig files and the YAML reader under them (src/k8s/yaml_json.h,
// kubeconfig.h). Input: a kubeconfig file. Properties: YAML turns into JSON
// that reads back as the same value (JSON is YAML 1.2), and loading the file
// as a kubeconfig ends in a config or an error. The file sits in a temporary
// directory with a token file and a CA file beside it, so relative
// references resolve to something.
#include <cmath>

#include "common/json.h"
#include "fuzz/fuzz_util.h"
#include "k8s/kubeconfig.h"
#include "k8s/yaml_json.h"

namespace {

using deepbox::fuzz::TempTree;

// JSON has no NaN or infinity (".nan", ".inf", or a float too large for a
// double): such documents cannot round-trip.
bool HasNonFinite(const deepbox::json::value& v) {
  if (v.is_double()) return !std::isfinite(v.as_double());
  if (v.is_array()) {
    for (const auto& e : v.as_array()) {
      if (HasNonFinite(e)) return true;
    }
  }
  if (v.is_object()) {
    for (const auto& kv : v.as_object()) {
      if (HasNonFinite(kv.value())) return true;
    }
  }
  return false;
}

// YAML limits an implicit key to 1024 characters (YAML 1.2, 7.4.2), and
// ToJson writes keys as flow-mapping implicit keys: a longer key (e.g. 200
// control characters, each "\u001b" in JSON) does not read back as YAML,
// by the spec, not by a bug.
bool HasKeyOverYamlLimit(const deepbox::json::value& v) {
  if (v.is_array()) {
    for (const auto& e : v.as_array()) {
      if (HasKeyOverYamlLimit(e)) return true;
    }
  }
  if (v.is_object()) {
    for (const auto& kv : v.as_object()) {
      if (deepbox::ToJson(deepbox::json::value(kv.key())).size() > 1024) return true;
      if (HasKeyOverYamlLimit(kv.value())) return true;
    }
  }
  return false;
}

TempTree& Dir() {
  static TempTree* dir = [] {
    auto* d = new TempTree("kubeconfig");
    deepbox::fuzz::WriteFile(d->Path("token"), "fuzz-token\n");
    deepbox::fuzz::WriteFile(d->Path("ca.crt"), "-----BEGIN CERTIFICATE-----\nMIIB\n");
    return d;
  }();
  return *dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto docs = deepbox::k8s::YamlToJsonDocuments(text, "fuzz");
  if (docs) {
    for (const auto& doc : *docs) {
      if (HasNonFinite(doc) || HasKeyOverYamlLimit(doc)) continue;
      const std::string json = deepbox::ToJson(doc);
      auto back = deepbox::k8s::YamlToJson(json, "fuzz (as JSON)");
      FUZZ_CHECK(back.has_value(), "YAML's JSON does not read back as YAML: " + json);
      FUZZ_CHECK(*back == doc, "YAML's JSON reads back as another value: " + json);
    }
  }
  const std::string path = Dir().Path("config");
  deepbox::fuzz::WriteFile(path, text, 0600);
  deepbox::k8s::KubeconfigOptions options;
  options.kubeconfig = path;
  options.kubeconfig_env = "";
  options.home = Dir().path();
  (void)deepbox::k8s::LoadKubeconfig(options);
  return 0;
}
