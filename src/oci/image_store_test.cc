#include "oci/image_store.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <thread>

#include "common/testing/temp_dir.h"
#include "fs/testing/test_util.h"
#include "oci/digest.h"
#include "oci/testing/layer_builder.h"

namespace deepbox::oci {
namespace {

using deepbox::testing::TempDir;
using fs::testing::Exists;

// Serves `content` from an offset as a registry would (honouring the range
// unless told not to), optionally failing after `fail_after` bytes.
struct Served {
  std::string content;
  bool honour_range = true;
  size_t fail_after = SIZE_MAX;
  std::atomic<int> requests{0};

  BlobFetch Fetch() {
    return [this](uint64_t offset, const BlobSink& sink) -> Status {
      ++requests;
      uint64_t from = honour_range ? offset : 0;
      if (auto s = sink.start(from); !s) return s;
      size_t end = std::min(content.size(), fail_after);
      for (size_t i = from; i < end; i += 1000) {
        if (auto s =
                sink.data(std::string_view(content).substr(i, std::min<size_t>(1000, end - i)));
            !s) {
          return s;
        }
      }
      if (end < content.size()) return MakeError(ErrorCode::kUnavailable, "connection reset");
      return {};
    };
  }
};

Descriptor Describe(const std::string& content) {
  return {std::string(kOciLayerGzip), Sha256Digest(content), content.size(), {}};
}

TEST(ImageStoreTest, VerifiedBlobLandsOnceAndWrongDigestLeavesNothing) {
  TempDir dir("oci-store");
  auto store = ImageStore::Open(dir.Path("images"));
  ASSERT_TRUE(store) << store.error().message;
  Served served{std::string(50000, 'q')};
  Descriptor d = Describe(served.content);
  auto r = (*store)->EnsureBlob(d, served.Fetch());
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_TRUE(r->downloaded);
  EXPECT_TRUE((*store)->HasBlob(d.digest));
  r = (*store)->EnsureBlob(d, served.Fetch());
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->downloaded);
  EXPECT_EQ(served.requests, 1);

  Descriptor lie = Describe("something else of other size");
  lie.size = served.content.size();
  auto bad = (*store)->EnsureBlob(lie, served.Fetch());
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(bad.error().message.find("digest"), std::string::npos);
  EXPECT_FALSE((*store)->HasBlob(lie.digest));
  EXPECT_FALSE(Exists(dir.Path("images/tmp/") + std::string(DigestHex(lie.digest)) + ".partial"));

