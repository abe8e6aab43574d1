#include "k8s/schema.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "k8s/operating_mode.h"
#include "k8s/util.h"

namespace deepbox::k8s {
namespace {

constexpr const char* kCrd = R"(apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  names: {kind: Widget, plural: widgets}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        required: [spec]
        properties:
          apiVersion: {type: string}
          kind: {type: string}
          metadata: {type: object}
          spec:
            type: object
            required: [size]
            properties:
              size: {type: integer, format: int32, minimum: 1}
              mode: {type: string, enum: [Fast, Slow]}
              quantity: {x-kubernetes-int-or-string: true, anyOf: [{type: integer}, {type: string}]}
              tags:
                type: object
                additionalProperties: {type: string}
              items:
                type: array
                items:
                  type: object
                  required: [name]
                  properties:
                    name: {type: string, maxLength: 5}
                    on: {type: boolean}
  - name: v0
    served: false
    schema:
      openAPIV3Schema: {type: object}
)";

CrdSchemas Load() {
  CrdSchemas s;
  auto r = s.AddCrdYaml(kCrd, "widgets.yaml");
  EXPECT_TRUE(r) << r.error().ToString();
  return s;
}

std::vector<std::string> Problems(const CrdSchemas& s, const std::string& yaml) {
  auto r = ValidateManifest(s, yaml, "w.yaml");
  EXPECT_TRUE(r) << r.error().ToString();
  return r ? *r : std::vector<std::string>{"parse error"};
}

TEST(SchemaTest, AcceptsAValidObject) {
  auto s = Load();
  EXPECT_TRUE(s.Knows("example.com/v1", "Widget"));
  EXPECT_FALSE(s.Knows("example.com/v0", "Widget"));  // not served
  auto p = Problems(s, R"(apiVersion: example.com/v1
kind: Widget
metadata: {name: w, labels: {a: "1"}}
spec:
  size: 3
  mode: Fast
  quantity: 500m
  tags: {x: y}
  items: [{name: ab, on: true}]
)");
  EXPECT_TRUE(p.empty()) << p.front();
}

TEST(SchemaTest, ReportsEveryProblemWithItsPath) {
  auto s = Load();
  auto p = Problems(s, R"(apiVersion: example.com/v1
kind: Widget
metadata: {name: w, labels: {a: 1}, nmae: x}
spec:
  size: 0
  mode: Medium
  quantity: 1.5
  tags: {x: 2}
  items: [{on: yes}, {name: toolong}]
  extra: true
)");
  std::vector<std::string> expected = {
      "w.yaml: Widget w: spec.extra: unknown field",
      "w.yaml: Widget w: spec.items[0].on: must be a boolean, not string",
      "w.yaml: Widget w: spec.items[0].name: missing required field",
      "w.yaml: Widget w: spec.items[1].name: longer than 5 characters",
      "w.yaml: Widget w: spec.mode: \"Medium\" is not one of \"Fast\", \"Slow\"",
      "w.yaml: Widget w: spec.quantity: must be an integer or a string, not number",
      "w.yaml: Widget w: spec.size: must be at least 1",
      "w.yaml: Widget w: spec.tags.x: must be a string, not integer",
      "w.yaml: Widget w: metadata.labels.a: must be a string, not integer (quote it)",
      "w.yaml: Widget w: metadata.nmae: unknown field",
  };
  std::sort(p.begin(), p.end());
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(p, expected);
}

TEST(SchemaTest, UnknownKindsAndMissingPieces) {
  auto s = Load();
  auto p = Problems(s, "apiVersion: example.com/v2\nkind: Widget\nmetadata: {name: w}\n");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_NE(p[0].find("no schema for apiVersion example.com/v2"), std::string::npos);
  p = Problems(s, "apiVersion: example.com/v1\nkind: Widget\n");
  EXPECT_EQ(
      p, (std::vector<std::string>{"w.yaml: Widget (no name): spec: missing required field",
                                   "w.yaml: Widget (no name): metadata: missing required field"}));
  EXPECT_FALSE(ValidateManifest(s, "a: [", "bad.yaml"));
  CrdSchemas empty;
  EXPECT_FALSE(empty.AddCrdYaml("kind: ConfigMap\n", "cm.yaml"));
}

TEST(SchemaTest, FieldSchemaFindsAFieldsFacts) {
  auto s = Load();
  const json::value* mode = s.FieldSchema("example.com/v1", "Widget", {"spec", "mode"});
  ASSERT_NE(mode, nullptr);
  EXPECT_EQ(ToJson(*Find(*mode, {"enum"})), R"(["Fast","Slow"])");
  EXPECT_NE(s.FieldSchema("example.com/v1", "Widget", {"spec"}), nullptr);
  EXPECT_EQ(s.FieldSchema("example.com/v1", "Widget", {"spec", "nope"}), nullptr);
  EXPECT_EQ(s.FieldSchema("example.com/v1", "Gadget", {"spec"}), nullptr);
}

// The strings of agent-sandbox v1.0's suspend API (api/v1beta1/sandbox_types.go:
// SandboxOperatingModeRunning/Suspended, SandboxConditionSuspended,
// SandboxReasonSuspendedPodTerminated/PodTerminating/PodNotTerminated,
// SandboxReasonNotSuspended, SandboxReasonSuspended, SandboxReasonDependenciesReady)
// as the provider and the test controller spell them. The enum and default of
// spec.operatingMode are checked against the recorded CRD in
// tests/k8s/manifest_test.cc.
TEST(OperatingModeTest, ConstantsAreUpstreams) {
  EXPECT_EQ(kOperatingModeRunning, "Running");
  EXPECT_EQ(kOperatingModeSuspended, "Suspended");
  EXPECT_EQ(kConditionReady, "Ready");
  EXPECT_EQ(kConditionSuspended, "Suspended");
  EXPECT_EQ(kReasonPodTerminated, "PodTerminated");
  EXPECT_EQ(kReasonPodTerminating, "PodTerminating");
  EXPECT_EQ(kReasonPodNotTerminated, "PodNotTerminated");
  EXPECT_EQ(kReasonNotSuspended, "NotSuspended");
  EXPECT_EQ(kReasonSandboxSuspended, "SandboxSuspended");
  EXPECT_EQ(kReasonDependenciesReady, "DependenciesReady");
  EXPECT_EQ(VolumeClaimName("workspace", "pool-abc12"), "workspace-pool-abc12");
}

json::object Object(std::string_view text) {
  auto o = ParseJsonObject(text);
  EXPECT_TRUE(o) << text;
  return o ? *o : json::object();
}

TEST(OperatingModeTest, ReadsTheControllersConditions) {
  json::object sb = Object(R"({"metadata":{"generation":3},
    "spec":{"operatingMode":"Suspended"},
    "status":{"conditions":[
      {"type":"Suspended","status":"True","reason":"PodTerminated","observedGeneration":3},
      {"type":"Ready","status":"False","reason":"SandboxSuspended","observedGeneration":3}]}})");
  EXPECT_EQ(OperatingMode(sb), "Suspended");
  EXPECT_TRUE(SuspendSettled(sb));
  EXPECT_FALSE(RunningAndReady(sb));
  EXPECT_TRUE(ReadySaysSuspended(sb));
  // Conditions of an older generation answer an older spec.
  json::object stale = sb;
  stale["metadata"].as_object()["generation"] = 4;
  EXPECT_FALSE(SuspendSettled(stale));
  // Still terminating, under either name upstream gave it.
  for (std::string_view reason : {kReasonPodTerminating, kReasonPodNotTerminated}) {
    json::object going = Object(fmt::format(
        R"({{"spec":{{"operatingMode":"Suspended"}},"status":{{"conditions":[
          {{"type":"Suspended","status":"False","reason":"{}"}}]}}}})",
        reason));
    EXPECT_FALSE(SuspendSettled(going)) << reason;
  }
  json::object running = Object(R"({"metadata":{"generation":5},"spec":{},
    "status":{"conditions":[{"type":"Ready","status":"True","reason":"DependenciesReady",
                             "observedGeneration":5},
                            {"type":"Suspended","status":"False","reason":"NotSuspended"}]}})");
  EXPECT_EQ(OperatingMode(running), "Running");  // the default
  EXPECT_TRUE(RunningAndReady(running));
  EXPECT_FALSE(SuspendSettled(running));
  EXPECT_FALSE(ReadySaysSuspended(running));
  // Hostile shapes read as nothing.
  for (std::string_view text : {R"({"status":{"conditions":{"type":"Ready"}}})",
                                R"({"status":{"conditions":[7,"Ready",{"type":3}]}})",
                                R"({"spec":{"operatingMode":7},"status":[]})"}) {
    json::object o = Object(text);
    EXPECT_FALSE(FindCondition(o, kConditionReady)) << text;
    EXPECT_FALSE(RunningAndReady(o) || SuspendSettled(o) || ReadySaysSuspended(o)) << text;
  }
}

