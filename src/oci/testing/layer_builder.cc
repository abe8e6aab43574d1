#include "oci/testing/layer_builder.h"

#include <archive.h>
#include <archive_entry.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>

#include "common/json.h"
#include "oci/digest.h"
#include "oci/manifest.h"

namespace deepbox::oci::testing {

namespace {

void Check(int r, archive* a, const char* what) {
  if (r < ARCHIVE_WARN) {
    std::fprintf(stderr, "layer_builder: %s: %s\n", what, archive_error_string(a));
    std::abort();
  }
}

la_ssize_t AppendToString(archive*, void* client, const void* buf, size_t len) {
  static_cast<std::string*>(client)->append(static_cast<const char*>(buf), len);
  return static_cast<la_ssize_t>(len);
}

}  // namespace

LayerEntry File(std::string name, std::string content, mode_t mode) {
  return {LayerEntry::Type::kFile, std::move(name), std::move(content), "", mode};
}
LayerEntry Dir(std::string name, mode_t mode) {
  return {LayerEntry::Type::kDir, std::move(name), "", "", mode};
}
LayerEntry Symlink(std::string name, std::string target) {
  return {LayerEntry::Type::kSymlink, std::move(name), "", std::move(target), 0777};
}
LayerEntry Hardlink(std::string name, std::string target) {
  return {LayerEntry::Type::kHardlink, std::move(name), "", std::move(target), 0644};
}
LayerEntry CharDevice(std::string name) {
  return {LayerEntry::Type::kCharDevice, std::move(name), "", "", 0666};
}
LayerEntry Fifo(std::string name) {
  return {LayerEntry::Type::kFifo, std::move(name), "", "", 0644};
}

std::string BuildLayer(const std::vector<LayerEntry>& entries, Compression compression) {
  std::string out;
  archive* a = archive_write_new();
  Check(archive_write_set_format_pax_restricted(a), a, "format");
  if (compression == Compression::kGzip) Check(archive_write_add_filter_gzip(a), a, "gzip");
  if (compression == Compression::kZstd) Check(archive_write_add_filter_zstd(a), a, "zstd");
  Check(archive_write_set_bytes_in_last_block(a, 1), a, "block");
  Check(archive_write_open2(a, &out, nullptr, AppendToString, nullptr, nullptr), a, "open");
  for (const auto& e : entries) {
    archive_entry* entry = archive_entry_new();
    archive_entry_set_pathname(entry, e.name.c_str());
    archive_entry_set_perm(entry, e.mode);
    archive_entry_set_mtime(entry, 1700000000, 0);
    switch (e.type) {
      case LayerEntry::Type::kFile:
        archive_entry_set_filetype(entry, AE_IFREG);
        archive_entry_set_size(entry, static_cast<la_int64_t>(e.content.size()));
        break;
      case LayerEntry::Type::kDir:
        archive_entry_set_filetype(entry, AE_IFDIR);
        break;
      case LayerEntry::Type::kSymlink:
        archive_entry_set_filetype(entry, AE_IFLNK);
        archive_entry_set_symlink(entry, e.target.c_str());
        break;
      case LayerEntry::Type::kHardlink:
        archive_entry_set_filetype(entry, AE_IFREG);
        archive_entry_set_hardlink(entry, e.target.c_str());
        archive_entry_set_size(entry, 0);
        break;
      case LayerEntry::Type::kCharDevice:
        archive_entry_set_filetype(entry, AE_IFCHR);
        archive_entry_set_rdevmajor(entry, 1);
        archive_entry_set_rdevminor(entry, 3);
        break;
      case LayerEntry::Type::kFifo:
        archive_entry_set_filetype(entry, AE_IFIFO);
        break;
    }
    Check(archive_write_header(a, entry), a, "header");
    if (e.type == LayerEntry::Type::kFile && !e.content.empty()) {
      if (archive_write_data(a, e.content.data(), e.content.size()) !=
          static_cast<la_ssize_t>(e.content.size())) {
        Check(ARCHIVE_FATAL, a, "data");
      }
    }
    archive_entry_free(entry);
  }
  Check(archive_write_close(a), a, "close");
  archive_write_free(a);
  return out;
}

std::string LayerMediaType(Compression compression) {
  switch (compression) {
    case Compression::kNone:
      return std::string(kOciLayerTar);
    case Compression::kGzip:
      return std::string(kOciLayerGzip);
    case Compression::kZstd:
      return std::string(kOciLayerZstd);
  }
  return "";
}

BlobRef RefOf(const std::string& media_type, const std::string& bytes) {
  return {media_type, Sha256Digest(bytes), bytes.size()};
}

namespace {
json::object DescriptorObject(const BlobRef& r) {
  json::object o;
  o["mediaType"] = r.media_type;
  o["digest"] = r.digest;
  o["size"] = r.size;
  return o;
}
}  // namespace

std::string ConfigJson(const std::string& architecture, const std::vector<std::string>& env,
                       const std::string& working_dir, const std::string& user) {
  json::object config;
  json::array e;
  for (const auto& v : env) e.push_back(json::value(v));
  config["Env"] = std::move(e);
  config["WorkingDir"] = working_dir;
  config["User"] = user;
  json::object doc;
  doc["architecture"] = architecture;
  doc["os"] = "linux";
  doc["config"] = std::move(config);
  json::object rootfs;
  rootfs["type"] = "layers";
  rootfs["diff_ids"] = json::array();
  doc["rootfs"] = std::move(rootfs);
  return ToJson(doc);
}

std::string ManifestJson(const BlobRef& config, const std::vector<BlobRef>& layers) {
  json::object doc;
  doc["schemaVersion"] = 2;
  doc["mediaType"] = std::string(kOciManifest);
  doc["config"] = DescriptorObject(config);
  json::array l;
  for (const auto& layer : layers) l.push_back(DescriptorObject(layer));
  doc["layers"] = std::move(l);
  return ToJson(doc);
}

std::string IndexJson(const std::vector<IndexEntry>& manifests) {
  json::object doc;
  doc["schemaVersion"] = 2;
  doc["mediaType"] = std::string(kOciIndex);
  json::array m;
  for (const auto& entry : manifests) {
    json::object d = DescriptorObject(entry.manifest);
    json::object platform;
    platform["os"] = "linux";
    platform["architecture"] = entry.architecture;
    d["platform"] = std::move(platform);
    m.push_back(std::move(d));
  }
  doc["manifests"] = std::move(m);
  return ToJson(doc);
}

}  // namespace deepbox::oci::testing