  Descriptor too_small = d;
  too_small.size = 100;
  too_small.digest = Sha256Digest("x");
  auto big = (*store)->EnsureBlob(too_small, served.Fetch());
  ASSERT_FALSE(big);
  EXPECT_NE(big.error().message.find("more than its 100 bytes"), std::string::npos);
}

TEST(ImageStoreTest, InterruptedDownloadResumesFromThePartialFile) {
  TempDir dir("oci-store");
  auto store = ImageStore::Open(dir.Path("images"));
  ASSERT_TRUE(store);
  Served served{std::string(300000, 'r')};
  for (size_t i = 0; i < served.content.size(); i += 7) served.content[i] = static_cast<char>(i);
  Descriptor d = Describe(served.content);
  served.fail_after = 120000;
  auto first = (*store)->EnsureBlob(d, served.Fetch());
  ASSERT_FALSE(first);
  EXPECT_FALSE((*store)->HasBlob(d.digest));
  served.fail_after = SIZE_MAX;
  auto second = (*store)->EnsureBlob(d, served.Fetch());
  ASSERT_TRUE(second) << second.error().message;
  EXPECT_EQ(second->resumed_from, 120000u);
  EXPECT_TRUE((*store)->HasBlob(d.digest));

  // A registry that ignores the Range: the download starts over, still verified.
  Served again{served.content + "tail"};
  Descriptor d2 = Describe(again.content);
  again.fail_after = 1000;
  ASSERT_FALSE((*store)->EnsureBlob(d2, again.Fetch()));
  again.fail_after = SIZE_MAX;
  again.honour_range = false;
  auto restarted = (*store)->EnsureBlob(d2, again.Fetch());
  ASSERT_TRUE(restarted) << restarted.error().message;
  EXPECT_EQ(restarted->resumed_from, 0u);
}

TEST(ImageStoreTest, ConcurrentFetchesOfOneBlobDownloadOnce) {
  TempDir dir("oci-store");
  auto store = ImageStore::Open(dir.Path("images"));
  ASSERT_TRUE(store);
  Served served{std::string(2000000, 'c')};
  Descriptor d = Describe(served.content);
  std::atomic<int> downloaded{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] {
      auto r = (*store)->EnsureBlob(d, served.Fetch());
      ASSERT_TRUE(r);
      if (r->downloaded) ++downloaded;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(downloaded, 1);
  EXPECT_EQ(served.requests, 1);
}

TEST(ImageStoreTest, RecordsRemoveAndPrune) {
  TempDir dir("oci-store");
  auto store = ImageStore::Open(dir.Path("images"));
  ASSERT_TRUE(store);
  std::string layer = testing::BuildLayer({testing::File("a", "1")});
  std::string config = testing::ConfigJson("amd64", {}, "", "");
  std::string orphan = "orphan";
  for (const std::string* b : {&layer, &config, &orphan}) {
    ASSERT_TRUE((*store)->PutBlob(Sha256Digest(*b), *b));
  }
  ASSERT_FALSE((*store)->PutBlob(Sha256Digest("x"), "y"));
  Descriptor l = Describe(layer);
  auto extracted = (*store)->EnsureLayerExtracted(l);
  ASSERT_TRUE(extracted) << extracted.error().message;
  EXPECT_TRUE(*extracted);
  EXPECT_EQ(fs::testing::ReadRaw((*store)->LayerDir(l.digest) + "/a"), "1");
  ImageRecord rec;
  rec.name = "localhost:1/a:b";
  rec.manifest_digest = Sha256Digest(config);  // any stored blob will do here
  rec.config_digest = Sha256Digest(config);
  rec.layers = {l};
  ASSERT_TRUE((*store)->RecordImage(rec));
  auto found = (*store)->FindImage(rec.name);
  ASSERT_TRUE(found && *found);
  EXPECT_EQ((*found)->layers[0].digest, l.digest);
  auto listed = (*store)->ListImages();
  ASSERT_TRUE(listed);
  EXPECT_EQ(listed->size(), 1u);

  auto pruned = (*store)->Prune();
  ASSERT_TRUE(pruned);
  EXPECT_EQ(pruned->blobs_removed, 1u);  // the orphan
  EXPECT_TRUE((*store)->HasBlob(l.digest));
  EXPECT_TRUE((*store)->HasLayer(l.digest));

  auto removed = (*store)->RemoveImage(rec.name);
  ASSERT_TRUE(removed);
  EXPECT_TRUE(*removed);
  EXPECT_FALSE((*store)->HasBlob(l.digest));
  EXPECT_FALSE((*store)->HasLayer(l.digest));
  auto again = (*store)->RemoveImage(rec.name);
  ASSERT_TRUE(again);
  EXPECT_FALSE(*again);
}

// A layer a deepbox before kRootCacheLayerOwner extracted (its files root's)
// is given to that owner when it is next used, links not followed.
TEST(ImageStoreTest, AnOldRootOwnedLayerIsAdoptedOnUse) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (root's cache gives layers to another owner)";
  TempDir dir("oci-store");
  auto store = ImageStore::Open(dir.Path("images"));
  ASSERT_TRUE(store) << store.error().message;
  using namespace oci::testing;  // NOLINT: the layer vocabulary
  std::string bytes = BuildLayer(
      {Dir("etc"), File("etc/conf", "x\n"), Symlink("link", "/etc/passwd")}, Compression::kGzip);
  Served served{bytes};
  Descriptor d = Describe(bytes);
  ASSERT_TRUE((*store)->EnsureBlob(d, served.Fetch()));
  auto extracted = (*store)->EnsureLayerExtracted(d);
  ASSERT_TRUE(extracted) << extracted.error().message;
  const std::string layer = (*store)->LayerDir(d.digest);
  struct stat st {};
  ASSERT_EQ(lstat((layer + "/etc/conf").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, kRootCacheLayerOwner);
  // What the old version left.
  for (const char* p : {"", "/etc", "/etc/conf", "/link"}) {
    ASSERT_EQ(lchown((layer + p).c_str(), 0, 0), 0) << p;
  }
  struct stat passwd_before {};
  ASSERT_EQ(stat("/etc/passwd", &passwd_before), 0);
  auto again = (*store)->EnsureLayerExtracted(d);
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_FALSE(*again);  // not extracted again
  for (const char* p : {"", "/etc", "/etc/conf", "/link"}) {
    ASSERT_EQ(lstat((layer + p).c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, kRootCacheLayerOwner) << p;
    EXPECT_EQ(st.st_gid, kRootCacheLayerOwner) << p;
  }
  struct stat passwd_after {};
  ASSERT_EQ(stat("/etc/passwd", &passwd_after), 0);
  EXPECT_EQ(passwd_after.st_uid, passwd_before.st_uid);  // the link was not followed
  ASSERT_TRUE((*store)->AdoptOldLayerOwner(d.digest));   // nothing left to do
}

TEST(ImageStoreTest, DefaultDirectory) {
  auto env = [](const char* n) -> const char* {
    return std::string_view(n) == "DEEPBOX_STATE_DIR" ? "/state" : nullptr;
  };
  auto d = DefaultImageDir(env);
  ASSERT_TRUE(d);
  EXPECT_EQ(*d, "/state/images");
}

}  // namespace
}  // namespace deepbox::oci
