#include "k8s/schema.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace deepbox::k8s
