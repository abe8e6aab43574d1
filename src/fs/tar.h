// Tar streaming for uploads and downloads of directory trees, with libarchive
// doing only the format work: every file is opened, and every entry created,
// by deepbox through the confined resolver (path_resolver.h), never by
// libarchive's own path-based disk reader/writer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "fs/path_resolver.h"

namespace deepbox::fs {

// Whether tar archives can be made and read here: UNAVAILABLE when
// libarchive (loaded on first use, fs/archive_loader.h) cannot be loaded.
// WriteTar and ExtractTar check it too; a caller that streams checks first.
Status TarSupported();

// Receives the archive in chunks as it is produced; an error stops the
// archive and is returned by WriteTar.
using TarSink = std::function<Status(std::string_view)>;
// Fills the buffer with up to `size` bytes of the archive; 0 means the end.
using TarSource = std::function<Result<size_t>(char* buf, size_t size)>;

struct TarWriteStats {
  uint64_t entries = 0;
  uint64_t bytes = 0;  // archive bytes handed to the sink
};

// Streams a pax (ustar where possible) archive of `paths` (API paths; files
// and directories, recursively) to `sink`, holding one 64 KiB buffer, never
// the archive. Entry names are relative to the root ("src/a.c"); the root
// itself contributes its children. Symlinks are stored as symlinks and never
// followed; devices, FIFOs and sockets are left out.
Result<TarWriteStats> WriteTar(const Root& root, const std::vector<std::string>& paths,
                               const TarSink& sink);

struct ExtractOptions {
  bool overwrite = true;  // false: an existing entry is a CONFLICT
};

// Extracts a tar archive (optionally gzip-compressed) read from `source`
// beneath `dest_dir` (an API path, created if missing), confined to it:
// absolute names, ".." components, symlinks or hard links leading outside
// dest_dir, and device nodes/FIFOs/sockets are refused (PERMISSION_DENIED),
// which stops the extraction (entries already written stay). Modes keep
// their permission bits (no setuid/setgid/sticky); files keep their mtime.
// Returns the absolute paths written, in archive order.
Result<std::vector<std::string>> ExtractTar(const Root& root, std::string_view dest_dir,
                                            const TarSource& source,
                                            const ExtractOptions& options = {});

}  // namespace deepbox::fs
