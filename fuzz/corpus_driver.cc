// main() of a fuzz target in the ordinary (gcc) build: feeds every file of
// the corpus directories (or files) named on the command line to
// LLVMFuzzerTestOneInput, in name order, so each target runs as a ctest test
// over its committed corpus (seeds and regression inputs). A crash or a
// violated property aborts, naming the input first.
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "fuzz/fuzz_util.h"

namespace {

std::vector<std::string> Inputs(const std::string& arg) {
  struct stat st {};
  if (::stat(arg.c_str(), &st) != 0) {
    std::fprintf(stderr, "corpus driver: %s does not exist\n", arg.c_str());
    std::exit(2);
  }
  if (!S_ISDIR(st.st_mode)) return {arg};
  std::vector<std::string> files;
  DIR* d = ::opendir(arg.c_str());
  if (d == nullptr) {
    std::fprintf(stderr, "corpus driver: cannot open %s\n", arg.c_str());
    std::exit(2);
  }
  while (dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    std::string path = arg + "/" + name;
    struct stat fst {};
    if (::stat(path.c_str(), &fst) == 0 && S_ISREG(fst.st_mode)) files.push_back(path);
  }
  ::closedir(d);
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

int main(int argc, char** argv) {
  if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
  size_t count = 0;
  for (int i = 1; i < argc; ++i) {
    for (const auto& path : Inputs(argv[i])) {
      std::ifstream in(path, std::ios::binary);
      std::stringstream ss;
      ss << in.rdbuf();
      const std::string data = ss.str();
      std::fprintf(stderr, "input %s (%zu bytes)\n", path.c_str(), data.size());
      LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(data.data()), data.size());
      ++count;
    }
  }
  if (count == 0) {
    std::fprintf(stderr, "corpus driver: no inputs (an empty corpus tests nothing)\n");
    return 2;
  }
  std::printf("%zu inputs ran\n", count);
  return 0;
}
