#include "k8s/template_image.h"

#include <fmt/format.h>

#include <algorithm>

#include "common/terminal_text.h"
#include "k8s/util.h"
#include "oci/reference.h"

namespace deepbox::k8s {
namespace {

// Names and images from the API server go into messages: one short line each.
std::string Shown(std::string_view text) {
  return SanitizeLineForTerminal(text.substr(0, std::min<size_t>(text.size(), 300)));
}

std::string NameOf(const json::object& object) { return FindString(object, {"metadata", "name"}); }

// "T (IMAGE)" for every template, sorted by name.
std::string DescribeTemplates(const std::vector<json::object>& templates) {
  std::vector<std::string> parts;
  for (const auto& t : templates) {
    std::string image = TemplateMainImage(t);
    parts.push_back(
        fmt::format("{} ({})", Shown(NameOf(t)), image.empty() ? "no image" : Shown(image)));
  }
  std::sort(parts.begin(), parts.end());
  return parts.empty() ? "none" : fmt::format("{}", fmt::join(parts, ", "));
}

}  // namespace

std::string TemplateMainImage(const json::object& tmpl) {
  const json::value* containers = Find(tmpl, {"spec", "podTemplate", "spec", "containers"});
  if (containers == nullptr || !containers->is_array() || containers->get_array().empty()) {
    return "";
  }
  const json::value& main = containers->get_array().front();
  if (!main.is_object()) return "";
  return FindString(main, {"image"});
}

Result<bool> ImageMatches(std::string_view wanted, std::string_view candidate) {
  auto want = oci::ParseImageReference(wanted);
  if (!want) {
    return MakeError(ErrorCode::kInvalidArgument, fmt::format("--image: {}", want.error().message));
  }
  auto have = oci::ParseImageReference(candidate);
  if (!have) return false;
  if (want->registry != have->registry || want->repository != have->repository) return false;
  if (!want->digest.empty()) return want->digest == have->digest;
  return !want->tag.empty() && want->tag == have->tag;
}

Result<TemplateChoice> ChooseTemplate(const TemplateSelection& sel,
                                      const std::vector<json::object>& templates,
                                      const std::vector<json::object>& pools) {
  if (!sel.image.empty()) {
    // A bad reference is the user's mistake whatever the cluster holds.
    if (auto ok = ImageMatches(sel.image, sel.image); !ok) return tl::unexpected(ok.error());
  }
  std::vector<const json::object*> sorted;
  for (const auto& t : templates) {
    if (!NameOf(t).empty()) sorted.push_back(&t);
  }
  std::sort(sorted.begin(), sorted.end(),
            [](const json::object* a, const json::object* b) { return NameOf(*a) < NameOf(*b); });
  // The template each pool makes sandboxes from.
  auto pool_template = [](const json::object& pool) {
    return FindString(pool, {"spec", "sandboxTemplateRef", "name"});
  };
  std::string preferred_template;
  for (const auto& p : pools) {
    if (NameOf(p) == sel.preferred_pool) preferred_template = pool_template(p);
  }

  const json::object* chosen = nullptr;
  if (!sel.template_name.empty()) {
    for (const auto* t : sorted) {
      if (NameOf(*t) == sel.template_name) chosen = t;
    }
    if (chosen == nullptr) {
      return MakeError(
          ErrorCode::kUnavailable,
          fmt::format("--template: no SandboxTemplate '{}' in namespace {} (there: {})",
                      Shown(sel.template_name), sel.namespace_name, DescribeTemplates(templates)));
    }
    if (!sel.image.empty()) {
      std::string image = TemplateMainImage(*chosen);
      auto match = ImageMatches(sel.image, image);
      if (!match) return tl::unexpected(match.error());
      if (!*match) {
        return MakeError(
            ErrorCode::kInvalidArgument,
            fmt::format("--image {} and --template {} disagree: on Kubernetes the image is the "
                        "template's, and SandboxTemplate {} runs {}",
                        Shown(sel.image), Shown(sel.template_name), Shown(sel.template_name),
                        image.empty() ? "no image deepbox can read" : Shown(image)));
      }
    }
  } else {
    std::vector<const json::object*> matching;
    for (const auto* t : sorted) {
      auto match = ImageMatches(sel.image, TemplateMainImage(*t));
      if (match && *match) matching.push_back(t);
    }
    if (matching.empty()) {
      return MakeError(
          ErrorCode::kUnavailable,
          fmt::format("--image {}: on Kubernetes the image is the SandboxTemplate's, and no "
                      "SandboxTemplate in namespace {} runs it (their first container's image: "
                      "{}); add a template for it (deploy/k8s/sandbox-template.yaml with "
                      "another image) and a SandboxWarmPool using it",
                      Shown(sel.image), sel.namespace_name, DescribeTemplates(templates)));
    }
    chosen = matching.front();
    for (const auto* t : matching) {
      if (!preferred_template.empty() && NameOf(*t) == preferred_template) chosen = t;
    }
  }

  TemplateChoice out;
  out.template_name = NameOf(*chosen);
  out.image = TemplateMainImage(*chosen);
  std::vector<std::string> users;
  for (const auto& p : pools) {
    std::string name = NameOf(p);
    if (!name.empty() && IsObjectName(name) && pool_template(p) == out.template_name) {
      users.push_back(name);
    }
  }
  std::sort(users.begin(), users.end());
  if (users.empty()) {
    return MakeError(
        ErrorCode::kUnavailable,
        fmt::format("SandboxTemplate {} runs {}, but no SandboxWarmPool in namespace {} uses it: "
                    "a claim is made from a warm pool (one with replicas: 0 makes cold "
                    "sandboxes from the template; deploy/k8s/warmpool.yaml)",
                    Shown(out.template_name), Shown(out.image), sel.namespace_name));
  }
  out.warm_pool = users.front();
  if (std::find(users.begin(), users.end(), sel.preferred_pool) != users.end()) {
    out.warm_pool = sel.preferred_pool;
  }
  return out;
}

}  // namespace deepbox::k8s
