// Which SandboxTemplate runs an image (`--image REF` on Kubernetes): a claim
// cannot choose its image, its template does, so `--image` selects the
// template whose pod runs REF and a warm pool that makes sandboxes from it.
//
// What is compared: the image of the template's main container, the first
// of spec.podTemplate.spec.containers (the container a claim's env goes to,
// and the one deploy/k8s/sandbox-template.yaml runs the sandbox in), against
// REF, both normalised as Docker does (oci/reference.h: python:3.12 is
// docker.io/library/python:3.12, no tag is :latest, index.docker.io is
// docker.io). Registry and repository must be equal; then
//  * REF with a digest matches an image with that same digest (the digest
//    decides what runs: the tags are not compared);
//  * REF with a tag only matches an image with the same tag, with or without
//    a digest pinning it (whether the tag still points at that digest is the
//    registry's business: nothing here asks a registry).
// Every object comes from the API server: a template without that field, or
// with a value of another type or an unparsable reference, runs no image
// that can match, and is listed as such.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/json.h"

namespace deepbox::k8s {

// The main container's image as written in `tmpl`; "" when it has none.
std::string TemplateMainImage(const json::object& tmpl);

// Whether image `candidate` (as a template writes it) is `wanted` by the
// rules above. INVALID_ARGUMENT when `wanted` is not an image reference; an
// unparsable `candidate` is simply no match.
Result<bool> ImageMatches(std::string_view wanted, std::string_view candidate);

// What a claim for `image` (and/or `template_name`) comes from.
struct TemplateChoice {
  std::string template_name;
  std::string image;  // the template's, as written
  std::string warm_pool;
};

struct TemplateSelection {
  std::string image;           // --image ("" = any)
  std::string template_name;   // --template ("" = any)
  std::string preferred_pool;  // the configured warm pool: taken when it fits
  std::string namespace_name;  // for messages
};

// The template and warm pool for `selection` among `templates` and `pools`
// (the namespace's SandboxTemplates and SandboxWarmPools, as listed):
//  * --template T: T must exist, and with --image its image must match
//    (else INVALID_ARGUMENT naming both);
//  * --image alone: the templates whose image matches; the preferred pool's
//    template when it is one of them, else the first by name;
//  * then the pool: the preferred one if it uses that template, else the
//    first by name that does.
// UNAVAILABLE (a failed create, exit 1 in the CLI, not "no such sandbox"):
// no template runs the image (the message lists every template and its
// image), no template has that name, or no warm pool uses the chosen
// template (a claim needs one: a pool of 0 replicas makes cold sandboxes).
Result<TemplateChoice> ChooseTemplate(const TemplateSelection& selection,
                                      const std::vector<json::object>& templates,
                                      const std::vector<json::object>& pools);

}  // namespace deepbox::k8s
