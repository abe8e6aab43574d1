// Every manifest under deploy/k8s/ is validated against the upstream
// agent-sandbox CRD structural schemas recorded in tests/k8s/crds/ (field names, types,
// required fields, enums), plus the hardening the README promises.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "k8s/operating_mode.h"
#include "k8s/schema.h"
#include "k8s/util.h"
#include "k8s/yaml_json.h"
#include "local/sandboxd_bundle.h"
#include "oci/default_image.h"

namespace deepbox::k8s {
namespace {

namespace fs = std::filesystem;

const fs::path kSource = DEEPBOX_SOURCE_DIR;

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const CrdSchemas& Schemas() {
  static const CrdSchemas* schemas = [] {
    auto* s = new CrdSchemas();
    for (const auto& e : fs::directory_iterator(kSource / "tests/k8s/crds")) {
      if (e.path().extension() != ".yaml") continue;
      auto r = s->AddCrdYaml(ReadFile(e.path()), e.path().filename().string());
      EXPECT_TRUE(r) << r.error().ToString();
    }
    return s;
  }();
  return *schemas;
}

std::vector<fs::path> Manifests() {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(kSource / "deploy/k8s")) {
    if (e.path().extension() == ".yaml" || e.path().extension() == ".yml") out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

json::object Load(const std::string& name) {
  auto v = YamlToJson(ReadFile(kSource / "deploy/k8s" / name), name);
  EXPECT_TRUE(v) << v.error().ToString();
  return v ? v->as_object() : json::object();
}

TEST(ManifestTest, AllFourCrdsAreKnown) {
  for (const auto& [api, kind] : std::vector<std::pair<std::string, std::string>>{
           {"agents.x-k8s.io/v1beta1", "Sandbox"},
           {"extensions.agents.x-k8s.io/v1beta1", "SandboxTemplate"},
           {"extensions.agents.x-k8s.io/v1beta1", "SandboxWarmPool"},
           {"extensions.agents.x-k8s.io/v1beta1", "SandboxClaim"}}) {
    EXPECT_TRUE(Schemas().Knows(api, kind)) << api << " " << kind;
  }
  // agent-sandbox v1.0.0 removed v1alpha1 (and its conversion webhook).
  for (const auto& [api, kind] : std::vector<std::pair<std::string, std::string>>{
           {"agents.x-k8s.io/v1alpha1", "Sandbox"},
           {"extensions.agents.x-k8s.io/v1alpha1", "SandboxClaim"}}) {
    EXPECT_FALSE(Schemas().Knows(api, kind)) << api << " " << kind;
  }
}

// v1.0.12's per-pool readiness grace period: an integer of at least one second.
TEST(ManifestTest, TheWarmPoolHasTheReadinessGracePeriodOfV1_0_12) {
  const json::value* grace =
      Schemas().FieldSchema("extensions.agents.x-k8s.io/v1beta1", "SandboxWarmPool",
                            {"spec", "readinessGracePeriodSeconds"});
  ASSERT_NE(grace, nullptr);
  EXPECT_EQ(FindString(*grace, {"type"}), "integer");
  auto problems = ValidateManifest(Schemas(),
                                   "apiVersion: extensions.agents.x-k8s.io/v1beta1\n"
                                   "kind: SandboxWarmPool\n"
                                   "metadata: {name: p}\n"
                                   "spec:\n"
                                   "  sandboxTemplateRef: {name: t}\n"
                                   "  readinessGracePeriodSeconds: \"600\"\n",
                                   "pool.yaml");
  ASSERT_TRUE(problems);
  ASSERT_EQ(problems->size(), 1u);
  EXPECT_NE(problems->front().find("spec.readinessGracePeriodSeconds: must be an integer"),
            std::string::npos)
      << problems->front();
}

TEST(ManifestTest, EveryDeployManifestMatchesTheUpstreamSchemas) {
  auto manifests = Manifests();
  ASSERT_GE(manifests.size(), 2u);
  for (const auto& path : manifests) {
    auto problems = ValidateManifest(Schemas(), ReadFile(path), path.filename().string());
    ASSERT_TRUE(problems) << problems.error().ToString();
    EXPECT_TRUE(problems->empty()) << fmt::format("{}", fmt::join(*problems, "\n"));
    auto docs = YamlToJsonDocuments(ReadFile(path), path.string());
    ASSERT_TRUE(docs);
    for (const auto& d : *docs) {
      if (d.is_null()) continue;
      std::string api = FindString(d, {"apiVersion"});
      EXPECT_FALSE(Schemas().Deprecated(api, FindString(d, {"kind"})))
          << path << " uses the deprecated " << api;
    }
  }
}

TEST(ManifestTest, ATypoFailsValidationNamingThePath) {
  auto problems = ValidateManifest(
      Schemas(), ReadFile(kSource / "tests/k8s/testdata/typo-template.yaml"), "typo-template.yaml");
  ASSERT_TRUE(problems);
  std::string all = fmt::format("{}", fmt::join(*problems, "\n"));
  const std::string prefix = "typo-template.yaml: SandboxTemplate typo-template: ";
  for (const std::string expected : {
           "metadata.lables: unknown field",
           "spec.podTemplate.spec.automountServiceAccountToken: must be a boolean, not string",
           "spec.podTemplate.spec.containers[0].securityContext.allowPrivilegEscalation: unknown "
           "field",
           "spec.podTemplate.spec.containers[0].ports[0].containerPort: must be an integer, not "
           "string",
           "spec.podTemplate.spec.containers[0].volumeMounts[0].name: missing required field",
       }) {
    EXPECT_NE(all.find(prefix + expected), std::string::npos) << "missing: " << expected << "\n"
                                                              << all;
  }
  EXPECT_EQ(problems->size(), 5u) << all;

  problems = ValidateManifest(
      Schemas(), ReadFile(kSource / "tests/k8s/testdata/typo-warmpool.yaml"), "typo-warmpool.yaml");
  ASSERT_TRUE(problems);
  all = fmt::format("{}", fmt::join(*problems, "\n"));
  EXPECT_NE(all.find("spec.replica: unknown field"), std::string::npos) << all;
  EXPECT_NE(all.find("spec.sandboxTemplateRef: missing required field"), std::string::npos) << all;
  EXPECT_NE(
      all.find(R"(spec.updateStrategy.type: "Sometimes" is not one of "Recreate", "OnReplenish")"),
      std::string::npos)
      << all;
}

TEST(ManifestTest, WarmPoolReferencesTheTemplate) {
  auto pool = Load("warmpool.yaml");
  auto tmpl = Load("sandbox-template.yaml");
  EXPECT_EQ(FindString(pool, {"metadata", "name"}), "deepagents-warmpool");
  const json::value* replicas = Find(pool, {"spec", "replicas"});
  ASSERT_NE(replicas, nullptr);
  EXPECT_EQ(*replicas, json::value(1));
  EXPECT_EQ(FindString(pool, {"spec", "sandboxTemplateRef", "name"}),
            FindString(tmpl, {"metadata", "name"}));
  EXPECT_EQ(FindString(pool, {"metadata", "namespace"}),
            FindString(tmpl, {"metadata", "namespace"}));
}

TEST(ManifestTest, TheTemplateIsHardenedAsDocumented) {
  auto tmpl = Load("sandbox-template.yaml");
  EXPECT_EQ(Find(tmpl, {"spec", "networkPolicy"}), nullptr)
      << "no networkPolicy: the controller's secure default must apply";
  const json::value* pod = Find(tmpl, {"spec", "podTemplate", "spec"});
  ASSERT_NE(pod, nullptr);
  EXPECT_EQ(*Find(*pod, {"automountServiceAccountToken"}), json::value(false));
  EXPECT_EQ(*Find(*pod, {"securityContext", "runAsNonRoot"}), json::value(true));
  EXPECT_EQ(*Find(*pod, {"securityContext", "runAsUser"}), json::value(1000));
  EXPECT_EQ(*Find(*pod, {"securityContext", "runAsGroup"}), json::value(1000));
  EXPECT_EQ(FindString(*pod, {"securityContext", "seccompProfile", "type"}), "RuntimeDefault");

  const auto& inits = Find(*pod, {"initContainers"})->as_array();
  const auto& containers = Find(*pod, {"containers"})->as_array();
  ASSERT_EQ(inits.size(), 1u);
  ASSERT_EQ(containers.size(), 1u);
  for (const auto* c : {&inits[0], &containers[0]}) {
    EXPECT_EQ(*Find(*c, {"securityContext", "allowPrivilegeEscalation"}), json::value(false));
    EXPECT_EQ(ToJson(*Find(*c, {"securityContext", "capabilities", "drop"})), R"(["ALL"])");
    EXPECT_EQ(*Find(*c, {"securityContext", "runAsNonRoot"}), json::value(true));
    EXPECT_NE(Find(*c, {"resources", "requests"}), nullptr);
    EXPECT_NE(Find(*c, {"resources", "limits"}), nullptr);
  }
  // The init container fills the emptyDir the main container mounts read-only.
  const json::value* init_mounts = Find(inits[0], {"volumeMounts"});
  ASSERT_NE(init_mounts, nullptr);
  std::string volume = FindString(init_mounts->as_array().at(0), {"name"});
  ASSERT_FALSE(volume.empty());
  bool read_only = false;
  for (const auto& m : Find(containers[0], {"volumeMounts"})->as_array()) {
    if (FindString(m, {"name"}) == volume) read_only = *Find(m, {"readOnly"}) == json::value(true);
  }
  EXPECT_TRUE(read_only);
  bool empty_dir = false;
  for (const auto& v : Find(*pod, {"volumes"})->as_array()) {
    if (FindString(v, {"name"}) == volume) empty_dir = Find(v, {"emptyDir"}) != nullptr;
  }
  EXPECT_TRUE(empty_dir);
  // The daemon: flags, port 8888, readiness on the upstream-compatible health.
  std::string cmd = ToJson(*Find(containers[0], {"command"}));
  EXPECT_NE(cmd.find(R"("--root-dir=/workspace","--listen","0.0.0.0:8888")"), std::string::npos)
      << cmd;
  EXPECT_EQ(FindString(containers[0], {"readinessProbe", "httpGet", "path"}), "/v1/health");
  EXPECT_EQ(*Find(containers[0], {"readinessProbe", "httpGet", "port"}), json::value(8888));
  // Said in a comment, as the issue asks.
  EXPECT_NE(ReadFile(kSource / "deploy/k8s/sandbox-template.yaml").find("secure default"),
            std::string::npos);
}

// Issue 21 M6: the daemon takes only its claim's token, whose verifier
// reaches it from the claim's annotation through a read-only downward API
// mount; the probes stay on a health path (served without a token).
TEST(ManifestTest, TheDaemonTakesOnlyItsClaimsToken) {
  auto tmpl = Load("sandbox-template.yaml");
  const json::value* pod = Find(tmpl, {"spec", "podTemplate", "spec"});
  ASSERT_NE(pod, nullptr);
  const auto& c = Find(*pod, {"containers"})->as_array().at(0);
  std::string file;
  for (const auto& a : Find(c, {"command"})->as_array()) {
    std::string_view arg = a.as_string();
    if (arg.starts_with("--token-sha256-file=")) file = arg.substr(20);
  }
  ASSERT_FALSE(file.empty()) << "the daemon must be started with --token-sha256-file";
  std::string dir = file.substr(0, file.rfind('/'));
  std::string item = file.substr(file.rfind('/') + 1);
  std::string volume;
  for (const auto& m : Find(c, {"volumeMounts"})->as_array()) {
    if (FindString(m, {"mountPath"}) == dir) {
      volume = FindString(m, {"name"});
      EXPECT_EQ(*Find(m, {"readOnly"}), json::value(true));
    }
  }
  ASSERT_FALSE(volume.empty()) << "nothing is mounted at " << dir;
  std::string field;
  for (const auto& v : Find(*pod, {"volumes"})->as_array()) {
    if (FindString(v, {"name"}) != volume) continue;
    for (const auto& i : Find(v, {"downwardAPI", "items"})->as_array()) {
      if (FindString(i, {"path"}) == item) field = FindString(i, {"fieldRef", "fieldPath"});
    }
  }
  EXPECT_EQ(field, "metadata.annotations['deepbox.dev/sandboxd-token-sha256']");
  for (const char* probe : {"readinessProbe", "livenessProbe"}) {
    EXPECT_EQ(FindString(c, {probe, "httpGet", "path"}), "/v1/health") << probe;
  }
}

// What Suspend/Resume write, as the recorded upstream CRD defines it:
// spec.operatingMode is an enum of exactly the provider's two constants,
// Running by default; a template can carry volumeClaimTemplates.
TEST(ManifestTest, TheSuspendApiIsTheUpstreamCrds) {
  const json::value* mode =
      Schemas().FieldSchema("agents.x-k8s.io/v1beta1", "Sandbox", {"spec", "operatingMode"});
  ASSERT_NE(mode, nullptr);
  json::array expected{json::value(kOperatingModeRunning), json::value(kOperatingModeSuspended)};
  ASSERT_NE(Find(*mode, {"enum"}), nullptr);
  EXPECT_EQ(*Find(*mode, {"enum"}), json::value(expected));
  EXPECT_EQ(FindString(*mode, {"default"}), kOperatingModeRunning);
  EXPECT_EQ(FindString(*mode, {"type"}), "string");
  EXPECT_NE(
      Schemas().FieldSchema("agents.x-k8s.io/v1beta1", "Sandbox", {"spec", "volumeClaimTemplates"}),
      nullptr);
  EXPECT_NE(Schemas().FieldSchema("extensions.agents.x-k8s.io/v1beta1", "SandboxTemplate",
                                  {"spec", "volumeClaimTemplates"}),
            nullptr);
  auto problems = ValidateManifest(Schemas(), R"(apiVersion: agents.x-k8s.io/v1beta1
kind: Sandbox
metadata: {name: s}
spec:
  operatingMode: Paused
  podTemplate: {spec: {containers: [{name: c}]}}
)",
                                   "sb.yaml");
  ASSERT_TRUE(problems);
  ASSERT_EQ(problems->size(), 1u);
  EXPECT_EQ(
      (*problems)[0],
      R"(sb.yaml: Sandbox s: spec.operatingMode: "Paused" is not one of "Running", "Suspended")");
}

// The volumeClaimTemplates variant is the default template with only
// /workspace moved onto a PersistentVolumeClaim: what the provider's suspend
// refusal tells the two apart by.
TEST(ManifestTest, ThePvcVariantKeepsOnlyTheWorkspaceOnAClaim) {
  auto tmpl = Load("sandbox-template.yaml");
  auto pvc = Load("sandbox-template-pvc.yaml");
  auto plain = DescribeWorkspace(tmpl);
  EXPECT_FALSE(plain.survives_suspend);
  EXPECT_EQ(plain.description, "an emptyDir");
  auto kept = DescribeWorkspace(pvc);
  EXPECT_TRUE(kept.survives_suspend) << kept.description;
  EXPECT_EQ(kept.volume, "workspace");
  const json::value* vcts = Find(pvc, {"spec", "volumeClaimTemplates"});
  ASSERT_TRUE(vcts != nullptr && vcts->is_array());
  ASSERT_EQ(vcts->as_array().size(), 1u);
  EXPECT_EQ(FindString(vcts->as_array()[0], {"metadata", "name"}), "workspace");
  EXPECT_EQ(FindString(vcts->as_array()[0], {"spec", "resources", "requests", "storage"}), "1Gi");
  // Everything else as in the default (same name: warmpool.yaml uses either).
  auto strip = [](json::object o) {
    auto& spec = o["spec"].as_object();
    spec.erase("volumeClaimTemplates");
    auto& volumes = spec["podTemplate"].as_object()["spec"].as_object()["volumes"].as_array();
    json::array rest;
    for (const auto& v : volumes) {
      if (FindString(v, {"name"}) != "workspace") rest.push_back(v);
    }
    volumes = std::move(rest);
    return o;
  };
  EXPECT_EQ(ToJson(strip(pvc)), ToJson(strip(tmpl)));
}

// Issue 26: the secrets sidecar variant. The value reaches only the sidecar
// (the sandbox container has no secretKeyRef), which runs under another uid
// as a native sidecar; the sandbox container points its proxy and trust at
// it and exports the placeholders; otherwise the default template.
TEST(ManifestTest, TheSecretsVariantKeepsTheValueInTheSidecar) {
  auto tmpl = Load("sandbox-template.yaml");
  auto sec = Load("sandbox-template-secrets.yaml");
  const json::value* spec = Find(sec, {"spec", "podTemplate", "spec"});
  ASSERT_NE(spec, nullptr);
  const json::value* inits = Find(*spec, {"initContainers"});
  ASSERT_TRUE(inits != nullptr && inits->is_array());
  const json::value* proxy = nullptr;
  for (const auto& c : inits->as_array()) {
    if (FindString(c, {"name"}) == "egress-proxy") proxy = &c;
  }
  ASSERT_NE(proxy, nullptr);
  EXPECT_EQ(FindString(*proxy, {"restartPolicy"}), "Always");  // a native sidecar
  std::string command = ToJson(*Find(*proxy, {"command"}));
  EXPECT_NE(command.find("egress-proxy"), std::string::npos);
  EXPECT_NE(command.find("--listen=127.0.0.1:3128"), std::string::npos);
  EXPECT_NE(command.find("--share-dir=/run/deepbox-egress"), std::string::npos);
  EXPECT_NE(command.find("--secret=GH_TOKEN=env:GH_TOKEN@"), std::string::npos);
  std::string proxy_env = ToJson(*Find(*proxy, {"env"}));
  EXPECT_NE(proxy_env.find("secretKeyRef"), std::string::npos);
  const json::value* uid = Find(*proxy, {"securityContext", "runAsUser"});
  ASSERT_NE(uid, nullptr);
  EXPECT_NE(uid->as_int64(), 1000);  // not the sandbox's uid
  const json::value* containers = Find(*spec, {"containers"});
  ASSERT_TRUE(containers != nullptr && containers->is_array());
  ASSERT_EQ(containers->as_array().size(), 1u);
  const json::value& sandbox = containers->as_array()[0];
  std::string sandbox_json = ToJson(sandbox);
  EXPECT_EQ(sandbox_json.find("secretKeyRef"), std::string::npos);
  EXPECT_NE(sandbox_json.find("--env-file=/run/deepbox-egress/secrets.env"), std::string::npos);
  for (const char* var : {"HTTPS_PROXY", "SSL_CERT_FILE", "CURL_CA_BUNDLE", "REQUESTS_CA_BUNDLE",
                          "GIT_SSL_CAINFO", "NODE_EXTRA_CA_CERTS"}) {
    EXPECT_NE(sandbox_json.find(std::string("\"") + var + "\""), std::string::npos) << var;
  }
  EXPECT_EQ(FindString(sec, {"metadata", "name"}), FindString(tmpl, {"metadata", "name"}));
}

}  // namespace
}  // namespace deepbox::k8s

