// libarchive, loaded on first use (dlopen) instead of linked: linked, it
// (with libxml2, ICU, nettle, lzma, zstd, ...) would be loaded by every
// `deepbox` process, each sandbox's supervisor included (~1.5 ms and
// hundreds of KiB per sandbox). `sandbox cp` (cli/sandbox_copy.cc) and image
// layers (oci/layer_extract.cc) call it through here, and so does the
// daemon's tar (fs/tar.cc: its start loads none of it). Headers only at
// build time.
#pragma once

#include <archive.h>
#include <archive_entry.h>

#include <string_view>

#include "common/error.h"

namespace deepbox::fs {

#define DEEPBOX_LIBARCHIVE_FUNCS(X)          \
  X(archive_entry_copy_stat)                 \
  X(archive_entry_filetype)                  \
  X(archive_entry_free)                      \
  X(archive_entry_hardlink)                  \
  X(archive_entry_mtime)                     \
  X(archive_entry_mtime_is_set)              \
  X(archive_entry_mtime_nsec)                \
  X(archive_entry_new)                       \
  X(archive_entry_pathname)                  \
  X(archive_entry_pathname_utf8)             \
  X(archive_entry_perm)                      \
  X(archive_entry_set_filetype)              \
  X(archive_entry_set_mtime)                 \
  X(archive_entry_set_pathname)              \
  X(archive_entry_set_perm)                  \
  X(archive_entry_set_size)                  \
  X(archive_entry_set_symlink)               \
  X(archive_entry_size)                      \
  X(archive_entry_size_is_set)               \
  X(archive_entry_symlink)                   \
  X(archive_entry_symlink_utf8)              \
  X(archive_error_string)                    \
  X(archive_read_data)                       \
  X(archive_read_data_block)                 \
  X(archive_read_free)                       \
  X(archive_read_new)                        \
  X(archive_read_next_header)                \
  X(archive_read_open)                       \
  X(archive_read_open_fd)                    \
  X(archive_read_support_filter_gzip)        \
  X(archive_read_support_filter_zstd)        \
  X(archive_read_support_format_gnutar)      \
  X(archive_read_support_format_tar)         \
  X(archive_set_error)                       \
  X(archive_write_close)                     \
  X(archive_write_data)                      \
  X(archive_write_free)                      \
  X(archive_write_header)                    \
  X(archive_write_new)                       \
  X(archive_write_open2)                     \
  X(archive_write_set_format_pax_restricted) \
  X(archive_write_set_options)               \
  X(archive_zlib_version)

struct LibArchive {
#define DEEPBOX_LIBARCHIVE_DECLARE(name) decltype(&::name) name = nullptr;
  DEEPBOX_LIBARCHIVE_FUNCS(DEEPBOX_LIBARCHIVE_DECLARE)
#undef DEEPBOX_LIBARCHIVE_DECLARE
};

// The functions, loaded once; UNAVAILABLE ("<purpose> needs libarchive: ...")
// when libarchive.so.13 or one of them is missing.
Result<const LibArchive*> LoadLibArchive(std::string_view purpose);

}  // namespace deepbox::fs
