#include "oci/image_store.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <ftw.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <set>

#include "common/io.h"
#include "common/json.h"
#include "common/make_dirs.h"
#include "common/random.h"
#include "common/remove_tree.h"
#include "common/time.h"
#include "common/trusted_path.h"
#include "common/user_state_dir.h"
#include "fs/dir_entries.h"
#include "oci/digest.h"
#include "oci/layer_extract.h"

namespace deepbox::oci {

namespace {

constexpr TrustedPath kImageDirTrust{"the image directory", "DEEPBOX_IMAGE_DIR",
                                     "chooses the files of every sandbox made from an image"};
constexpr size_t kHashChunk = 1u << 20;
constexpr size_t kMaxRecordBytes = 4u << 20;

Status FsyncPath(const std::string& path, bool dir) {
  UniqueFd fd(open(path.c_str(), (dir ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC));
  if (!fd) return MakeSyscallError("open", errno, path);
  if (fsync(fd.get()) != 0) return MakeSyscallError("fsync", errno, path);
  return {};
}

// Writes `content` to `path` through a temporary file renamed over it.
Status WriteFileAtomically(const std::string& path, std::string_view content) {
  std::string tmp = path + ".tmp-" + RandomHex(12);
  UniqueFd fd(open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd) return MakeSyscallError("open", errno, tmp);
  auto s = WriteAll(fd.get(), content, tmp);
  if (s && fsync(fd.get()) != 0) s = MakeSyscallError("fsync", errno, tmp);
  if (s && rename(tmp.c_str(), path.c_str()) != 0) s = MakeSyscallError("rename", errno, path);
  if (!s) {
    unlink(tmp.c_str());
    return s;
  }
  return {};
}

uint64_t FileSize(const std::string& path) {
  struct stat st {};
  return lstat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

json::object DescriptorJson(const Descriptor& d) {
  json::object o;
  o["mediaType"] = d.media_type;
  o["digest"] = d.digest;
  o["size"] = d.size;
  return o;
}

// nftw callback of GiveLayerToRootOwner (no state: nftw takes a plain function).
int ChownLayerEntry(const char* path, const struct stat*, int, struct FTW*) {
  return lchown(path, kRootCacheLayerOwner, kRootCacheLayerOwner) == 0 ? 0 : errno;
}

// An extracted layer of root's cache: every entry owned by
// kRootCacheLayerOwner (no symlink followed), its top directory 0755.
Status GiveLayerToRootOwner(const std::string& dir) {
  if (chmod(dir.c_str(), 0755) != 0) return MakeSyscallError("chmod", errno, dir);
  if (geteuid() != 0) return {};
  int err = nftw(dir.c_str(), ChownLayerEntry, 64, FTW_PHYS);
  if (err != 0) return MakeSyscallError("lchown", err > 0 ? err : errno, dir);
  return {};
}

bool ValidPinName(std::string_view name) {
  if (name.empty() || name.size() > 64 || name.front() == '.') return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '.' || c == '-';
  });
}

}  // namespace

bool ImagePin::Live() const {
  struct stat st {};
  return !sandbox_dir.empty() && sandbox_dir.front() == '/' &&
         lstat(sandbox_dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

Result<std::string> DefaultImageDir(const EnvFn& env_fn) {
  auto env = [&](const char* name) -> std::string {
    const char* v = env_fn ? env_fn(name) : std::getenv(name);
    return v == nullptr ? std::string() : std::string(v);
  };
  auto absolute = [](const std::string& value, const char* what) -> Result<std::string> {
    if (value.front() != '/') {
      return MakeError(ErrorCode::kInvalidArgument,
                       fmt::format("{} must be an absolute path, not '{}'", what, value));
    }
    return value;
  };
  if (std::string d = env("DEEPBOX_IMAGE_DIR"); !d.empty()) return absolute(d, "DEEPBOX_IMAGE_DIR");
  if (std::string s = env("DEEPBOX_STATE_DIR"); !s.empty()) {
    auto p = absolute(s, "DEEPBOX_STATE_DIR");
    if (!p) return p;
    return *p + "/images";
  }
  return UserStateDir(env, "images", "DEEPBOX_IMAGE_DIR");
}

Result<std::unique_ptr<ImageStore>> ImageStore::Open(const std::string& given) {
  std::string dir = given;
  if (dir.empty()) {
    auto d = DefaultImageDir();
    if (!d) return tl::unexpected(d.error());
    dir = *d;
  }
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  if (dir.empty() || dir.front() != '/') {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("the image directory must be an absolute path, not '{}'", dir));
  }
  if (auto s = MakeDirs(dir, 0700); !s) return tl::unexpected(s.error());
  UniqueFd fd(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return MakeSyscallError("open(O_DIRECTORY|O_NOFOLLOW)", errno, dir);
  if (auto s = CheckOwnedByUs(fd.get(), dir, kImageDirTrust); !s) return tl::unexpected(s.error());
  for (const char* sub : {"blobs/sha256", "layers/sha256", "images", "tmp", "pins"}) {
    if (auto s = MakeDirs(dir + "/" + sub, 0700); !s) return tl::unexpected(s.error());
  }
  return std::unique_ptr<ImageStore>(new ImageStore(dir));
}

std::string ImageStore::BlobPath(std::string_view digest) const {
  return fmt::format("{}/blobs/sha256/{}", dir_, DigestHex(digest));
}

std::string ImageStore::LayerDir(std::string_view digest) const {
  return fmt::format("{}/layers/sha256/{}", dir_, DigestHex(digest));
}

std::string ImageStore::RecordPath(std::string_view name) const {
  return fmt::format("{}/images/{}.json", dir_, DigestHex(Sha256Digest(name)));
}

bool ImageStore::HasBlob(std::string_view digest) const {
  struct stat st {};
  return ValidDigest(digest) && lstat(BlobPath(digest).c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool ImageStore::HasLayer(std::string_view digest) const {
  struct stat st {};
  return ValidDigest(digest) && lstat(LayerDir(digest).c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

Result<StoreLock> ImageStore::Lock(const std::string& path, int how) const {
  UniqueFd fd(open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd) return MakeSyscallError("open", errno, path);
  while (flock(fd.get(), how) != 0) {
    if (errno != EINTR) return MakeSyscallError("flock", errno, path);
  }
  return StoreLock(std::move(fd));
}

Result<StoreLock> ImageStore::LockShared() const { return Lock(dir_ + "/store.lock", LOCK_SH); }
Result<StoreLock> ImageStore::LockExclusive() const { return Lock(dir_ + "/store.lock", LOCK_EX); }

Result<BlobResult> ImageStore::EnsureBlob(const Descriptor& d, const BlobFetch& fetch,
                                          const BlobProgress& progress) const {
  if (auto s = CheckDigest(d.digest, "blob digest"); !s) return tl::unexpected(s.error());
  BlobResult result;
  const std::string hex(DigestHex(d.digest));
  const std::string final_path = BlobPath(d.digest);
  if (HasBlob(d.digest)) return result;
  auto lock = Lock(fmt::format("{}/tmp/{}.lock", dir_, hex), LOCK_EX);
  if (!lock) return tl::unexpected(lock.error());
  if (HasBlob(d.digest)) return result;  // another process fetched it meanwhile

  const std::string partial = fmt::format("{}/tmp/{}.partial", dir_, hex);
  UniqueFd fd(open(partial.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd) return MakeSyscallError("open", errno, partial);
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) return MakeSyscallError("fstat", errno, partial);
  uint64_t have = static_cast<uint64_t>(st.st_size);
  if (have > d.size) {
    if (ftruncate(fd.get(), 0) != 0) return MakeSyscallError("ftruncate", errno, partial);
    have = 0;
  }
  // What an interrupted pull left is hashed again, not trusted.
  Sha256Digester digester;
  if (have > 0) {
    std::unique_ptr<char[]> buf(new char[kHashChunk]);
    uint64_t read_so_far = 0;
    while (read_so_far < have) {
      ssize_t n = pread(fd.get(), buf.get(), kHashChunk, static_cast<off_t>(read_so_far));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return MakeSyscallError("pread", errno, partial);
      if (n == 0) break;
      digester.Update(std::string_view(buf.get(), static_cast<size_t>(n)));
      read_so_far += static_cast<uint64_t>(n);
    }
    have = read_so_far;
    result.resumed_from = have;
  }
  uint64_t written = have;
  if (written < d.size) {
    BlobSink sink;
    sink.start = [&](uint64_t from) -> Status {
      if (from != written) {
        // The registry sends it all again: start over.
        if (ftruncate(fd.get(), 0) != 0) return MakeSyscallError("ftruncate", errno, partial);
        digester = Sha256Digester();
        written = 0;
        result.resumed_from = 0;
      }
      if (progress) progress(written);
      return {};
    };
    sink.data = [&](std::string_view data) -> Status {
      if (written + data.size() > d.size) {
        return MakeError(
            ErrorCode::kInvalidArgument,
            fmt::format("blob {}: the registry sent more than its {} bytes", d.digest, d.size));
      }
      size_t done = 0;
      while (done < data.size()) {
        ssize_t n = pwrite(fd.get(), data.data() + done, data.size() - done,
                           static_cast<off_t>(written + done));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return MakeSyscallError("pwrite", errno, partial);
        done += static_cast<size_t>(n);
      }
      digester.Update(data);
      written += data.size();
      if (progress) progress(written);
      return {};
    };
    result.downloaded = true;
    if (auto s = fetch(have, sink); !s) {
      if (s.error().code == ErrorCode::kInvalidArgument) unlink(partial.c_str());
      return tl::unexpected(s.error());
    }
  }
  if (written != d.size) {
    // Kept: the next pull resumes it.
    return MakeError(ErrorCode::kUnavailable,
                     fmt::format("blob {}: the download ended after {} of its {} bytes", d.digest,
                                 written, d.size));
  }
  std::string got = digester.Finish();
  if (got != d.digest) {
    unlink(partial.c_str());
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("blob {}: the registry sent content whose digest is {}: refused "
                                 "(nothing was kept)",
                                 d.digest, got));
  }
  if (fsync(fd.get()) != 0) return MakeSyscallError("fsync", errno, partial);
  if (fchmod(fd.get(), 0400) != 0) return MakeSyscallError("fchmod", errno, partial);
  if (rename(partial.c_str(), final_path.c_str()) != 0) {
    return MakeSyscallError("rename", errno, final_path);
  }
  (void)FsyncPath(dir_ + "/blobs/sha256", true);
  return result;
}

Status ImageStore::PutBlob(std::string_view digest, std::string_view bytes) const {
  if (auto s = CheckDigest(digest, "blob digest"); !s) return s;
  if (Sha256Digest(bytes) != digest) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("content does not have digest {}", digest));
  }
  if (HasBlob(digest)) return {};
  return WriteFileAtomically(BlobPath(digest), bytes);
}

Result<std::string> ImageStore::ReadBlob(std::string_view digest, size_t limit) const {
  if (auto s = CheckDigest(digest, "blob digest"); !s) return tl::unexpected(s.error());
  std::string path = BlobPath(digest);
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd) return MakeSyscallError("open", errno, path);
  return ReadAll(fd.get(), path, limit);
}

Status ImageStore::AdoptOldLayerOwner(std::string_view digest) const {
  if (geteuid() != 0) return {};
  if (auto s = CheckDigest(digest, "layer digest"); !s) return s;
  const std::string dir = LayerDir(digest);
  struct stat st {};
  if (lstat(dir.c_str(), &st) != 0) return MakeSyscallError("lstat", errno, dir);
  if (st.st_uid == kRootCacheLayerOwner) return {};
  auto lock = Lock(fmt::format("{}/tmp/{}.lock", dir_, DigestHex(digest)), LOCK_EX);
  if (!lock) return tl::unexpected(lock.error());
  if (lstat(dir.c_str(), &st) != 0) return MakeSyscallError("lstat", errno, dir);
  if (st.st_uid == kRootCacheLayerOwner) return {};  // another process did it
  return GiveLayerToRootOwner(dir);
}

Result<bool> ImageStore::EnsureLayerExtracted(const Descriptor& d) const {
  if (auto s = CheckDigest(d.digest, "layer digest"); !s) return tl::unexpected(s.error());
  if (HasLayer(d.digest)) {
    if (auto s = AdoptOldLayerOwner(d.digest); !s) return tl::unexpected(s.error());
    return false;
  }
  const std::string hex(DigestHex(d.digest));
  auto lock = Lock(fmt::format("{}/tmp/{}.lock", dir_, hex), LOCK_EX);
  if (!lock) return tl::unexpected(lock.error());
  if (HasLayer(d.digest)) return false;
  // What an extraction that died left (we hold the layer's lock: nobody else
  // is extracting it).
  const std::string tmp_dir = dir_ + "/tmp";
  UniqueFd tdir(open(tmp_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!tdir) return MakeSyscallError("open", errno, tmp_dir);
  auto entries = fs::ReadDir(tdir.get(), tmp_dir);
  if (!entries) return tl::unexpected(entries.error());
  const std::string stale_prefix = "layer-" + hex + "-";
  for (const auto& e : *entries) {
    if (e.name.starts_with(stale_prefix)) (void)RemoveTree(tmp_dir + "/" + e.name);
  }
  std::string work = tmp_dir + "/" + stale_prefix + "XXXXXX";
  if (mkdtemp(work.data()) == nullptr) return MakeSyscallError("mkdtemp", errno, work);
  std::string blob = BlobPath(d.digest);
  UniqueFd fd(open(blob.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd) {
    int e = errno;
    (void)RemoveTree(work);
    return MakeSyscallError("open", e, blob);
  }
  auto stats = ExtractLayerFile(fd.get(), work);
  if (!stats) {
    (void)RemoveTree(work);
    Error e = stats.error();
    e.message = fmt::format("layer {}: {}", d.digest, e.message);
    return tl::unexpected(e);
  }
  if (auto s = GiveLayerToRootOwner(work); !s) {
    (void)RemoveTree(work);
    return tl::unexpected(s.error());
  }
  if (rename(work.c_str(), LayerDir(d.digest).c_str()) != 0) {
    int e = errno;
    (void)RemoveTree(work);
    return MakeSyscallError("rename", e, LayerDir(d.digest));
  }
  return true;
}

std::string ImageRecordToJson(const ImageRecord& r) {
  json::object o;
  o["name"] = r.name;
  o["index_digest"] = r.index_digest;
  o["manifest_digest"] = r.manifest_digest;
  o["config_digest"] = r.config_digest;
  o["platform"] = r.platform.ToString();
  json::array layers;
  for (const auto& l : r.layers) layers.push_back(DescriptorJson(l));
  o["layers"] = std::move(layers);
  o["size"] = r.size;
  o["pulled_at"] = r.pulled_at;
  return ToJson(o);
}

Result<ImageRecord> ImageRecordFromJson(std::string_view text) {
  auto doc = ParseJsonObject(text);
  if (!doc) return tl::unexpected(doc.error());
  ImageRecord r;
  r.name = GetOptString(*doc, "name").value_or("");
  r.index_digest = GetOptString(*doc, "index_digest").value_or("");
  r.manifest_digest = GetOptString(*doc, "manifest_digest").value_or("");
  r.config_digest = GetOptString(*doc, "config_digest").value_or("");
  r.pulled_at = GetOptString(*doc, "pulled_at").value_or("");
  std::string platform = GetOptString(*doc, "platform").value_or("");
  size_t slash = platform.find('/');
  r.platform.os = platform.substr(0, slash);
  if (slash != std::string::npos) {
    std::string rest = platform.substr(slash + 1);
    size_t v = rest.find('/');
    r.platform.architecture = rest.substr(0, v);
    if (v != std::string::npos) r.platform.variant = rest.substr(v + 1);
  }
  if (const json::value* size = doc->if_contains("size")) {
    r.size = static_cast<uint64_t>(JsonToInt64(*size).value_or(0));
  }
  if (r.name.empty() || !ValidDigest(r.manifest_digest) || !ValidDigest(r.config_digest) ||
      (!r.index_digest.empty() && !ValidDigest(r.index_digest))) {
    return MakeError(ErrorCode::kInvalidArgument, "an image record without its name or digests");
  }
  const json::value* layers = doc->if_contains("layers");
  if (layers == nullptr || !layers->is_array()) {
    return MakeError(ErrorCode::kInvalidArgument, "an image record without layers");
  }
  for (const auto& l : layers->as_array()) {
    if (!l.is_object()) return MakeError(ErrorCode::kInvalidArgument, "a bad layer in a record");
    Descriptor d;
    d.media_type = GetOptString(l.as_object(), "mediaType").value_or("");
    d.digest = GetOptString(l.as_object(), "digest").value_or("");
    const json::value* size = l.as_object().if_contains("size");
    d.size = size != nullptr ? static_cast<uint64_t>(JsonToInt64(*size).value_or(0)) : 0;
    if (!ValidDigest(d.digest)) {
      return MakeError(ErrorCode::kInvalidArgument, "a layer digest in a record is not valid");
    }
    r.layers.push_back(std::move(d));
  }
  return r;
}

Status ImageStore::RecordImage(const ImageRecord& record) const {
  return WriteFileAtomically(RecordPath(record.name), ImageRecordToJson(record));
}

Result<std::optional<ImageRecord>> ImageStore::FindImage(std::string_view name) const {
  std::string path = RecordPath(name);
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd) {
    if (errno == ENOENT) return std::optional<ImageRecord>();
    return MakeSyscallError("open", errno, path);
  }
  auto text = ReadAll(fd.get(), path, kMaxRecordBytes);
  if (!text) return tl::unexpected(text.error());
  auto record = ImageRecordFromJson(*text);
  if (!record) {
    return MakeError(ErrorCode::kInternal,
                     fmt::format("image record {}: {}", path, record.error().message));
  }
  return std::optional<ImageRecord>(std::move(*record));
}

Result<std::vector<ImageRecord>> ImageStore::ListImages() const {
  const std::string images = dir_ + "/images";
  UniqueFd dir(open(images.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir) return MakeSyscallError("open", errno, images);
  auto entries = fs::ReadDir(dir.get(), images);
  if (!entries) return tl::unexpected(entries.error());
  std::vector<ImageRecord> out;
  for (const auto& e : *entries) {
    if (!e.name.ends_with(".json") || e.name.find(".tmp-") != std::string::npos) continue;
    std::string path = images + "/" + e.name;
    UniqueFd fd(openat(dir.get(), e.name.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    if (!fd) continue;  // removed meanwhile
    auto text = ReadAll(fd.get(), path, kMaxRecordBytes);
    if (!text) return tl::unexpected(text.error());
    auto record = ImageRecordFromJson(*text);
    if (!record) {
      return MakeError(ErrorCode::kInternal,
                       fmt::format("image record {}: {}", path, record.error().message));
    }
    out.push_back(std::move(*record));
  }
  std::sort(out.begin(), out.end(),
            [](const ImageRecord& a, const ImageRecord& b) { return a.name < b.name; });
  return out;
}

Result<bool> ImageStore::RemoveImage(std::string_view name) const {
  auto lock = LockExclusive();
  if (!lock) return tl::unexpected(lock.error());
  auto pins = ListPins();
  if (!pins) return tl::unexpected(pins.error());
  for (const auto& pin : *pins) {
    if (pin.image.name == name && pin.Live()) {
      return MakeError(ErrorCode::kConflict,
                       fmt::format("image {} is in use by sandbox {} (delete it first: deepbox "
                                   "sandbox rm {})",
                                   name, pin.sandbox, pin.sandbox));
    }
  }
  std::string path = RecordPath(name);
  if (unlink(path.c_str()) != 0) {
    if (errno == ENOENT) return false;
    return MakeSyscallError("unlink", errno, path);
  }
  if (auto c = Collect(false); !c) return tl::unexpected(c.error());
  return true;
}

Result<PruneResult> ImageStore::Prune() const {
  auto lock = LockExclusive();
  if (!lock) return tl::unexpected(lock.error());
  return Collect(true);
}

Status ImageStore::Pin(const ImagePin& pin) const {
  if (!ValidPinName(pin.sandbox)) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("'{}' cannot name an image pin", pin.sandbox));
  }
  if (pin.sandbox_dir.empty() || pin.sandbox_dir.front() != '/') {
    return MakeError(ErrorCode::kInvalidArgument, "an image pin needs the sandbox's absolute dir");
  }
  auto doc = ParseJsonObject(ImageRecordToJson(pin.image));
  if (!doc) return tl::unexpected(doc.error());
  json::object o;
  o["sandbox"] = pin.sandbox;
  o["sandbox_dir"] = pin.sandbox_dir;
  o["image"] = std::move(*doc);
  return WriteFileAtomically(fmt::format("{}/pins/{}.json", dir_, pin.sandbox), ToJson(o));
}

Status ImageStore::Unpin(std::string_view sandbox) const {
  if (!ValidPinName(sandbox)) return {};
  std::string path = fmt::format("{}/pins/{}.json", dir_, sandbox);
  if (unlink(path.c_str()) != 0 && errno != ENOENT) return MakeSyscallError("unlink", errno, path);
  return {};
}

Result<std::vector<ImagePin>> ImageStore::ListPins() const {
  const std::string pins = dir_ + "/pins";
  UniqueFd dir(open(pins.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir) {
    if (errno == ENOENT) return std::vector<ImagePin>();  // a cache made before pins
    return MakeSyscallError("open", errno, pins);
  }
  auto entries = fs::ReadDir(dir.get(), pins);
  if (!entries) return tl::unexpected(entries.error());
  std::vector<ImagePin> out;
  for (const auto& e : *entries) {
    if (!e.name.ends_with(".json") || e.name.find(".tmp-") != std::string::npos) continue;
    std::string path = pins + "/" + e.name;
    UniqueFd fd(openat(dir.get(), e.name.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    if (!fd) continue;  // removed meanwhile
    auto text = ReadAll(fd.get(), path, kMaxRecordBytes);
    if (!text) return tl::unexpected(text.error());
    auto doc = ParseJsonObject(*text);
    const json::value* image = doc ? doc->if_contains("image") : nullptr;
    if (image == nullptr || !image->is_object()) {
      return MakeError(ErrorCode::kInternal, fmt::format("image pin {}: not a pin", path));
    }
    auto record = ImageRecordFromJson(ToJson(image->as_object()));
    if (!record) {
      return MakeError(ErrorCode::kInternal,
                       fmt::format("image pin {}: {}", path, record.error().message));
    }
    ImagePin pin;
    pin.sandbox = GetOptString(*doc, "sandbox").value_or("");
    pin.sandbox_dir = GetOptString(*doc, "sandbox_dir").value_or("");
    pin.image = std::move(*record);
    if (pin.sandbox + ".json" != e.name) {
      return MakeError(ErrorCode::kInternal,
                       fmt::format("image pin {}: names another sandbox", path));
    }
    out.push_back(std::move(pin));
  }
  return out;
}

Result<PruneResult> ImageStore::Collect(bool temporaries) const {
  auto records = ListImages();
  if (!records) return tl::unexpected(records.error());
  std::set<std::string> used;  // hex digests
  for (const auto& r : *records) {
    for (const std::string* d : {&r.index_digest, &r.manifest_digest, &r.config_digest}) {
      if (!d->empty()) used.emplace(DigestHex(*d));
    }
    for (const auto& l : r.layers) used.emplace(DigestHex(l.digest));
  }
  // Live pins keep what their sandboxes use; stale ones go.
  auto pins = ListPins();
  if (!pins) return tl::unexpected(pins.error());
  for (const auto& pin : *pins) {
    if (!pin.Live()) {
      if (auto s = Unpin(pin.sandbox); !s) return tl::unexpected(s.error());
      continue;
    }
    const ImageRecord& r = pin.image;
    for (const std::string* d : {&r.index_digest, &r.manifest_digest, &r.config_digest}) {
      if (!d->empty()) used.emplace(DigestHex(*d));
    }
    for (const auto& l : r.layers) used.emplace(DigestHex(l.digest));
  }
  PruneResult result;
  auto sweep = [&](const std::string& dir, uint64_t* count, bool blobs) -> Status {
    UniqueFd fd(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!fd) return MakeSyscallError("open", errno, dir);
    auto entries = fs::ReadDir(fd.get(), dir);
    if (!entries) return tl::unexpected(entries.error());
    for (const auto& e : *entries) {
      if (used.count(e.name) != 0) continue;
      std::string path = dir + "/" + e.name;
      uint64_t size = blobs ? FileSize(path) : 0;
      if (auto s = RemoveTree(path); !s) return s;
      if (!e.name.ends_with(".lock")) ++*count;  // a lock file is no leftover of a pull
      result.bytes_freed += size;
    }
    return {};
  };
  if (auto s = sweep(dir_ + "/blobs/sha256", &result.blobs_removed, true); !s) {
    return tl::unexpected(s.error());
  }
  if (auto s = sweep(dir_ + "/layers/sha256", &result.layers_removed, false); !s) {
    return tl::unexpected(s.error());
  }
  if (temporaries) {
    // No pull runs (the store is held exclusive): every temporary is left over.
    used.clear();
    if (auto s = sweep(dir_ + "/tmp", &result.temporaries_removed, true); !s) {
      return tl::unexpected(s.error());
    }
  }
  return result;
}

}  // namespace deepbox::oci
