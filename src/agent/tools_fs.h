// The deepagents 0.7 file tools over the Sandbox interface: ls, read_file,
// write_file, edit_file, delete, glob, grep. Every operation is a native
// sandbox call (List/Read/Write/Edit/Delete/Glob/Grep/Stat/Download); no
// scripts run in the sandbox. Names, argument schemas, defaults and output
// strings follow deepagents (see format.h); paths follow paths.h.
#pragma once

#include <chrono>
#include <vector>

#include "agent/tool.h"

namespace deepbox::agent {

struct FsToolOptions {
  int64_t grep_max_count = 1000;   // default total cap on grep matches
  size_t read_char_limit = 80000;  // read_file budget (4 x tool_token_limit)
  std::chrono::milliseconds glob_timeout{10000};
};

ToolPtr MakeLsTool(FsToolOptions options = {});
ToolPtr MakeReadFileTool(FsToolOptions options = {});
ToolPtr MakeWriteFileTool(FsToolOptions options = {});
ToolPtr MakeEditFileTool(FsToolOptions options = {});
ToolPtr MakeDeleteTool(FsToolOptions options = {});
ToolPtr MakeGlobTool(FsToolOptions options = {});
ToolPtr MakeGrepTool(FsToolOptions options = {});

// All seven, in deepagents order: ls, read_file, write_file, edit_file,
// delete, glob, grep.
std::vector<ToolPtr> MakeFilesystemTools(FsToolOptions options = {});

// The file tools' names (these are never evicted, see middleware_eviction.h).
bool IsFilesystemToolName(std::string_view name);

// Classification of a path by extension, as deepagents does for read_file:
// "image", "audio", "video", "file" (pdf/ppt) or "text".
std::string_view FileTypeForPath(std::string_view path);
// MIME type guessed from the extension ("application/octet-stream" if unknown).
std::string MimeTypeForPath(std::string_view path);

}  // namespace deepbox::agent
