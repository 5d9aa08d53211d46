// main() for the fuzz targets (*-fuzz.cc) in builds without libFuzzer: runs
// LLVMFuzzerTestOneInput once on every file named on the command line, or in every directory
// named there, so ctest replays the seed corpus and the inputs that once crashed a target in the
// plain, ASAN and TSAN builds too. A crash or a failed check aborts, as under libFuzzer.
// build-support/fuzz.sh builds the same targets with libFuzzer to search for new inputs.
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) __attribute__((weak));

namespace {

bool IsDirectory(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// The regular files directly inside `dir`, sorted so runs are repeatable.
std::vector<std::string> FilesIn(const std::string& dir) {
  std::vector<std::string> files;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return files;
  while (dirent* e = readdir(d)) {
    const std::string path = dir + "/" + e->d_name;
    struct stat st;
    if (e->d_name[0] != '.' && stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      files.push_back(path);
    }
  }
  closedir(d);
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

int main(int argc, char** argv) {
  if (LLVMFuzzerInitialize != nullptr) LLVMFuzzerInitialize(&argc, &argv);
  std::vector<std::string> inputs;
  for (int i = 1; i < argc; i++) {
    const std::string arg = argv[i];
    if (!arg.empty() && arg[0] == '-') continue;  // a libFuzzer flag: nothing to do here
    if (IsDirectory(arg)) {
      for (std::string& f : FilesIn(arg)) inputs.push_back(std::move(f));
    } else {
      inputs.push_back(arg);
    }
  }
  if (inputs.empty()) {
    fprintf(stderr, "usage: %s FILE_OR_DIR...  (no inputs found)\n", argv[0]);
    return 2;
  }
  for (const std::string& path : inputs) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      fprintf(stderr, "cannot read %s\n", path.c_str());
      return 2;
    }
    const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                                     std::istreambuf_iterator<char>());
    LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
  }
  printf("ran %zu inputs\n", inputs.size());
  return 0;
}