TEST(OperatingModeTest, TellsWhatHoldsTheWorkspace) {
  auto blueprint = [](std::string_view mounts, std::string_view volumes, std::string_view vcts) {
    return Object(fmt::format(R"({{"spec":{{"podTemplate":{{"spec":{{
      "containers":[{{"name":"sidecar"}},{{"name":"c","volumeMounts":{}}}],"volumes":{}}}}},
      "volumeClaimTemplates":{}}}}})",
                              mounts, volumes, vcts));
  };
  const std::string ws = R"([{"name":"ws","mountPath":"/workspace"}])";
  auto w = DescribeWorkspace(blueprint(ws, R"([{"name":"ws","emptyDir":{}}])", "[]"));
  EXPECT_FALSE(w.survives_suspend);
  EXPECT_EQ(w.volume, "ws");
  EXPECT_EQ(w.description, "an emptyDir");
  // A volumeClaimTemplates entry of that name replaces the pod volume.
  w = DescribeWorkspace(blueprint(ws, R"([{"name":"ws","emptyDir":{}}])",
                                  R"([{"metadata":{"name":"ws"},"spec":{}}])"));
  EXPECT_TRUE(w.survives_suspend);
  EXPECT_EQ(w.description, "a PersistentVolumeClaim from volumeClaimTemplates");
  w = DescribeWorkspace(
      blueprint(ws, R"([{"name":"ws","persistentVolumeClaim":{"claimName":"shared"}}])", "[]"));
  EXPECT_TRUE(w.survives_suspend);
  EXPECT_EQ(w.description, "the PersistentVolumeClaim shared");
  w = DescribeWorkspace(blueprint(ws, R"([{"name":"ws","ephemeral":{}}])", "[]"));
  EXPECT_FALSE(w.survives_suspend);
  w = DescribeWorkspace(blueprint(ws, R"([{"name":"ws","hostPath":{"path":"/x"}}])", "[]"));
  EXPECT_FALSE(w.survives_suspend);
  EXPECT_EQ(w.description, "a hostPath volume");
  w = DescribeWorkspace(blueprint(ws, "[{\"name\":\"ws\",\"\\u001b[2J\":{}}]", "[]"));
  EXPECT_EQ(w.description, "a volume of another kind");  // never the server's raw key
  // The closest mount above it counts; unrelated prefixes do not.
  w = DescribeWorkspace(
      blueprint(R"([{"name":"root","mountPath":"/"},{"name":"ws","mountPath":"/workspace/"},)"
                R"({"name":"other","mountPath":"/workspace2"}])",
                R"([{"name":"ws","emptyDir":{}}])", R"([{"metadata":{"name":"root"}}])"));
  EXPECT_EQ(w.volume, "ws");
  EXPECT_FALSE(w.survives_suspend);
  w = DescribeWorkspace(blueprint(R"([{"name":"other","mountPath":"/workspace2"}])", "[]", "[]"));
  EXPECT_EQ(w.volume, "");
  EXPECT_EQ(w.description, "not a volume (it is in the container's own filesystem)");
  w = DescribeWorkspace(blueprint(ws, "[]", "[]"));
  EXPECT_FALSE(w.survives_suspend);
  EXPECT_EQ(w.description, "a volume the pod template does not define");
  EXPECT_FALSE(DescribeWorkspace(Object(R"({"spec":{"podTemplate":7}})")).survives_suspend);
}

}  // namespace
}  // namespace deepbox::k8s