namespace deepbox::k8s {
namespace {

// Issue 24 item 4: one default image in one place (oci/default_image.h), the
// template's; and a local sandbox on an image finds its daemon where the
// template mounts it (local/sandboxd_bundle.h).
TEST(ManifestTest, TheTemplateRunsTheDefaultImageAndTheDaemonWhereLocalSandboxesDo) {
  auto tmpl = Load("sandbox-template.yaml");
  const json::value* containers = Find(tmpl, {"spec", "podTemplate", "spec", "containers"});
  ASSERT_NE(containers, nullptr);
  const json::value& sandbox = containers->as_array().at(0);
  EXPECT_EQ(FindString(sandbox, {"image"}), oci::kDefaultSandboxImage);
  const json::value* command = Find(sandbox, {"command"});
  ASSERT_NE(command, nullptr);
  EXPECT_EQ(command->as_array().at(0).as_string(), local::kBundledSandboxdPath);
  bool mounted = false;
  for (const auto& m : Find(sandbox, {"volumeMounts"})->as_array()) {
    if (FindString(m, {"mountPath"}) == local::kSandboxdBundleMount) mounted = true;
  }
  EXPECT_TRUE(mounted);
  // The docs show the same --image in both worlds.
  for (const char* doc : {"README.md", "deploy/k8s/README.md"}) {
    EXPECT_NE(ReadFile(kSource / doc).find(std::string("--image ") + oci::kDefaultSandboxImage),
              std::string::npos)
        << doc;
  }
}

}  // namespace
}  // namespace deepbox::k8s
