// JSON of file listings (POST /deepbox/v1/fs/stat and fs/list). The listing is
// written straight into its output string: a directory of N entries would
// otherwise build N Boost.JSON objects (7 allocated keys and values each) only
// to serialize them. The bytes are the same as serializing FileInfoJson(...)
// objects with Boost.JSON (fs_json_test checks it).
#pragma once

#include <string>

#include "common/json.h"
#include "sandboxd/fs/tree.h"
#include "sandboxd/fs/workspace.h"

namespace deepbox::sandboxd {

// {"path","name","type","size","mode","modified_at"[,"link_target"]}
json::object FileInfoJson(const fs::FileInfo& f);

// {"path":...,"entries":[FileInfoJson...],"truncated":...}
std::string ListJson(const fs::ListResult& list);

// {"entries":[[path,size,mtime_ns,mode,"f"|"l"],...],"truncated":...,
// "unreadable":...} (POST /deepbox/v1/fs/tree): the same bytes as Boost.JSON
// would write, without an array allocated per entry.
std::string TreeJson(const fs::TreeResult& tree);

// Appends `text` as a JSON string literal, invalid UTF-8 replaced as JsonString
// does, escaped as Boost.JSON's serializer does.
void AppendJsonString(std::string& out, std::string_view text);

}  // namespace deepbox::sandboxd
